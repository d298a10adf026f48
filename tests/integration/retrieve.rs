//! The read path end to end with the real MiniLM model over the real store files: search and its
//! explanation, the refusal floor, model mismatch, tenant separation, trace, reranking through the
//! cross-encoder code path, and `ragbox eval` on a tiny BEIR set.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use ragbox_core::rerank::{CrossEncoder, RerankOptions, Reranker};
use ragbox_core::retrieve::{Evidence, Outcome, RetrieveOptions, Retriever};
use ragbox_core::store::{Store, VectorOptions};

use crate::common::{copy_tree, fixture, models_dir, ragbox, run};
use crate::ingest::sample_corpus;

/// The sample corpus ingested once (MiniLM, default settings) into a data folder shared by the
/// read-only tests here.
pub(crate) fn sample_data() -> &'static Path {
    static DATA: OnceLock<PathBuf> = OnceLock::new();
    DATA.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap().keep();
        let corpus = dir.join("corpus");
        copy_tree(&sample_corpus(), &corpus);
        let (code, out, err) = run(ragbox(&dir.join("data")).arg("ingest").arg(&corpus).arg("-q"));
        assert_eq!(code, 0, "{out}\n{err}");
        dir.join("data")
    })
}

fn search_json(data: &Path, args: &[&str]) -> serde_json::Value {
    let (code, out, err) = run(ragbox(data).arg("search").args(args).arg("--json"));
    assert_eq!(code, 0, "{out}\n{err}");
    serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("search --json printed {out:?}: {e}"))
}

fn normalise(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ").to_lowercase()
}

fn questions() -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/corpus-questions.jsonl")).unwrap();
    text.lines().filter(|l| !l.trim().is_empty()).map(|l| serde_json::from_str(l).unwrap()).collect()
}

#[test]
fn search_returns_the_evidence_of_answerable_questions() {
    let data = sample_data();
    let mut found = 0;
    let answerable: Vec<_> = questions().into_iter().filter(|q| q["answerable"] == true).collect();
    for q in &answerable {
        let r = &search_json(data, &[q["question"].as_str().unwrap(), "-k", "5"])["retrieval"];
        let hits = r["hits"].as_array().unwrap();
        assert!(!hits.is_empty() && hits.len() <= 5, "{r}");
        for (i, h) in hits.iter().enumerate() {
            assert_eq!(h["rank"], i + 1);
            assert!(h["chunk"]["path"].as_str().unwrap().contains("corpus"), "hits carry their document: {h}");
        }
        let evidence = normalise(q["evidence"].as_str().unwrap());
        if hits.iter().any(|h| normalise(h["chunk"]["text"].as_str().unwrap()).contains(&evidence)) {
            found += 1;
        }
        // Every candidate carries each stage's view; the fused ranks are 1..n in list order.
        let candidates = r["candidates"].as_array().unwrap();
        assert!(candidates.iter().all(|c| c["fused"]["rank"].as_u64().is_some()));
        assert!(candidates.iter().any(|c| c["dense"].is_object()) && candidates.iter().any(|c| c["lexical"].is_object()));
    }
    // Measured: see the assertion message; the bar is most, not all (MiniLM, no reranker).
    assert!(found * 4 >= answerable.len() * 3, "evidence in the top 5 for only {found} of {} questions", answerable.len());
}

#[test]
fn the_default_floor_passes_answerable_questions_and_refuses_questions_from_elsewhere() {
    // The floor on the cross-encoder's logit was chosen on SciFact's dev half vs NQ-open
    // (docs/EVAL.md), not on this corpus. Measured here: every answerable question passes it, and
    // so do the three unanswerable ones, all near misses next to real policy text (Harbourline's
    // 2023 revenue -2.2 against the expenses policy, parental leave -4.15 against "approved by the
    // employee's manager", the Rotterdam guest Wi-Fi password -2.52): the floor catches questions
    // from outside the documents' world (about -11 here), not near misses inside their subjects,
    // which the cosine floor before it partly caught (two of the three). Said in docs/EVAL.md.
    let data = sample_data();
    for q in ["Who won the football World Cup in 2018?", "How do I bake sourdough bread at home?"] {
        let r = &search_json(data, &[q])["retrieval"];
        assert_eq!(r["refused"], true, "{q}: {r}");
        assert!(r["best_evidence"].as_f64().unwrap() < -9.0, "{q}: {r}");
        assert!(!r["hits"].as_array().unwrap().is_empty(), "the closest material is still shown");
    }
    let mut answerable_refused = 0;
    for q in questions().into_iter().filter(|q| q["answerable"] == true) {
        let r = &search_json(data, &[q["question"].as_str().unwrap()])["retrieval"];
        assert_eq!(r["evidence"]["kind"], "rerank");
        answerable_refused += usize::from(r["refused"].as_bool().unwrap());
    }
    assert_eq!(answerable_refused, 0);
}

