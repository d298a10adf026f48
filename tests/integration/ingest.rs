//! The write path end to end through the CLI, with the real MiniLM model and real SQLite, usearch
//! and tantivy files: incremental runs, bad input, crash safety, repair, tenants, re-embedding.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use ragbox_core::store::{Store, VectorOptions};
use ragbox_core::testing::SeededRng;

use crate::common::{copy_tree, ragbox, run};

/// The sample corpus the repo ships.
pub fn sample_corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/corpus")
}

fn ingest_json(data: &Path, args: &[&str]) -> (i32, serde_json::Value, String) {
    let (code, out, err) = run(ragbox(data).arg("ingest").args(args).arg("--json"));
    let json = serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("ingest --json printed {out:?} ({e}); stderr: {err}"));
    (code, json, err)
}

fn count(v: &serde_json::Value, key: &str) -> u64 {
    v[key].as_u64().unwrap_or_else(|| panic!("{key} missing in {v}"))
}

fn open_store(data: &Path) -> Store {
    Store::open(data, VectorOptions::default()).expect("store opens")
}

fn consistent(data: &Path, tenant: &str) -> ragbox_core::store::Consistency {
    let store = open_store(data);
    let t = store.catalog().require_tenant(tenant).unwrap();
    store.check_consistency(&t).unwrap()
}

/// Paths of the tenant's indexed documents.
fn indexed_paths(data: &Path, tenant: &str) -> BTreeSet<PathBuf> {
    let store = open_store(data);
    let t = store.catalog().require_tenant(tenant).unwrap();
    store
        .catalog()
        .documents(t.id)
        .unwrap()
        .into_iter()
        .filter(|d| d.status == ragbox_core::store::DocumentStatus::Indexed)
        .map(|d| d.path)
        .collect()
}

/// BM25 search through a reader (which repairs first), returning the hits' document paths.
fn lexical_paths(data: &Path, tenant: &str, query: &str) -> Vec<PathBuf> {
    let store = open_store(data);
    let t = store.catalog().require_tenant(tenant).unwrap();
    let reader = store.reader(&t).unwrap();
    let hits = reader.lexical.search(query, 5).unwrap();
    let ids: Vec<_> = hits.iter().map(|h| h.0).collect();
    store.catalog().chunks(t.id, &ids).unwrap().into_iter().map(|c| c.path).collect()
}

fn corpus_files(dir: &Path) -> usize {
    ragbox_core::source::walk::walk(dir, ragbox_core::source::walk::Links::Inside)
        .filter(|e| matches!(e, ragbox_core::source::walk::WalkEntry::File { path, .. } if ragbox_core::source::parser_for(path).is_some()))
        .count()
}

