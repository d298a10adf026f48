//! BEIR-format evaluation data: loading a dataset folder, and writing its corpus out as one
//! markdown file per document for `ragbox ingest`.
//!
//! May import `types`, `error` and `store` (for atomic writes). A BEIR folder holds
//! `corpus.jsonl` (`{"_id", "title", "text"}` per line), `queries.jsonl` (`{"_id", "text"}`) and
//! `qrels/<split>.tsv` (`query-id corpus-id score`, a header line first). Every parse error names
//! the file and line.
//!
//! Document files are named after the document id ([`document_file_name`]), and
//! [`doc_id_for_path`] maps a retrieved file back to its id. The byte format of the files is
//! fixed: files written earlier by other tools must compare equal so they are not re-ingested.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

use serde::Deserialize;
use sha2::{Digest, Sha256};

use super::metrics::Qrels;
use ragbox_core::error::{Error, Result};
use ragbox_core::store::layout::write_atomically;

/// What a BEIR folder holds, for error messages.
const LAYOUT_HINT: &str = "a BEIR folder holds corpus.jsonl, queries.jsonl and qrels/<split>.tsv";

/// Longest document id used verbatim as a file name (longer ones are hex-encoded).
const MAX_PLAIN_ID: usize = 101;

/// Prefix of a hex-encoded file name.
const HEX_PREFIX: &str = "x-";

/// A BEIR dataset split, loaded: the queries to run and their judgments.
#[derive(Debug, Clone)]
pub struct BeirSet {
    /// The dataset folder.
    pub dir: PathBuf,
    /// Its `corpus.jsonl`.
    pub corpus: PathBuf,
    /// sha256 (lowercase hex) of `corpus.jsonl`, to tell a changed corpus.
    pub corpus_sha256: String,
    /// `(query id, text)` of the queries with judgments, in the order the qrels first name them.
    pub queries: Vec<(String, String)>,
    /// The judgments of the split.
    pub qrels: Qrels,
}

/// A document or query id: BEIR writes strings, but a number is taken as its decimal text.
#[derive(Deserialize)]
#[serde(untagged)]
enum Id {
    Text(String),
    Number(serde_json::Number),
}

impl From<Id> for String {
    fn from(id: Id) -> String {
        match id {
            Id::Text(s) => s,
            Id::Number(n) => n.to_string(),
        }
    }
}

/// One line of `queries.jsonl` (other fields are ignored).
#[derive(Deserialize)]
struct QueryLine {
    #[serde(rename = "_id")]
    id: Id,
    text: String,
}

/// One line of `corpus.jsonl` (other fields are ignored).
#[derive(Deserialize)]
struct CorpusLine {
    #[serde(rename = "_id")]
    id: Id,
    #[serde(default)]
    title: Option<String>,
    text: String,
}

/// Loads the split `split` of the BEIR folder `dir`: its qrels, the queries they judge, and the
/// corpus checksum.
pub fn load(dir: &Path, split: &str) -> Result<BeirSet> {
    let corpus = dir.join("corpus.jsonl");
    let queries_path = dir.join("queries.jsonl");
    let qrels_path = dir.join("qrels").join(format!("{split}.tsv"));
    let (qrels, order) = read_qrels(&qrels_path)?;
    let mut texts = read_queries(&queries_path, &qrels)?;
    let missing: Vec<&String> = order.iter().filter(|q| !texts.contains_key(*q)).collect();
    if let Some(first) = missing.first() {
        return Err(Error::Invalid(format!(
            "{}: {} quer{} judged in {} but missing from queries.jsonl, first `{first}`",
            queries_path.display(),
            missing.len(),
            if missing.len() == 1 { "y" } else { "ies" },
            qrels_path.display(),
        )));
    }
    let queries = order
        .into_iter()
        .map(|q| {
            let text = texts.remove(&q).expect("checked above: every judged query has a text");
            (q, text)
        })
        .collect();
    let corpus_sha256 = sha256_file(&corpus)?;
    Ok(BeirSet { dir: dir.to_path_buf(), corpus, corpus_sha256, queries, qrels })
}

