//! `ragbox serve` end to end: the real binary on a loopback port (127.0.0.1:0), real models
//! (MiniLM, the cross-encoder when present, SmolLM2-135M for short answers) and a real copy of
//! the sample corpus. One server process serves every check, in order: probes, keys (missing,
//! invalid, revoked), tenant isolation (out of scope reads like unknown), search, bad input,
//! streamed answers, chat, feedback, upload + ingest job + search, path traversal, 413s, the
//! OpenAI-compatible routes through the `async-openai` client, the full queue's 503 and
//! cancellation, the admin audit routes, SIGTERM; then `ragbox audit verify` on the chain,
//! intact and tampered.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use crate::common::{ragbox, run};
use crate::retrieve::sample_data;

/// Copies a folder byte for byte (no hard links: the server writes to the catalog).
fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let (src, dst) = (entry.path(), to.join(entry.file_name()));
        if src.is_dir() {
            copy_dir(&src, &dst);
        } else {
            std::fs::copy(&src, &dst).unwrap();
        }
    }
}

pub(crate) struct Server {
    child: Child,
    /// The server's stdout, kept open (a closed pipe would end the server on its next print).
    _stdout: BufReader<std::process::ChildStdout>,
    pub(crate) base: String,
    /// The web page's one-time sign-in link, from the second start-up line.
    pub(crate) signin: String,
    pub(crate) data: PathBuf,
    config: PathBuf,
}

impl Server {
    /// SIGKILL: the server stops at once, mid-request.
    pub(crate) fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Kills the server (if it runs) and starts it again on the same data and configuration.
    pub(crate) fn restart(&mut self) {
        self.kill();
        *self = spawn(self.data.clone(), self.config.clone());
    }

    /// Everything the server (and its restarts) wrote to stderr.
    pub(crate) fn stderr(&self) -> String {
        std::fs::read_to_string(self.config.with_file_name("server.err")).unwrap_or_default()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub(crate) fn cli(server: &Server, args: &[&str]) -> (i32, String, String) {
    run(ragbox(&server.data).arg("--config").arg(&server.config).args(args))
}

pub(crate) fn create_key(server: &Server, args: &[&str]) -> String {
    let mut all = vec!["keys", "create"];
    all.extend_from_slice(args);
    let (code, out, err) = cli(server, &all);
    assert_eq!(code, 0, "{out}\n{err}");
    let key = out.trim().to_string();
    assert!(key.starts_with("rbx_") && key.len() == 68, "{key}");
    key
}

pub(crate) fn start() -> Server {
    // The fast test model answers the sample question from the labelled layout; with the default
    // (system-context) it declines it (SmolLM2's eval --qa row, docs/EVAL.md). This test is about
    // serving (streaming, the generation queue, cancellation), so it keeps the layout the small
    // model answers with, and the generative reader (`answer.reader = "generate"`: the
    // evidence-first reader asks no generator for most answers).
    start_with(
        "[generate]\nmodel = \"smollm2-135m-instruct\"\nmax_tokens = 48\n\
         [answer]\npassages = 2\npassage_chars = 400\nprompt = \"labelled\"\nreader = \"generate\"\n\
         [server]\nqueue = 1\ngenerate_concurrency = 1\nmax_body_bytes = 65536\nmax_question_chars = 2000\n\
         max_upload_bytes = 200000\nshutdown_grace_ms = 3000\nauth_failures_per_minute = 50\nbody_timeout_ms = 2000\n",
    )
}

/// A server over a copy of the sample data with the configuration `toml`.
pub(crate) fn start_with(toml: &str) -> Server {
    let dir = tempfile::tempdir().unwrap().keep();
    let data = dir.join("data");
    copy_dir(sample_data(), &data);
    let config = dir.join("server.toml");
    std::fs::write(&config, toml).unwrap();
    spawn(data, config)
}

/// `ragbox serve` on `data` with `config`, on a free loopback port; its stderr goes to
/// `server.err` beside the config (appended across restarts).
pub(crate) fn spawn(data: PathBuf, config: PathBuf) -> Server {
    spawn_at(data, config, "127.0.0.1:0")
}

/// [`spawn`] listening on `listen` (a test that must know the address before the server starts:
/// an OpenID Connect redirect).
pub(crate) fn spawn_at(data: PathBuf, config: PathBuf, listen: &str) -> Server {
    let err = std::fs::OpenOptions::new().create(true).append(true).open(config.with_file_name("server.err")).unwrap();
    let mut child = ragbox(&data)
        .arg("--config")
        .arg(&config)
        .args(["serve", "--listen", listen])
        .stdout(Stdio::piped())
        .stderr(err)
        .spawn()
        .unwrap();
    let mut line = String::new();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    stdout.read_line(&mut line).unwrap();
    assert!(line.contains("(loopback only)"), "start-up line: {line:?}");
    let base = line.split_whitespace().find(|w| w.starts_with("http://")).expect("an address").to_string();
    line.clear();
    stdout.read_line(&mut line).unwrap();
    let signin = line.split_whitespace().find(|w| w.starts_with("http://")).unwrap_or_else(|| panic!("sign-in line: {line:?}")).to_string();
    assert!(signin.starts_with(&format!("{base}/signin?token=")), "{signin}");
    Server { child, _stdout: stdout, base, signin, data, config }
}

/// (status, body as JSON, Retry-After) of a request.
pub(crate) fn call(method: &str, url: &str, key: Option<&str>, body: Option<&[u8]>, content_type: &str) -> (u16, serde_json::Value, Option<String>) {
    let mut req = ureq::request(method, url).timeout(Duration::from_secs(120));
    if let Some(k) = key {
        req = req.set("Authorization", &format!("Bearer {k}"));
    }
    let resp = match body {
        Some(b) => req.set("Content-Type", content_type).send_bytes(b),
        None => req.call(),
    };
    let resp = match resp {
        Ok(r) => r,
        Err(ureq::Error::Status(_, r)) => r,
        Err(e) => panic!("{method} {url}: {e}"),
    };
    let status = resp.status();
    let retry = resp.header("Retry-After").map(str::to_string);
    let text = resp.into_string().unwrap();
    let json = serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text));
    (status, json, retry)
}

