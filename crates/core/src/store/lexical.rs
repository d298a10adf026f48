//! The lexical (BM25) index of one tenant: tantivy over each child chunk's contextualised text
//! (title + section path + text), English-stemmed, storing chunk and document ids.
//!
//! The catalog generation an index reflects is kept in tantivy's commit payload, so it changes
//! atomically with the index's own commit.
//!
//! What a reader needs of it is the [`LexicalSearch`] trait. The index lives in a folder (tantivy's
//! memory-mapped directory) or, for unit tests of what sits above the store, in memory
//! ([`LexicalIndex::in_memory`], tantivy's RAM directory): the same BM25 either way.

use std::path::Path;

use tantivy::collector::TopDocs;
use tantivy::query::{BooleanQuery, Occur, Query, TermQuery};
use tantivy::tokenizer::{TextAnalyzer, TokenStream};
use tantivy::schema::{Field, IndexRecordOption, NumericOptions, Schema, TextFieldIndexing, TextOptions, Value};
use tantivy::{doc, Index, IndexReader, IndexWriter, ReloadPolicy, TantivyDocument, Term};

use crate::access::ChunkFilter;
use crate::error::{Error, Result};
use crate::types::{ChunkId, DocId};

/// Memory the writer may use before flushing a segment.
const WRITER_HEAP_BYTES: usize = 64 << 20;
/// The tokenizer tantivy registers for English with stemming.
const TOKENIZER: &str = "en_stem";

/// One scored hit: chunk id and BM25 score.
pub type LexicalHit = (ChunkId, f32);

#[derive(Clone, Copy)]
struct Fields {
    chunk: Field,
    doc: Field,
    body: Field,
}

fn schema() -> (Schema, Fields) {
    let mut b = Schema::builder();
    let id_opts = NumericOptions::default().set_indexed().set_stored().set_fast();
    let chunk = b.add_u64_field("chunk_id", id_opts.clone());
    let doc = b.add_u64_field("doc_id", id_opts);
    let body = b.add_text_field(
        "body",
        TextOptions::default().set_indexing_options(
            TextFieldIndexing::default().set_tokenizer(TOKENIZER).set_index_option(IndexRecordOption::WithFreqsAndPositions),
        ),
    );
    (b.build(), Fields { chunk, doc, body })
}

fn err(what: String) -> impl FnOnce(tantivy::TantivyError) -> Error {
    move |e| Error::Index { what, source: Box::new(e) }
}

/// The terms of `text` as the index sees them (tantivy's English analyser: split on
/// non-alphanumerics, drop tokens over 40 bytes, lower-case, stem), in order; what a lexical
/// backend kept elsewhere than tantivy indexes and queries with, so that both count the same terms.
pub fn analyze(text: &str) -> Vec<String> {
    static ANALYZER: std::sync::OnceLock<TextAnalyzer> = std::sync::OnceLock::new();
    let mut analyzer = ANALYZER
        .get_or_init(|| tantivy::tokenizer::TokenizerManager::default().get(TOKENIZER).expect("tantivy registers en_stem"))
        .clone();
    let mut stream = analyzer.token_stream(text);
    let mut out = Vec::new();
    while let Some(token) = stream.next() {
        out.push(token.text.clone());
    }
    out
}

/// BM25 search over one commit of a tenant's lexical index, as a reader uses it.
pub trait LexicalSearch: Send + Sync {
    /// The `k` best chunks for a free-text query, best first.
    fn search(&self, query: &str, k: usize) -> Result<Vec<LexicalHit>> {
        self.search_filtered(query, k, None)
    }
    /// [`LexicalSearch::search`] over the chunks `filter` allows only, decided inside the search:
    /// `k` hits come back whenever `k` allowed chunks match.
    fn search_filtered(&self, query: &str, k: usize, filter: Option<&ChunkFilter>) -> Result<Vec<LexicalHit>>;
    /// Chunks in this commit.
    fn len(&self) -> usize;
    /// Whether this commit holds no chunks.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A tenant's lexical index.
pub struct LexicalIndex {
    index: Index,
    fields: Fields,
}

impl LexicalIndex {
    /// Opens the index in `dir`, creating an empty one if the folder is empty or missing. An index
    /// that cannot be opened, or whose schema differs, is an error (the caller rebuilds it).
    pub fn open_or_create(dir: &Path) -> Result<LexicalIndex> {
        std::fs::create_dir_all(dir).map_err(Error::path(dir))?;
        let (schema, fields) = schema();
        let mmap = tantivy::directory::MmapDirectory::open(dir).map_err(|e| Error::Index {
            what: format!("opening lexical index folder {dir:?}"),
            source: Box::new(e),
        })?;
        let index = Index::open_or_create(mmap, schema).map_err(err(format!("opening lexical index {dir:?}")))?;
        Ok(LexicalIndex { index, fields })
    }