#[test]
fn sample_corpus_ingests_then_reruns_touch_only_what_changed() {
    let tmp = tempfile::tempdir().unwrap();
    let (corpus, data) = (tmp.path().join("corpus"), tmp.path().join("data"));
    copy_tree(&sample_corpus(), &corpus);
    let files = corpus_files(&corpus) as u64;
    assert!(files >= 8, "the sample corpus has its documents");

    let (code, first, err) = ingest_json(&data, &[corpus.to_str().unwrap()]);
    assert_eq!(code, 0, "{first}\n{err}");
    assert_eq!(count(&first, "added"), files, "{first}");
    assert!(first["skipped"].as_array().unwrap().is_empty(), "{first}");
    let chunks = count(&first, "chunks");
    assert!(chunks >= files, "{first}");
    assert_eq!(count(&first, "embedded") + count(&first, "cached"), chunks);
    let c = consistent(&data, "default");
    assert!(c.consistent, "{c:?}");
    assert_eq!(c.catalog_children as u64, chunks);

    // Unchanged: nothing parsed, embedded or committed.
    let (code, second, _) = ingest_json(&data, &[corpus.to_str().unwrap()]);
    assert_eq!(code, 0);
    assert_eq!((count(&second, "unchanged"), count(&second, "embedded"), count(&second, "commits")), (files, 0, 0), "{second}");

    // Each run went through the service's write path: an `ingest` row in the audit log, with
    // the path and what it did.
    let (code, out, err) = run(ragbox(&data).args(["audit", "--json"]));
    assert_eq!(code, 0, "{err}");
    let rows: Vec<serde_json::Value> = serde_json::Deserializer::from_str(&out).into_iter().map(Result::unwrap).collect();
    let ingests: Vec<&serde_json::Value> = rows.iter().filter(|r| r["action"] == "ingest").collect();
    assert_eq!(ingests.len(), 2, "{out}");
    assert!(ingests.iter().all(|r| r["outcome"] == "ok" && r["tenant"] == "default"), "{out}");
    let details: Vec<u64> = ingests.iter().map(|r| r["detail"]["added"].as_u64().unwrap()).collect();
    assert!(details.contains(&files) && details.contains(&0), "{out}");

    // One file changed, one removed, one added: exactly those are touched.
    let mut md: Vec<PathBuf> = std::fs::read_dir(corpus.join("policies"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    md.sort();
    let (changed, gone) = (&md[0], &md[1]);
    let mut text = std::fs::read_to_string(changed).unwrap();
    text.push_str("\n\n## 99 Appendix\n\nThe quokka clause: every quokka on site must be reported to facilities.\n");
    std::fs::remove_file(changed).unwrap(); // break the hard link to the shipped file
    std::fs::write(changed, text).unwrap();
    std::fs::remove_file(gone).unwrap();
    std::fs::write(corpus.join("new-note.txt"), "Parking\n\nVisitors park in bay 7 after signing in at reception.\n").unwrap();
    let (code, third, _) = ingest_json(&data, &[corpus.to_str().unwrap()]);
    assert_eq!(code, 0);
    assert_eq!(
        (count(&third, "added"), count(&third, "updated"), count(&third, "removed"), count(&third, "unchanged")),
        (1, 1, 1, files - 2),
        "{third}"
    );
    assert!(count(&third, "cached") > 0, "unchanged sections of the changed file come from the cache: {third}");
    let c = consistent(&data, "default");
    assert!(c.consistent, "{c:?}");
    let paths = indexed_paths(&data, "default");
    assert!(!paths.iter().any(|p| p.file_name() == gone.file_name()));
    assert_eq!(lexical_paths(&data, "default", "quokka on site")[0].file_name(), changed.file_name());
    assert_eq!(lexical_paths(&data, "default", "where do visitors park")[0].file_name().unwrap(), "new-note.txt");

    // ls and rm.
    let (code, out, _) = run(ragbox(&data).args(["ls", "--json"]));
    assert_eq!(code, 0);
    let ls: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(ls["documents"].as_array().unwrap().len() as u64, files);
    let (code, _, err) = run(ragbox(&data).arg("rm").arg(corpus.join("new-note.txt")));
    assert_eq!(code, 0, "{err}");
    assert!(lexical_paths(&data, "default", "where do visitors park").iter().all(|p| !p.ends_with("new-note.txt")));
    let (code, _, err) = run(ragbox(&data).arg("rm").arg(corpus.join("never-there.md")));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("ragbox ls"), "{err}");
}

#[test]
fn dense_search_finds_the_passage_with_the_real_model() {
    let tmp = tempfile::tempdir().unwrap();
    let (corpus, data) = (tmp.path().join("corpus"), tmp.path().join("data"));
    std::fs::create_dir_all(&corpus).unwrap();
    std::fs::write(corpus.join("pets.md"), "# Office pets\n\nDogs are welcome in the office on Fridays if they are calm and vaccinated.\n").unwrap();
    std::fs::write(corpus.join("tax.md"), "# Taxes\n\nQuarterly VAT returns are filed by the finance team before the 20th.\n").unwrap();
    let (code, report, err) = ingest_json(&data, &[corpus.to_str().unwrap()]);
    assert_eq!(code, 0, "{report} {err}");

    let app = ragbox_core::app::App::new(
        ragbox_core::config::Config::load(&ragbox_core::config::Overrides {
            data_dir: Some(data.clone()),
            models_dir: Some(crate::common::models_dir()),
            ..Default::default()
        })
        .unwrap(),
    )
    .unwrap();
    let embedder = app.embedder(None).unwrap();
    let store = app.store().unwrap();
    let t = store.catalog().require_tenant("default").unwrap();
    let reader = store.reader(&t).unwrap();
    let q = embedder.embed_one("can I bring my puppy to work?", ragbox_core::types::TextKind::Query).unwrap();
    let hits = reader.vector.search(&q.vector, 2).unwrap();
    let rows = store.catalog().chunks(t.id, &[hits[0].0]).unwrap();
    assert!(rows[0].path.ends_with("pets.md"), "{rows:?}");
    assert!(rows[0].text.contains("Dogs are welcome"));
    assert_eq!(rows[0].context, "Office pets", "title and section path, deduplicated");
    assert!(hits[0].1 > hits[1].1);
}

#[test]
fn bad_inputs_are_reported_with_path_and_reason_and_the_rest_is_ingested() {
    let tmp = tempfile::tempdir().unwrap();
    let (dir, data) = (tmp.path().join("bad"), tmp.path().join("data"));
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/fixtures/make-bad-inputs.sh");
    let (code, out, err) = run(std::process::Command::new("bash").arg(&script).arg(&dir));
    assert_eq!(code, 0, "{out}{err}");
    let (code, report, err) = ingest_json(&data, &[dir.to_str().unwrap()]);
    assert_eq!(code, 5, "completed with skips: {report}\n{err}");
    let skipped: Vec<(String, String)> = report["skipped"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["path"].as_str().unwrap().to_string(), s["reason"].as_str().unwrap().to_string()))
        .collect();
    let reason_of = |name: &str| -> String {
        skipped
            .iter()
            .find(|(p, _)| Path::new(p).file_name().is_some_and(|f| f.to_string_lossy() == name))
            .map(|(_, r)| r.clone())
            .unwrap_or_else(|| panic!("{name} not reported as skipped: {skipped:#?}"))
    };
    assert!(reason_of("empty.md").contains("empty"));
    assert!(reason_of("huge.txt").contains("too large"));
    assert!(reason_of("truncated.pdf").contains("could not be parsed"), "{}", reason_of("truncated.pdf"));
    assert!(skipped.iter().any(|(_, r)| r.contains("binary")), "{skipped:#?}");
    assert!(skipped.iter().any(|(_, r)| r.contains("UTF-8")), "{skipped:#?}");
    assert!(skipped.iter().any(|(_, r)| r.contains("loop")), "{skipped:#?}");
    assert!(count(&report, "added") >= 3, "the good files are ingested: {report}");
    let c = consistent(&data, "default");
    assert!(c.consistent, "{c:?}");

    // A second run reports the same skips (they stay skipped until they change) and does no work.
    let (code, again, _) = ingest_json(&data, &[dir.to_str().unwrap()]);
    assert_eq!(code, 5);
    assert_eq!(again["skipped"].as_array().unwrap().len(), skipped.len(), "{again}");
    assert_eq!(count(&again, "embedded"), 0);
}