pub(crate) fn post(url: &str, key: Option<&str>, body: &serde_json::Value) -> (u16, serde_json::Value) {
    let (s, j, _) = call("POST", url, key, Some(body.to_string().as_bytes()), "application/json");
    (s, j)
}

pub(crate) fn get(url: &str, key: Option<&str>) -> (u16, serde_json::Value) {
    let (s, j, _) = call("GET", url, key, None, "");
    (s, j)
}

/// Waits until ingest job `job` of `tenant` on the server at `base` is done (panics if it fails
/// or outlasts `limit`).
pub(crate) fn wait_for_job(base: &str, tenant: &str, job: u64, key: &str, limit: Duration) {
    let deadline = Instant::now() + limit;
    loop {
        let (s, j) = get(&format!("{base}/v1/tenants/{tenant}/jobs/{job}"), Some(key));
        assert_eq!(s, 200, "{j}");
        match j["job"]["state"].as_str().unwrap() {
            "done" => return,
            "failed" => panic!("ingest job failed: {j}"),
            _ => {}
        }
        assert!(Instant::now() < deadline, "the ingest job finishes: {j}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Asserts a 4xx with the error shape, returns its code.
fn error_code(status: u16, body: &serde_json::Value, want: u16) -> String {
    assert_eq!(status, want, "{body}");
    let code = body["error"]["code"].as_str().unwrap_or_else(|| panic!("error shape: {body}"));
    assert!(body["error"]["message"].as_str().is_some_and(|m| !m.is_empty()), "{body}");
    code.to_string()
}

/// Reads a whole event stream: (event name, data as JSON) in order.
pub(crate) fn events(url: &str, key: &str, body: &serde_json::Value) -> Vec<(String, serde_json::Value)> {
    let resp = ureq::post(url)
        .timeout(Duration::from_secs(300))
        .set("Authorization", &format!("Bearer {key}"))
        .set("Content-Type", "application/json")
        .send_string(&body.to_string())
        .unwrap_or_else(|e| panic!("{url}: {e}"));
    assert_eq!(resp.header("Content-Type"), Some("text/event-stream"));
    parse_events(&resp.into_string().unwrap())
}

fn parse_events(text: &str) -> Vec<(String, serde_json::Value)> {
    let mut out = Vec::new();
    for block in text.split("\n\n") {
        let mut name = "message".to_string();
        let mut data = String::new();
        for line in block.lines() {
            if let Some(n) = line.strip_prefix("event:") {
                name = n.trim().to_string();
            } else if let Some(d) = line.strip_prefix("data:") {
                data.push_str(d.strip_prefix(' ').unwrap_or(d));
            }
        }
        if !data.is_empty() {
            out.push((name, serde_json::from_str(&data).unwrap_or(serde_json::Value::String(data))));
        }
    }
    out
}

pub(crate) fn multipart(name: &str, bytes: &[u8]) -> (Vec<u8>, String) {
    let boundary = "ragboxtestboundary7";
    let mut body = format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{name}\"\r\nContent-Type: text/markdown\r\n\r\n"
    )
    .into_bytes();
    body.extend_from_slice(bytes);
    body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    (body, format!("multipart/form-data; boundary={boundary}"))
}

pub(crate) const HANDBOOK: &str = "# Globex Onboarding Handbook\n\n## Badges\n\nEvery new starter collects a purple visitor badge from \
the Zanzibar reception desk on their first morning; the badge number is GX-7741.\n";

#[test]
fn serve_end_to_end() {
    let started = Instant::now();
    let server = start();
    let b = server.base.clone();
    let reader = create_key(&server, &["--tenant", "default", "--role", "reader", "--name", "alice"]);
    let writer = create_key(&server, &["--tenant", "globex", "--role", "writer", "--name", "bob"]);
    let admin = create_key(&server, &["--role", "admin", "--name", "root"]);
    let revoked = create_key(&server, &["--tenant", "default", "--name", "leaver"]);
    let (code, out, _) = cli(&server, &["keys", "list", "--json"]);
    assert_eq!(code, 0);
    let keys: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    let leaver = keys.as_array().unwrap().iter().find(|k| k["name"] == "leaver").unwrap()["id"].as_i64().unwrap();
    assert!(!out.contains(&reader), "keys list never shows a secret");
    assert_eq!(cli(&server, &["keys", "revoke", &leaver.to_string()]).0, 0);

    // Probes.
    assert_eq!(get(&format!("{b}/healthz"), None).0, 200);
    let (s, ready) = get(&format!("{b}/readyz"), None);
    assert_eq!(s, 200, "{ready}");
    assert_eq!(ready["health"]["embedder"], true);

    // Keys: missing, invalid, revoked.
    let search = format!("{b}/v1/tenants/default/search");
    let q = serde_json::json!({ "query": "How many days after a trip do I have to submit my expense claim?", "k": 3 });
    let (s, body) = post(&search, None, &q);
    assert_eq!(error_code(s, &body, 401), "unauthorized");
    let (s, body) = post(&search, Some("rbx_0123456789"), &q);
    assert_eq!(error_code(s, &body, 401), "unauthorized");
    let (s, body) = post(&search, Some(&revoked), &q);
    assert_eq!(error_code(s, &body, 401), "unauthorized", "a revoked key is refused");

    // Search.
    let (s, body) = post(&search, Some(&reader), &q);
    assert_eq!(s, 200, "{body}");
    let hits = body["retrieval"]["hits"].as_array().unwrap();
    assert!(!hits.is_empty() && hits.len() <= 3);
    assert!(hits[0]["chunk"]["path"].as_str().unwrap().ends_with("travel-and-expenses.md"), "{:#}", hits[0]);
    assert!(body["retrieval"]["candidates"].as_array().unwrap().is_empty(), "no candidates without explain");
    let (s, body) = post(&search, Some(&reader), &serde_json::json!({ "query": "expense claim deadline", "explain": true, "no_rerank": true }));
    assert_eq!(s, 200);
    assert!(!body["retrieval"]["candidates"].as_array().unwrap().is_empty());

    // Tenant isolation: another tenant reads exactly like one that does not exist.
    let (s1, other) = post(&format!("{b}/v1/tenants/globex/search"), Some(&reader), &q);
    let (s2, missing) = post(&format!("{b}/v1/tenants/nope/search"), Some(&reader), &q);
    assert_eq!((s1, s2), (404, 404));
    assert_eq!(other["error"]["code"], missing["error"]["code"]);
    assert_eq!(
        other["error"]["message"].as_str().unwrap().replace("globex", "X"),
        missing["error"]["message"].as_str().unwrap().replace("nope", "X")
    );
    assert!(!missing.to_string().contains("default"), "the 404 lists no tenants: {missing}");
    let (s, body) = get(&format!("{b}/v1/tenants"), Some(&reader));
    assert_eq!(s, 200);
    assert_eq!(body["tenants"].as_array().unwrap().len(), 1, "a reader sees its own tenant only: {body}");

    // Bad input: each a clear 4xx JSON error, never a 5xx.
    let raw = |body: &[u8], ct: &str| {
        let (s, j, _) = call("POST", &search, Some(&reader), Some(body), ct);
        (s, j)
    };
    let (s, j) = raw(b"{\"query\": ", "application/json");
    assert_eq!(error_code(s, &j, 400), "invalid_request");
    let (s, j) = raw(br#"{"query": 5}"#, "application/json");
    assert_eq!(error_code(s, &j, 422), "invalid_field");
    let (s, j) = raw(br#"{"query": "x", "top": 3}"#, "application/json");
    assert!(error_code(s, &j, 422) == "invalid_field" && j["error"]["message"].as_str().unwrap().contains("top"), "{j}");
    let (s, j) = raw(b"{\"query\": \"\xff\xfe\"}", "application/json");
    error_code(s, &j, 400);
    let (s, j) = raw(br#"{"query": "x"}"#, "text/plain");
    error_code(s, &j, 415);
    let (s, j) = post(&search, Some(&reader), &serde_json::json!({ "query": "   " }));
    error_code(s, &j, 400);
    let (s, j) = post(&search, Some(&reader), &serde_json::json!({ "query": "word ".repeat(1000) }));
    assert_eq!(error_code(s, &j, 413), "too_large");
    assert!(j["error"]["message"].as_str().unwrap().contains("2000"), "the limit is named: {j}");
    let (s, j) = post(&search, Some(&reader), &serde_json::json!({ "query": "x".repeat(100_000) }));
    assert_eq!(error_code(s, &j, 413), "too_large");
    assert!(j["error"]["message"].as_str().unwrap().contains("65536"), "{j}");
    let (s, j) = get(&format!("{b}/v1/tenants/default/chat/sessions/abc"), Some(&reader));
    error_code(s, &j, 400);
    let (s, j) = get(&format!("{b}/v1/nothing-here"), Some(&reader));
    error_code(s, &j, 404);
    let (s, j) = post(&format!("{b}/v1/tenants/default/search"), Some(&reader), &serde_json::json!({ "query": "x", "k": 0 }));
    error_code(s, &j, 400);

    // Slow clients: a body that stops arriving gets 408 after server.body_timeout_ms; the
    // server keeps serving.
    for (path, ct, declared, sent) in [
        ("/v1/tenants/default/search", "application/json", 100, &b"{\"query\": \"exp"[..]),
        ("/v1/tenants/globex/documents", "multipart/form-data; boundary=xx", 5000, &b"--xx\r\nContent-Disposition: form-data; name=\"file\"; filename=\"s.md\"\r\n\r\n# slow"[..]),
    ] {
        let key = if path.contains("globex") { &writer } else { &reader };
        let t = Instant::now();
        let (status, body) = stall(&b, path, key, ct, declared, sent);
        assert!(status.contains(" 408 "), "{path}: {status} {body}");
        let j: serde_json::Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{body}: {e}"));
        assert_eq!(error_code(408, &j, 408), "body_timeout");
        assert!(t.elapsed() >= Duration::from_millis(1900) && t.elapsed() < Duration::from_secs(20), "{:?}", t.elapsed());
    }
    assert_eq!(post(&search, Some(&reader), &q).0, 200, "still serving after the slow clients");

    // A streamed answer: tokens first, then one answer event with citations, sources, timings.
    let ask = format!("{b}/v1/tenants/default/ask");
    let evs = events(&ask, &reader, &serde_json::json!({ "question": "How many days after a trip do I have to submit my expense claim?" }));
    let last = evs.last().unwrap();
    assert_eq!(last.0, "answer", "{evs:?}");
    assert!(evs[..evs.len() - 1].iter().all(|e| e.0 == "token"), "tokens come before the answer: {evs:?}");
    assert!(evs.len() >= 2, "at least one token streamed: {evs:?}");
    let a = &last.1;
    let streamed: String = evs.iter().filter(|e| e.0 == "token").map(|e| e.1["text"].as_str().unwrap()).collect();
    assert!(!a["answer"].as_str().unwrap().is_empty() && !streamed.is_empty());
    assert_eq!(a["refused"], false, "{a:#}");
    assert!(!a["sources"].as_array().unwrap().is_empty());
    assert!(a["timings"]["total_ms"].as_f64().unwrap() > 0.0);
    assert!(a["citations"].is_array() && a["sentences"].is_array());
    let answer_id = a["answer_id"].as_i64().unwrap();
    let refused = events(&ask, &reader, &serde_json::json!({ "question": "Who won the football World Cup in 2018?" }));
    assert_eq!(refused.last().unwrap().1["refused"], true, "{refused:?}");

    // Feedback: on its own tenant's answer only.
    let (s, j) = post(&format!("{b}/v1/tenants/default/feedback"), Some(&reader), &serde_json::json!({ "answer_id": answer_id, "rating": "up", "comment": "right" }));
    assert_eq!(s, 201, "{j}");
    let (s, j) = post(&format!("{b}/v1/tenants/default/feedback"), Some(&reader), &serde_json::json!({ "answer_id": answer_id, "rating": "sideways" }));
    error_code(s, &j, 400);
    let (s, j) = post(&format!("{b}/v1/tenants/default/feedback"), Some(&reader), &serde_json::json!({ "answer_id": 999_999, "rating": "up" }));
    error_code(s, &j, 404);

    // Chat: a session, a question, a follow-up rewritten against it, reading it back.
    let sessions = format!("{b}/v1/tenants/default/chat/sessions");
    let (s, j) = post(&sessions, Some(&reader), &serde_json::json!(null));
    assert_eq!(s, 201, "{j}");
    let session = j["session"].as_i64().unwrap();
    let messages = format!("{sessions}/{session}/messages");
    let first = events(&messages, &reader, &serde_json::json!({ "question": "What is the maximum hotel cost per night in London?" }));
    assert_eq!(first.last().unwrap().0, "answer", "{first:?}");
    assert_eq!(first.last().unwrap().1["session"], session);
    let second = events(&messages, &reader, &serde_json::json!({ "question": "And what about the meal allowance there?" }));
    let f = second.iter().find(|e| e.0 == "follow_up").unwrap_or_else(|| panic!("a follow_up event: {second:?}"));
    assert!(!f.1["cue"].is_null(), "{f:?}");
    assert_eq!(second.last().unwrap().0, "answer");
    let (s, j) = get(&format!("{sessions}/{session}"), Some(&reader));
    assert_eq!(s, 200);
    assert_eq!(j["turns"].as_array().unwrap().len(), 2, "{j}");
    let (s, j) = get(&sessions, Some(&reader));
    assert!(s == 200 && j["sessions"][0]["session"] == session, "{j}");

    // Upload into another tenant (created by the upload), ingest job, search finds it.
    let docs = format!("{b}/v1/tenants/globex/documents");
    let (body, ct) = multipart("handbook.md", HANDBOOK.as_bytes());
    let (s, j, _) = call("POST", &format!("{b}/v1/tenants/default/documents"), Some(&reader), Some(&body), &ct);
    assert_eq!(error_code(s, &j, 403), "forbidden", "a reader may not upload");
    let (s, j, _) = call("POST", &docs, Some(&writer), Some(&body), &ct);
    assert_eq!(s, 202, "{j}");
    let job = j["job"]["id"].as_u64().unwrap();
    wait_for_job(&b, "globex", job, &writer, Duration::from_secs(60));
    let (s, j) = post(&format!("{b}/v1/tenants/globex/search"), Some(&writer), &serde_json::json!({ "query": "Where do new starters collect their visitor badge?" }));
    assert_eq!(s, 200, "{j}");
    assert!(j["retrieval"]["hits"][0]["chunk"]["text"].as_str().unwrap().contains("GX-7741"), "{j}");
    let (s, j) = get(&docs, Some(&writer));
    assert_eq!(s, 200);
    let doc = &j["documents"][0];
    assert_eq!(doc["status"], "indexed");
    assert!(doc["path"].as_str().unwrap().contains("/tenants/globex/uploads/handbook.md"), "stored in the managed folder: {doc}");
    let doc_id = doc["id"].as_u64().unwrap();
    let (s, _) = get(&format!("{b}/v1/tenants/globex/jobs/{job}"), Some(&reader));
    assert_eq!(s, 404, "another tenant's job is not found");
    let (s, _) = get(&docs, Some(&reader));
    assert_eq!(s, 404);

    // Path traversal and bad uploads are refused; nothing is written outside the folder.
    for name in ["../escape.md", "/etc/passwd", "a/b.md", "..", ".hidden.md", "nul\u{0}.md"] {
        let (body, ct) = multipart(name, b"# x\n\ntext\n");
        let (s, j, _) = call("POST", &docs, Some(&writer), Some(&body), &ct);
        assert!(s == 400, "{name:?}: {s} {j}");
        error_code(s, &j, 400);
    }
    assert!(!server.data.join("tenants/globex/escape.md").exists() && !server.data.join("tenants/escape.md").exists());
    let (body, ct) = multipart("big.md", &vec![b'a'; 220_000]); // over the limit, under the body cap (limit + 64 KiB): read whole, refused by size
    let (s, j, _) = call("POST", &docs, Some(&writer), Some(&body), &ct);
    assert_eq!(error_code(s, &j, 413), "too_large");
    let (mut body, ct) = multipart("cut.md", b"# cut\n\ntext that stops");
    body.truncate(body.len() - 20);
    let (s, j, _) = call("POST", &docs, Some(&writer), Some(&body), &ct);
    assert!((400..500).contains(&s), "a truncated multipart body: {s} {j}");
    let (s, j, _) = call("POST", &docs, Some(&writer), Some(b"not multipart"), "application/json");
    assert!((400..500).contains(&s), "{s} {j}");

    // The adversarial tenant suite: every route and id-bearing parameter, aimed at the other
    // tenant's data, must answer exactly like the same request for something that does not exist.
    let (_, j) = get(&format!("{b}/v1/tenants/default/documents"), Some(&reader));
    let default_doc = j["documents"][0]["id"].as_u64().unwrap();
    let default_docs = j["documents"].as_array().unwrap().len();
    let (attempts, leaks) = adversarial_tenant_suite(&b, &reader, &writer, Victims { answer_id, session, default_doc, globex_doc: doc_id, globex_job: job });
    eprintln!("adversarial tenant suite: {attempts} attempts, {} leaks", leaks.len());
    assert!(attempts >= 40, "{attempts}");
    assert!(leaks.is_empty(), "{} of {attempts} attempts leaked:\n{}", leaks.len(), leaks.join("\n"));
    // And nothing of either tenant changed.
    let (_, j) = get(&format!("{b}/v1/tenants/default/documents"), Some(&reader));
    assert_eq!(j["documents"].as_array().unwrap().len(), default_docs);
    assert!(!server.data.join("tenants/default/uploads").exists(), "nothing uploaded into default");
    let (_, j) = get(&format!("{sessions}/{session}"), Some(&reader));
    assert_eq!(j["turns"].as_array().unwrap().len(), 2, "{j}");
    let (_, j) = get(&docs, Some(&writer));
    assert!(j["documents"].as_array().unwrap().iter().any(|d| d["id"] == doc_id), "{j}");

    // Re-ingest and remove.
    let (s, j) = post(&format!("{docs}/{doc_id}/reingest"), Some(&writer), &serde_json::json!(null));
    assert_eq!(s, 202, "{j}");
    std::thread::sleep(Duration::from_millis(500));
    let (s, j, _) = call("DELETE", &format!("{docs}/{doc_id}"), Some(&reader), None, "");
    assert_eq!(s, 404, "another tenant's document is not found: {j}");

    // OpenAI-compatible routes through a real client library.
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        use async_openai::types::{ChatCompletionRequestUserMessageArgs, CreateChatCompletionRequestArgs};
        use futures::StreamExt;
        let config = async_openai::config::OpenAIConfig::new().with_api_base(format!("{b}/v1")).with_api_key(reader.clone());
        let client = async_openai::Client::with_config(config);
        let models = client.models().list().await.unwrap();
        assert!(models.data.iter().any(|m| m.id == "ragbox"), "{models:?}");
        assert!(models.data.iter().all(|m| m.id == "ragbox" || m.id == "ragbox/default"), "{models:?}");
        let request = |stream: bool| {
            CreateChatCompletionRequestArgs::default()
                .model("ragbox")
                .stream(stream)
                .messages([ChatCompletionRequestUserMessageArgs::default()
                    .content("How many days after a trip do I have to submit my expense claim?")
                    .build()
                    .unwrap()
                    .into()])
                .build()
                .unwrap()
        };
        let response = client.chat().create(request(false)).await.unwrap();
        let text = response.choices[0].message.content.clone().unwrap_or_default();
        assert!(!text.is_empty(), "{response:?}");
        let mut stream = client.chat().create_stream(request(true)).await.unwrap();
        let mut streamed = String::new();
        let mut finished = false;
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.unwrap();
            for c in &chunk.choices {
                streamed.push_str(c.delta.content.as_deref().unwrap_or(""));
                finished |= c.finish_reason.is_some();
            }
        }
        assert!(!streamed.is_empty() && finished);
    });
    // The extra field with the sources.
    let (s, j) = post(
        &format!("{b}/v1/chat/completions"),
        Some(&reader),
        &serde_json::json!({ "model": "ragbox/default", "temperature": 0.2, "messages": [{ "role": "user", "content": "How many days after a trip do I have to submit my expense claim?" }] }),
    );
    assert_eq!(s, 200, "{j}");
    assert!(j["ragbox"]["sources"].as_array().is_some_and(|s| !s.is_empty()) && j["ragbox"]["answer_id"].is_i64(), "{j}");
    let (s, j) = post(&format!("{b}/v1/chat/completions"), Some(&reader), &serde_json::json!({ "model": "ragbox/globex", "messages": [{ "role": "user", "content": "badge?" }] }));
    error_code(s, &j, 404);

    // Embeddings for other tools: the tenant's own embedder through the OpenAI client, the same
    // vectors as `ragbox embed`, base64 as the Python client asks, and the key's scope.
    let texts = ["Expense claims are due within 30 days of the trip.", "Hotels in London are capped at GBP 210 a night."];
    let got = rt.block_on(async {
        use async_openai::types::CreateEmbeddingRequestArgs;
        let config = async_openai::config::OpenAIConfig::new().with_api_base(format!("{b}/v1")).with_api_key(reader.clone());
        let client = async_openai::Client::with_config(config);
        let request = CreateEmbeddingRequestArgs::default().model("ragbox").input(texts.to_vec()).build().unwrap();
        client.embeddings().create(request).await.unwrap()
    });
    assert_eq!(got.data.len(), 2);
    assert_eq!(got.model, "all-minilm-l6-v2@int8", "the tenant's own embedder, at its index's precision");
    assert!(got.usage.prompt_tokens > 10, "{:?}", got.usage);
    let (code, out, err) = cli(&server, &["embed", "--json", "--model", "all-minilm-l6-v2@int8", texts[0], texts[1]]);
    assert_eq!(code, 0, "{err}");
    for (line, e) in out.lines().zip(&got.data) {
        let local: serde_json::Value = serde_json::from_str(line).unwrap();
        let local: Vec<f32> = local["vector"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect();
        assert_eq!(local.len(), e.embedding.len());
        let cosine: f32 = local.iter().zip(&e.embedding).map(|(a, b)| a * b).sum();
        assert!(cosine > 0.9999, "text {}: cosine {cosine}", e.index);
    }
    let body = serde_json::json!({ "model": "ragbox/default", "input": texts[0], "encoding_format": "base64", "input_type": "query" });
    let (s, j) = post(&format!("{b}/v1/embeddings"), Some(&reader), &body);
    assert_eq!(s, 200, "{j}");
    use base64::Engine as _;
    let bytes = base64::engine::general_purpose::STANDARD.decode(j["data"][0]["embedding"].as_str().unwrap()).unwrap();
    let decoded: Vec<f32> = bytes.chunks(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect();
    let cosine: f32 = decoded.iter().zip(&got.data[0].embedding).map(|(a, b)| a * b).sum();
    assert!(decoded.len() == 384 && cosine > 0.9999, "base64 holds the same little-endian f32 vector: {cosine}");
    for (body, status) in [
        (serde_json::json!({ "model": "ragbox/globex", "input": "badge" }), 404),
        (serde_json::json!({ "model": "ragbox", "input": [[101, 2023]] }), 400),
        (serde_json::json!({ "model": "ragbox", "input": [] }), 400),
        (serde_json::json!({ "model": "ragbox", "input": "x", "input_type": "code" }), 400),
        (serde_json::json!({ "model": "ragbox", "input": "x", "dimensions": 64 }), 400),
        (serde_json::json!({ "model": "qwen2.5-coder-0.5b-instruct", "input": "x" }), 400),
    ] {
        let (s, j) = post(&format!("{b}/v1/embeddings"), Some(&reader), &body);
        error_code(s, &j, status);
    }
    let (s, _) = post(&format!("{b}/v1/embeddings"), None, &serde_json::json!({ "model": "ragbox", "input": "x" }));
    assert_eq!(s, 401);

    // The queue: one generating, one waiting, the third refused with Retry-After; a client that
    // goes away cancels its generation.
    let open = |q: &str| {
        ureq::post(&ask)
            .set("Authorization", &format!("Bearer {reader}"))
            .set("Content-Type", "application/json")
            .send_string(&serde_json::json!({ "question": q }).to_string())
    };
    let one = open("What is the maximum hotel cost per night in London?").unwrap();
    let mut one = BufReader::new(one.into_reader());
    let mut line = String::new();
    while !line.starts_with("event: token") {
        line.clear();
        assert!(one.read_line(&mut line).unwrap() > 0, "the first answer streams");
    }
    let two = open("How long do we keep travel receipts?").unwrap();
    let (s, j, retry) = call("POST", &ask, Some(&reader), Some(serde_json::json!({ "question": "Who approves travel?" }).to_string().as_bytes()), "application/json");
    assert_eq!(error_code(s, &j, 503), "busy");
    assert!(retry.is_some_and(|r| r.parse::<u64>().is_ok()), "Retry-After is set");
    drop(two);
    drop(one);
    // Both cancellations show: the waiting one never generates, the streaming one stops.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (_, m, _) = call("GET", &format!("{b}/metrics"), None, None, "");
        let m = m.as_str().unwrap().to_string();
        let cancelled = m.lines().find(|l| l.starts_with("ragbox_generations_total{outcome=\"cancelled\"}"));
        if cancelled.and_then(|l| l.split_whitespace().last()).and_then(|n| n.parse::<u64>().ok()) >= Some(2) {
            assert!(m.contains("ragbox_http_requests_total{method=\"POST\",route=\"/v1/tenants/{tenant}/search\",status=\"200\"}"), "{m}");
            assert!(m.contains("ragbox_queue_waiting"), "{m}");
            break;
        }
        assert!(Instant::now() < deadline, "two cancelled generations: {m}");
        std::thread::sleep(Duration::from_millis(250));
    }

    // The audit log over HTTP: admins only.
    let (s, j) = get(&format!("{b}/v1/admin/audit?limit=500"), Some(&reader));
    assert_eq!(error_code(s, &j, 403), "forbidden");
    let (s, j) = get(&format!("{b}/v1/admin/audit?limit=500"), Some(&admin));
    assert_eq!(s, 200, "{j}");
    let rows = j["events"].as_array().unwrap();
    let actions: Vec<&str> = rows.iter().map(|r| r["action"].as_str().unwrap()).collect();
    for want in ["key_create", "key_revoke", "auth_failed", "search", "ask", "chat", "feedback", "upload", "ingest", "chat_completion"] {
        assert!(actions.contains(&want), "an audit row for {want}: {actions:?}");
    }
    // An embedding request is recorded with its model and counts, never its texts.
    let embed_row = rows.iter().find(|r| r["action"] == "embed" && r["outcome"] == "ok" && r["key_name"] == "alice").expect("an embed row");
    assert_eq!((embed_row["detail"]["inputs"].as_u64(), embed_row["detail"]["model"].as_str()), (Some(2), Some("all-minilm-l6-v2@int8")), "{embed_row}");
    assert!(!embed_row.to_string().contains("Expense claims"), "{embed_row}");
    // The copied sample data may already hold `cli` rows (other tests ask it from the command
    // line); the server's answers are recorded under the key that asked.
    let ask_row = rows.iter().find(|r| r["action"] == "ask" && r["outcome"] == "ok" && r["key_name"] == "alice");
    let ask_row = ask_row.unwrap_or_else(|| panic!("an ok ask row under alice's key: {rows:?}"));
    assert_eq!(ask_row["tenant"], "default");
    assert!(ask_row["key_id"].as_i64().is_some(), "{ask_row}");
    assert!(!ask_row["chunk_ids"].as_array().unwrap().is_empty() && !ask_row["model"].as_str().unwrap().is_empty(), "{ask_row}");
    assert!(rows.iter().any(|r| r["action"] == "ask" && r["outcome"] == "cancelled"), "the dropped stream's answer is recorded as cancelled: {rows:?}");
    let failed = rows.iter().find(|r| r["action"] == "auth_failed").unwrap();
    assert!(failed["detail"]["address"].as_str().unwrap().starts_with("127.0.0.1"), "{failed}");
    let (s, j) = get(&format!("{b}/v1/admin/audit/verify"), Some(&admin));
    assert!(s == 200 && j["intact"] == true, "{j}");
    let (s, j) = post(&format!("{b}/v1/admin/keys"), Some(&admin), &serde_json::json!({ "name": "carol", "tenant": "globex", "role": "reader" }));
    assert!(s == 201 && j["secret"].as_str().unwrap().starts_with("rbx_"), "{j}");

    // Failed authentications from one address: past server.auth_failures_per_minute (50) the
    // address gets 429 + Retry-After before any key is looked at, a valid one included.
    let mut refused = None;
    for i in 0..60 {
        let (s, j, retry) = call("GET", &format!("{b}/v1/tenants"), Some("rbx_not_a_key"), None, "");
        if s == 429 {
            refused = Some((i, j, retry));
            break;
        }
        assert_eq!(error_code(s, &j, 401), "unauthorized");
    }
    let (attempt, j, retry) = refused.expect("429 within 60 failed attempts");
    assert!(attempt <= 50, "refused after at most 50 failures in the minute (3 came earlier): {attempt}");
    assert_eq!(error_code(429, &j, 429), "too_many_failures");
    assert!(retry.is_some_and(|r| r.parse::<u64>().is_ok_and(|s| (1..=60).contains(&s))), "Retry-After is set");
    let (s, j, _) = call("GET", &format!("{b}/v1/tenants"), Some(&reader), None, "");
    assert_eq!(error_code(s, &j, 429), "too_many_failures", "the address is refused, whatever key it sends");
    assert_eq!(get(&format!("{b}/healthz"), None).0, 200);

    // SIGTERM: a clean exit within the grace period.
    let mut server = server;
    let pid = server.child.id() as i32;
    // SAFETY: sends a signal to the child this test started.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(st) = server.child.try_wait().unwrap() {
            break st;
        }
        assert!(Instant::now() < deadline, "the server exits after SIGTERM");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(status.success(), "{status:?}");

    // The audit chain: intact, then tampered by hand and caught.
    let (code, out, err) = cli(&server, &["audit", "verify"]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("intact"), "{out}");
    let (code, out, _) = cli(&server, &["audit", "--tenant", "default", "--json"]);
    assert_eq!(code, 0);
    let listed: Vec<serde_json::Value> = out.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert!(listed.iter().all(|r| r["tenant"] == "default") && listed.len() > 5);
    let victim = listed[2]["id"].as_i64().unwrap();
    {
        let conn = rusqlite::Connection::open(server.data.join("catalog.sqlite")).unwrap();
        assert!(conn.execute("UPDATE events SET question = 'nothing to see' WHERE id = ?1", [victim]).is_err(), "append-only");
        conn.execute_batch("DROP TRIGGER events_no_update").unwrap();
        conn.execute("UPDATE events SET question = 'nothing to see' WHERE id = ?1", [victim]).unwrap();
    }
    let (code, out, _) = cli(&server, &["audit", "verify"]);
    assert_eq!(code, 6, "{out}");
    assert!(out.contains(&format!("row {victim}")), "names the first broken row: {out}");
    eprintln!("serve_end_to_end: {:.1} s", started.elapsed().as_secs_f64());
}

/// Sends a request's head and the first `sent` bytes of a body said to be `declared` bytes long,
/// then stalls; returns the response's status line and body.
fn stall(base: &str, path: &str, key: &str, content_type: &str, declared: usize, sent: &[u8]) -> (String, String) {
    use std::io::{Read, Write};
    let addr = base.trim_start_matches("http://");
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(s, "POST {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {key}\r\nContent-Type: {content_type}\r\nContent-Length: {declared}\r\n\r\n").unwrap();
    s.write_all(sent).unwrap();
    s.flush().unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let text = String::from_utf8_lossy(&got).to_string();
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let length = head
                .lines()
                .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().parse::<usize>().unwrap()))
                .expect("a content-length");
            if body.len() >= length {
                return (head.lines().next().unwrap().to_string(), body[..length].to_string());
            }
        }
        let n = s.read(&mut buf).unwrap_or_else(|e| panic!("{path}: no answer to a stalled body: {e}"));
        assert!(n > 0, "{path}: closed without an answer: {text}");
        got.extend_from_slice(&buf[..n]);
    }
}

