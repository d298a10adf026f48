//! What ragbox keeps, end to end over the real binary, server and models: two keys ask through
//! `ragbox serve`; each exports its own conversations and only those, an admin exports either or
//! both (the admin route refuses a reader); `ragbox retention` with a hold on one key deletes
//! the other's questions, answers, sessions and feedback, leaves none of their text in the
//! catalog's files (searched byte for byte), keeps the audit chain verifiable, and once the hold
//! is released deletes the rest.

use std::path::Path;

use crate::common::{ragbox, run};
use crate::server::{call, cli, create_key, events, get, post, spawn, start_with};


/// The catalog file and its write-ahead log, as bytes.
fn catalog_bytes(data: &Path) -> Vec<u8> {
    let mut bytes = std::fs::read(data.join("catalog.sqlite")).unwrap();
    bytes.extend(std::fs::read(data.join("catalog.sqlite-wal")).unwrap_or_default());
    bytes
}

fn contains(bytes: &[u8], text: &str) -> bool {
    bytes.windows(text.len()).any(|w| w == text.as_bytes())
}

/// The records of a JSON-lines export.
fn records(text: &str) -> Vec<serde_json::Value> {
    text.lines().filter(|l| !l.trim().is_empty()).map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}"))).collect()
}

fn questions(records: &[serde_json::Value]) -> Vec<String> {
    let mut q: Vec<String> = records.iter().filter(|r| r["type"] == "answer").map(|r| r["question"].as_str().unwrap().to_string()).collect();
    q.sort();
    q
}

/// `GET url` as `key`: status and body text.
fn download(url: &str, key: &str) -> (u16, String, Option<String>) {
    match ureq::get(url).set("Authorization", &format!("Bearer {key}")).call() {
        Ok(r) => {
            let kind = r.header("Content-Type").map(str::to_string);
            (r.status(), r.into_string().unwrap(), kind)
        }
        Err(ureq::Error::Status(s, r)) => (s, r.into_string().unwrap(), None),
        Err(e) => panic!("{url}: {e}"),
    }
}