#[test]
fn a_missing_folder_is_a_user_error_that_says_what_to_do() {
    let tmp = tempfile::tempdir().unwrap();
    let (code, _, err) = run(ragbox(tmp.path()).args(["ingest", "/no/such/folder"]));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("/no/such/folder") && err.contains("existing file or folder"), "{err}");
}

/// A config that commits every few chunks, so kills land between many commits.
fn small_commits_config(dir: &Path) -> PathBuf {
    let path = dir.join("small-commits.toml");
    std::fs::write(&path, "[ingest]\ncommit_chunks = 6\n").unwrap();
    path
}

/// Starts an ingest, kills it after `delay`, returns the documents it acknowledged and whether the
/// kill landed while it was still running.
fn ingest_and_kill(data: &Path, config: &Path, corpus: &Path, delay: Duration) -> (BTreeSet<PathBuf>, bool) {
    use std::io::Read;
    use std::os::unix::process::ExitStatusExt;
    let mut child = ragbox(data)
        .arg("--config")
        .arg(config)
        .args(["ingest", "-v"])
        .arg(corpus)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Drain stderr meanwhile, so a full pipe never stalls the child.
    let mut stderr = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut err = String::new();
        stderr.read_to_string(&mut err).unwrap();
        err
    });
    std::thread::sleep(delay);
    let _ = child.kill(); // SIGKILL
    let status = child.wait().unwrap();
    let err = reader.join().unwrap();
    let acked = err
        .lines()
        .filter_map(|l| l.strip_prefix("committed added ").or_else(|| l.strip_prefix("committed updated ")))
        .map(PathBuf::from)
        .collect();
    (acked, status.signal() == Some(9))
}

/// The crash test of the issue, at the size the suite can afford (20 kills);
/// `scripts/check/crash.sh` runs it with RAGBOX_CRASH_RUNS=100 or more.
#[test]
fn sigkill_at_random_moments_loses_nothing_acknowledged() {
    let runs: usize = std::env::var("RAGBOX_CRASH_RUNS").ok().and_then(|v| v.parse().ok()).unwrap_or(20);
    let tmp = tempfile::tempdir().unwrap();
    // Part of the sample corpus (four policies, the e-mails, the PDF: three parsers, ~90 chunks),
    // so that 20 runs stay within a few minutes on two cores.
    let corpus = tmp.path().join("corpus");
    for part in ["policies", "email", "plans"] {
        copy_tree(&sample_corpus().join(part), &corpus.join(part));
    }
    let config = small_commits_config(tmp.path());

    // How long a whole run takes here: kills are spread over that window.
    let data = tmp.path().join("timing");
    let t = Instant::now();
    let (code, _, err) = run(ragbox(&data).arg("--config").arg(&config).arg("ingest").arg(&corpus));
    assert_eq!(code, 0, "{err}");
    let full = t.elapsed();
    let expected = indexed_paths(&data, "default");

    let mut rng = SeededRng::new(0x5eed);
    let (mut kills, mut interrupted) = (0, 0);
    for run_no in 0..runs {
        let data = tmp.path().join(format!("data{run_no}"));
        // Each run may be killed twice in a row before it is allowed to finish.
        let mut acked = BTreeSet::new();
        for attempt in 0..2 {
            // The second attempt has less left to do: kill it sooner.
            let window = full.as_millis() as f32 / (attempt + 1) as f32;
            let delay = Duration::from_millis((rng.next_f32(1.0).abs() * window) as u64);
            let (now, killed) = ingest_and_kill(&data, &config, &corpus, delay);
            acked.extend(now);
            kills += 1;
            interrupted += usize::from(killed);
            if !data.join("catalog.sqlite").exists() {
                continue;
            }
            // Straight after the kill: a reader repairs, and every acknowledged document is there.
            let store = open_store(&data);
            if let Some(t) = store.catalog().tenant("default").unwrap() {
                drop(store.reader(&t).unwrap());
                let present = indexed_paths(&data, "default");
                assert!(acked.is_subset(&present), "run {run_no}: acknowledged but missing: {:?}", acked.difference(&present));
                let c = store.check_consistency(&store.catalog().require_tenant("default").unwrap()).unwrap();
                assert!(c.consistent, "run {run_no}: after repair {c:?}");
            }
        }
        eprintln!("run {run_no}: {} of {} documents acknowledged before the kills", acked.len(), expected.len());
        // The next run finishes the job.
        let (code, _, err) = run(ragbox(&data).arg("--config").arg(&config).arg("ingest").arg(&corpus));
        assert_eq!(code, 0, "run {run_no}: {err}");
        assert_eq!(indexed_paths(&data, "default"), expected, "run {run_no}");
        let c = consistent(&data, "default");
        assert!(c.consistent && c.duplicate_lexical == 0, "run {run_no}: {c:?}");
        assert!(!lexical_paths(&data, "default", "policy").is_empty(), "run {run_no}: search works");
    }
    eprintln!("{interrupted} of {kills} kills landed while ingest was running");
    assert!(interrupted * 2 >= kills, "most kills land mid-run ({interrupted} of {kills})");
}

