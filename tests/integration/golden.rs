//! The candle models against reference outputs of the Python implementations
//! (tests/fixtures/golden-*.json): token ids identical, cosine >= 0.9999, |logit diff| <= 1e-3.

use ragbox_core::embed::{load_transformer, EmbedOptions, Embedder};
use ragbox_core::model::{ModelStore, Precision};
use ragbox_core::rerank::{CrossEncoder, RerankOptions, Reranker};
use ragbox_core::types::{cosine, TextKind};

use crate::common::{f32s, fixture, json_fixture, models_dir, u32s};

fn embedder(name: &str) -> ragbox_core::embed::TransformerEmbedder {
    embedder_at(name, Precision::F32)
}

fn embedder_at(name: &str, precision: Precision) -> ragbox_core::embed::TransformerEmbedder {
    let store = ModelStore::new(models_dir());
    let spec = store.manifest().get(name).unwrap();
    let options = EmbedOptions { precision, ..EmbedOptions::default() };
    load_transformer(&store, spec, &options).unwrap_or_else(|e| panic!("{e}"))
}

/// Whether the manifest says `embed.precision = "auto"` runs `model` at int8.
fn auto_runs_int8(model: &str) -> bool {
    ModelStore::new(models_dir()).manifest().get(model).unwrap().auto_precision == Some(Precision::Int8)
}

/// The quality gate of int8 (docs/BENCHMARKS.md): `auto` may run a model at int8 only if every
/// golden text's embedding stays within cosine 0.999 of the f32 reference. Measured on MiniLM:
/// worst 0.9962 at first, 0.9987 with outliers set aside, 0.9992 with the FFN output layers'
/// weights at 15 bits too, so `auto` runs it at int8; this test fails the day that changes
/// either way. The opt-in path must stay close (>= 0.995 per
/// text) and consistent (a text alone and in a padded batch get the same vector).
#[test]
fn minilm_int8_quality_gate_decides_the_auto_precision() {
    let golden = json_fixture("golden-minilm.json");
    let e = embedder_at("all-minilm-l6-v2", Precision::Int8);
    let items = golden["items"].as_array().unwrap();
    let texts: Vec<&str> = items.iter().map(|i| i["text"].as_str().unwrap()).collect();
    let out = e.embed(&texts, TextKind::Passage).unwrap();
    let mut worst = 1f32;
    for (i, item) in items.iter().enumerate() {
        assert_eq!(out[i].tokens, item["num_tokens"].as_u64().unwrap() as usize);
        let c = cosine(&out[i].vector, &f32s(&item["embedding"]));
        assert!(c >= 0.995, "text {i}: int8 cosine {c} to the f32 reference");
        worst = worst.min(c);
    }
    let alone = e.embed(&texts[..1], TextKind::Passage).unwrap();
    assert!(cosine(&alone[0].vector, &out[0].vector) > 0.99999);
    assert_eq!(
        auto_runs_int8("all-minilm-l6-v2"),
        worst >= 0.999,
        "the manifest's auto_precision must be int8 exactly when int8 passes the gate (worst cosine {worst})"
    );
    eprintln!("golden minilm int8: {} texts, worst cosine {worst:.5}", texts.len());
}

#[test]
fn minilm_matches_sentence_transformers() {
    let golden = json_fixture("golden-minilm.json");
    let e = embedder("all-minilm-l6-v2");
    assert_eq!(e.max_tokens(), 256);
    let items = golden["items"].as_array().unwrap();
    let texts: Vec<&str> = items.iter().map(|i| i["text"].as_str().unwrap()).collect();
    // All 24 in one call: batching, padding and length sorting are part of what is checked.
    let out = e.embed(&texts, TextKind::Passage).unwrap();
    let mut worst = 1f32;
    for (i, item) in items.iter().enumerate() {
        let ids = e.token_ids(texts[i], TextKind::Passage).unwrap();
        assert_eq!(ids, u32s(&item["input_ids"]), "token ids of text {i}");
        assert_eq!(out[i].tokens, item["num_tokens"].as_u64().unwrap() as usize);
        let c = cosine(&out[i].vector, &f32s(&item["embedding"]));
        assert!(c >= 0.9999, "text {i}: cosine {c}");
        worst = worst.min(c);
    }
    let truncated = out.iter().filter(|o| o.truncated_from.is_some()).count();
    assert!(truncated >= 1, "the golden set has a text over 256 tokens; its truncation must be reported");
    for t in golden["tokenization"].as_array().unwrap() {
        let ids = e.token_ids(t["text"].as_str().unwrap(), TextKind::Passage).unwrap();
        assert_eq!(ids, u32s(&t["input_ids"]));
    }
    eprintln!("golden minilm: {} texts, worst cosine {worst:.7}", texts.len());
}