    /// An empty index held in memory (tantivy's RAM directory), for unit tests: the same schema,
    /// tokenizer and BM25 as a folder's.
    #[cfg(any(test, feature = "testing"))]
    pub fn in_memory() -> LexicalIndex {
        let (schema, fields) = schema();
        LexicalIndex { index: Index::create_in_ram(schema), fields }
    }

    /// The catalog generation of the last commit (0 for a new index).
    pub fn generation(&self) -> Result<u64> {
        let metas = self.index.load_metas().map_err(err("reading lexical index metadata".into()))?;
        Ok(metas.payload.as_deref().and_then(|p| p.parse().ok()).unwrap_or(0))
    }

    /// Documents (chunks) in the last commit.
    pub fn len(&self) -> Result<usize> {
        Ok(self.reader()?.searcher().num_docs() as usize)
    }

    /// Whether the last commit holds no chunks.
    pub fn is_empty(&self) -> Result<bool> {
        Ok(self.len()? == 0)
    }

    /// Every chunk id in the last commit (with repeats, if any: a consistency check counts them).
    pub fn all_chunk_ids(&self) -> Result<Vec<ChunkId>> {
        let searcher = self.reader()?.searcher();
        let mut out = Vec::new();
        for segment in searcher.segment_readers() {
            let column = segment
                .fast_fields()
                .u64("chunk_id")
                .map_err(err("reading lexical chunk ids".into()))?;
            let alive = segment.alive_bitset();
            for doc in 0..segment.max_doc() {
                if alive.is_some_and(|a| !a.is_alive(doc)) {
                    continue;
                }
                if let Some(id) = column.first(doc) {
                    out.push(ChunkId(id));
                }
            }
        }
        Ok(out)
    }

    /// A writer for changes; commit with [`LexicalWriter::commit`].
    pub fn writer(&self) -> Result<LexicalWriter> {
        let writer = self.index.writer(WRITER_HEAP_BYTES).map_err(err("opening the lexical index writer".into()))?;
        Ok(LexicalWriter { writer, fields: self.fields })
    }

    fn reader(&self) -> Result<IndexReader> {
        self.index
            .reader_builder()
            .reload_policy(ReloadPolicy::Manual)
            .try_into()
            .map_err(err("opening the lexical index reader".into()))
    }

    /// A searcher over the last commit.
    pub fn searcher(&self) -> Result<LexicalSearcher> {
        let reader = self.reader()?;
        let analyzer = self.index.tokenizer_for_field(self.fields.body).map_err(err("loading the lexical tokenizer".into()))?;
        Ok(LexicalSearcher { reader, analyzer: std::sync::Mutex::new(analyzer), fields: self.fields })
    }
}

/// Pending changes to a lexical index.
pub struct LexicalWriter {
    writer: IndexWriter,
    fields: Fields,
}

impl LexicalWriter {
    /// Adds one chunk's contextualised text.
    pub fn add(&mut self, chunk: ChunkId, doc: DocId, text: &str) -> Result<()> {
        let f = self.fields;
        self.writer
            .add_document(doc!(f.chunk => chunk.0, f.doc => doc.0, f.body => text))
            .map_err(err("adding to the lexical index".into()))?;
        Ok(())
    }

    /// Removes every chunk of a document.
    pub fn remove_document(&mut self, doc: DocId) {
        self.writer.delete_term(Term::from_field_u64(self.fields.doc, doc.0));
    }

    /// Removes everything.
    pub fn clear(&mut self) -> Result<()> {
        self.writer.delete_all_documents().map_err(err("clearing the lexical index".into()))?;
        Ok(())
    }