#[test]
fn damaged_or_missing_indexes_are_rebuilt_from_the_catalog_without_reembedding() {
    let tmp = tempfile::tempdir().unwrap();
    let (corpus, data) = (tmp.path().join("corpus"), tmp.path().join("data"));
    copy_tree(&sample_corpus(), &corpus);
    let (code, _, err) = ingest_json(&data, &[corpus.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let layout = ragbox_core::store::Layout::new(&data);
    let vector = layout.vector("default", &open_store(&data).catalog().require_tenant("default").unwrap().model);

    // Garbage over the vector file, the lexical index deleted.
    let len = std::fs::metadata(&vector).unwrap().len() as usize;
    std::fs::write(&vector, vec![0xAB; len]).unwrap();
    std::fs::remove_dir_all(layout.lexical("default")).unwrap();
    let (code, report, _) = ingest_json(&data, &[corpus.to_str().unwrap()]);
    assert_eq!(code, 0);
    let repaired = report["repaired"].as_array().unwrap();
    assert_eq!(repaired.len(), 2, "{report}");
    assert_eq!(count(&report, "embedded"), 0, "vectors come from the catalog's cache: {report}");
    assert!(consistent(&data, "default").consistent);

    // A missing vector file, and a truncated one.
    std::fs::remove_file(&vector).unwrap();
    assert!(!lexical_paths(&data, "default", "password").is_empty());
    assert!(consistent(&data, "default").consistent, "the reader rebuilt it");
    let bytes = std::fs::read(&vector).unwrap();
    std::fs::write(&vector, &bytes[..bytes.len() / 3]).unwrap();
    assert!(!consistent(&data, "default").consistent);
    drop(open_store(&data).reader(&open_store(&data).catalog().require_tenant("default").unwrap()).unwrap());
    assert!(consistent(&data, "default").consistent);
}

#[test]
fn tenants_are_kept_apart() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    std::fs::create_dir_all(&a).unwrap();
    std::fs::create_dir_all(&b).unwrap();
    std::fs::write(a.join("alpha.md"), "# Alpha\n\nThe alpha team owns the zebra project.\n").unwrap();
    std::fs::write(b.join("beta.md"), "# Beta\n\nThe beta team owns the zebra budget.\n").unwrap();
    assert_eq!(ingest_json(&data, &[a.to_str().unwrap(), "--tenant", "acme"]).0, 0);
    assert_eq!(ingest_json(&data, &[b.to_str().unwrap(), "--tenant", "globex"]).0, 0);
    let acme = lexical_paths(&data, "acme", "zebra");
    let globex = lexical_paths(&data, "globex", "zebra");
    assert!(acme.len() == 1 && acme[0].ends_with("alpha.md"), "{acme:?}");
    assert!(globex.len() == 1 && globex[0].ends_with("beta.md"), "{globex:?}");
    // Resolution checks the tenant again: globex's chunk ids do not resolve for acme.
    let store = open_store(&data);
    let (ta, tg) = (store.catalog().require_tenant("acme").unwrap(), store.catalog().require_tenant("globex").unwrap());
    let g_hits = store.reader(&tg).unwrap().lexical.search("zebra", 5).unwrap();
    assert!(store.catalog().chunks(ta.id, &[g_hits[0].0]).unwrap().is_empty());
    let (code, _, err) = run(ragbox(&data).args(["ls", "--tenant", "initech"]));
    assert_eq!(code, 2);
    assert!(err.contains("acme, globex"), "{err}");
    let (code, _, err) = run(ragbox(&data).args(["ingest", "--tenant", "../evil"]).arg(&a));
    assert_eq!(code, 2, "{err}");
}

/// A corpus of two short documents ingested with the default model: the temporary folder (kept
/// alive by the caller), the corpus and the data folder.
fn two_documents_ingested() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let (corpus, data) = (tmp.path().join("corpus"), tmp.path().join("data"));
    std::fs::create_dir_all(&corpus).unwrap();
    std::fs::write(corpus.join("a.md"), "# Leave\n\nStaff get 28 days of annual leave, including public holidays.\n").unwrap();
    std::fs::write(corpus.join("b.md"), "# Laptops\n\nLaptops are replaced every four years.\n").unwrap();
    assert_eq!(ingest_json(&data, &[corpus.to_str().unwrap()]).0, 0);
    (tmp, corpus, data)
}

