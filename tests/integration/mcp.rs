//! The MCP server through a real client: the protocol's official Python SDK (`mcp` 2.3.0, in a
//! venv made by scripts/setup/mcp-client-venv.sh), over streamable HTTP at `ragbox serve`'s
//! `/mcp` and over stdio (`ragbox mcp`, started by the client), against the access test's corpus
//! (an HR folder closed to `hr`, a legal folder closed to `legal`) with the real models. Checked:
//! the four tools are listed; `search`, `ask`, `list_documents` and `get_passage` answer as the
//! caller may read (an `hr` key gets the salary bands and nothing of the legal matter, not even
//! by passage id), and so do the document resources (listed and read); a key of another tenant sees nothing of this one; no key is a 401; a malformed
//! request is a JSON-RPC error and the server keeps serving; the calls are audited.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{json, Value};

use crate::access::{audit_of, corpus, ingest, no_legal, HR_QUESTION, LEGAL_QUESTION};
use crate::common::{models_dir, ragbox, run};
use crate::server::{create_key, spawn};

/// The venv's python with the MCP SDK (`MCP_PYTHON`, as scripts/test.sh exports it, else made now).
fn python() -> PathBuf {
    if let Some(p) = std::env::var_os("MCP_PYTHON") {
        return PathBuf::from(p);
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/setup/mcp-client-venv.sh");
    let out = Command::new("bash").arg(script).output().unwrap();
    assert!(out.status.success(), "the MCP client's venv: {}", String::from_utf8_lossy(&out.stderr));
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

/// Runs the client with `calls` ([tool, arguments] pairs) and `args` (its mode and target).
pub(crate) fn client(calls: &Value, args: &[&str], env: &[(&str, &str)]) -> Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/mcp/client.py");
    let mut cmd = Command::new(python());
    cmd.arg(script).arg(args[0]).arg(calls.to_string()).args(&args[1..]);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "the MCP client failed:\n{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)))
}

/// The checks every transport passes for an `hr` key: (the client's output, the legal passage id).
fn hr_checks(out: &Value, legal_passage: u64, own_document: u64) {
    assert_eq!(out["server"], "ragbox");
    assert_eq!(out["tools"], json!(["search", "ask", "list_documents", "get_passage"]));
    let calls = out["calls"].as_array().unwrap();
    let text = out.to_string();
    no_legal("MCP", &text);
    // search: the salary bands first, with their passage, document, section and span.
    assert!(!calls[0]["is_error"].as_bool().unwrap());
    let first = &calls[0]["structured"]["hits"][0];
    assert!(first["path"].as_str().unwrap().ends_with("salary-bands.md") && first["text"].as_str().unwrap().contains("71,400"), "{first}");
    assert!(first["passage"].as_u64().is_some() && first["lines"]["first"].as_u64().is_some());
    // ask: the answer, cited, from the salary bands.
    let answer = &calls[1]["structured"]["answer"];
    assert!(answer["answer"].as_str().unwrap().contains("71,400"), "{answer}");
    // list_documents: the open ones and hr's.
    let docs: Vec<&str> = calls[2]["structured"]["documents"].as_array().unwrap().iter().map(|d| d["path"].as_str().unwrap()).collect();
    assert!(docs.iter().any(|p| p.ends_with("salary-bands.md")) && !docs.iter().any(|p| p.ends_with("zephyr-matter.md")), "{docs:?}");
    // get_passage: its own search hit, yes; the legal passage's id, not found (like any unknown id).
    assert_eq!(calls[3]["structured"]["passage"]["id"], first["passage"]);
    assert!(calls[4]["is_error"].as_bool().unwrap() && calls[4]["text"].as_str().unwrap().contains(&format!("no passage {legal_passage}")), "{}", calls[4]);
    // resources/list: the same documents as list_documents, as ragbox:// URIs, and the template.
    let listed = &calls[6]["structured"];
    let uris: Vec<&str> = listed["resources"].as_array().unwrap().iter().map(|r| r["uri"].as_str().unwrap()).collect();
    assert_eq!(uris.len(), docs.len(), "{listed}");
    assert!(uris.contains(&format!("ragbox://default/documents/{own_document}").as_str()), "{uris:?}");
    assert_eq!(listed["templates"], json!(["ragbox://{tenant}/documents/{id}"]));
    // resources/read: the salary bands' text; the legal matter reads as not found (-32002), as
    // does a URI that names no document (-32602).
    let contents = &calls[7]["structured"]["contents"][0];
    assert!(contents["text"].as_str().unwrap().contains("71,400") && contents["mimeType"] == "text/plain", "{contents}");
    assert!(contents["_meta"]["path"].as_str().unwrap().ends_with("salary-bands.md"), "{contents}");
    assert!(calls[8]["is_error"].as_bool().unwrap() && calls[8]["code"] == -32002, "{}", calls[8]);
    assert!(calls[9]["is_error"].as_bool().unwrap() && calls[9]["code"] == -32602, "{}", calls[9]);
}

#[test]
fn mcp_tools_through_the_official_client_over_both_transports() {
    let dir = tempfile::tempdir().unwrap().keep();
    let corpus = corpus(&dir);
    let config = dir.join("server.toml");
    std::fs::write(&config, "[access]\nrules = [{ path = \"**/legal/**\", groups = [\"legal\"] }]\n").unwrap();
    let data = dir.join("data");
    ingest(&data, &config, &corpus);
    // The legal passage's id, as the command line (which reads everything) finds it.
    let (code, out, err) = run(ragbox(&data).arg("--config").arg(&config).args(["search", "--json", "-k", "1", LEGAL_QUESTION]));
    assert_eq!(code, 0, "{err}");
    let found: Value = serde_json::from_str(out.trim()).unwrap();
    assert!(found["retrieval"]["hits"][0]["chunk"]["path"].as_str().unwrap().ends_with("zephyr-matter.md"));
    let legal_passage = found["retrieval"]["hits"][0]["chunk"]["id"].as_u64().unwrap();
    let legal_document = found["retrieval"]["hits"][0]["chunk"]["doc"].as_u64().unwrap();

    let server = spawn(data.clone(), config.clone());
    let b = server.base.clone();
    let hr = create_key(&server, &["--tenant", "default", "--name", "hr-assistant", "--groups", "hr"]);
    let other = create_key(&server, &["--tenant", "globex", "--name", "globex-assistant"]);
    // The client's first search hit is asked for again by id in the fourth call: run the search
    // once to learn it (the client takes its calls up front).
    let calls = |passage: u64, document: u64| {
        json!([
            ["search", { "query": HR_QUESTION, "k": 5 }],
            ["ask", { "question": HR_QUESTION }],
            ["list_documents", {}],
            ["get_passage", { "id": passage }],
            ["get_passage", { "id": legal_passage }],
            ["search", { "query": LEGAL_QUESTION, "k": 10 }],
            ["resources/list", {}],
            ["resources/read", { "uri": format!("ragbox://default/documents/{document}") }],
            ["resources/read", { "uri": format!("ragbox://default/documents/{legal_document}") }],
            ["resources/read", { "uri": "ragbox://default/passages/1" }],
        ])
    };
    let probe = client(&json!([["search", { "query": HR_QUESTION, "k": 5 }]]), &["http", &format!("{b}/mcp"), &hr], &[]);
    let own = probe["calls"][0]["structured"]["hits"][0]["passage"].as_u64().unwrap();
    let own_document = probe["calls"][0]["structured"]["hits"][0]["document"].as_u64().unwrap();

    // Streamable HTTP, with the hr key.
    let http = client(&calls(own, own_document), &["http", &format!("{b}/mcp"), &hr], &[]);
    assert!(http["protocol"].as_str().is_some_and(|p| !p.is_empty()));
    hr_checks(&http, legal_passage, own_document);

    // stdio: the client starts `ragbox mcp` itself, acting as the hr key.
    let bin = env!("CARGO_BIN_EXE_ragbox");
    let stdio = client(
        &calls(own, own_document),
        &["stdio", bin, "--config", config.to_str().unwrap(), "mcp"],
        &[("RAGBOX_DATA_DIR", data.to_str().unwrap()), ("RAGBOX_MODELS_DIR", models_dir().to_str().unwrap()), ("RAGBOX_KEY", &hr)],
    );
    hr_checks(&stdio, legal_passage, own_document);

    // A key of another tenant: the default tenant reads as unknown, nothing of it comes back.
    let theirs = client(
        &json!([
            ["list_documents", { "tenant": "default" }],
            ["search", { "query": HR_QUESTION, "tenant": "default" }],
            ["resources/read", { "uri": format!("ragbox://default/documents/{own_document}") }],
        ]),
        &["http", &format!("{b}/mcp"), &other],
        &[],
    );
    let mine = client(&json!([["resources/list", {}]]), &["http", &format!("{b}/mcp"), &other], &[]);
    assert_eq!(mine["calls"][0]["structured"]["resources"], json!([]), "their own tenant has no documents");
    for call in theirs["calls"].as_array().unwrap() {
        assert!(call["is_error"].as_bool().unwrap(), "{call}");
        assert!(call["text"].as_str().unwrap().contains("tenant") && !call.to_string().contains("salary"), "{call}");
    }

    // No key: refused before the protocol. A malformed body: a JSON-RPC error; the server serves on.
    let no_key = ureq::post(&format!("{b}/mcp")).set("Content-Type", "application/json").send_string("{}");
    assert!(matches!(no_key, Err(ureq::Error::Status(401, _))), "{no_key:?}");
    let bad = ureq::post(&format!("{b}/mcp"))
        .set("Authorization", &format!("Bearer {hr}"))
        .set("Content-Type", "application/json")
        .set("Accept", "application/json, text/event-stream")
        .send_string("{\"jsonrpc\": \"2.0\", \"id\": 1, \"method\": ");
    let (status, body) = match bad {
        Ok(r) | Err(ureq::Error::Status(_, r)) => (r.status(), r.into_string().unwrap()),
        Err(e) => panic!("{e}"),
    };
    assert!((400..500).contains(&status), "{status} {body}");
    let again = client(&json!([["list_documents", {}]]), &["http", &format!("{b}/mcp"), &hr], &[]);
    assert!(!again["calls"][0]["is_error"].as_bool().unwrap(), "the server still serves");

    // Audited as over HTTP: the key, its groups, the passages served.
    let rows = audit_of(&data, &config, "hr-assistant");
    assert!(rows.iter().filter(|r| r["action"] == "search").count() >= 3, "{rows:?}");
    assert!(rows.iter().any(|r| r["action"] == "read_passage" && r["chunk_ids"] == json!([own])), "{rows:?}");
    assert!(rows.iter().any(|r| r["action"] == "read_document" && r["detail"]["document"] == json!(own_document)), "{rows:?}");
    assert!(rows.iter().all(|r| r["detail"]["who"]["groups"] == json!(["hr"])));
}