    /// Commits the changes atomically, stamped with the catalog `generation`.
    pub fn commit(mut self, generation: u64) -> Result<()> {
        let mut prepared = self.writer.prepare_commit().map_err(err("preparing the lexical commit".into()))?;
        prepared.set_payload(&generation.to_string());
        prepared.commit().map_err(err("committing the lexical index".into()))?;
        self.writer.wait_merging_threads().map_err(err("merging lexical index segments".into()))?;
        Ok(())
    }
}

/// The `k` best chunks for `query` among those `filter` allows, by BM25. The filter runs inside
/// the scoring loop: each segment's query is driven by `for_each_pruning` (block-max WAND for a
/// union of terms), and a document above the threshold is asked of the filter (by its `chunk_id`
/// fast field) before it enters the top-k heap; the threshold is the k-th allowed score, so
/// blocks that cannot beat it are skipped as in an unfiltered search. (tantivy's
/// `FilterCollector` asks every matching document and switches the pruning off: at 100k chunks
/// that was 20 times slower.)
fn filtered_top_k(searcher: &tantivy::Searcher, query: &dyn Query, k: usize, filter: &ChunkFilter) -> tantivy::Result<Vec<LexicalHit>> {
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;

    /// A score with a total order (BM25 scores are finite).
    #[derive(PartialEq, PartialOrd)]
    struct Ranked(f32, Reverse<u64>);
    impl Eq for Ranked {}
    impl Ord for Ranked {
        fn cmp(&self, other: &Self) -> std::cmp::Ordering {
            self.0.total_cmp(&other.0).then(self.1.cmp(&other.1))
        }
    }

    let weight = query.weight(tantivy::query::EnableScoring::enabled_from_searcher(searcher))?;
    let mut top: BinaryHeap<Reverse<Ranked>> = BinaryHeap::with_capacity(k + 1);
    for reader in searcher.segment_readers() {
        let ids = reader.fast_fields().u64("chunk_id")?;
        let alive = reader.alive_bitset();
        let start = if top.len() == k { top.peek().map_or(f32::MIN, |r| r.0 .0) } else { f32::MIN };
        let mut threshold = start;
        weight.for_each_pruning(start, reader, &mut |doc, score| {
            if alive.is_some_and(|a| a.is_deleted(doc)) {
                return threshold;
            }
            let Some(id) = ids.first(doc) else { return threshold };
            if filter.allows(id) {
                top.push(Reverse(Ranked(score, Reverse(id))));
                if top.len() > k {
                    top.pop();
                }
                if top.len() == k {
                    threshold = top.peek().map_or(threshold, |r| r.0 .0);
                }
            }
            threshold
        })?;
    }
    let mut hits: Vec<LexicalHit> = top.into_iter().map(|Reverse(Ranked(score, Reverse(id)))| (ChunkId(id), score)).collect();
    hits.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0 .0.cmp(&b.0 .0)));
    Ok(hits)
}

/// Searches one commit of a lexical index.
pub struct LexicalSearcher {
    reader: IndexReader,
    analyzer: std::sync::Mutex<TextAnalyzer>,
    fields: Fields,
}

impl LexicalSearcher {
    /// The `k` best chunks for a free-text query by BM25, best first. The query is plain text,
    /// not query syntax: it is tokenised like the indexed text (stemmed) and its distinct terms
    /// are OR-ed, so any user text works and ranks by BM25.
    pub fn search(&self, query: &str, k: usize) -> Result<Vec<LexicalHit>> {
        self.search_filtered(query, k, None)
    }

    /// [`LexicalSearcher::search`] over the chunks `filter` allows ([`filtered_top_k`]): refused
    /// chunks never take a place in the top k, and block-max WAND still skips what cannot beat it.
    pub fn search_filtered(&self, query: &str, k: usize, filter: Option<&ChunkFilter>) -> Result<Vec<LexicalHit>> {
        let mut terms: Vec<Term> = Vec::new();
        {
            let mut analyzer = self.analyzer.lock().unwrap_or_else(|p| p.into_inner());
            let mut stream = analyzer.token_stream(query);
            while let Some(token) = stream.next() {
                let term = Term::from_field_text(self.fields.body, &token.text);
                if !terms.contains(&term) {
                    terms.push(term);
                }
            }
        }
        if k == 0 || terms.is_empty() {
            return Ok(Vec::new());
        }
        let q = BooleanQuery::new(
            terms
                .into_iter()
                .map(|t| (Occur::Should, Box::new(TermQuery::new(t, IndexRecordOption::WithFreqs)) as Box<dyn Query>))
                .collect(),
        );
        let searcher = self.reader.searcher();
        let Some(filter) = filter else {
            let top = searcher.search(&q, &TopDocs::with_limit(k).order_by_score()).map_err(err("searching the lexical index".into()))?;
            let mut out = Vec::with_capacity(top.len());
            for (score, address) in top {
                let d: TantivyDocument = searcher.doc(address).map_err(err("reading a lexical hit".into()))?;
                let id = d
                    .get_first(self.fields.chunk)
                    .and_then(|v| v.as_u64())
                    .ok_or_else(|| Error::Bug("lexical hit without a chunk id".into()))?;
                out.push((ChunkId(id), score));
            }
            return Ok(out);
        };
        filtered_top_k(&searcher, &q, k, filter).map_err(err("searching the lexical index".into()))
    }

    /// Chunks in this commit.
    pub fn len(&self) -> usize {
        self.reader.searcher().num_docs() as usize
    }