#[test]
fn reembed_switches_a_tenant_to_another_model_from_the_catalog() {
    let (_tmp, corpus, data) = two_documents_ingested();
    let (code, _, err) = run(ragbox(&data).args(["ingest", "--model", "nomic-embed-text-v1.5"]).arg(&corpus));
    assert_eq!(code, 2, "another model on an existing tenant is refused");
    assert!(err.contains("ragbox reembed --tenant default --model nomic-embed-text-v1.5"), "{err}");

    let (code, out, err) = run(ragbox(&data).args(["reembed", "--model", "nomic-embed-text-v1.5", "--json"]));
    assert_eq!(code, 0, "{err}");
    let r: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(r["report"]["embedded"], 2, "{r}");
    let store = open_store(&data);
    let t = store.catalog().require_tenant("default").unwrap();
    // `auto` runs both models at int8 (their manifest entries passed the gate at it).
    assert_eq!((t.model.as_str(), t.dims), ("nomic-embed-text-v1.5@int8", 768));
    assert!(store.check_consistency(&t).unwrap().consistent);
    assert!(ragbox_core::store::Layout::new(&data).vector("default", "all-minilm-l6-v2@int8").exists(), "the old index stays");

    // Further ingests use the tenant's model; nothing unchanged is embedded again.
    std::fs::write(corpus.join("c.md"), "# Parking\n\nBay 7 is for visitors.\n").unwrap();
    let (code, report, _) = ingest_json(&data, &[corpus.to_str().unwrap()]);
    assert_eq!(code, 0);
    assert_eq!((report["model"].as_str().unwrap(), count(&report, "added"), count(&report, "embedded")), ("nomic-embed-text-v1.5@int8", 1, 1));
    // Switching back costs nothing: MiniLM's vectors are still cached.
    let (code, out, _) = run(ragbox(&data).args(["reembed", "--model", "all-minilm-l6-v2", "--json"]));
    assert_eq!(code, 0);
    let r: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!((r["report"]["embedded"].as_u64(), r["report"]["cached"].as_u64()), (Some(1), Some(2)), "{r}");
    // Both switches, and the refused ingest, are in the audit log.
    let (_, out, _) = run(ragbox(&data).args(["audit", "--json"]));
    let rows: Vec<serde_json::Value> = serde_json::Deserializer::from_str(&out).into_iter().map(Result::unwrap).collect();
    let moves: Vec<(&str, &str)> = rows
        .iter()
        .filter(|r| r["action"] == "reembed")
        .map(|r| (r["detail"]["to"].as_str().unwrap(), r["outcome"].as_str().unwrap()))
        .collect();
    assert_eq!(moves, [("nomic-embed-text-v1.5@int8", "ok"), ("all-minilm-l6-v2@int8", "ok")], "{out}");
    assert!(rows.iter().any(|r| r["action"] == "ingest" && r["outcome"].as_str().unwrap().starts_with("error")), "{out}");
}

#[test]
fn switching_the_encoders_precision_never_mixes_vectors_in_one_index() {
    // `auto` (the default) builds a new tenant at the precision the manifest says passed the
    // quality gate: int8 for MiniLM.
    let (_tmp, corpus, data) = two_documents_ingested();
    let model = |data: &std::path::Path| open_store(data).catalog().require_tenant("default").unwrap().model;
    assert_eq!(model(&data), "all-minilm-l6-v2@int8");
    let at = |precision: &str| {
        let mut c = ragbox(&data);
        c.env("RAGBOX_EMBED_PRECISION", precision);
        c
    };

    // A query with f32 configured is still embedded as the int8 index was: the same scores
    // (without the reranker, whose own precision follows the setting too).
    let search = |c: &mut std::process::Command| {
        let (code, out, err) = run(c.args(["search", "how many days of annual leave", "--json", "--no-rerank"]));
        assert_eq!(code, 0, "{err}");
        let r: serde_json::Value = serde_json::from_str(&out).unwrap();
        let r = &r["retrieval"];
        assert!(r["floor"].is_number(), "the model's floor applies at either precision: {r}");
        (r["model"].clone(), r["best_evidence"].clone(), r["hits"].clone())
    };
    assert_eq!(search(&mut at("f32")), search(&mut ragbox(&data)), "an int8 index is searched with int8 query vectors");

    // Ingesting at an explicit f32 into the int8 index is refused with the command that switches it.
    let (code, _, err) = run(at("f32").arg("ingest").arg(&corpus));
    assert_eq!(code, 2, "f32 vectors are not added to an int8 index");
    assert!(err.contains("ragbox reembed --tenant default --model all-minilm-l6-v2"), "{err}");

    // Switching re-embeds every chunk: int8 vectors in the cache are not f32 ones.
    let (code, out, err) = run(ragbox(&data).args(["reembed", "--model", "all-minilm-l6-v2@f32", "--json"]));
    assert_eq!(code, 0, "{err}");
    let r: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!((r["report"]["embedded"].as_u64(), r["report"]["cached"].as_u64()), (Some(2), Some(0)), "{r}");
    assert_eq!(model(&data), "all-minilm-l6-v2");
    let store = open_store(&data);
    assert!(store.check_consistency(&store.catalog().require_tenant("default").unwrap()).unwrap().consistent);
    drop(store);
    // Under `auto` a tenant built at f32 stays at f32: an ingest into it is not refused, and the
    // index is searched at f32 whatever the configuration says.
    std::fs::write(corpus.join("c.md"), "# Parking\n\nVisitors park in bay 4.\n").unwrap();
    let (code, _, err) = run(ragbox(&data).arg("ingest").arg(&corpus));
    assert_eq!(code, 0, "{err}");
    assert_eq!(model(&data), "all-minilm-l6-v2");
    assert_eq!(search(&mut ragbox(&data)), search(&mut at("int8")));
    // Back to int8 by name: the vectors of the first two documents are still cached.
    let (code, out, _) = run(ragbox(&data).args(["reembed", "--model", "all-minilm-l6-v2@int8", "--json"]));
    assert_eq!(code, 0);
    let r: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!((r["report"]["embedded"].as_u64(), r["report"]["cached"].as_u64()), (Some(1), Some(2)), "{r}");
    assert_eq!(model(&data), "all-minilm-l6-v2@int8");
}

