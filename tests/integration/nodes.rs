//! Several ragbox nodes over one shared backend (catalog on PostgreSQL, vectors on Milvus, BM25
//! on PostgreSQL), each node a real `ragbox` process with a data folder of its own: an upload on
//! one node is searchable and answerable on the other after its commit; keys and the audit chain
//! are the same from every node; a node SIGKILLed mid-ingest loses nothing acknowledged, its
//! tenant lock dies with it, and another node finishes the job.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ragbox_core::store::shared::{MilvusVectors, Postgres, PostgresLexical};
use ragbox_core::store::{Backends, DocumentStatus, Store};

use crate::common::{notices, ragbox, run};
use crate::server::{call, create_key, events, get, multipart, post, spawn, wait_for_job, HANDBOOK};
use crate::shared_servers::shared;

/// A configuration that puts everything on the shared servers, the catalog in database `db`
/// and the collections under the prefix `db`.
fn shared_config(dir: &Path, db: &str, extra: &str) -> (PathBuf, String) {
    let servers = shared();
    let url = servers.pg.database(db);
    let config = dir.join("shared.toml");
    std::fs::write(
        &config,
        format!(
            "[store]\nbackend = \"shared\"\n[store.shared]\npostgres = \"{url}\"\nmilvus = \"{}\"\ncollection_prefix = \"{db}\"\n{extra}",
            servers.milvus_url
        ),
    )
    .unwrap();
    (config, url)
}

/// The shared store as a third party sees it, for the checks.
fn open_shared(url: &str, prefix: &str, data: &Path) -> Store {
    let pg = Arc::new(Postgres::connect(url).unwrap());
    let backends = Backends {
        vectors: Box::new(MilvusVectors::connect(&shared().milvus_url, None, prefix).unwrap()),
        lexical: Box::new(PostgresLexical::open(pg.clone()).unwrap()),
        catalog: Some(pg),
    };
    Store::open_with(data, backends).unwrap()
}

#[test]
fn an_upload_on_one_node_is_answered_on_the_other_with_one_set_of_keys_and_one_audit_chain() {
    let _gate = shared().gate.read().unwrap_or_else(|p| p.into_inner());
    let tmp = tempfile::tempdir().unwrap();
    let (config, url) = shared_config(tmp.path(), "nodes_two", "");
    let a = spawn(tmp.path().join("node-a"), config.clone());
    let b = spawn(tmp.path().join("node-b"), config.clone());

    // A key made on node A's command line signs in on node B.
    let writer = create_key(&a, &["--tenant", "globex", "--role", "writer", "--name", "bob"]);
    let (s, j) = get(&format!("{}/v1/tenants", b.base), Some(&writer));
    assert_eq!(s, 200, "node B knows node A's key: {j}");

    // Upload on A; once A's job is done, B searches and answers from it.
    let (body, ct) = multipart("handbook.md", HANDBOOK.as_bytes());
    let (s, j, _) = call("POST", &format!("{}/v1/tenants/globex/documents", a.base), Some(&writer), Some(&body), &ct);
    assert_eq!(s, 202, "{j}");
    let job = j["job"]["id"].as_u64().unwrap();
    wait_for_job(&a.base, "globex", job, &writer, Duration::from_secs(120));
    let question = "Where do new starters collect their visitor badge?";
    let (s, j) = post(&format!("{}/v1/tenants/globex/search", b.base), Some(&writer), &serde_json::json!({ "query": question }));
    assert_eq!(s, 200, "{j}");
    assert!(j["retrieval"]["hits"][0]["chunk"]["text"].as_str().unwrap().contains("GX-7741"), "node B finds node A's upload: {j}");
    let evs = events(&format!("{}/v1/tenants/globex/ask", b.base), &writer, &serde_json::json!({ "question": question }));
    let answer = &evs.last().unwrap().1;
    assert_eq!(answer["refused"], false, "node B answers from node A's upload: {answer:#}");
    assert!(answer["answer"].as_str().unwrap().contains("Zanzibar"), "{answer:#}");
    assert!(!answer["citations"].as_array().unwrap().is_empty(), "{answer:#}");
    // The answer B logged is rated on A.
    let (s, j) = post(&format!("{}/v1/tenants/globex/feedback", a.base), Some(&writer), &serde_json::json!({ "answer_id": answer["answer_id"], "rating": "up" }));
    assert_eq!(s, 201, "node A rates node B's answer: {j}");

    // One audit chain, written by both nodes, intact.
    let (code, out, err) = run(ragbox(&b.data).arg("--config").arg(&config).args(["audit", "verify"]));
    assert_eq!(code, 0, "{out}{err}");
    let admin = create_key(&b, &["--role", "admin", "--name", "root"]);
    let (s, j) = get(&format!("{}/v1/admin/audit?limit=500", a.base), Some(&admin));
    assert_eq!(s, 200, "{j}");
    let actions: BTreeSet<String> = j["events"].as_array().unwrap().iter().map(|e| e["action"].as_str().unwrap().to_string()).collect();
    for want in ["key_create", "upload", "search", "ask", "feedback"] {
        assert!(actions.contains(want), "{want} in the shared chain: {actions:?}");
    }

    // Revoked on B's command line, refused by A at once.
    let (code, out, err) = run(ragbox(&b.data).arg("--config").arg(&config).args(["keys", "list", "--json"]));
    assert_eq!(code, 0, "{err}");
    let id = serde_json::from_str::<serde_json::Value>(&out).unwrap()[0]["id"].as_i64().unwrap_or_else(|| panic!("{out}"));
    let (code, _, err) = run(ragbox(&b.data).arg("--config").arg(&config).args(["keys", "revoke", &id.to_string()]));
    assert_eq!(code, 0, "{err}");
    let (s, _) = get(&format!("{}/v1/tenants", a.base), Some(&writer));
    assert_eq!(s, 401, "a key revoked on one node is refused by the other");

    // Nothing of this is in either node's data folder: no catalog file, no index files.
    for node in [&a.data, &b.data] {
        assert!(!node.join("catalog.sqlite").exists(), "{node:?}");
    }
    let store = open_shared(&url, "nodes_two", &tmp.path().join("checker"));
    let t = store.catalog().require_tenant("globex").unwrap();
    assert!(store.check_consistency(&t).unwrap().consistent);
}

