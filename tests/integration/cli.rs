//! The CLI as a person uses it: doctor, embed, and every kind of bad input named in the issue.

use std::path::Path;

use candle_core::quantized::gguf_file;

use crate::common::{copy_tree, models_dir, ragbox, run};

fn json_lines(out: &str) -> Vec<serde_json::Value> {
    out.lines().map(|l| serde_json::from_str(l).expect("one JSON object per line")).collect()
}

#[test]
fn doctor_reports_features_device_and_verified_models() {
    let data = tempfile::tempdir().unwrap();
    let (code, out, err) = run(ragbox(data.path()).args(["doctor", "--json"]));
    assert_eq!(code, 0, "{err}");
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(report["features"].as_array().unwrap().iter().any(|f| f == "cpu"));
    assert!(report["device"].as_str().unwrap().starts_with("cpu"));
    let model = |name: &str| report["models"].as_array().unwrap().iter().find(|m| m["name"] == name).cloned().unwrap();
    assert_eq!(model("all-minilm-l6-v2")["ready"], true);
    assert_eq!(model("nomic-embed-text-v1.5")["ready"], true);
    // The default cross-encoder is fetched with the others: doctor says how it reranks.
    assert_eq!(model("ms-marco-minilm-l12-v2-int8")["ready"], true);
    let status = report["rerank_status"].as_str().unwrap();
    assert!(status.starts_with("ready: retrieval reranks the top") && status.contains("int8") && status.contains("refusal floor"), "{status}");
    // The L-6 weights are in no registry: a clear status and the fix, not a crash.
    let l6 = model("ms-marco-minilm-l6-v2");
    if l6["ready"] == false {
        assert!(l6["fix"].as_str().unwrap().contains("models pull"), "{l6}");
    }
    let (code, out, _) = run(ragbox(data.path()).arg("doctor"));
    assert_eq!(code, 0);
    assert!(out.contains("all-minilm-l6-v2") && out.contains("device:"));
}

#[test]
fn embed_prints_normalised_vectors_for_each_model() {
    let data = tempfile::tempdir().unwrap();
    for (model, dims) in [("all-minilm-l6-v2", 384), ("nomic-embed-text-v1.5", 768)] {
        let (code, out, err) = run(ragbox(data.path()).args(["embed", "--json", "--model", model, "first text", "second text"]));
        assert_eq!(code, 0, "{err}");
        let rows = json_lines(&out);
        assert_eq!(rows.len(), 2);
        for row in rows {
            assert_eq!(row["dims"], dims);
            let v: Vec<f64> = row["vector"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect();
            assert_eq!(v.len(), dims);
            let norm = v.iter().map(|x| x * x).sum::<f64>().sqrt();
            assert!((norm - 1.0).abs() < 1e-4, "{model}: norm {norm}");
        }
    }
    // Plain output: one line of numbers per text; texts may come on standard input.
    let mut child = ragbox(data.path())
        .arg("embed")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child.stdin.take().unwrap().write_all(b"one\ntwo\nthree\n").unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(text.lines().count(), 3);
    assert_eq!(text.lines().next().unwrap().split(' ').count(), 384);
}

#[test]
fn query_and_passage_prefixes_give_different_nomic_vectors() {
    let data = tempfile::tempdir().unwrap();
    let get = |extra: &[&str]| {
        let (code, out, err) = run(ragbox(data.path()).args(["embed", "--json", "--model", "nomic-embed-text-v1.5"]).args(extra).arg("data retention"));
        assert_eq!(code, 0, "{err}");
        json_lines(&out).remove(0)
    };
    let (q, p) = (get(&["--query"]), get(&[]));
    // [CLS] search _ query : data retention [SEP], and the same with "document".
    assert_eq!(q["tokens"], 8);
    assert_eq!(p["tokens"], 8);
    let dot: f64 = q["vector"].as_array().unwrap().iter().zip(p["vector"].as_array().unwrap()).map(|(a, b)| a.as_f64().unwrap() * b.as_f64().unwrap()).sum();
    assert!(dot < 0.99, "query and passage prefixes must change the vector (cosine {dot})");
}

#[test]
fn a_100k_character_text_is_truncated_and_the_count_reported() {
    let data = tempfile::tempdir().unwrap();
    let long = "retention ".repeat(10_000);
    let (code, out, err) = run(ragbox(data.path()).args(["embed", "--json", &long]));
    assert_eq!(code, 0, "{err}");
    let row = &json_lines(&out)[0];
    assert_eq!(row["tokens"], 256);
    assert_eq!(row["truncated_from"], 10_002);
    assert!(err.contains("10002 tokens") && err.contains("256"), "{err}");
}

#[test]
fn empty_text_and_unknown_model_are_user_errors_that_say_what_to_do() {
    let data = tempfile::tempdir().unwrap();
    let (code, _, err) = run(ragbox(data.path()).args(["embed", ""]));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("empty"), "{err}");
    let (code, _, err) = run(ragbox(data.path()).args(["embed", "--model", "bert-huge", "x"]));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("unknown model `bert-huge`") && err.contains("all-minilm-l6-v2, nomic-embed-text-v1.5"), "{err}");
    let (code, _, err) = run(ragbox(data.path()).args(["embed", "--model", "qwen2.5-coder-0.5b-instruct", "x"]));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("not an embedder"), "{err}");
}