#[test]
fn watch_follows_new_and_changed_files() {
    let tmp = tempfile::tempdir().unwrap();
    let (corpus, data) = (tmp.path().join("corpus"), tmp.path().join("data"));
    std::fs::create_dir_all(&corpus).unwrap();
    std::fs::write(corpus.join("a.md"), "# A\n\nFirst document.\n").unwrap();
    let mut child = ragbox(&data).args(["ingest", "--watch", "-q"]).arg(&corpus).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    let wait_for = |what: &str, cond: &dyn Fn() -> bool| {
        let t = Instant::now();
        while !cond() {
            assert!(t.elapsed() < Duration::from_secs(60), "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(200));
        }
    };
    let has = |name: &'static str| {
        let data = data.clone();
        move || {
            data.join("catalog.sqlite").exists()
                && open_store(&data).catalog().tenant("default").ok().flatten().is_some()
                && indexed_paths(&data, "default").iter().any(|p| p.ends_with(name))
        }
    };
    wait_for("the first ingest", &has("a.md"));
    std::fs::write(corpus.join("b.md"), "# B\n\nThe watcher picked up the aardvark memo.\n").unwrap();
    wait_for("the new file", &has("b.md"));
    wait_for("the lexical index", &|| lexical_paths(&data, "default", "aardvark").iter().any(|p| p.ends_with("b.md")));
    std::fs::remove_file(corpus.join("a.md")).unwrap();
    wait_for("the removal", &|| !indexed_paths(&data, "default").iter().any(|p| p.ends_with("a.md")));
    let _ = child.kill();
    let _ = child.wait();
}

#[test]
fn office_files_ingest_by_kind_and_encrypted_or_legacy_ones_say_what_to_do() {
    let tmp = tempfile::tempdir().unwrap();
    let (dir, data) = (tmp.path().join("office"), tmp.path().join("data"));
    copy_tree(&Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/office"), &dir);
    let (code, report, err) = ingest_json(&data, &[dir.to_str().unwrap()]);
    assert_eq!(code, 5, "completed with skips: {report}\n{err}");
    let skipped: Vec<(String, String)> = report["skipped"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            let name = Path::new(s["path"].as_str().unwrap()).file_name().unwrap().to_string_lossy().into_owned();
            (name, s["reason"].as_str().unwrap().to_string())
        })
        .collect();
    let reasons: std::collections::BTreeMap<_, _> = skipped.iter().cloned().collect();
    assert_eq!(reasons.keys().map(String::as_str).collect::<Vec<_>>(), vec!["encrypted.docx", "legacy.doc", "legacy.ppt"], "{skipped:#?}");
    assert!(reasons["encrypted.docx"].starts_with("encrypted: cannot be read without its password"));
    assert!(reasons["legacy.doc"].contains("--convert-to docx"), "{}", reasons["legacy.doc"]);
    assert!(reasons["legacy.ppt"].contains("--convert-to pptx"), "{}", reasons["legacy.ppt"]);

    // Every other fixture is indexed, and `ls` names each one's kind.
    let (code, out, err) = run(ragbox(&data).args(["ls", "--json"]));
    assert_eq!(code, 0, "{err}");
    let listed: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    let kinds: BTreeSet<(String, String)> = listed
        .as_array()
        .unwrap_or_else(|| listed["documents"].as_array().expect("ls --json lists documents"))
        .iter()
        .map(|d| {
            let name = Path::new(d["path"].as_str().unwrap()).file_name().unwrap().to_string_lossy().into_owned();
            (name, d["parser"].as_str().unwrap_or("?").to_string())
        })
        .collect();
    for (file, kind) in [
        ("headings-lists-table.docx", "docx"),
        ("tracked-changes.docx", "docx"),
        ("headings-lists-table.odt", "odt"),
        ("slides.pptx", "pptx"),
        ("slides.odp", "odp"),
        ("sheet.xlsx", "xlsx"),
        ("sheet.xls", "xls"),
        ("sheet.ods", "ods"),
        ("sheet.csv", "csv"),
        ("sheet.tsv", "tsv"),
        ("book.epub", "epub"),
        ("letter.rtf", "rtf"),
    ] {
        assert!(kinds.contains(&(file.to_string(), kind.to_string())), "{file} as {kind}: {kinds:?}");
    }
    let c = consistent(&data, "default");
    assert!(c.consistent, "{c:?}");

    // What each format holds is searchable: a spreadsheet row, a slide's speaker notes, a footnote.
    let names = |query: &str| -> Vec<String> {
        lexical_paths(&data, "default", query).iter().map(|p| p.file_name().unwrap().to_string_lossy().into_owned()).collect()
    };
    assert!(names("Hamburg 15730 parcels").iter().any(|n| n.starts_with("sheet.")), "{:?}", names("Hamburg 15730 parcels"));
    assert!(names("busiest April").iter().any(|n| n.starts_with("slides.")));
    assert!(names("handbook reviewed every January").iter().any(|n| n.starts_with("headings-lists-table.")));

    // Re-running touches nothing; the skips are reported again.
    let (code, again, _) = ingest_json(&data, &[dir.to_str().unwrap()]);
    assert_eq!(code, 5);
    assert_eq!(count(&again, "embedded"), 0, "{again}");
}