#[test]
fn a_node_killed_mid_ingest_loses_nothing_acknowledged_and_another_node_finishes() {
    let _gate = shared().gate.read().unwrap_or_else(|p| p.into_inner());
    let tmp = tempfile::tempdir().unwrap();
    let (config, url) = shared_config(tmp.path(), "nodes_kill", "[ingest]\ncommit_chunks = 6\n");
    let corpus = tmp.path().join("notices");
    notices(&corpus, 240);

    // Node A ingests; it is SIGKILLed as soon as it acknowledges its first commit.
    let mut a = ragbox(&tmp.path().join("node-a"))
        .arg("--config")
        .arg(&config)
        .args(["ingest", "-v"])
        .arg(&corpus)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut acked = BTreeSet::new();
    let mut seen = String::new();
    for line in BufReader::new(a.stderr.take().unwrap()).lines() {
        let line = line.unwrap();
        seen.push_str(&line);
        seen.push('\n');
        // The line comes after the commit it reports: the batch is acknowledged, the rest not.
        if let Some(path) = line.strip_prefix("committed added ") {
            acked.insert(PathBuf::from(path));
            break;
        }
    }
    a.kill().unwrap();
    a.wait().unwrap();
    assert!(!acked.is_empty() && acked.len() < 240, "killed mid-ingest: {seen}");

    // What A acknowledged is there, and nothing half-written is served.
    let checker = tmp.path().join("checker");
    let indexed = |store: &Store| -> BTreeSet<PathBuf> {
        let t = store.catalog().require_tenant("default").unwrap();
        store.catalog().documents(t.id).unwrap().into_iter().filter(|d| d.status == DocumentStatus::Indexed).map(|d| d.path).collect()
    };
    {
        let store = open_shared(&url, "nodes_kill", &checker);
        let present = indexed(&store);
        assert!(acked.is_subset(&present), "acknowledged but lost: {:?}", acked.difference(&present));
    }

    // Node B runs the same job: A's lock died with A (no wait), and B finishes it.
    let started = Instant::now();
    let (code, out, err) = run(ragbox(&tmp.path().join("node-b")).arg("--config").arg(&config).arg("ingest").arg(&corpus));
    assert_eq!(code, 0, "{out}{err}");
    let store = open_shared(&url, "nodes_kill", &checker);
    assert_eq!(indexed(&store).len(), 240, "{out}");
    let t = store.catalog().require_tenant("default").unwrap();
    let c = store.check_consistency(&t).unwrap();
    assert!(c.consistent && c.catalog_children >= 240, "{c:?}");
    let hits = store.reader(&t).unwrap().lexical.search("badge number 1007", 3).unwrap();
    let rows = store.catalog().chunks(t.id, &[hits[0].0]).unwrap();
    assert!(rows[0].text.contains("1007"), "{rows:?}");
    assert!(started.elapsed() < Duration::from_secs(600));
}

#[test]
fn two_nodes_give_a_key_its_quota_once() {
    let _gate = shared().gate.read().unwrap_or_else(|p| p.into_inner());
    let tmp = tempfile::tempdir().unwrap();
    let (config, _) = shared_config(tmp.path(), "nodes_quota", "[[quotas]]\ngroup = \"*\"\nquestions_per_minute = 3\n");
    let a = spawn(tmp.path().join("node-a"), config.clone());
    let b = spawn(tmp.path().join("node-b"), config.clone());
    let key = create_key(&a, &["--tenant", "initech", "--name", "counted"]);
    let search = |node: &crate::server::Server| {
        let (s, j, retry) = call("POST", &format!("{}/v1/tenants/initech/search", node.base), Some(&key), Some(br#"{"query": "badge"}"#), "application/json");
        (s, j, retry)
    };
    // Three questions a minute in all: two on A, one on B, and the fourth, on either, is refused.
    for node in [&a, &b, &a] {
        let (s, j, _) = search(node);
        assert_ne!(s, 429, "within the quota: {j}");
    }
    for node in [&b, &a] {
        let (s, j, retry) = search(node);
        assert_eq!(s, 429, "the quota is counted across both nodes: {j}");
        assert!(retry.is_some_and(|r| r.parse::<u64>().is_ok_and(|s| (1..=60).contains(&s))), "Retry-After in seconds");
        assert_eq!(j["error"]["code"], "quota_exceeded", "{j}");
    }
}
