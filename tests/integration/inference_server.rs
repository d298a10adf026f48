//! Generation on an inference server (`generate.backend = "openai"`) against a real one:
//! llama.cpp's OpenAI-compatible server (llama-cpp-python, built by
//! `scripts/setup/llama-server-venv.sh` into a venv outside the clone) on a free loopback port,
//! serving the same qwen2.5-coder-0.5b GGUF ragbox fetches (the local fallback is SmolLM2).
//! `ragbox serve` answers through it: a streamed, cited answer whose log row names the backend
//! and host, the start-up line and `doctor` saying where prompts go, the queue's 503 with the
//! server's one slot busy, a cancelled stream, the server killed mid-answer (an error, nothing
//! stored as a whole answer), the local fallback while it is down, and the allowlist refusing a
//! host it does not name (nothing reaches that host).

use std::io::{BufRead, BufReader, Read};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{ragbox, run};
use crate::server::{call, cli, create_key, get, start_with, Server};

/// The venv holding llama-cpp-python's server. scripts/test.sh builds it in the background and
/// names a file (`LLAMA_SERVER_READY`) it writes when done: `ok`, or why not; wait for it.
fn venv() -> PathBuf {
    if let Some(ready) = std::env::var_os("LLAMA_SERVER_READY").map(PathBuf::from) {
        let started = std::time::Instant::now();
        while !ready.exists() {
            assert!(started.elapsed() < std::time::Duration::from_secs(1800), "llama.cpp's server was not built within 30 minutes ({ready:?})");
            std::thread::sleep(std::time::Duration::from_secs(2));
        }
        let said = std::fs::read_to_string(&ready).unwrap();
        assert_eq!(said.trim(), "ok", "{said}");
    }
    let dir = std::env::var_os("LLAMA_SERVER_VENV").map(PathBuf::from).unwrap_or_else(|| {
        let cache = std::env::var_os("RAGBOX_CACHE_DIR").map(PathBuf::from).unwrap_or_else(|| PathBuf::from(std::env::var("HOME").unwrap()).join(".cache/ragbox"));
        cache.join("llama-server-venv")
    });
    assert!(dir.join("bin/python").exists(), "no llama.cpp server venv at {dir:?}: run scripts/setup/llama-server-venv.sh (scripts/test.sh does)");
    dir
}

/// A free loopback port (bound, then released for the server to take).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// llama.cpp's server on 127.0.0.1, one slot, until dropped, serving the default model's GGUF
/// (SmolLM2 through llama.cpp's chat template wrote no citation markers).
struct LlamaServer {
    child: Child,
    port: u16,
}

impl LlamaServer {
    fn start() -> LlamaServer {
        let (code, gguf, err) = run(ragbox(&tempfile::tempdir().unwrap().keep()).args(["models", "path", "qwen2.5-coder-0.5b-instruct"]));
        assert_eq!(code, 0, "{err}");
        let port = free_port();
        let log = std::fs::File::create(std::env::temp_dir().join(format!("llama-server-{port}.log"))).unwrap();
        let child = Command::new(venv().join("bin/python"))
            .args(["-m", "llama_cpp.server", "--model", gguf.trim(), "--model_alias", "qwen-0.5b", "--host", "127.0.0.1"])
            .args(["--port", &port.to_string(), "--n_ctx", "4096", "--n_threads", "2", "--verbose", "false"])
            .env("HF_HUB_OFFLINE", "1")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        let server = LlamaServer { child, port };
        let deadline = Instant::now() + Duration::from_secs(180);
        while ureq::get(&format!("{}/models", server.base())).timeout(Duration::from_secs(2)).call().is_err() {
            assert!(Instant::now() < deadline, "llama.cpp's server did not come up on port {port}");
            std::thread::sleep(Duration::from_millis(300));
        }
        server
    }