/// A legacy workbook is read by a child `ragbox` bounded in memory: the mutated `.xls` that made
/// calamine allocate 24 GB ends that child alone, the file is skipped as over a limit, and the
/// well-formed workbook beside it is read and searchable.
#[test]
fn a_memory_bomb_xls_ends_its_reader_child_and_the_rest_of_the_folder_ingests() {
    let tmp = tempfile::tempdir().unwrap();
    let (dir, data) = (tmp.path().join("sheets"), tmp.path().join("data"));
    std::fs::create_dir_all(&dir).unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    std::fs::copy(root.join("tests/fixtures/fuzz/xls-calamine-memory-bomb.xls"), dir.join("bomb.xls")).unwrap();
    std::fs::copy(root.join("tests/data/office/sheet.xls"), dir.join("shipments.xls")).unwrap();
    std::fs::write(dir.join("notes.md"), "# Notes\n\nThe depot list is in the workbook.\n").unwrap();
    let (code, report, err) = ingest_json(&data, &[dir.to_str().unwrap()]);
    assert_eq!(code, 5, "completed with one skip: {report}\n{err}");
    let skipped = report["skipped"].as_array().unwrap();
    assert_eq!(skipped.len(), 1, "{report}");
    assert!(skipped[0]["path"].as_str().unwrap().ends_with("bomb.xls"), "{report}");
    let reason = skipped[0]["reason"].as_str().unwrap();
    assert!(reason.contains("over a parser safety limit") && reason.contains("2 GiB"), "{reason}");
    let found = lexical_paths(&data, "default", "Hamburg 15730 parcels");
    assert!(found.iter().any(|p| p.ends_with("shipments.xls")), "{found:?}");
    assert!(lexical_paths(&data, "default", "depot list workbook").iter().any(|p| p.ends_with("notes.md")));
    let c = consistent(&data, "default");
    assert!(c.consistent, "{c:?}");
}

#[test]
fn scanned_pages_and_images_are_read_by_ocr_with_their_pages() {
    let tmp = tempfile::tempdir().unwrap();
    let (dir, data) = (tmp.path().join("scans"), tmp.path().join("data"));
    std::fs::create_dir_all(&dir).unwrap();
    let scanned = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/scanned");
    let tiff = "business-continuity-plan-pages-1-2.tif";
    for name in ["business-continuity-plan-scanned.pdf", "page-1.png", "page-2.jpg", tiff] {
        std::fs::copy(scanned.join(name), dir.join(name)).unwrap();
    }
    let (code, report, err) = ingest_json(&data, &[dir.to_str().unwrap()]);
    assert_eq!(code, 0, "every scan is read: {report}\n{err}");
    assert_eq!(count(&report, "added"), 4, "{report}");

    let store = open_store(&data);
    let t = store.catalog().require_tenant("default").unwrap();
    let docs = store.catalog().documents(t.id).unwrap();
    let pdf = docs.iter().find(|d| d.path.ends_with("business-continuity-plan-scanned.pdf")).unwrap();
    assert_eq!(pdf.parser.as_deref(), Some("pdf"));
    let image = docs.iter().find(|d| d.path.ends_with("page-2.jpg")).unwrap();
    assert_eq!(image.parser.as_deref(), Some("image"));

    // The recovery table of page 2 is found in the scan, on page 2, and in the JPEG of that page.
    let hits = lexical_paths(&data, "default", "Warehouse Management System recovery time objective");
    assert!(hits.iter().any(|p| p.ends_with("business-continuity-plan-scanned.pdf")), "{hits:?}");
    assert!(hits.iter().any(|p| p.ends_with("page-2.jpg")), "{hits:?}");
    let reader = store.reader(&t).unwrap();
    let ids: Vec<_> = reader.lexical.search("Dordrecht backup office 40 workstations", 5).unwrap().iter().map(|h| h.0).collect();
    let chunks = store.catalog().chunks(t.id, &ids).unwrap();
    let in_pdf = chunks.iter().find(|c| c.path.ends_with("business-continuity-plan-scanned.pdf")).expect("the scan's page 2 is indexed");
    assert_eq!(in_pdf.page, Some(2), "{in_pdf:?}");
    // Every page of the multi-page TIFF (bilevel fax pages) is read, each with its number.
    let in_tiff = chunks.iter().find(|c| c.path.ends_with(tiff)).expect("the TIFF's page 2 is indexed");
    assert_eq!(in_tiff.page, Some(2), "{in_tiff:?}");
    let doc = docs.iter().find(|d| d.path.ends_with(tiff)).unwrap();
    assert_eq!(doc.parser.as_deref(), Some("image"));
    let ids: Vec<_> = reader.lexical.search("Annelies de Vries Chief Operating Officer", 10).unwrap().iter().map(|h| h.0).collect();
    let pages: Vec<_> = store.catalog().chunks(t.id, &ids).unwrap().into_iter().filter(|c| c.path.ends_with(tiff)).map(|c| c.page).collect();
    assert!(pages.contains(&Some(1)), "the TIFF's page 1 is indexed: {pages:?}");
}