#[test]
fn conversations_are_exported_to_their_owner_and_deleted_past_retention_except_under_hold() {
    let mut server = start_with("[answer]\npassages = 3\n");
    let b = server.base.clone();
    let kestrel = create_key(&server, &["--tenant", "default", "--name", "kestrel-desk"]);
    let osprey = create_key(&server, &["--tenant", "default", "--name", "osprey-desk"]);
    let admin = create_key(&server, &["--name", "officer", "--role", "admin"]);
    let kestrel_q = "How many days after a trip do I have to submit my expense claim? (KESTREL-7)";
    let osprey_q = "Who approves travel? (OSPREY-9)";
    for (key, q) in [(&kestrel, kestrel_q), (&osprey, osprey_q)] {
        let asked = events(&format!("{b}/v1/tenants/default/ask"), key, &serde_json::json!({ "question": q }));
        let answer = asked.iter().find(|(n, _)| n == "answer").unwrap_or_else(|| panic!("{asked:?}"));
        let id = answer.1["answer_id"].as_i64().unwrap();
        let (s, j) = post(&format!("{b}/v1/tenants/default/feedback"), Some(key), &serde_json::json!({ "answer_id": id, "rating": "up", "comment": format!("{q} helped") }));
        assert_eq!(s, 201, "{j}");
    }
    let (s, j) = post(&format!("{b}/v1/tenants/default/chat/sessions"), Some(&osprey), &serde_json::json!({}));
    assert_eq!(s, 201, "{j}");
    let session = j["session"].as_i64().unwrap();
    let turn = events(&format!("{b}/v1/tenants/default/chat/sessions/{session}/messages"), &osprey, &serde_json::json!({ "question": "Is a hotel in London covered? (OSPREY-9)" }));
    assert!(turn.iter().any(|(n, _)| n == "answer"), "{turn:?}");

    // Each key exports its own, as JSON lines to download.
    let (s, mine, kind) = download(&format!("{b}/v1/tenants/default/export"), &kestrel);
    assert_eq!((s, kind.as_deref()), (200, Some("application/x-ndjson")), "{mine}");
    let mine = records(&mine);
    assert_eq!(mine[0]["type"], "export");
    assert_eq!(questions(&mine), [kestrel_q]);
    let answer = mine.iter().find(|r| r["type"] == "answer").unwrap();
    assert!(answer["sources"].as_array().is_some_and(|s| !s.is_empty() && s[0]["path"].as_str().is_some_and(|p| p.ends_with(".md"))), "{answer}");
    assert_eq!(answer["feedback"][0]["comment"], format!("{kestrel_q} helped"));
    let (_, theirs, _) = download(&format!("{b}/v1/tenants/default/export"), &osprey);
    let theirs = records(&theirs);
    assert_eq!(questions(&theirs), ["Is a hotel in London covered? (OSPREY-9)", osprey_q]);
    assert_eq!(theirs.iter().filter(|r| r["type"] == "session").count(), 1, "the chat session and its turn");
    assert!(!theirs.iter().any(|r| r.to_string().contains("KESTREL")), "nothing of another key's");

    // The admin route: a reader is refused; an admin exports everyone's, or one key's by name.
    let (s, j) = get(&format!("{b}/v1/admin/export?tenant=default"), Some(&kestrel));
    assert_eq!(s, 403, "{j}");
    let (s, _, _) = call("GET", &format!("{b}/v1/tenants/default/export?person=osprey-desk"), Some(&kestrel), None, "");
    assert_eq!(s, 400, "the person's route exports only the caller's own");
    let (s, all, _) = download(&format!("{b}/v1/admin/export?tenant=default"), &admin);
    assert_eq!(s, 200, "{all}");
    // Everyone's: these three and whatever the copied sample data folder held before.
    let all = records(&all);
    let everyone = questions(&all);
    assert!([kestrel_q, osprey_q, "Is a hotel in London covered? (OSPREY-9)"].iter().all(|q| everyone.iter().any(|e| e == q)), "{everyone:?}");
    let (all_answers, all_sessions) = (everyone.len(), all.iter().filter(|r| r["type"] == "session").count());
    let (_, one, _) = download(&format!("{b}/v1/admin/export?tenant=default&person=kestrel-desk"), &admin);
    assert_eq!(questions(&records(&one)), [kestrel_q]);

    // The command line exports the same, to a file.
    let out = server.data.with_file_name("export.jsonl");
    let (code, _, err) = cli(&server, &["export", "--tenant", "default", "--person", "osprey-desk", "--out", out.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(questions(&records(&std::fs::read_to_string(&out).unwrap())).len(), 2);
    assert!(err.contains("exported 1 sessions (1 turns) and 2 answers (1 feedback)"), "{err}");

    // A hold on kestrel's key, then retention at 0 days (keep nothing past the run).
    let (code, out, err) = cli(&server, &["retention", "hold", "--tenant", "default", "--person", "kestrel-desk", "--reason", "request 42"]);
    assert_eq!(code, 0, "{out}{err}");
    server.kill();
    let data = server.data.clone();
    let config = data.with_file_name("retention.toml");
    std::fs::write(&config, "[retention]\ndays = 0\n").unwrap();
    assert!(contains(&catalog_bytes(&data), "OSPREY-9"), "the catalog holds the questions before the run");
    let retention = |args: &[&str]| {
        let (code, out, err) = run(ragbox(&data).arg("--config").arg(&config).arg("retention").args(args));
        assert_eq!(code, 0, "{out}\n{err}");
        out
    };
    let status = retention(&["status"]);
    assert!(status.contains("default: keeps 0 days") && status.contains("request 42"), "{status}");
    let report: serde_json::Value = serde_json::from_str(retention(&["run", "--json"]).trim()).unwrap();
    let tenant = &report["tenants"][0];
    // Everything but the held key's one answer (it has no session).
    assert_eq!((tenant["answers"].as_u64(), tenant["sessions"].as_u64()), (Some(all_answers as u64 - 1), Some(all_sessions as u64)), "{report}");
    assert!(tenant["events_blanked"].as_u64().unwrap() >= 3, "{report}");
    assert_eq!(report["reclaimed"]["how"], "vacuum");
    let bytes = catalog_bytes(&data);
    assert!(!contains(&bytes, "OSPREY-9"), "no text of the deleted rows is left in the catalog's files");
    assert!(contains(&bytes, "KESTREL-7"), "the held key's rows stay");
    let (code, out, _) = run(ragbox(&data).args(["audit", "verify", "--json"]));
    assert_eq!(code, 0, "{out}");
    let chain: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert!(chain["broken"].is_null() && chain["redacted"].as_u64().unwrap() >= 3, "{chain}");

    // Released, the next run deletes the rest.
    let holds: serde_json::Value = serde_json::from_str(retention(&["status", "--json"]).trim()).unwrap();
    let hold = holds[0]["holds"][0]["id"].as_i64().unwrap().to_string();
    retention(&["release", &hold]);
    retention(&["run"]);
    assert!(!contains(&catalog_bytes(&data), "KESTREL-7"));
    let (code, out, _) = run(ragbox(&data).args(["audit", "verify"]));
    assert_eq!(code, 0, "{out}");

    // `serve` runs retention as it starts (then daily): a question asked before it starts is
    // gone, text and all, once it is up.
    let (code, out, err) = run(ragbox(&data).args(["ask", "Who approves travel? (HERON-3)"]));
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(contains(&catalog_bytes(&data), "HERON-3"));
    let served = spawn(data.clone(), config.clone());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while contains(&catalog_bytes(&data), "HERON-3") {
        assert!(std::time::Instant::now() < deadline, "serve did not run retention at start: {}", served.stderr());
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    assert!(served.stderr().contains("deleting conversations past their retention period"), "{}", served.stderr());
}