    /// Whether this commit holds no chunks.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl LexicalSearch for LexicalSearcher {
    fn search_filtered(&self, query: &str, k: usize, filter: Option<&ChunkFilter>) -> Result<Vec<LexicalHit>> {
        LexicalSearcher::search_filtered(self, query, k, filter)
    }
    fn len(&self) -> usize {
        LexicalSearcher::len(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The filtered top k is the unfiltered ranking with the refused chunks taken out: the same
    /// chunks, the same scores, in the same order, and full; across several segments.
    #[test]
    fn a_filtered_search_ranks_as_the_full_one_without_the_refused() {
        use crate::access::{AccessMap, Audience};
        let ix = LexicalIndex::in_memory();
        let words = ["policy", "travel", "expense", "claim", "badge", "laptop", "holiday", "train", "hotel", "receipt"];
        for segment in 0..3u64 {
            let mut w = ix.writer().unwrap();
            for i in 0..400u64 {
                let id = segment * 400 + i + 1;
                let text: Vec<&str> = (0..(3 + id % 9)).map(|j| words[((id * 7 + j * j * 3) % 10) as usize]).collect();
                w.add(ChunkId(id), DocId(id), &text.join(" ")).unwrap();
            }
            w.commit(segment + 1).unwrap();
        }
        let searcher = ix.searcher().unwrap();
        let map = std::sync::Arc::new(AccessMap::new(1, (1..=1200u64).filter(|id| id % 7 != 0).map(|id| (ChunkId(id), vec!["legal".to_string()]))));
        let filter = map.filter(&Audience::groups(["hr"])).unwrap();
        for query in ["travel expense claim", "hotel", "badge laptop receipt train"] {
            let all = searcher.search(query, 1200).unwrap();
            let want: Vec<LexicalHit> = all.into_iter().filter(|h| h.0 .0 % 7 == 0).take(20).collect();
            let got = searcher.search_filtered(query, 20, Some(&filter)).unwrap();
            assert_eq!(got.len(), 20, "{query}: full");
            for (g, w) in got.iter().zip(&want) {
                assert!((g.1 - w.1).abs() < 1e-4, "{query}: {got:?} vs {want:?}");
            }
            let ids = |v: &[LexicalHit]| v.iter().map(|h| h.0 .0).collect::<std::collections::BTreeSet<_>>();
            let last = want.last().unwrap().1;
            // Ties at the last score may be broken differently; everything above it agrees.
            let above = |v: &[LexicalHit]| v.iter().filter(|h| h.1 > last + 1e-4).map(|h| h.0 .0).collect::<std::collections::BTreeSet<_>>();
            assert_eq!(above(&got), above(&want), "{query}");
            assert!(ids(&got).iter().all(|id| id % 7 == 0));
        }
    }

    /// The in-memory index ranks as the folder's does.
    #[test]
    fn an_index_in_memory_ranks_as_one_in_a_folder() {
        let dir = tempfile::tempdir().unwrap();
        let texts = ["Travel policy: book economy flights.", "Flights over six hours may be premium economy.", "Passwords have 14 characters."];
        let searchers: Vec<LexicalSearcher> = [LexicalIndex::open_or_create(dir.path()).unwrap(), LexicalIndex::in_memory()]
            .iter()
            .map(|ix| {
                let mut w = ix.writer().unwrap();
                for (i, t) in texts.iter().enumerate() {
                    w.add(ChunkId(i as u64 + 1), DocId(i as u64 + 1), t).unwrap();
                }
                w.commit(1).unwrap();
                ix.searcher().unwrap()
            })
            .collect();
        let (folder, memory): (&dyn LexicalSearch, &dyn LexicalSearch) = (&searchers[0], &searchers[1]);
        assert_eq!(folder.len(), memory.len());
        assert_eq!(folder.search("economy flight", 5).unwrap(), memory.search("economy flight", 5).unwrap());
    }

    #[test]
    fn add_search_replace_and_generation() {
        let dir = tempfile::tempdir().unwrap();
        let ix = LexicalIndex::open_or_create(dir.path()).unwrap();
        assert_eq!(ix.generation().unwrap(), 0);
        let mut w = ix.writer().unwrap();
        w.add(ChunkId(1), DocId(1), "Travel policy\n\nEmployees book economy flights.").unwrap();
        w.add(ChunkId(2), DocId(2), "Security policy\n\nPasswords have at least 14 characters.").unwrap();
        w.commit(3).unwrap();
        assert_eq!(ix.generation().unwrap(), 3);
        let s = ix.searcher().unwrap();
        assert_eq!(s.search("flight booking", 5).unwrap()[0].0, ChunkId(1), "stemming: flight ~ flights");
        assert_eq!(s.search("password: \"14 (characters", 5).unwrap()[0].0, ChunkId(2), "odd syntax is tolerated");
        assert!(s.search("   ", 5).unwrap().is_empty());

        let mut w = ix.writer().unwrap();
        w.remove_document(DocId(1));
        w.commit(4).unwrap();
        let s = LexicalIndex::open_or_create(dir.path()).unwrap().searcher().unwrap();
        assert!(s.search("flights", 5).unwrap().is_empty());
        assert_eq!(s.len(), 1);
    }
}
