//! `ragbox serve` under faults and attack, against the real binary on
//! loopback with real models and a copy of the sample data:
//!
//! - SIGKILL mid-answer, mid-upload (half a body sent) and mid-ingest (uploads acknowledged, their
//!   job running): after each restart the audit chain verifies, every index agrees with the
//!   catalog, no half upload is left, and every acknowledged upload ends up ingested (the server
//!   resumes its tenants' uploads at start), while the restarted server keeps answering searches.
//! - Mutated requests (methods, paths, ids, query strings, headers, JSON and multipart bodies,
//!   some not even valid HTTP) over raw TCP: every request that is HTTP gets a response, no 5xx
//!   other than the intended 503/504, every `/v1` error is `{"error": {"code", "message"}}`, the
//!   server never panics and is healthy at the end. `RAGBOX_API_FUZZ_CASES` sets how many
//!   (2,000 in the suite; docs/RELIABILITY.md gives the long run's command and figures).

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use ragbox_core::testing::SeededRng;

use crate::server::{call, cli, create_key, get, multipart, post, start_with, Server};

/// The small, fast test model with answers cut short: these tests are about the server.
const FAST: &str = "[generate]\nmodel = \"smollm2-135m-instruct\"\nmax_tokens = 6\n\
    [answer]\npassages = 2\npassage_chars = 300\nprompt = \"labelled\"\n\
    [server]\nqueue = 1\ngenerate_concurrency = 1\nmax_body_bytes = 65536\nmax_question_chars = 2000\n\
    max_upload_bytes = 200000\nshutdown_grace_ms = 1000\nauth_failures_per_minute = 1000000\nbody_timeout_ms = 1000\n";

fn host(server: &Server) -> String {
    server.base.trim_start_matches("http://").to_string()
}

/// The checks of the ingest crash test, with the server stopped: an index a kill left behind
/// the catalog (the catalog commits first) is rebuilt by the next open of the tenant, after
/// which every tenant's indexes agree with its catalog; the audit chain verifies.
fn assert_consistent(server: &Server, when: &str) {
    let doctor = || {
        let (code, out, err) = cli(server, &["doctor", "--json"]);
        assert_eq!(code, 0, "{when}: {err}");
        serde_json::from_str::<serde_json::Value>(&out).unwrap()
    };
    for t in doctor()["tenants"].as_array().unwrap() {
        if t["consistency"]["consistent"] != true {
            eprintln!("{when}: tenant {} behind its catalog after the kill: {}", t["tenant"]["name"], t["consistency"]);
            let (code, _, err) = cli(server, &["search", "--tenant", t["tenant"]["name"].as_str().unwrap(), "policy"]);
            assert_eq!(code, 0, "{when}: {err}");
        }
    }
    for t in doctor()["tenants"].as_array().unwrap() {
        assert_eq!(t["consistency"]["consistent"], true, "{when}: {t:#}");
    }
    let (code, out, err) = cli(server, &["audit", "verify"]);
    assert_eq!(code, 0, "{when}: the audit chain verifies\n{out}\n{err}");
}

fn uploads(server: &Server, tenant: &str) -> BTreeSet<String> {
    let dir = server.data.join("tenants").join(tenant).join("uploads");
    std::fs::read_dir(dir).map(|d| d.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect()).unwrap_or_default()
}