#[test]
fn nomic_matches_the_float64_reference_and_llama_cpp() {
    let golden = json_fixture("golden-nomic.json");
    let e = embedder("nomic-embed-text-v1.5");
    assert!(e.max_tokens() >= 8192, "nomic is not truncated below 8,192 tokens");
    let items = golden["items"].as_array().unwrap();
    let (mut worst, mut worst_llama) = (1f32, 1f32);
    for kind in [TextKind::Passage, TextKind::Query] {
        let prefix = if kind == TextKind::Query { "search_query: " } else { "search_document: " };
        let chosen: Vec<&serde_json::Value> = items.iter().filter(|i| i["prefix"] == prefix).collect();
        assert!(!chosen.is_empty());
        let texts: Vec<&str> = chosen.iter().map(|i| i["text"].as_str().unwrap()).collect();
        let out = e.embed(&texts, kind).unwrap();
        for (i, item) in chosen.iter().enumerate() {
            assert_eq!(e.token_ids(texts[i], kind).unwrap(), u32s(&item["input_ids"]), "{prefix}{}", texts[i]);
            assert_eq!(out[i].truncated_from, None);
            let c = cosine(&out[i].vector, &f32s(&item["embedding"]));
            assert!(c >= 0.9999, "{prefix}{}: cosine {c}", texts[i]);
            worst = worst.min(c);
            worst_llama = worst_llama.min(cosine(&out[i].vector, &f32s(&item["embedding_llama_cpp"])));
        }
    }
    eprintln!("golden nomic: {} inputs, worst cosine {worst:.7} (float64 reference), {worst_llama:.7} (llama.cpp)", items.len());
}

/// nomic's int8 body against the float64 reference: the same gate as MiniLM's (cosine >= 0.999
/// per text for `auto` to run it at int8; measured 0.990 before outliers were set aside, 0.9994
/// after), close in any case (>= 0.995), and consistent: a text alone and in a padded batch agree
/// to the gate (f32 rounding differs between the two shapes in attention's sums, and across 12
/// layers an int8 code flips here and there: measured 0.9998, where f32 agrees to 1e-7).
#[test]
fn nomic_int8_quality_gate_decides_the_auto_precision() {
    let golden = json_fixture("golden-nomic.json");
    let e = embedder_at("nomic-embed-text-v1.5", Precision::Int8);
    assert_eq!(e.model_id(), "nomic-embed-text-v1.5@int8");
    let items = golden["items"].as_array().unwrap();
    let mut worst = 1f32;
    for kind in [TextKind::Passage, TextKind::Query] {
        let prefix = if kind == TextKind::Query { "search_query: " } else { "search_document: " };
        let chosen: Vec<&serde_json::Value> = items.iter().filter(|i| i["prefix"] == prefix).collect();
        let texts: Vec<&str> = chosen.iter().map(|i| i["text"].as_str().unwrap()).collect();
        let out = e.embed(&texts, kind).unwrap();
        for (i, item) in chosen.iter().enumerate() {
            let c = cosine(&out[i].vector, &f32s(&item["embedding"]));
            assert!(c >= 0.995, "{prefix}{}: int8 cosine {c} to the float64 reference", texts[i]);
            worst = worst.min(c);
        }
        let alone = e.embed_one(texts[0], kind).unwrap();
        let agree = cosine(&alone.vector, &out[0].vector);
        assert!(agree >= 0.999, "{prefix}{}: alone and batched cosine {agree}", texts[0]);
    }
    assert_eq!(
        auto_runs_int8("nomic-embed-text-v1.5"),
        worst >= 0.999,
        "the manifest's auto_precision must be int8 exactly when int8 passes the gate (worst cosine {worst})"
    );
    assert_eq!(embedder_at("nomic-embed-text-v1.5", Precision::Auto).model_id(), e.model_id(), "auto runs what the manifest says");
    eprintln!("golden nomic int8: {} inputs, worst cosine {worst:.5}", items.len());
}