/// Opens one of the dataset's files; a missing one gets an error that says what a BEIR folder
/// holds.
fn open(path: &Path) -> Result<BufReader<File>> {
    match File::open(path) {
        Ok(f) => Ok(BufReader::new(f)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            Err(Error::Invalid(format!("{} is missing; {LAYOUT_HINT}", path.display())))
        }
        Err(e) => Err(Error::path(path)(e)),
    }
}

/// Yields `(line number from 1, line)` of a text file, skipping blank lines.
fn numbered_lines(path: &Path) -> Result<impl Iterator<Item = Result<(usize, String)>> + '_> {
    let reader = open(path)?;
    Ok(reader.lines().enumerate().filter_map(move |(i, line)| match line {
        Ok(line) if line.trim().is_empty() => None,
        Ok(line) => Some(Ok((i + 1, line))),
        Err(e) => Some(Err(Error::path(path)(e))),
    }))
}

/// Parses one JSON line, naming `path:line` on failure.
fn parse_json<T: for<'de> Deserialize<'de>>(path: &Path, number: usize, line: &str) -> Result<T> {
    serde_json::from_str(line).map_err(|e| Error::Invalid(format!("{}:{number}: bad JSON line: {e}", path.display())))
}

/// Reads a qrels file: the judgments, and the query ids in order of first appearance.
///
/// Fields are separated by tabs, or by spaces where a line has no tab. A first line whose score is
/// not an integer is a header and is skipped. A repeated (query, document) pair keeps the last
/// score, as BEIR's loader does.
fn read_qrels(path: &Path) -> Result<(Qrels, Vec<String>)> {
    let mut qrels = Qrels::new();
    let mut order = Vec::new();
    for (index, item) in numbered_lines(path)?.enumerate() {
        let (number, line) = item?;
        let fields: Vec<&str> = if line.contains('\t') {
            line.split('\t').map(str::trim).collect()
        } else {
            line.split_whitespace().collect()
        };
        let [query, doc, score] = fields[..] else {
            return Err(Error::Invalid(format!(
                "{}:{number}: expected 3 fields `query-id corpus-id score`, found {}",
                path.display(),
                fields.len()
            )));
        };
        let Ok(score) = score.parse::<i32>() else {
            if index == 0 {
                continue; // the header line
            }
            return Err(Error::Invalid(format!("{}:{number}: score `{score}` is not an integer", path.display())));
        };
        if !qrels.contains_key(query) {
            order.push(query.to_string());
        }
        qrels.entry(query.to_string()).or_default().insert(doc.to_string(), score);
    }
    Ok((qrels, order))
}

/// Reads the texts of the queries that `qrels` judges.
fn read_queries(path: &Path, qrels: &Qrels) -> Result<HashMap<String, String>> {
    let mut texts = HashMap::new();
    for item in numbered_lines(path)? {
        let (number, line) = item?;
        let query: QueryLine = parse_json(path, number, &line)?;
        let id = String::from(query.id);
        if qrels.contains_key(&id) {
            texts.insert(id, query.text);
        }
    }
    Ok(texts)
}

/// sha256 of a file, streamed, as lowercase hex.
fn sha256_file(path: &Path) -> Result<String> {
    let mut reader = open(path)?;
    let mut hasher = Sha256::new();
    std::io::copy(&mut reader, &mut hasher).map_err(Error::path(path))?;
    Ok(hex::encode(hasher.finalize()))
}

/// Writes each document of `corpus` (a BEIR `corpus.jsonl`) to `dir` as one markdown file,
/// creating `dir` if needed, and returns the number of documents.
///
/// A file whose bytes are already right is left alone (its mtime too); others are written
/// atomically. `.md` files in `dir` that are no document of the corpus are removed. A repeated
/// document id keeps its last entry; an empty one is an error.
pub fn write_documents(corpus: &Path, dir: &Path) -> Result<usize> {
    std::fs::create_dir_all(dir).map_err(Error::path(dir))?;
    let mut names = HashSet::new();
    for item in numbered_lines(corpus)? {
        let (number, line) = item?;
        let doc: CorpusLine = parse_json(corpus, number, &line)?;
        let id = String::from(doc.id);
        if id.is_empty() {
            // Its file name, `x-.md`, is that of the id `x-`.
            return Err(Error::Invalid(format!("{}:{number}: empty `_id`", corpus.display())));
        }
        let name = document_file_name(&id);
        let bytes = document_markdown(doc.title.as_deref().unwrap_or(""), &doc.text);
        write_if_changed(&dir.join(&name), bytes.as_bytes())?;
        names.insert(name);
    }
    remove_stale(dir, &names)?;
    Ok(names.len())
}