/// The indexed documents' file names in `tenant`, through the API.
fn indexed(server: &Server, key: &str, tenant: &str) -> BTreeSet<String> {
    let (s, body) = get(&format!("{}/v1/tenants/{tenant}/documents", server.base), Some(key));
    if s == 404 {
        return BTreeSet::new();
    }
    assert_eq!(s, 200, "{body}");
    body["documents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["status"] == "indexed")
        .map(|d| d["path"].as_str().unwrap().rsplit('/').next().unwrap().to_string())
        .collect()
}

#[test]
fn serve_sigkill_mid_answer_mid_upload_and_mid_ingest_loses_nothing_acknowledged() {
    let mut server = start_with(FAST);
    let writer = create_key(&server, &["--tenant", "crash", "--role", "writer", "--name", "crash-writer"]);
    let reader = create_key(&server, &["--tenant", "default", "--role", "reader", "--name", "crash-reader"]);

    // Mid-answer: the event stream is open (the generation runs) when the server dies.
    let ask = format!("{}/v1/tenants/default/ask", server.base);
    let resp = ureq::post(&ask)
        .set("Authorization", &format!("Bearer {reader}"))
        .set("Content-Type", "application/json")
        .send_string(r#"{"question": "How many days after a trip do I have to submit my expense claim?"}"#)
        .unwrap();
    assert_eq!(resp.header("Content-Type"), Some("text/event-stream"));
    server.kill();
    drop(resp);
    assert_consistent(&server, "after a kill mid-answer");
    server.restart();

    // Mid-upload: half of a body sent, then the kill. Nothing of it may be left.
    let (body, content_type) = multipart("half.md", "# Half\n\nNever finished.\n".repeat(4000).as_bytes());
    let mut tcp = TcpStream::connect(host(&server)).unwrap();
    let head = format!(
        "POST /v1/tenants/crash/documents HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {writer}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\r\n",
        host(&server),
        body.len()
    );
    tcp.write_all(head.as_bytes()).unwrap();
    tcp.write_all(&body[..body.len() / 2]).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    server.kill();
    assert!(uploads(&server, "crash").is_empty(), "a half upload left a file: {:?}", uploads(&server, "crash"));
    server.restart();

    // Mid-ingest: six uploads acknowledged (202), the kill while their jobs run.
    let policies = crate::ingest::sample_corpus().join("policies");
    let mut acked = BTreeSet::new();
    for entry in std::fs::read_dir(&policies).unwrap().flatten().take(6) {
        let name = format!("crash-{}", entry.file_name().to_string_lossy());
        let (body, content_type) = multipart(&name, &std::fs::read(entry.path()).unwrap());
        let (s, reply, _) = call("POST", &format!("{}/v1/tenants/crash/documents", server.base), Some(&writer), Some(&body), &content_type);
        assert_eq!(s, 202, "{reply}");
        acked.insert(name);
    }
    server.kill();
    let done_before = indexed_after_kill(&server);
    eprintln!("{} of {} acknowledged uploads were ingested before the kill", done_before, acked.len());
    assert_eq!(uploads(&server, "crash"), acked, "every acknowledged upload is on disk");

    // The restarted server ingests what the kill interrupted, and answers searches meanwhile.
    server.restart();
    let search = format!("{}/v1/tenants/default/search", server.base);
    let deadline = Instant::now() + Duration::from_secs(300);
    let mut searches = 0;
    while indexed(&server, &writer, "crash") != acked {
        assert!(Instant::now() < deadline, "acknowledged uploads not ingested after the restart: {:?}", indexed(&server, &writer, "crash"));
        let (s, body) = post(&search, Some(&reader), &serde_json::json!({ "query": "expense claim deadline", "k": 3 }));
        assert_eq!(s, 200, "searches are answered while the uploads are ingested: {body}");
        searches += 1;
        std::thread::sleep(Duration::from_millis(200));
    }
    eprintln!("{searches} searches answered while the restarted server ingested the interrupted uploads");
    server.kill();
    assert_consistent(&server, "after the resumed ingest");
    assert!(!server.stderr().contains("panicked"), "{}", server.stderr());
}

/// Opens the catalog after a kill: how many of the crash tenant's documents were committed.
fn indexed_after_kill(server: &Server) -> usize {
    let conn = rusqlite::Connection::open(server.data.join("catalog.sqlite")).unwrap();
    conn.query_row(
        "SELECT COUNT(*) FROM documents d JOIN tenants t ON d.tenant_id = t.id WHERE t.name = 'crash'",
        [],
        |r| r.get::<_, i64>(0),
    )
    .unwrap_or(0) as usize
}

/// One raw HTTP/1.1 exchange: the request's bytes as they are, the response read to its end.
/// `None` when the server closed without answering.
fn exchange(addr: &str, request: &[u8]) -> Option<(u16, String, Vec<u8>)> {
    let mut tcp = TcpStream::connect(addr).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    tcp.set_write_timeout(Some(Duration::from_secs(10))).unwrap();
    // The server may answer (401, 413) and stop reading before it all went: the write fails or
    // times out, and the answer is read all the same.
    let _ = tcp.write_all(request);
    let mut raw = Vec::new();
    if let Err(e) = tcp.read_to_end(&mut raw) {
        assert!(
            !matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) || !raw.is_empty(),
            "no answer within 60 s to ({} bytes):\n{}",
            request.len(),
            String::from_utf8_lossy(&request[..request.len().min(3000)]).replace(&"x".repeat(300), "x…x")
        );
    }
    let text = String::from_utf8_lossy(&raw);
    let status: u16 = text.strip_prefix("HTTP/1.1 ")?.get(..3)?.parse().ok()?;
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = String::from_utf8_lossy(&raw[..split]).to_ascii_lowercase();
    let mut body = raw[split + 4..].to_vec();
    if head.contains("transfer-encoding: chunked") {
        body = dechunk(&body);
    } else if let Some(len) = head.lines().find_map(|l| l.strip_prefix("content-length:")).and_then(|v| v.trim().parse::<usize>().ok()) {
        // Only the first response: after answering early (a 401 before the body was read), hyper
        // may read the rest of the body as another request and answer that too.
        body.truncate(len);
    }
    Some((status, head, body))
}

fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(eol) = b.windows(2).position(|w| w == b"\r\n") {
        let Ok(n) = usize::from_str_radix(String::from_utf8_lossy(&b[..eol]).trim(), 16) else { break };
        if n == 0 || b.len() < eol + 2 + n {
            break;
        }
        out.extend_from_slice(&b[eol + 2..eol + 2 + n]);
        b = &b[(eol + 4 + n).min(b.len())..];
    }
    out
}