#[test]
fn explain_shows_each_stage_and_the_floor_decides_refusal() {
    let data = sample_data();
    let q = "What is the maximum hotel cost per night in London?";
    let (code, out, err) = run(ragbox(data).args(["search", q, "--explain"]));
    assert_eq!(code, 0, "{err}");
    for needle in ["dense", "bm25", "fused", "rerank", "combined", "kept as hit 1", "reranked by ms-marco-minilm-l12-v2-int8", "stages: embed"] {
        assert!(out.contains(needle), "--explain lacks {needle:?}:\n{out}");
    }

    // The reranker's logit decides refusal when it runs; the similarity when it does not.
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("floor.toml");
    std::fs::write(&config, "[retrieve.floors]\n\"ms-marco-minilm-l12-v2-int8\" = 99.0\n").unwrap();
    let r = &search_json(data, &[q, "--config", config.to_str().unwrap()])["retrieval"];
    assert_eq!((r["refused"].as_bool(), r["evidence"]["kind"].as_str()), (Some(true), Some("rerank")), "{r}");
    std::fs::write(&config, "[retrieve.floors]\n\"all-minilm-l6-v2\" = 0.99\n").unwrap();
    let (code, out, _) = run(ragbox(data).args(["search", q, "--no-rerank"]).arg("--config").arg(&config));
    assert_eq!(code, 0);
    assert!(out.contains("no good source"), "a floor above every similarity refuses:\n{out}");
    std::fs::write(&config, "[retrieve.floors]\n\"all-minilm-l6-v2\" = 0.05\n").unwrap();
    let r = &search_json(data, &[q, "--no-rerank", "--config", config.to_str().unwrap()])["retrieval"];
    assert_eq!(r["refused"], false, "{r}");
    assert_eq!(r["floor"].as_f64().unwrap(), 0.05f32 as f64);
    assert!(r["best_evidence"].as_f64().unwrap() > 0.05);
    assert_eq!(r["evidence"]["kind"], "similarity");
}

#[test]
fn a_query_model_other_than_the_index_model_is_refused() {
    let (code, out, err) = run(ragbox(sample_data()).args(["search", "hotel cap", "--model", "nomic-embed-text-v1.5"]));
    assert_eq!(code, 2, "a user error: {out}\n{err}");
    assert!(err.contains("all-minilm-l6-v2@int8 (384 dims)") && err.contains("reembed"), "{err}");
    let (code, _, err) = run(ragbox(sample_data()).args(["search", "   "]));
    assert_eq!(code, 2);
    assert!(err.contains("query is empty"), "{err}");
    let (code, _, err) = run(ragbox(sample_data()).args(["search", "x", "--tenant", "nobody"]));
    assert_eq!(code, 2);
    assert!(err.contains("nobody"), "{err}");
}

#[test]
fn tenants_only_see_their_own_documents() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    copy_tree(&sample_corpus().join("policies"), &a);
    copy_tree(&sample_corpus().join("meetings"), &b);
    for (dir, tenant) in [(&a, "alpha"), (&b, "beta")] {
        let (code, out, err) = run(ragbox(&data).arg("ingest").arg(dir).args(["--tenant", tenant, "-q"]));
        assert_eq!(code, 0, "{out}\n{err}");
    }
    for (dir, tenant, other) in [(&a, "alpha", &b), (&b, "beta", &a)] {
        let r = &search_json(&data, &["hotel cap meeting decision travel", "--tenant", tenant, "-k", "20"])["retrieval"];
        let hits = r["hits"].as_array().unwrap();
        assert!(!hits.is_empty());
        for h in hits {
            let p = PathBuf::from(h["chunk"]["path"].as_str().unwrap());
            assert!(p.starts_with(dir.canonicalize().unwrap()), "{tenant} sees {p:?}");
            assert!(!p.starts_with(other.canonicalize().unwrap()));
        }
    }
}