#[test]
fn nomic_ranks_the_paris_passage_first() {
    let e = embedder("nomic-embed-text-v1.5");
    let q = e.embed_one("capital of France", TextKind::Query).unwrap();
    let docs = ["Paris is the capital and largest city of France.", "Berlin is the capital of Germany.", "Mitochondria produce most of the cell's energy."];
    let d = e.embed(&docs, TextKind::Passage).unwrap();
    let s: Vec<f32> = d.iter().map(|v| cosine(&q.vector, &v.vector)).collect();
    assert!(s[0] > s[1] && s[1] > s[2], "{s:?}");
}

fn tiny_cross_encoder(precision: Precision) -> CrossEncoder {
    let dir = fixture("tiny-random-bert-crossencoder");
    CrossEncoder::from_files(
        "tiny-random-bert-crossencoder",
        512,
        &dir.join("config.json"),
        &dir.join("tokenizer.json"),
        &dir.join("model.safetensors"),
        &RerankOptions { precision, ..RerankOptions::default() },
    )
    .unwrap()
}

/// The worst |logit − reference| over the golden pairs, scoring one query's passages per call as
/// retrieval does; also asserts each is within `tolerance`.
fn worst_logit_difference(ce: &CrossEncoder, tolerance: f32) -> f32 {
    let golden = json_fixture("golden-crossencoder-tiny-random.json");
    let pairs = golden["pairs"].as_array().unwrap();
    let mut worst = 0f32;
    let queries: std::collections::BTreeSet<&str> = pairs.iter().map(|p| p["query"].as_str().unwrap()).collect();
    for q in queries {
        let mine: Vec<&serde_json::Value> = pairs.iter().filter(|p| p["query"] == q).collect();
        let passages: Vec<&str> = mine.iter().map(|p| p["passage"].as_str().unwrap()).collect();
        let scores = ce.score(q, &passages).unwrap();
        for (p, s) in mine.iter().zip(scores) {
            let d = (s - p["logit"].as_f64().unwrap() as f32).abs();
            assert!(d <= tolerance, "{q} / {}: logit {s}, reference {}", p["passage"], p["logit"]);
            worst = worst.max(d);
        }
    }
    worst
}

#[test]
fn cross_encoder_matches_transformers_logits() {
    let golden = json_fixture("golden-crossencoder-tiny-random.json");
    let ce = tiny_cross_encoder(Precision::F32);
    for p in golden["pairs"].as_array().unwrap() {
        let (q, passage) = (p["query"].as_str().unwrap(), p["passage"].as_str().unwrap());
        let t = ce.encode_pair(q, passage).unwrap();
        assert_eq!(t.ids, u32s(&p["input_ids"]));
        assert_eq!(t.type_ids, u32s(&p["token_type_ids"]));
    }
    let worst = worst_logit_difference(&ce, 1e-3);
    eprintln!("golden cross-encoder: worst |logit diff| {worst:.2e}");
}

/// int8's gate for the cross-encoder: logits within 1e-2 of transformers' f32 ones. Measured on
/// the tiny random model (32-wide layers, which quantise worse than a real model's 384-wide
/// ones): worst 0.083 on logits that span 1.6 (0.087 with outliers set aside), so int8 does not
/// pass and `auto` keeps the cross-encoder at f32; this test fails the day that changes either
/// way.
#[test]
fn cross_encoder_int8_gate_decides_the_auto_precision() {
    let worst = worst_logit_difference(&tiny_cross_encoder(Precision::Int8), f32::INFINITY);
    assert!(worst.is_finite());
    // The tiny model stands in for ms-marco-minilm-l6-v2, whose own reference logits are not in
    // the fixtures.
    assert_eq!(auto_runs_int8("ms-marco-minilm-l6-v2"), worst <= 1e-2, "worst |logit diff| {worst}");
    eprintln!("golden cross-encoder int8: worst |logit diff| {worst:.2e}");
}