/// The markdown file of one document: a front-matter title (whitespace runs collapsed) when there
/// is one, then the text exactly as given, then a newline.
fn document_markdown(title: &str, text: &str) -> String {
    let title = title.split_whitespace().collect::<Vec<_>>().join(" ");
    if title.is_empty() {
        format!("{text}\n")
    } else {
        format!("---\ntitle: {title}\n---\n\n{text}\n")
    }
}

/// Writes `bytes` to `path` atomically unless the file already holds exactly them.
fn write_if_changed(path: &Path, bytes: &[u8]) -> Result<()> {
    let same = match std::fs::metadata(path) {
        Ok(meta) if meta.is_file() && meta.len() == bytes.len() as u64 => {
            std::fs::read(path).map_err(Error::path(path))? == bytes
        }
        _ => false,
    };
    if same {
        Ok(())
    } else {
        write_atomically(path, bytes)
    }
}

/// Removes the `.md` files of `dir` whose names are not in `keep`.
fn remove_stale(dir: &Path, keep: &HashSet<String>) -> Result<()> {
    for entry in std::fs::read_dir(dir).map_err(Error::path(dir))? {
        let path = entry.map_err(Error::path(dir))?.path();
        let is_md = path.extension().is_some_and(|e| e == "md") && path.is_file();
        let kept = path.file_name().and_then(|n| n.to_str()).is_some_and(|n| keep.contains(n));
        if is_md && !kept {
            std::fs::remove_file(&path).map_err(Error::path(&path))?;
        }
    }
    Ok(())
}

/// The file name of a document: the id plus `.md` when the id matches
/// `^[A-Za-z0-9_-][A-Za-z0-9._-]{0,100}$`, else `x-` + lowercase hex of its UTF-8 bytes + `.md`.
pub fn document_file_name(id: &str) -> String {
    if is_plain_id(id) {
        format!("{id}.md")
    } else {
        format!("{HEX_PREFIX}{}.md", hex::encode(id.as_bytes()))
    }
}

/// Whether an id is safe as a file name as it is.
fn is_plain_id(id: &str) -> bool {
    let safe = |b: u8| b.is_ascii_alphanumeric() || b == b'_' || b == b'-';
    let bytes = id.as_bytes();
    match bytes.first() {
        Some(&first) => safe(first) && bytes.len() <= MAX_PLAIN_ID && bytes.iter().all(|&b| safe(b) || b == b'.'),
        None => false,
    }
}