#[test]
fn a_scan_whose_page_images_cannot_be_decoded_is_skipped_with_why() {
    let tmp = tempfile::tempdir().unwrap();
    let (dir, data) = (tmp.path().join("scans"), tmp.path().join("data"));
    std::fs::create_dir_all(&dir).unwrap();
    // The Group 4 scan with its images relabelled JBIG2 (same length, so the PDF's offsets hold):
    // a bilevel encoding no decoder here reads.
    let scanned = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/scanned");
    let pdf = std::fs::read(scanned.join("business-continuity-plan-pages-1-2-g4.pdf")).unwrap();
    let (from, to) = (b"/CCITTFaxDecode".as_slice(), b"/JBIG2Decode   ".as_slice());
    let mut relabelled = Vec::with_capacity(pdf.len());
    let mut rest = pdf.as_slice();
    while let Some(at) = rest.windows(from.len()).position(|w| w == from) {
        relabelled.extend_from_slice(&rest[..at]);
        relabelled.extend_from_slice(to);
        rest = &rest[at + from.len()..];
    }
    relabelled.extend_from_slice(rest);
    assert_ne!(relabelled, pdf);
    std::fs::write(dir.join("jbig2.pdf"), &relabelled).unwrap();
    std::fs::copy(scanned.join("business-continuity-plan-pages-1-2-g4.pdf"), dir.join("g4.pdf")).unwrap();
    let (code, report, err) = ingest_json(&data, &[dir.to_str().unwrap()]);
    assert_eq!(code, 5, "completed with one skip: {report}\n{err}");
    let skipped = report["skipped"].as_array().unwrap();
    assert_eq!(skipped.len(), 1, "{report}");
    assert!(skipped[0]["path"].as_str().unwrap().ends_with("jbig2.pdf"), "{report}");
    let reason = skipped[0]["reason"].as_str().unwrap();
    assert!(
        reason.contains("the image of scanned page 1: unsupported image encoding JBIG2Decode (and 1 more scanned page)"),
        "{reason}"
    );
    // The Group 4 copy is read, page 2 on page 2.
    let store = open_store(&data);
    let t = store.catalog().require_tenant("default").unwrap();
    let reader = store.reader(&t).unwrap();
    let ids: Vec<_> = reader.lexical.search("Dordrecht backup office 40 workstations", 5).unwrap().iter().map(|h| h.0).collect();
    let chunks = store.catalog().chunks(t.id, &ids).unwrap();
    let hit = chunks.iter().find(|c| c.path.ends_with("g4.pdf")).expect("the G4 scan's page 2 is indexed");
    assert_eq!(hit.page, Some(2), "{hit:?}");
}

#[test]
fn without_the_ocr_model_scans_are_skipped_with_the_fetch_command() {
    let tmp = tempfile::tempdir().unwrap();
    let (dir, data, models) = (tmp.path().join("scans"), tmp.path().join("data"), tmp.path().join("models"));
    std::fs::create_dir_all(&dir).unwrap();
    let scanned = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/scanned");
    std::fs::copy(scanned.join("business-continuity-plan-scanned.pdf"), dir.join("scan.pdf")).unwrap();
    std::fs::write(dir.join("note.md"), "# Note\n\nThe loading bay closes at 18:00.\n").unwrap();
    // A models folder with the embedder only (linked from the real one), no OCR model.
    std::fs::create_dir_all(&models).unwrap();
    let real = Path::new(env!("CARGO_MANIFEST_DIR")).join("models");
    for entry in std::fs::read_dir(&real).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.contains("all-MiniLM-L6-v2") || name == "manifest.toml" {
            std::os::unix::fs::symlink(entry.path(), models.join(&name)).unwrap();
        }
    }
    let (code, out, err) = run(ragbox(&data).env("RAGBOX_MODELS_DIR", &models).args(["ingest", "--json", dir.to_str().unwrap()]));
    let report: serde_json::Value = serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{out} {err} {e}"));
    assert_eq!(code, 5, "{report}\n{err}");
    let skipped = report["skipped"].as_array().unwrap();
    assert_eq!(skipped.len(), 1, "{report}");
    let reason = skipped[0]["reason"].as_str().unwrap();
    assert!(reason.starts_with(ragbox_core::source::NEEDS_OCR) && reason.contains("scripts/setup/fetch-models.sh pp-ocrv6-small"), "{reason}");
    assert_eq!(count(&report, "added"), 1, "the markdown note is ingested: {report}");
}