#[test]
fn trace_says_which_stage_lost_the_expected_text() {
    let data = sample_data();
    let q = "How many days after a trip do I have to submit my expense claim?";
    let (code, out, err) = run(ragbox(data).args(["trace", q, "--expect", "within 30 days of the last day of the trip", "--json"]));
    assert_eq!(code, 0, "{err}");
    let t: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    let chunks = t["chunks"].as_array().unwrap();
    assert!(!chunks.is_empty(), "{t}");
    assert!(chunks[0]["dense_rank"].as_u64().is_some() && chunks[0]["similarity"].as_f64().is_some(), "{t}");
    assert!(t["verdict"].as_str().unwrap().starts_with("found"), "{t}");

    let (code, out, _) = run(ragbox(data).args(["trace", q, "--expect", "the purple giraffe clause"]));
    assert_eq!(code, 0);
    assert!(out.contains("in no chunk"), "{out}");
}

#[test]
fn the_rerank_stage_reorders_the_head_through_the_cross_encoder() {
    let data = sample_data();
    let store = Store::open(data, VectorOptions::default()).unwrap();
    let tenant = store.catalog().require_tenant("default").unwrap();
    let dir = fixture("tiny-random-bert-crossencoder");
    // The seeded random cross-encoder proves the code path, not relevance.
    let tiny: Arc<dyn Reranker> = Arc::new(
        CrossEncoder::from_files(
            "tiny-random",
            512,
            &dir.join("config.json"),
            &dir.join("tokenizer.json"),
            &dir.join("model.safetensors"),
            &RerankOptions::default(),
        )
        .unwrap(),
    );
    let models = ragbox_core::model::ModelStore::new(&models_dir());
    let spec = models.manifest().get("all-minilm-l6-v2").unwrap();
    let embedder = ragbox_core::embed::load_embedder(&models, spec, &ragbox_core::embed::EmbedOptions::default()).unwrap();
    let options = RetrieveOptions { rerank_depth: 10, top_k: 4, floor: Some(1e9), ..RetrieveOptions::default() };
    let retriever = Retriever::new(&store, &tenant, Some(embedder), Some(Arc::clone(&tiny)), options).unwrap();
    let r = retriever.retrieve("hotel cost per night in London").unwrap();
    assert_eq!(r.reranker.as_deref(), Some("tiny-random"));
    assert_eq!(r.evidence, Evidence::Rerank { model: "tiny-random".into() });
    let reranked: Vec<_> = r.candidates.iter().take_while(|c| c.rerank.is_some()).collect();
    assert_eq!(reranked.len(), 10, "the top 10 fused candidates are scored");
    assert!(r.candidates[10..].iter().all(|c| c.rerank.is_none()));
    for (i, c) in reranked.iter().enumerate() {
        assert_eq!(c.rerank.unwrap().rank, i + 1, "reranked candidates lead, in reranker order");
    }
    assert!(reranked.windows(2).all(|w| w[0].rerank.unwrap().score >= w[1].rerank.unwrap().score));
    // The scores are the cross-encoder's own for those passages.
    let first = store.catalog().chunks(tenant.id, &[reranked[0].chunk]).unwrap().remove(0);
    let direct = tiny.score("hotel cost per night in London", &[&ragbox_core::types::indexed_text(&first.context, &first.text)]).unwrap()[0];
    assert!((direct - reranked[0].rerank.unwrap().score).abs() < 1e-4);
    assert!(r.refused, "no score reaches a floor of 1e9");
    assert!(!r.hits.is_empty(), "a refusal still shows the closest material");
    assert!(matches!(reranked[0].outcome, Outcome::Kept { rank: 1 } | Outcome::MergedIntoParent { rank: 1, .. }));
}

