//! Models arriving three ways: import from a folder, pull from a hub endpoint (a loopback HTTP
//! server in this test, serving a tiny model in hub layout), and the checks that refuse bad files.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::PathBuf;
use std::sync::Arc;

use ragbox_core::model::checksum::sha256_file;
use ragbox_core::model::pull::pull_model;
use ragbox_core::model::{Manifest, ModelStore};
use ragbox_core::rerank::{load_reranker, RerankOptions};

use crate::common::{copy_tree, files_under, fixture, json_fixture, models_dir, ragbox, run};

/// A hub endpoint on loopback serving `files` (repo, name, bytes) the way the hub's resolve URLs
/// do: `GET /{repo}/resolve/main/{name}`, honouring `Range`, with etag and commit headers.
/// Serves at most `max_requests` connections, then stops.
fn serve_hub(files: Vec<(String, String, Vec<u8>)>, max_requests: usize) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let files = Arc::new(files);
    std::thread::spawn(move || {
        for stream in listener.incoming().take(max_requests) {
            let Ok(mut stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut request = String::new();
            if reader.read_line(&mut request).is_err() {
                continue;
            }
            let mut range_start: Option<usize> = None;
            let mut range_end: Option<usize> = None;
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("range: bytes=") {
                    let (a, b) = v.trim().split_once('-').unwrap();
                    range_start = a.parse().ok();
                    range_end = b.parse().ok();
                }
            }
            let path = request.split_whitespace().nth(1).unwrap_or("").to_string();
            let found = files.iter().find(|(repo, name, _)| path == format!("/{repo}/resolve/main/{name}"));
            let response = match found {
                None => b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".to_vec(),
                Some((_, _, body)) => {
                    let start = range_start.unwrap_or(0).min(body.len());
                    let end = range_end.map_or(body.len(), |e| (e + 1).min(body.len()));
                    let etag = ragbox_sha256(body);
                    let mut head = format!(
                        "HTTP/1.1 206 Partial Content\r\nContent-Length: {}\r\nContent-Range: bytes {start}-{}/{}\r\n\
                         ETag: \"{etag}\"\r\nX-Repo-Commit: 0123456789abcdef0123456789abcdef01234567\r\nConnection: close\r\n\r\n",
                        end - start,
                        end.saturating_sub(1),
                        body.len()
                    )
                    .into_bytes();
                    head.extend_from_slice(&body[start..end]);
                    head
                }
            };
            let _ = stream.write_all(&response);
        }
    });
    format!("http://{addr}")
}

fn ragbox_sha256(bytes: &[u8]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("b");
    std::fs::write(&p, bytes).unwrap();
    sha256_file(&p).unwrap()
}

fn tiny_files(repo: &str) -> Vec<(String, String, Vec<u8>)> {
    let dir = fixture("tiny-random-bert-crossencoder");
    ["config.json", "tokenizer.json", "model.safetensors"]
        .iter()
        .map(|f| (repo.to_string(), f.to_string(), std::fs::read(dir.join(f)).unwrap()))
        .collect()
}

fn tiny_manifest() -> &'static Manifest {
    let dir = fixture("tiny-random-bert-crossencoder");
    let mut text = String::from(
        "[[model]]\nname = \"tiny-ce\"\nrole = \"rerank\"\narchitecture = \"bert_cross_encoder\"\n\
         repo = \"ragbox-tests/tiny-ce\"\nmax_tokens = 512\n",
    );
    for f in ["config.json", "tokenizer.json", "model.safetensors"] {
        let p = dir.join(f);
        let size = std::fs::metadata(&p).unwrap().len();
        text += &format!("[[model.files]]\nname = \"{f}\"\nsha256 = \"{}\"\nsize = {size}\n", sha256_file(&p).unwrap());
    }
    Box::leak(Box::new(Manifest::parse(&text).unwrap()))
}