/// The document id of a file written by [`write_documents`]: the stem, hex-decoded when it was
/// hex-encoded. None for a name that is not UTF-8.
///
/// A stem `x-<hex>` is decoded only when the decoded id would itself have been hex-encoded, so a
/// plain id that happens to look like `x-41` maps back to itself (and `x-.md` is the id `x-`).
pub fn doc_id_for_path(path: &Path) -> Option<String> {
    let stem = path.file_stem()?.to_str()?;
    let decoded = stem
        .strip_prefix(HEX_PREFIX)
        .and_then(|h| hex::decode(h).ok())
        .and_then(|bytes| String::from_utf8(bytes).ok())
        .filter(|id| !id.is_empty() && !is_plain_id(id));
    Some(decoded.unwrap_or_else(|| stem.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tiny BEIR folder: three documents, three queries, test qrels with a header.
    fn tiny_beir() -> tempfile::TempDir {
        let tmp = tempfile::tempdir().expect("tempdir");
        let d = tmp.path();
        std::fs::write(
            d.join("corpus.jsonl"),
            concat!(
                "{\"_id\": \"d1\", \"title\": \"  First\\tdoc \", \"text\": \"Alpha text.\"}\n",
                "{\"_id\": \"d/2\", \"title\": \"\", \"text\": \"Beta\\nlines\"}\n",
                "{\"_id\": \"é3\", \"title\": \"Third\", \"text\": \"Gamma\", \"metadata\": {}}\n",
            ),
        )
        .expect("corpus");
        std::fs::write(
            d.join("queries.jsonl"),
            concat!(
                "{\"_id\": \"q1\", \"text\": \"what is alpha\", \"metadata\": {}}\n",
                "{\"_id\": \"q2\", \"text\": \"beta?\"}\n",
                "{\"_id\": \"q3\", \"text\": \"not judged\"}\n",
            ),
        )
        .expect("queries");
        std::fs::create_dir(d.join("qrels")).expect("qrels dir");
        std::fs::write(d.join("qrels/test.tsv"), "query-id\tcorpus-id\tscore\nq2\td/2\t1\nq1\td1\t2\nq2\té3\t0\n")
            .expect("qrels");
        tmp
    }

    #[test]
    fn loads_queries_in_qrels_order() {
        let tmp = tiny_beir();
        let set = load(tmp.path(), "test").expect("load");
        assert_eq!(
            set.queries,
            vec![("q2".to_string(), "beta?".to_string()), ("q1".to_string(), "what is alpha".to_string())]
        );
        assert_eq!(set.qrels.len(), 2);
        assert_eq!(set.qrels["q2"]["d/2"], 1);
        assert_eq!(set.qrels["q2"]["é3"], 0);
        assert_eq!(set.qrels["q1"]["d1"], 2);
        assert_eq!(set.corpus, tmp.path().join("corpus.jsonl"));
        let bytes = std::fs::read(&set.corpus).expect("read");
        assert_eq!(set.corpus_sha256, hex::encode(Sha256::digest(&bytes)));
        assert_eq!(set.corpus_sha256.len(), 64);
    }

    #[test]
    fn qrels_without_header_and_with_spaces() {
        let tmp = tiny_beir();
        std::fs::write(tmp.path().join("qrels/dev.tsv"), "q1 d1 1\n\nq3  d2 1\n").expect("qrels");
        let set = load(tmp.path(), "dev").expect("load");
        assert_eq!(set.queries.iter().map(|(q, _)| q.as_str()).collect::<Vec<_>>(), ["q1", "q3"]);
        assert_eq!(set.qrels["q3"]["d2"], 1);
    }

    #[test]
    fn bad_score_after_the_first_line_names_the_line() {
        let tmp = tiny_beir();
        std::fs::write(tmp.path().join("qrels/dev.tsv"), "q1\td1\t1\nq1\td2\thigh\n").expect("qrels");
        let msg = load(tmp.path(), "dev").expect_err("bad score").to_string();
        assert!(msg.contains("dev.tsv:2:") && msg.contains("`high`"), "{msg}");
    }

    #[test]
    fn missing_file_says_what_a_beir_folder_holds() {
        let tmp = tiny_beir();
        let msg = load(tmp.path(), "train").expect_err("no train split").to_string();
        assert!(msg.contains("train.tsv is missing"), "{msg}");
        assert!(msg.contains("corpus.jsonl, queries.jsonl and qrels/<split>.tsv"), "{msg}");
        std::fs::remove_file(tmp.path().join("corpus.jsonl")).expect("rm");
        let msg = load(tmp.path(), "test").expect_err("no corpus").to_string();
        assert!(msg.contains("corpus.jsonl is missing"), "{msg}");
    }

    #[test]
    fn bad_json_line_names_the_line() {
        let tmp = tiny_beir();
        let queries = tmp.path().join("queries.jsonl");
        std::fs::write(&queries, "{\"_id\": \"q1\", \"text\": \"a\"}\n\n{\"_id\": \"q2\", \"text\": \n").expect("queries");
        let msg = load(tmp.path(), "test").expect_err("bad json").to_string();
        assert!(msg.contains("queries.jsonl:3: bad JSON line"), "{msg}");
    }

    #[test]
    fn judged_query_missing_from_queries_is_named() {
        let tmp = tiny_beir();
        std::fs::write(tmp.path().join("queries.jsonl"), "{\"_id\": \"q1\", \"text\": \"a\"}\n").expect("queries");
        let msg = load(tmp.path(), "test").expect_err("q2 missing").to_string();
        assert!(msg.contains("1 query judged") && msg.contains("`q2`"), "{msg}");
    }

    #[test]
    fn file_names_round_trip() {
        for id in ["d1", "10009203", "a.b-c_d", "d/2", "é3", ".hidden", "x-41", "x-", "a b", &"z".repeat(102)] {
            let name = document_file_name(id);
            assert!(!name.contains('/'), "{name}");
            assert_eq!(doc_id_for_path(&Path::new("/docs").join(&name)).as_deref(), Some(id), "{name}");
        }
        assert_eq!(document_file_name("d1"), "d1.md");
        assert_eq!(document_file_name(&"z".repeat(101)), format!("{}.md", "z".repeat(101)));
        assert_eq!(document_file_name("d/2"), "x-642f32.md");
        assert_eq!(document_file_name("é3"), "x-c3a933.md");
        assert_eq!(document_file_name(".hidden"), "x-2e68696464656e.md");
        assert_eq!(document_file_name("x-41"), "x-41.md");
    }

    #[test]
    fn writes_documents_in_the_fixed_format() {
        let tmp = tiny_beir();
        let out = tmp.path().join("docs");
        let n = write_documents(&tmp.path().join("corpus.jsonl"), &out).expect("write");
        assert_eq!(n, 3);
        let read = |name: &str| std::fs::read_to_string(out.join(name)).expect(name);
        assert_eq!(read("d1.md"), "---\ntitle: First doc\n---\n\nAlpha text.\n");
        assert_eq!(read("x-642f32.md"), "Beta\nlines\n"); // empty title: the text alone
        assert_eq!(read("x-c3a933.md"), "---\ntitle: Third\n---\n\nGamma\n");
    }

    #[test]
    fn identical_files_are_not_rewritten_and_stale_ones_go() {
        let tmp = tiny_beir();
        let corpus = tmp.path().join("corpus.jsonl");
        let out = tmp.path().join("docs");
        write_documents(&corpus, &out).expect("first");
        let old = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000);
        for name in ["d1.md", "x-c3a933.md"] {
            File::options().write(true).open(out.join(name)).expect("open").set_modified(old).expect("mtime");
        }
        std::fs::write(out.join("gone.md"), "stale").expect("stale");
        std::fs::write(out.join("notes.txt"), "kept").expect("other");
        // The corpus changes: d1's text differs, é3 is the same.
        std::fs::write(
            &corpus,
            concat!(
                "{\"_id\": \"d1\", \"title\": \"First doc\", \"text\": \"Alpha, changed.\"}\n",
                "{\"_id\": \"é3\", \"title\": \"Third\", \"text\": \"Gamma\"}\n",
            ),
        )
        .expect("corpus");
        assert_eq!(write_documents(&corpus, &out).expect("second"), 2);
        let mtime = |name: &str| std::fs::metadata(out.join(name)).expect(name).modified().expect("mtime");
        assert_eq!(mtime("x-c3a933.md"), old, "identical file rewritten");
        assert_ne!(mtime("d1.md"), old, "changed file not rewritten");
        assert!(!out.join("gone.md").exists() && !out.join("x-642f32.md").exists());
        assert!(out.join("notes.txt").exists());
    }

    #[test]
    fn bad_corpus_line_names_the_line() {
        let tmp = tiny_beir();
        let corpus = tmp.path().join("corpus.jsonl");
        std::fs::write(&corpus, "{\"_id\": \"d1\", \"text\": \"a\"}\n{\"_id\": \"d2\"}\n").expect("corpus");
        let msg = write_documents(&corpus, &tmp.path().join("docs")).expect_err("no text").to_string();
        assert!(msg.contains("corpus.jsonl:2: bad JSON line") && msg.contains("text"), "{msg}");
        std::fs::write(&corpus, "{\"_id\": \"d1\", \"text\": \"a\"}\n{\"_id\": \"\", \"text\": \"b\"}\n").expect("corpus");
        let msg = write_documents(&corpus, &tmp.path().join("docs")).expect_err("empty id").to_string();
        assert!(msg.contains("corpus.jsonl:2: empty `_id`"), "{msg}");
    }
}