#[test]
fn eval_scores_each_configuration_on_a_tiny_beir_set() {
    let tmp = tempfile::tempdir().unwrap();
    let beir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/beir-mini");
    let ood = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/ood-questions.jsonl");
    let report = tmp.path().join("docs/EVAL.md");
    let eval = |report: Option<&Path>, extra: &[&str]| {
        let mut cmd = ragbox(&tmp.path().join("data"));
        cmd.arg("eval").arg("--data").arg(&beir).args(["--models", "all-minilm-l6-v2", "--json"]);
        cmd.arg("--scratch").arg(tmp.path().join("scratch")).args(extra);
        if let Some(report) = report {
            cmd.arg("--report").arg(report);
        }
        let (code, out, err) = run(&mut cmd);
        assert_eq!(code, 0, "{out}\n{err}");
        serde_json::from_str::<serde_json::Value>(out.trim()).unwrap()
    };
    let r = eval(Some(&report), &["--ood", ood.to_str().unwrap()]);
    assert_eq!(r["queries"], 6, "the test split only");
    assert_eq!(r["documents"], 12);
    let configs = r["configs"].as_array().unwrap();
    let names: Vec<&str> = configs.iter().map(|c| c["name"].as_str().unwrap()).collect();
    for n in ["bm25", "dense-all-minilm-l6-v2", "hybrid-all-minilm-l6-v2", "hybrid-all-minilm-l6-v2-noctx", "dense-all-minilm-l6-v2-whole", "bm25-whole"] {
        assert!(names.contains(&n), "{n} missing from {names:?}");
    }
    assert_eq!(configs.iter().filter(|c| c["default"] == true).count(), 1);
    for c in configs {
        for k in ["ndcg@10", "recall@10", "recall@100", "mrr@10"] {
            let v = c[k].as_f64().unwrap();
            assert!((0.0..=1.0).contains(&v), "{k} = {v} in {c}");
        }
        assert!(c["p50_ms"].as_f64().unwrap() > 0.0 && c["p95_ms"].as_f64().unwrap() >= c["p50_ms"].as_f64().unwrap());
        // Each query's answer is one short document with distinctive words: every configuration
        // finds all of them in its top 10.
        assert_eq!(c["recall@10"].as_f64().unwrap(), 1.0, "{c}");
    }
    // The default cross-encoder is fetched with the other models: the reranked configuration
    // runs, is the default, and its logit gets a refusal curve of its own.
    assert!(r["skipped"].as_array().unwrap().is_empty(), "{}", r["skipped"]);
    let default = configs.iter().find(|c| c["default"] == true).unwrap();
    assert_eq!(default["name"], "hybrid-all-minilm-l6-v2-rerank");
    assert_eq!(r["refusal"][1]["scorer"], "ms-marco-minilm-l12-v2-int8");
    assert!(r["refusal"][1]["shipped"].is_array(), "the shipped floor is checked here too: {}", r["refusal"][1]);
    let refusal = &r["refusal"][0];
    assert_eq!(refusal["scorer"], "all-minilm-l6-v2");
    assert_eq!(refusal["out_of_domain"], 6);
    assert!(refusal["chosen_in_domain_refused"].as_f64().unwrap() <= 0.05);

    let md = std::fs::read_to_string(&report).unwrap();
    assert!(md.contains("**hybrid-all-minilm-l6-v2-rerank** (default)") && md.contains("Refusal floor for `all-minilm-l6-v2`"), "{md}");
    assert!(md.contains("The shipped floor for `ms-marco-minilm-l12-v2-int8`"), "{md}");
    let svg = std::fs::read_to_string(tmp.path().join("docs/eval-beir-mini.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("bm25-whole"));
    assert!(tmp.path().join("docs/refusal-beir-mini-all-minilm-l6-v2.svg").exists());

    // The scratch store is reused: a second run ingests nothing and scores the same.
    let again = eval(None, &["--only", "hybrid"]);
    assert_eq!(again["ingest_s"], 0.0);
    let hybrid = |v: &serde_json::Value| v["configs"].as_array().unwrap().iter().find(|c| c["name"] == "hybrid-all-minilm-l6-v2").unwrap()["ndcg@10"].clone();
    assert_eq!(hybrid(&again), hybrid(&r));
    assert_eq!(std::fs::read_to_string(&report).unwrap(), md, "without --report nothing is written");
}

#[test]
fn a_closed_pipe_ends_search_quietly() {
    // `ragbox search … | head -1`: the reader goes away before the output is written.
    let mut child = ragbox(sample_data())
        .args(["search", "hotel cap per night", "--explain", "-k", "8"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "{err}");
}