#[test]
fn missing_and_corrupted_model_files_name_the_file_and_the_fix() {
    let data = tempfile::tempdir().unwrap();
    let empty = tempfile::tempdir().unwrap();
    let (code, _, err) = run(ragbox(data.path()).env("RAGBOX_MODELS_DIR", empty.path()).args(["embed", "x"]));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("missing") && err.contains("scripts/setup/fetch-models.sh all-minilm-l6-v2"), "{err}");

    let models = tempfile::tempdir().unwrap();
    let repo = "models--sentence-transformers--all-MiniLM-L6-v2";
    copy_tree(&models_dir().join(repo), &models.path().join(repo));
    let rev = std::fs::read_to_string(models.path().join(repo).join("refs/main")).unwrap();
    let weights = models.path().join(repo).join("snapshots").join(rev.trim()).join("model.safetensors");
    // Replace (never edit in place: the original is a hard link into the fetch cache).
    let mut bytes = std::fs::read(&weights).unwrap();
    bytes[1_000_000] ^= 0x55;
    std::fs::remove_file(&weights).unwrap();
    std::fs::write(&weights, bytes).unwrap();
    let (code, _, err) = run(ragbox(data.path()).env("RAGBOX_MODELS_DIR", models.path()).args(["embed", "x"]));
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("model.safetensors") && err.contains("sha256"), "{err}");
    assert!(err.contains("scripts/setup/fetch-models.sh all-minilm-l6-v2"), "{err}");
    let (code, out, _) = run(ragbox(data.path()).env("RAGBOX_MODELS_DIR", models.path()).args(["models", "verify"]));
    assert_ne!(code, 0);
    assert!(out.contains("CORRUPT"), "{out}");
}

/// Writes a GGUF whose architecture is `arch`, with one tensor.
fn write_gguf(path: &Path, arch: &str) {
    let mut f = std::fs::File::create(path).unwrap();
    let t = candle_core::Tensor::zeros((4, 4), candle_core::DType::F32, &candle_core::Device::Cpu).unwrap();
    let q = candle_core::quantized::QTensor::quantize(&t, candle_core::quantized::GgmlDType::F32).unwrap();
    let arch = gguf_file::Value::String(arch.to_string());
    gguf_file::write(&mut f, &[("general.architecture", &arch)], &[("token_embd.weight", &q)]).unwrap();
}

#[test]
fn a_gguf_of_the_wrong_architecture_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("m.gguf");
    write_gguf(&p, "llama");
    let err = ragbox_core::model::gguf::load_gguf(&p, "nomic-bert", |n| Some(n.to_string()), candle_core::DType::F32, &candle_core::Device::Cpu)
        .err()
        .expect("a llama GGUF is not a nomic-bert model")
        .to_string();
    assert!(err.contains("architecture is `llama`, expected `nomic-bert`"), "{err}");
    std::fs::write(&p, b"GGUF but truncated").unwrap();
    let err = ragbox_core::model::gguf::load_gguf(&p, "nomic-bert", |n| Some(n.to_string()), candle_core::DType::F32, &candle_core::Device::Cpu)
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("not a readable GGUF"), "{err}");
}

#[test]
fn config_errors_point_at_the_file() {
    let data = tempfile::tempdir().unwrap();
    let cfg = data.path().join("ragbox.toml");
    std::fs::write(&cfg, "[embed]\nmodel = 5\n").unwrap();
    let (code, _, err) = run(ragbox(data.path()).arg("--config").arg(&cfg).arg("doctor"));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("configuration"), "{err}");
    let (code, _, err) = run(ragbox(data.path()).args(["--config", "/nonexistent/ragbox.toml", "doctor"]));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--config"), "{err}");
}