/// Ids of each tenant's data the suite aims at.
struct Victims {
    /// An answer of `default`.
    answer_id: i64,
    /// A chat session of `default`.
    session: i64,
    /// A document of `default`.
    default_doc: u64,
    /// A document of `globex`.
    globex_doc: u64,
    /// An ingest job of `globex`.
    globex_job: u64,
}

/// With `alice` (reader of `default`) and `bob` (writer of `globex`), tries every route on the
/// other tenant, and every id-bearing parameter with the other tenant's ids under the caller's
/// own tenant. Each attempt is paired with a control: the same request naming a tenant or id
/// that does not exist. A leak is any difference between the two (status, error code, or the
/// message once the names are set aside), or a success. Returns (attempts, leaks).
fn adversarial_tenant_suite(b: &str, alice: &str, bob: &str, v: Victims) -> (usize, Vec<String>) {
    const NO_ID: &str = "987654321";
    let question = serde_json::json!({ "question": "How many days after a trip do I have to submit my expense claim?" });
    let query = serde_json::json!({ "query": "expense claim deadline", "k": 3 });
    let (upload, upload_ct) = multipart("planted.md", b"# planted\n\nthis must never be stored\n");
    let json = "application/json";
    // (key, method, path with {T} for the tenant and {ID} for the id, body, content type, victim, control)
    // {T}/{ID} stand for the victim's value in the attempt and the control's in the control.
    let mut probes: Vec<(&str, &str, String, Option<Vec<u8>>, &str, String, String)> = Vec::new();
    let body = |v: &serde_json::Value| Some(v.to_string().into_bytes());
    // 1. Whole routes on the other tenant (tenant name in the path): each attacker at the other.
    for (key, victim) in [(alice, "globex"), (bob, "default")] {
        let t = |p: &str| p.to_string();
        let tenant_routes: Vec<(&str, String, Option<Vec<u8>>, &str)> = vec![
            ("POST", t("/v1/tenants/{T}/search"), body(&query), json),
            ("POST", t("/v1/tenants/{T}/search"), body(&serde_json::json!({ "query": "badge", "explain": true })), json),
            ("POST", t("/v1/tenants/{T}/ask"), body(&question), json),
            ("POST", t("/v1/tenants/{T}/chat/sessions"), body(&serde_json::json!(null)), json),
            ("GET", t("/v1/tenants/{T}/chat/sessions"), None, ""),
            ("GET", format!("/v1/tenants/{{T}}/chat/sessions/{}", v.session), None, ""),
            ("POST", format!("/v1/tenants/{{T}}/chat/sessions/{}/messages", v.session), body(&question), json),
            ("POST", t("/v1/tenants/{T}/feedback"), body(&serde_json::json!({ "answer_id": v.answer_id, "rating": "down" })), json),
            ("GET", t("/v1/tenants/{T}/documents"), None, ""),
            ("POST", t("/v1/tenants/{T}/documents"), Some(upload.clone()), upload_ct.as_str()),
            ("DELETE", format!("/v1/tenants/{{T}}/documents/{}", v.default_doc), None, ""),
            ("DELETE", format!("/v1/tenants/{{T}}/documents/{}", v.globex_doc), None, ""),
            ("POST", format!("/v1/tenants/{{T}}/documents/{}/reingest", v.default_doc), body(&serde_json::json!(null)), json),
            ("POST", format!("/v1/tenants/{{T}}/documents/{}/reingest", v.globex_doc), body(&serde_json::json!(null)), json),
            ("GET", format!("/v1/tenants/{{T}}/jobs/{}", v.globex_job), None, ""),
            ("POST", t("/v1/chat/completions"), body(&serde_json::json!({ "model": "ragbox/{T}", "messages": [{ "role": "user", "content": "badge?" }] })), json),
            ("POST", t("/v1/chat/completions"), body(&serde_json::json!({ "model": "ragbox/{T}", "stream": true, "messages": [{ "role": "user", "content": "badge?" }] })), json),
            ("GET", t("/v1/admin/audit?tenant={T}"), None, ""),
        ];
        for (method, path, body, ct) in tenant_routes {
            probes.push((key, method, path, body, ct, victim.to_string(), "nosuchtenant".to_string()));
        }
    }
    // 2. The other tenant's ids under the caller's own tenant.
    let ids: Vec<(&str, &str, String, Option<Vec<u8>>, &str, String)> = vec![
        (bob, "GET", "/v1/tenants/globex/chat/sessions/{ID}".into(), None, "", v.session.to_string()),
        (bob, "POST", "/v1/tenants/globex/chat/sessions/{ID}/messages".into(), body(&question), json, v.session.to_string()),
        (bob, "POST", "/v1/tenants/globex/feedback".into(), Some(br#"{"answer_id": {ID}, "rating": "down"}"#.to_vec()), json, v.answer_id.to_string()),
        (bob, "DELETE", "/v1/tenants/globex/documents/{ID}".into(), None, "", v.default_doc.to_string()),
        (bob, "POST", "/v1/tenants/globex/documents/{ID}/reingest".into(), body(&serde_json::json!(null)), json, v.default_doc.to_string()),
        (alice, "GET", "/v1/tenants/default/jobs/{ID}".into(), None, "", v.globex_job.to_string()),
        (alice, "DELETE", "/v1/tenants/default/documents/{ID}".into(), None, "", v.globex_doc.to_string()),
        (alice, "POST", "/v1/tenants/default/documents/{ID}/reingest".into(), body(&serde_json::json!(null)), json, v.globex_doc.to_string()),
    ];
    for (key, method, path, body, ct, victim) in ids {
        probes.push((key, method, path, body, ct, victim, NO_ID.to_string()));
    }
    // 3. The OpenAI route's plain model name means the key's own tenant; a listing shows no other.
    let mut leaks = Vec::new();
    let mut attempts = 0;
    for (key, want_absent) in [(alice, "globex"), (bob, "default")] {
        attempts += 2;
        let (_, models) = get(&format!("{b}/v1/models"), Some(key));
        if models.to_string().contains(&format!("ragbox/{want_absent}")) {
            leaks.push(format!("/v1/models lists {want_absent}: {models}"));
        }
        let (_, tenants) = get(&format!("{b}/v1/tenants"), Some(key));
        if tenants.to_string().contains(want_absent) {
            leaks.push(format!("/v1/tenants lists {want_absent}: {tenants}"));
        }
    }
    let fill = |text: &str, value: &str| text.replace("{T}", value).replace("{ID}", value);
    for (key, method, path, body, ct, victim, control) in probes {
        attempts += 1;
        let send = |value: &str| {
            let url = format!("{b}{}", fill(&path, value));
            let body = body.as_ref().map(|bytes| match std::str::from_utf8(bytes) {
                Ok(text) if ct == json => fill(text, value).into_bytes(),
                _ => bytes.clone(),
            });
            let (s, j, _) = call(method, &url, Some(key), body.as_deref(), ct);
            (s, j)
        };
        let (s1, j1) = send(&victim);
        let (s2, j2) = send(&control);
        let what = format!("{method} {} (victim {victim}, control {control})", fill(&path, &victim));
        let norm = |j: &serde_json::Value, token: &str| j["error"]["message"].as_str().unwrap_or("").replace(token, "<X>");
        if (200..300).contains(&s1) {
            leaks.push(format!("{what}: succeeded with {s1}: {j1}"));
        } else if s1 != s2 || j1["error"]["code"] != j2["error"]["code"] || norm(&j1, &victim) != norm(&j2, &control) {
            leaks.push(format!("{what}: {s1} {j1} differs from the control's {s2} {j2}"));
        } else if !(400..500).contains(&s1) {
            leaks.push(format!("{what}: not a 4xx: {s1} {j1}"));
        }
    }
    (attempts, leaks)
}