#[test]
fn pull_from_a_hub_endpoint_lands_verified_files_in_hub_layout() {
    let endpoint = serve_hub(tiny_files("ragbox-tests/tiny-ce"), 32);
    let models = tempfile::tempdir().unwrap();
    let store = ModelStore::with_manifest(models.path(), tiny_manifest());
    let spec = store.manifest().get("tiny-ce").unwrap();
    let paths = pull_model(&store, spec, &endpoint, false).unwrap();
    assert_eq!(paths.len(), 3);
    assert!(models.path().join("models--ragbox-tests--tiny-ce/refs/main").is_file());
    assert!(store.status(spec, ragbox_core::model::store::Check::Full).ready);
    // The pulled model works: its logits are the reference ones.
    let reranker = load_reranker(&store, spec, &RerankOptions::default()).unwrap();
    let golden = json_fixture("golden-crossencoder-tiny-random.json");
    let p = &golden["pairs"][0];
    let s = reranker.score(p["query"].as_str().unwrap(), &[p["passage"].as_str().unwrap()]).unwrap();
    assert!((s[0] - p["logit"].as_f64().unwrap() as f32).abs() <= 1e-3);
    // A second pull finds everything verified and asks the endpoint nothing.
    let again = pull_model(&store, spec, "http://127.0.0.1:9", false).unwrap();
    assert_eq!(again, paths);
}

#[test]
fn pull_refuses_files_that_fail_their_checksum_and_keeps_none() {
    // The endpoint serves the tiny model's bytes under the real cross-encoder's name.
    let endpoint = serve_hub(tiny_files("cross-encoder/ms-marco-MiniLM-L-6-v2"), 32);
    let data = tempfile::tempdir().unwrap();
    let models = tempfile::tempdir().unwrap();
    let (code, _out, err) = run(ragbox(data.path())
        .env("RAGBOX_MODELS_DIR", models.path())
        .args(["models", "pull", "ms-marco-minilm-l6-v2", "--endpoint", &endpoint]));
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("config.json") && err.contains("failed its checksum"), "{err}");
    let left: Vec<PathBuf> = files_under(models.path()).into_iter().filter(|p| !p.ends_with("refs/main")).collect();
    assert!(left.is_empty(), "unverified files left behind: {left:?}");
}

#[test]
fn import_copies_a_carried_folder_and_verifies_it() {
    let spec_dir = models_dir().join("models--sentence-transformers--all-MiniLM-L6-v2");
    let snapshot = std::fs::read_to_string(spec_dir.join("refs/main")).expect("MiniLM fetched: run scripts/setup/fetch-models.sh");
    let carried = tempfile::tempdir().unwrap();
    // A flat folder of files, as someone would carry them on a stick.
    copy_tree(&spec_dir.join("snapshots").join(snapshot.trim()), &carried.path().join("all-minilm-l6-v2"));
    let models = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    let (code, out, err) = run(ragbox(data.path())
        .env("RAGBOX_MODELS_DIR", models.path())
        .args(["models", "import"])
        .arg(carried.path())
        .args(["--model", "all-minilm-l6-v2"]));
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.matches("imported").count(), 3, "{out}");
    let (code, out, err) = run(ragbox(data.path()).env("RAGBOX_MODELS_DIR", models.path()).args(["embed", "--json", "imported and working"]));
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("\"dims\":384"));

    // A corrupted copy is refused and nothing of it lands.
    let carried2 = tempfile::tempdir().unwrap();
    let models2 = tempfile::tempdir().unwrap();
    for f in ["config.json", "tokenizer.json", "model.safetensors"] {
        std::fs::copy(carried.path().join("all-minilm-l6-v2").join(f), carried2.path().join(f)).unwrap();
    }
    let mut bytes = std::fs::read(carried2.path().join("config.json")).unwrap();
    bytes[10] ^= 1;
    std::fs::write(carried2.path().join("config.json"), bytes).unwrap();
    let (code, _out, err) = run(ragbox(data.path())
        .env("RAGBOX_MODELS_DIR", models2.path())
        .args(["models", "import"])
        .arg(carried2.path())
        .args(["--model", "all-minilm-l6-v2"]));
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("config.json") && err.contains("sha256"), "{err}");
    assert!(files_under(models2.path()).iter().all(|p| !p.ends_with("config.json")));
}

#[test]
fn import_of_a_folder_without_the_model_says_what_is_missing() {
    let empty = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    let (code, _out, err) = run(ragbox(data.path()).args(["models", "import"]).arg(empty.path()).args(["--model", "ms-marco-minilm-l6-v2"]));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("config.json of model `ms-marco-minilm-l6-v2` is not in"), "{err}");
}