/// ms-marco-MiniLM-L-12-v2 as its int8 ONNX file ships (the default reranker), run by ragbox's
/// own int8 path on the file's codes, against onnxruntime's logits on the same file
/// (tests/fixtures/golden-crossencoder-l12.json, 531 pairs, made by
/// scripts/fixtures/golden-crossencoder-l12.py, one pair per run). Activations are quantised as the
/// export expects, one scale per sequence as `DynamicQuantizeLinear` does per tensor
/// (`Int8Linear::with_sequence_scale`; one scale per row with outliers set aside gave worst 1.02,
/// mean 0.082). What remains is float rounding (LayerNorm, softmax, GELU in another order) that
/// flips an activation's code here and there and grows through 12 layers: onnxruntime itself moves
/// logits by up to 0.35 (mean 0.036) between its own optimisation levels
/// (`ort_optimisation_spread`). Measured: worst |diff| 0.88, mean 0.057 (the target was a
/// worst of 0.05: not met, docs/EVAL.md). What a reranker needs holds: the same best passage for
/// every query whose reference top two are 0.5 apart or more. The bounds on the mean (0.075) and
/// the worst (2.0: a broken layer moves logits by several units) guard against regressions.
#[test]
fn l12_cross_encoder_agrees_with_onnxruntime_on_the_same_int8_file() {
    let golden = json_fixture("golden-crossencoder-l12.json");
    let store = ModelStore::new(models_dir());
    let spec = store.manifest().get("ms-marco-minilm-l12-v2-int8").unwrap().clone();
    let ce = CrossEncoder::load(&store, &spec, &RerankOptions::default()).unwrap();
    let pairs = golden["pairs"].as_array().unwrap();
    for p in pairs.iter().filter(|p| p.get("ids").is_some()) {
        let t = ce.encode_pair(p["query"].as_str().unwrap(), p["passage"].as_str().unwrap()).unwrap();
        assert_eq!(t.ids, u32s(&p["ids"]));
        assert_eq!(t.type_ids, u32s(&p["type_ids"]));
    }
    let queries: std::collections::BTreeSet<&str> = pairs.iter().map(|p| p["query"].as_str().unwrap()).collect();
    let (mut worst, mut sum, mut n, mut tops, mut top_agree) = (0f32, 0f64, 0usize, 0, 0);
    let mut all: Vec<(f32, f32, u64)> = Vec::new();
    for q in queries {
        let mine: Vec<&serde_json::Value> = pairs.iter().filter(|p| p["query"] == q).collect();
        let passages: Vec<&str> = mine.iter().map(|p| p["passage"].as_str().unwrap()).collect();
        let scores = ce.score(q, &passages).unwrap();
        let reference: Vec<f32> = mine.iter().map(|p| p["logit"].as_f64().unwrap() as f32).collect();
        for ((s, r), p) in scores.iter().zip(&reference).zip(&mine) {
            all.push(((s - r).abs(), *r, p["tokens"].as_u64().unwrap()));
            worst = worst.max((s - r).abs());
            sum += f64::from((s - r).abs());
            n += 1;
        }
        let best = |v: &[f32]| (0..v.len()).max_by(|&a, &b| v[a].total_cmp(&v[b])).unwrap();
        let mut sorted = reference.clone();
        sorted.sort_by(|a, b| b.total_cmp(a));
        if sorted.len() >= 2 && sorted[0] - sorted[1] >= 0.5 {
            tops += 1;
            top_agree += usize::from(best(&scores) == best(&reference));
        }
    }
    all.sort_by(|a, b| b.0.total_cmp(&a.0));
    eprintln!("worst pairs (|diff|, reference logit, tokens): {:?}", &all[..3]);
    let spread = golden["ort_optimisation_spread"].as_f64().unwrap() as f32;
    let mean = sum / n as f64;
    eprintln!("golden L-12 int8: {n} pairs, worst |logit diff| {worst:.4}, mean {mean:.4}; best passage kept {top_agree}/{tops}; onnxruntime's own spread {spread:.4}");
    assert_eq!(n, pairs.len());
    assert!(mean <= 0.075, "mean |logit diff| {mean}");
    assert!(worst <= 2.0, "worst |logit diff| {worst}");
    assert_eq!(top_agree, tops, "the best passage differs");
}