    fn base(&self) -> String {
        format!("http://127.0.0.1:{}/v1", self.port)
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for LlamaServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A `ragbox serve` configuration answering through `base_url`, with the generative reader
/// (`answer.reader = "generate"`), which asks the generator for every answer: the
/// evidence-first reader asks it only for yes/no verdicts.
fn config(base_url: &str, allow: &str, extra: &str) -> String {
    format!(
        "[generate]\nbackend = \"openai\"\nmodel = \"smollm2-135m-instruct\"\nmax_tokens = 64\n\
         openai_base_url = \"{base_url}\"\nopenai_model = \"qwen-0.5b\"\nallow_hosts = [{allow}]\nopenai_connect_timeout_ms = 1000\n{extra}\
         [answer]\nreader = \"generate\"\n\
         [server]\nqueue = 1\ngenerate_concurrency = 1\nshutdown_grace_ms = 2000\n"
    )
}

/// The events of a streamed answer, read to the end.
fn ask(server: &Server, key: &str, question: &str) -> Vec<(String, serde_json::Value)> {
    let resp = ureq::post(&format!("{}/v1/tenants/default/ask", server.base))
        .timeout(Duration::from_secs(300))
        .set("Authorization", &format!("Bearer {key}"))
        .set("Content-Type", "application/json")
        .send_string(&serde_json::json!({ "question": question }).to_string())
        .unwrap();
    let mut text = String::new();
    resp.into_reader().read_to_string(&mut text).unwrap();
    let mut out = Vec::new();
    for block in text.split("\n\n") {
        let name = block.lines().find_map(|l| l.strip_prefix("event:")).map_or("message", str::trim).to_string();
        let data: String = block.lines().filter_map(|l| l.strip_prefix("data:")).map(str::trim).collect();
        if !data.is_empty() {
            out.push((name, serde_json::from_str(&data).unwrap_or(serde_json::Value::String(data))));
        }
    }
    out
}

/// The admin audit rows for `action`.
fn audit_rows(server: &Server, admin: &str, action: &str) -> Vec<serde_json::Value> {
    let (s, j) = get(&format!("{}/v1/admin/audit?limit=500", server.base), Some(admin));
    assert_eq!(s, 200, "{j}");
    j["events"].as_array().unwrap().iter().filter(|r| r["action"] == action).cloned().collect()
}

/// Opens a streamed answer and reads until its first token; the reader is returned open.
fn open_until_first_token(server: &Server, key: &str, question: &str) -> BufReader<Box<dyn Read + Send + Sync>> {
    let resp = ureq::post(&format!("{}/v1/tenants/default/ask", server.base))
        .set("Authorization", &format!("Bearer {key}"))
        .set("Content-Type", "application/json")
        .send_string(&serde_json::json!({ "question": question }).to_string())
        .unwrap();
    let mut reader = BufReader::new(resp.into_reader());
    let mut line = String::new();
    while !line.starts_with("event: token") {
        line.clear();
        assert!(reader.read_line(&mut line).unwrap() > 0, "the answer streams a token");
    }
    reader
}

#[test]
fn answers_stream_through_llama_cpps_server_and_every_failure_is_legible() {
    let mut llama = LlamaServer::start();
    let host = format!("127.0.0.1:{}", llama.port);
    let server = start_with(&config(&llama.base(), "\"127.0.0.1\"", ""));
    let reader = create_key(&server, &["--tenant", "default", "--role", "reader", "--name", "alice"]);
    let admin = create_key(&server, &["--role", "admin", "--name", "root"]);

    // Where prompts go: the start-up line, and `doctor`, which asks the server.
    assert!(server.stderr().contains(&format!("prompts go to the inference server {}", llama.base())), "{}", server.stderr());
    let (code, out, err) = cli(&server, &["doctor"]);
    assert_eq!(code, 0, "{err}");
    let line = out.lines().find(|l| l.starts_with("generator:")).unwrap_or_else(|| panic!("{out}"));
    assert!(line.contains(&llama.base()) && line.contains("reachable, serving qwen-0.5b"), "{line}");

    // A streamed, cited answer written by the server; its log row names the backend and host.
    let evs = ask(&server, &reader, "How many days after a trip do I have to submit my expense claim?");
    let (last, tokens) = evs.split_last().unwrap();
    assert_eq!(last.0, "answer", "{evs:?}");
    assert!(!tokens.is_empty() && tokens.iter().all(|e| e.0 == "token"), "tokens stream before the answer: {evs:?}");
    let a = &last.1;
    assert_eq!(a["refused"], false, "{a:#}");
    assert_eq!(a["written_by"], format!("openai {host}"), "{a:#}");
    assert_eq!(a["model"], "qwen-0.5b");
    assert!(!a["citations"].as_array().unwrap().is_empty(), "the answer cites its passages: {a:#}");
    // The copied sample data may already hold `cli` rows (other tests ask it from the command
    // line); the server's answers are recorded under the key that asked.
    let row = audit_rows(&server, &admin, "ask").into_iter().find(|r| r["outcome"] == "ok" && r["key_name"] == "alice").expect("an ok ask row");
    assert_eq!(row["detail"]["written_by"], format!("openai {host}"), "{row}");
    assert_eq!(row["model"], "qwen-0.5b", "{row}");

    // The server's one slot busy and ragbox's queue full: 503 with Retry-After. The client that
    // goes away cancels its generation, which closes the connection to the server.
    let first = open_until_first_token(&server, &reader, "What is the maximum hotel cost per night in London?");
    let waiting = ureq::post(&format!("{}/v1/tenants/default/ask", server.base))
        .set("Authorization", &format!("Bearer {reader}"))
        .set("Content-Type", "application/json")
        .send_string(&serde_json::json!({ "question": "How long do we keep travel receipts?" }).to_string())
        .unwrap();
    let (s, j, retry) = call("POST", &format!("{}/v1/tenants/default/ask", server.base), Some(&reader), Some(br#"{"question": "Who approves travel?"}"#), "application/json");
    assert_eq!((s, j["error"]["code"].as_str()), (503, Some("busy")), "{j}");
    assert!(retry.is_some(), "Retry-After is set");
    drop(waiting);
    drop(first);
    let deadline = Instant::now() + Duration::from_secs(60);
    while !audit_rows(&server, &admin, "ask").iter().any(|r| r["outcome"] == "cancelled") {
        assert!(Instant::now() < deadline, "the dropped stream's answer is recorded as cancelled");
        std::thread::sleep(Duration::from_millis(250));
    }
    // The server is free again: the next answer goes through.
    let again = ask(&server, &reader, "What is the maximum hotel cost per night in London?");
    assert_eq!(again.last().unwrap().0, "answer", "{again:?}");

    // The server killed mid-answer: an error event, and no answer recorded as whole.
    let ours = |rows: Vec<serde_json::Value>| rows.into_iter().filter(|r| r["key_name"] == "alice").collect::<Vec<_>>();
    let answers_before = ours(audit_rows(&server, &admin, "ask")).iter().filter(|r| r["outcome"] == "ok").count();
    let mut open = open_until_first_token(&server, &reader, "Who approves a late expense claim?");
    llama.kill();
    let mut rest = String::new();
    let _ = open.read_to_string(&mut rest);
    assert!(rest.contains("event: error"), "a clear error event: {rest}");
    assert!(!rest.contains("event: answer"), "no answer event after the server died: {rest}");
    let rows = ours(audit_rows(&server, &admin, "ask"));
    assert_eq!(rows.iter().filter(|r| r["outcome"] == "ok").count(), answers_before, "{rows:?}");
    assert!(rows.iter().any(|r| r["outcome"].as_str().is_some_and(|o| o.starts_with("error:") && o.contains("inference server"))), "{rows:?}");

    // Down, without a fallback: the error names the server and what to do.
    let evs = ask(&server, &reader, "How many days after a trip do I have to submit my expense claim?");
    let (name, body) = evs.last().unwrap();
    assert_eq!(name, "error", "{evs:?}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("cannot be reached") && message.contains(&host) && message.contains("fallback"), "{body}");
}

#[test]
fn the_local_model_answers_while_the_server_is_down_when_the_configuration_says_so() {
    // Nothing listens on this port.
    let base = format!("http://127.0.0.1:{}/v1", free_port());
    let server = start_with(&config(&base, "\"127.0.0.1\"", "fallback = \"local\"\n"));
    let reader = create_key(&server, &["--tenant", "default", "--role", "reader", "--name", "alice"]);
    let evs = ask(&server, &reader, "How many days after a trip do I have to submit my expense claim?");
    let a = &evs.last().unwrap().1;
    assert_eq!(evs.last().unwrap().0, "answer", "{evs:?}");
    let by = a["written_by"].as_str().unwrap_or_else(|| panic!("{a:#}"));
    assert!(by.starts_with("local smollm2-135m-instruct (fallback: ") && by.contains("unreachable"), "{by}");
}

#[test]
fn a_host_off_the_allowlist_is_refused_and_never_contacted() {
    // A listener on another loopback address, counting connections.
    let listener = TcpListener::bind("127.0.0.2:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let base = format!("http://{}/v1", listener.local_addr().unwrap());
    let dir = tempfile::tempdir().unwrap();
    let config_file = dir.path().join("c.toml");
    std::fs::write(&config_file, config(&base, "\"127.0.0.1\", \"10.0.0.0/8\"", "")).unwrap();
    let data = dir.path().join("data");
    for args in [&["doctor"][..], &["ask", "How many days do I have to submit an expense claim?"][..]] {
        let (code, out, err) = run(ragbox(&data).arg("--config").arg(&config_file).args(args));
        assert_ne!(code, 0, "{args:?}: {out}");
        assert!(err.contains("127.0.0.2") && err.contains("generate.allow_hosts"), "{args:?}: {err}");
    }
    std::thread::sleep(Duration::from_millis(200));
    let contacted: Option<TcpStream> = listener.accept().ok().map(|(s, _)| s);
    assert!(contacted.is_none(), "nothing may reach a host the allowlist does not name");
}