/// A seeded generator of hostile requests.
struct Requests {
    rng: SeededRng,
    host: String,
    keys: Vec<String>,
}

impl Requests {
    fn pick<'a>(&mut self, items: &'a [&'a str]) -> &'a str {
        items[self.rng.below(items.len())]
    }

    /// A method and a path.
    fn route(&mut self) -> (String, String) {
        let tenant = match self.rng.below(10) {
            0 => "..".to_string(),
            1 => "%2e%2e%2fetc".to_string(),
            2 => "a%00b".to_string(),
            3 => "x".repeat(300),
            4 => "globex".to_string(),
            5 => "DEFAULT".to_string(),
            _ => "default".to_string(),
        };
        let id = self.pick(&["1", "2", "0", "-1", "99999999999999999999", "abc", "1.5", "%20", "3"]).to_string();
        let q = self.pick(&["", "?limit=5", "?limit=-5", "?since_ms=abc", "?tenant=%00&limit=99999999999", "?since_ms=1&since_ms=2", "?x=%zz"]).to_string();
        // Each route with the method it answers, so that most requests get past routing.
        const ROUTES: &[(&str, &str)] = &[
            ("POST", "/v1/tenants/{t}/search"), ("POST", "/v1/tenants/{t}/ask"), ("POST", "/v1/tenants/{t}/chat/sessions"),
            ("GET", "/v1/tenants/{t}/chat/sessions"), ("GET", "/v1/tenants/{t}/chat/sessions/{id}"),
            ("POST", "/v1/tenants/{t}/chat/sessions/{id}/messages"), ("POST", "/v1/tenants/{t}/feedback"),
            ("GET", "/v1/tenants/{t}/documents"), ("POST", "/v1/tenants/{t}/documents"), ("DELETE", "/v1/tenants/{t}/documents/{id}"),
            ("GET", "/v1/tenants/{t}/documents/{id}/text"), ("POST", "/v1/tenants/{t}/documents/{id}/reingest"),
            ("GET", "/v1/tenants/{t}/jobs/{id}"), ("GET", "/v1/admin/audit{q}"), ("GET", "/v1/admin/audit/verify"),
            ("GET", "/v1/admin/doctor"), ("GET", "/v1/admin/keys"), ("POST", "/v1/admin/keys"), ("GET", "/v1/models"),
            ("POST", "/v1/chat/completions"), ("GET", "/v1/tenants"), ("GET", "/web/session"), ("POST", "/web/session"),
            ("DELETE", "/web/session"), ("GET", "/signin?token={id}"), ("GET", "/"), ("GET", "/assets/{id}"), ("GET", "/healthz"),
            ("GET", "/readyz"), ("GET", "/metrics"), ("GET", "/v1/nope/{id}"), ("POST", "/v1/tenants/{t}/search{q}"),
        ];
        let (method, t) = ROUTES[self.rng.below(ROUTES.len())];
        let method = if self.rng.below(4) == 0 { self.pick(&["GET", "POST", "DELETE", "PUT", "PATCH", "HEAD", "OPTIONS"]) } else { method };
        (method.to_string(), t.replace("{t}", &tenant).replace("{id}", &id).replace("{q}", &q))
    }

    fn json_seed(&mut self) -> serde_json::Value {
        let q = "How many days after a trip do I have to submit my expense claim?";
        match self.rng.below(7) {
            0 => serde_json::json!({ "query": q, "k": 3 }),
            1 => serde_json::json!({ "question": q }),
            2 => serde_json::json!({ "answer_id": 1, "rating": "up", "comment": "fine" }),
            3 => serde_json::json!({ "key": "rbx_0000" }),
            4 => serde_json::json!({ "name": "fuzz", "tenant": "globex", "role": "reader" }),
            5 => serde_json::json!({ "model": "ragbox", "messages": [{ "role": "user", "content": q }], "stream": false }),
            _ => serde_json::json!({ "query": q, "explain": true, "no_rerank": true }),
        }
    }

    /// A JSON value with one part replaced by something hostile.
    fn hostile_value(&mut self) -> serde_json::Value {
        match self.rng.below(9) {
            0 => serde_json::Value::Null,
            1 => serde_json::json!(-1),
            2 => serde_json::json!(1e308),
            3 => serde_json::json!("x".repeat(100_000)),
            4 => serde_json::json!([1, "two", null]),
            5 => serde_json::json!({ "nested": { "deeper": [] } }),
            6 => serde_json::json!("\u{0}\u{202e}\u{1F600}'; DROP TABLE answers;--"),
            7 => serde_json::json!(u64::MAX),
            _ => serde_json::json!(""),
        }
    }

    fn body(&mut self) -> Vec<u8> {
        let mut v = self.json_seed();
        match self.rng.below(10) {
            0..=2 => return serde_json::to_vec(&v).unwrap(),
            3 | 4 => {
                let keys: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
                let k = keys[self.rng.below(keys.len())].clone();
                v[k.as_str()] = self.hostile_value();
            }
            5 => {
                v["unknown_field"] = self.hostile_value();
            }
            6 => return format!("{}1{}", "[".repeat(100_000), "]".repeat(100_000)).into_bytes(),
            7 => return vec![0xff, 0xfe, b'{', 0xc3, 0x28, b'}'],
            _ => {}
        }
        let mut bytes = serde_json::to_vec(&v).unwrap();
        // Byte-level damage: flips, a cut, an insertion.
        for _ in 0..self.rng.below(4) {
            let at = self.rng.below(bytes.len().max(1));
            match self.rng.below(3) {
                0 => bytes[at] ^= 1 << self.rng.below(8),
                1 => bytes.truncate(at),
                _ => bytes.insert(at, self.rng.below(256) as u8),
            }
            if bytes.is_empty() {
                break;
            }
        }
        bytes
    }

    fn multipart_body(&mut self) -> (Vec<u8>, String) {
        let name = self.pick(&["notes.md", "../escape.md", ".hidden.md", "a/b.md", "ok.txt", "x.pdf", "nul\u{0}.md", "über.md", ""]).to_string();
        let content: Vec<u8> = match self.rng.below(4) {
            0 => b"# Title\n\nSome text.\n".to_vec(),
            1 => (0..self.rng.below(5000)).map(|_| self.rng.below(256) as u8).collect(),
            2 => b"%PDF-1.4\n1 0 obj<</Length 99999999>>stream\nxx\nendstream\nendobj\n".to_vec(),
            _ => Vec::new(),
        };
        let (mut body, mut content_type) = multipart(&name, &content);
        match self.rng.below(6) {
            0 => content_type = "multipart/form-data".to_string(),
            1 => content_type = "multipart/form-data; boundary=other".to_string(),
            2 => body.truncate(self.rng.below(body.len())),
            3 => body = body.replace_bytes(b"name=\"file\"", b"name=\"nope\""),
            _ => {}
        }
        (body, content_type)
    }

    fn next(&mut self) -> Vec<u8> {
        let (method, path) = self.route();
        let mut headers = vec![format!("Host: {}", self.host), "Connection: close".to_string()];
        match self.rng.below(8) {
            0 => {}
            1 => headers.push("Authorization: Bearer".into()),
            2 => headers.push(format!("Authorization: Bearer rbx_{}", "f".repeat(self.rng.below(3) * 4000))),
            3 => headers.push("Authorization: Basic YWxhZGRpbjpvcGVuc2VzYW1l".into()),
            4 => headers.push(format!("Cookie: ragbox_session={}", "a".repeat(64))),
            _ => {
                let key = self.keys[self.rng.below(self.keys.len())].clone();
                headers.push(format!("Authorization: Bearer {key}"));
            }
        }
        if self.rng.below(4) == 0 {
            headers.push(self.pick(&["Origin: http://evil.example", "Origin: null", "X-Forwarded-For: 1.2.3.4", "Accept: */*"]).to_string());
        }
        let (body, content_type) = if self.rng.below(5) == 0 {
            self.multipart_body()
        } else {
            let ct = self.pick(&["application/json", "application/json", "application/json", "text/plain", "application/json; charset=utf-16", ""]);
            (self.body(), ct.to_string())
        };
        if !content_type.is_empty() {
            headers.push(format!("Content-Type: {content_type}"));
        }
        let mut request = match self.rng.below(20) {
            // Not even HTTP: a broken request line, a header without a colon, a huge header.
            0 => format!("{method} {path}\r\n").into_bytes(),
            1 => format!("{method} {path} HTTP/1.1\r\nHost {}\r\n\r\n", self.host).into_bytes(),
            2 => format!("{method} {path} HTTP/1.1\r\nHost: {}\r\nX-Big: {}\r\n\r\n", self.host, "b".repeat(200_000)).into_bytes(),
            // A body shorter than its Content-Length: the server's body timeout answers.
            3 => format!("{method} {path} HTTP/1.1\r\n{}\r\nContent-Length: {}\r\n\r\n", headers.join("\r\n"), body.len() + 10).into_bytes(),
            _ => format!("{method} {path} HTTP/1.1\r\n{}\r\nContent-Length: {}\r\n\r\n", headers.join("\r\n"), body.len()).into_bytes(),
        };
        request.extend_from_slice(&body);
        request
    }
}

trait ReplaceBytes {
    fn replace_bytes(&self, from: &[u8], to: &[u8]) -> Vec<u8>;
}

impl ReplaceBytes for Vec<u8> {
    fn replace_bytes(&self, from: &[u8], to: &[u8]) -> Vec<u8> {
        match self.windows(from.len()).position(|w| w == from) {
            Some(at) => [&self[..at], to, &self[at + from.len()..]].concat(),
            None => self.clone(),
        }
    }
}

#[test]
fn api_fuzz_answers_every_request_with_a_well_formed_response() {
    let cases: usize = std::env::var("RAGBOX_API_FUZZ_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(2_000);
    let seed: u64 = std::env::var("RAGBOX_API_FUZZ_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(16);
    let server = start_with(FAST);
    let keys = vec![
        create_key(&server, &["--tenant", "default", "--role", "reader", "--name", "fuzz-reader"]),
        create_key(&server, &["--tenant", "globex", "--role", "writer", "--name", "fuzz-writer"]),
        create_key(&server, &["--role", "admin", "--name", "fuzz-admin"]),
    ];
    let addr = host(&server);
    let mut gen = Requests { rng: SeededRng::new(seed), host: addr.clone(), keys };
    let started = Instant::now();
    let (mut answered, mut closed, mut by_status) = (0usize, 0usize, std::collections::BTreeMap::<u16, usize>::new());
    for case in 0..cases {
        let request = gen.next();
        let is_http = request.windows(11).any(|w| w == b" HTTP/1.1\r\n") && request.windows(6).any(|w| w == b"Host: ");
        let Some((status, head, body)) = exchange(&addr, &request) else {
            assert!(!is_http || request.len() > 100_000, "case {case}: no response to an HTTP request:\n{}", String::from_utf8_lossy(&request[..request.len().min(600)]));
            closed += 1;
            continue;
        };
        answered += 1;
        *by_status.entry(status).or_default() += 1;
        assert!(status < 500 || status == 503 || status == 504, "case {case}: {status}\n{}\n{}", String::from_utf8_lossy(&request[..request.len().min(600)]), String::from_utf8_lossy(&body));
        // Every error ragbox itself writes has the one shape (hyper's own 400/431 for a request
        // that is not HTTP have no body).
        if request.starts_with(b"HEAD ") {
            continue; // a response to HEAD has no body
        }
        if status >= 400 && head.contains("content-type: application/json") {
            let v: serde_json::Value = serde_json::from_slice(&body).unwrap_or_else(|e| panic!("case {case}: {status} body is not JSON ({e}): {}", String::from_utf8_lossy(&body)));
            assert!(v["error"]["code"].as_str().is_some_and(|c| !c.is_empty()), "case {case}: {v}");
            assert!(v["error"]["message"].as_str().is_some_and(|m| !m.is_empty()), "case {case}: {v}");
        } else if status >= 400 && !body.is_empty() {
            panic!("case {case}: a {status} that is not JSON: {}", String::from_utf8_lossy(&body));
        }
    }
    eprintln!(
        "{cases} requests (seed {seed}) in {:.0} s: {answered} answered, {closed} closed without an answer (not HTTP), statuses {by_status:?}",
        started.elapsed().as_secs_f64()
    );
    assert_eq!(get(&format!("{}/healthz", server.base), None).0, 200, "the server is still up");
    assert!(!server.stderr().contains("panicked"), "{}", server.stderr());
    let (code, out, err) = cli(&server, &["audit", "verify"]);
    assert_eq!(code, 0, "{out}\n{err}");
}
