//! Who reads what, end to end: a copy of the sample corpus with an HR folder (closed by a
//! `.ragbox-access` file) and a legal folder (closed by an `[[access.rules]]` glob), ingested by
//! the real binary with the real models, served by `ragbox serve`, signed into by keys with groups
//! and by people of a real LDAP directory (Debian's slapd, started here on loopback).
//!
//! The leak checks: an asker outside `legal` asks about the legal document through every face
//! (search with `explain`, ask, chat and its memory, the OpenAI-compatible route, the documents
//! list and text, the page's sign-in) and no passage, title, path or count of it comes back;
//! its answer is what it gets once the document is gone. A `legal` key finds it (the filter is
//! not hiding everything), a filtered top k stays full, a rule change takes effect on the next
//! ingest with nothing re-embedded, quotas answer 429 with Retry-After and are audited, and the
//! audit names the person (subject, issuer) or key and the groups that granted access.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::common::{copy_tree, ragbox, run};
use crate::ingest::sample_corpus;
use crate::server::{create_key, events, get, post, spawn, Server};

/// The legal document's words that must never reach an asker outside `legal` (its path, its
/// title's slug and the facts in it; the question itself names "Zephyr", so that word may come
/// back in a question's echo).
const LEGAL_MARKERS: &[&str] = &["zephyr-matter", "2.4 million", "Quillfeather", "outside counsel"];
pub(crate) const LEGAL_QUESTION: &str = "What was the Zephyr matter settled for, and who handles it?";
pub(crate) const HR_QUESTION: &str = "What is the salary band for grade 7 engineers?";

pub(crate) fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// The sample corpus plus `hr/` (a permissions file: `hr`) and `legal/` (a rule: `legal`).
pub(crate) fn corpus(dir: &Path) -> PathBuf {
    let corpus = dir.join("corpus");
    copy_tree(&sample_corpus(), &corpus);
    std::fs::create_dir_all(corpus.join("hr")).unwrap();
    std::fs::write(corpus.join("hr/.ragbox-access"), "groups = [\"hr\"]\n").unwrap();
    std::fs::write(
        corpus.join("hr/salary-bands.md"),
        "# Salary bands\n\nThe salary band for grade 7 engineers runs from 71,400 to 84,900 euros a year. \
         Bands are reviewed every April by the compensation committee.\n",
    )
    .unwrap();
    std::fs::create_dir_all(corpus.join("legal")).unwrap();
    std::fs::write(
        corpus.join("legal/zephyr-matter.md"),
        "# Zephyr matter\n\nThe Zephyr matter was settled for 2.4 million euros in March. The settlement is \
         confidential and is handled by outside counsel Quillfeather & Okafor.\n",
    )
    .unwrap();
    corpus
}

/// A slapd of the test directory on a free loopback port, stopped on drop.
struct Directory {
    dir: tempfile::TempDir,
    url: String,
}

impl Drop for Directory {
    fn drop(&mut self) {
        if let Ok(pid) = std::fs::read_to_string(self.dir.path().join("slapd.pid")) {
            unsafe { libc::kill(pid.trim().parse().unwrap_or(0), libc::SIGTERM) };
        }
    }
}

fn directory() -> Directory {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/sso/ldap-launch.sh");
    let out = Command::new("bash").arg(script).arg(dir.path()).arg(port.to_string()).output().unwrap();
    assert!(
        out.status.success(),
        "slapd did not start (scripts/setup/ldap-server.sh installs it):\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let password = dir.path().join("service-password");
    std::fs::write(&password, "service-pw").unwrap();
    Directory { url: format!("ldap://127.0.0.1:{port}"), dir }
}

/// The configuration: the legal rule, everyone who signs in reads `default`, the directory,
/// and a quota for the `limited` group.
fn config(dir: &Path, ldap: &Directory) -> PathBuf {
    let toml = format!(
        "[answer]\npassages = 3\n\
         [access]\nrules = [{{ path = \"**/legal/**\", groups = [\"legal\"] }}]\n\
         [[sso.groups]]\ngroup = \"*\"\ntenant = \"default\"\nrole = \"reader\"\n\
         [sso.ldap]\nurl = \"{}\"\nbind_dn = \"cn=ragbox,ou=services,dc=ragbox,dc=test\"\nbind_password_file = \"{}\"\n\
         user_base = \"ou=people,dc=ragbox,dc=test\"\ngroup_base = \"ou=groups,dc=ragbox,dc=test\"\nallow_hosts = [\"127.0.0.1\"]\n\
         [[quotas]]\ngroup = \"limited\"\nquestions_per_minute = 2\nuploads_per_day = 1\n\
         [server]\nauth_failures_per_minute = 50\n",
        ldap.url,
        ldap.dir.path().join("service-password").display()
    );
    let path = dir.join("server.toml");
    std::fs::write(&path, toml).unwrap();
    path
}

pub(crate) fn ingest(data: &Path, config: &Path, corpus: &Path) -> serde_json::Value {
    let (code, out, err) = run(ragbox(data).arg("--config").arg(config).arg("ingest").arg(corpus).arg("--json"));
    assert_eq!(code, 0, "{out}\n{err}");
    serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{out}: {e}"))
}

/// Panics if `body` (a whole response) holds anything of the legal document.
pub(crate) fn no_legal(face: &str, body: &str) {
    for m in LEGAL_MARKERS {
        assert!(!body.contains(m), "{face} leaked `{m}` to an asker outside `legal`:\n{body}");
    }
}

/// The documents a key sees, by file name.
fn documents(server: &Server, key: &str) -> Vec<String> {
    let (s, j) = get(&format!("{}/v1/tenants/default/documents", server.base), Some(key));
    assert_eq!(s, 200, "{j}");
    j["documents"].as_array().unwrap().iter().map(|d| d["path"].as_str().unwrap().rsplit('/').next().unwrap().to_string()).collect()
}

/// A request with the page's session cookie (and its own origin, as the page sends).
pub(crate) fn with_cookie(method: &str, url: &str, base: &str, cookie: &str, body: Option<&serde_json::Value>) -> (u16, String) {
    let req = ureq::request(method, url).timeout(Duration::from_secs(300)).set("Cookie", cookie).set("Origin", base);
    let resp = match body {
        Some(b) => req.set("Content-Type", "application/json").send_string(&b.to_string()),
        None => req.call(),
    };
    match resp {
        Ok(r) | Err(ureq::Error::Status(_, r)) => (r.status(), r.into_string().unwrap()),
        Err(e) => panic!("{method} {url}: {e}"),
    }
}

/// Signs a person in through `POST /web/session`; their cookie, or the status it failed with.
fn ldap_sign_in(base: &str, user: &str, password: &str) -> Result<String, (u16, String)> {
    let resp = ureq::post(&format!("{base}/web/session"))
        .set("Origin", base)
        .set("Content-Type", "application/json")
        .send_string(&serde_json::json!({ "user": user, "password": password }).to_string());
    match resp {
        Ok(r) => {
            let set = r.header("Set-Cookie").expect("a session cookie").to_string();
            Ok(set.split(';').next().unwrap().to_string())
        }
        Err(ureq::Error::Status(s, r)) => Err((s, r.into_string().unwrap())),
        Err(e) => panic!("sign-in: {e}"),
    }
}

/// The audit rows of `person` (name or subject), through the command line.
pub(crate) fn audit_of(data: &Path, config: &Path, person: &str) -> Vec<serde_json::Value> {
    let (code, out, err) = run(ragbox(data).arg("--config").arg(config).args(["audit", "--person", person, "--json"]));
    assert_eq!(code, 0, "{out}\n{err}");
    out.lines().filter(|l| !l.trim().is_empty()).map(|l| serde_json::from_str(l).unwrap()).collect()
}

#[test]
fn document_permissions_hold_through_every_face() {
    let ldap = directory();
    let dir = tempfile::tempdir().unwrap().keep();
    let corpus = corpus(&dir);
    let config = config(&dir, &ldap);
    let data = dir.join("data");
    let first = ingest(&data, &config, &corpus);
    assert_eq!(first["skipped"].as_array().unwrap().len(), 0, "{first}");
    let server = spawn(data.clone(), config.clone());
    let b = server.base.clone();

    let hr = create_key(&server, &["--tenant", "default", "--name", "hr-analyst", "--groups", "hr"]);
    let legal = create_key(&server, &["--tenant", "default", "--name", "counsel", "--groups", "legal"]);
    let limited = create_key(&server, &["--tenant", "default", "--name", "kiosk", "--groups", "limited"]);
    let everything = create_key(&server, &["--tenant", "default", "--name", "indexer"]);

    // The documents list: the open ones and the caller's groups'; counts follow.
    let all = documents(&server, &everything);
    let (hr_docs, legal_docs) = (documents(&server, &hr), documents(&server, &legal));
    assert!(all.contains(&"zephyr-matter.md".to_string()) && all.contains(&"salary-bands.md".to_string()), "{all:?}");
    assert!(hr_docs.contains(&"salary-bands.md".to_string()) && !hr_docs.contains(&"zephyr-matter.md".to_string()), "{hr_docs:?}");
    assert!(legal_docs.contains(&"zephyr-matter.md".to_string()) && !legal_docs.contains(&"salary-bands.md".to_string()));
    assert_eq!(hr_docs.len(), all.len() - 1);

    // The legal document's text by id answers exactly like an id that does not exist.
    let (_, j) = get(&format!("{b}/v1/tenants/default/documents"), Some(&everything));
    let zephyr_id = j["documents"].as_array().unwrap().iter().find(|d| d["path"].as_str().unwrap().ends_with("zephyr-matter.md")).unwrap()["id"].as_u64().unwrap();
    let (s1, hidden) = get(&format!("{b}/v1/tenants/default/documents/{zephyr_id}/text"), Some(&hr));
    let (s2, absent) = get(&format!("{b}/v1/tenants/default/documents/987654/text"), Some(&hr));
    assert_eq!((s1, s2), (404, 404));
    assert_eq!(hidden.to_string().replace(&zephyr_id.to_string(), "N"), absent.to_string().replace("987654", "N"));
    let (s, j) = ureq_delete(&format!("{b}/v1/tenants/default/documents/{zephyr_id}"), &hr_writer(&server));
    assert_eq!(s, 404, "a writer outside `legal` cannot remove it either: {j}");

    // Search, with every stage's candidates: nothing of it, and the top k stays full.
    let (s, j) = post(&format!("{b}/v1/tenants/default/search"), Some(&hr), &serde_json::json!({ "query": LEGAL_QUESTION, "k": 8, "explain": true }));
    assert_eq!(s, 200, "{j}");
    no_legal("search", &j.to_string());
    assert_eq!(j["retrieval"]["hits"].as_array().unwrap().len(), 8, "a filtered top k is full: {j}");
    let (_, j) = post(&format!("{b}/v1/tenants/default/search"), Some(&legal), &serde_json::json!({ "query": LEGAL_QUESTION, "k": 3 }));
    assert!(j["retrieval"]["hits"][0].to_string().contains("zephyr-matter.md"), "its own group finds it first: {j}");
    let (_, j) = post(&format!("{b}/v1/tenants/default/search"), Some(&hr), &serde_json::json!({ "query": HR_QUESTION, "k": 3 }));
    assert!(j["retrieval"]["hits"][0].to_string().contains("salary-bands.md"), "{j}");

    // Ask (the streamed events, the sources, the closest material when refused).
    let asked = events(&format!("{b}/v1/tenants/default/ask"), &hr, &serde_json::json!({ "question": LEGAL_QUESTION }));
    let asked_text = serde_json::to_string(&asked).unwrap();
    no_legal("ask", &asked_text);

    // Chat and its memory: a follow-up in the session, the session read back; another key's
    // sessions are not found.
    let (s, j) = post(&format!("{b}/v1/tenants/default/chat/sessions"), Some(&hr), &serde_json::json!({}));
    assert_eq!(s, 201, "{j}");
    let session = j["session"].as_i64().unwrap();
    for q in [LEGAL_QUESTION, "And when was it settled?"] {
        let turn = events(&format!("{b}/v1/tenants/default/chat/sessions/{session}/messages"), &hr, &serde_json::json!({ "question": q }));
        no_legal("chat", &serde_json::to_string(&turn).unwrap());
    }
    let (s, j) = get(&format!("{b}/v1/tenants/default/chat/sessions/{session}"), Some(&hr));
    assert_eq!(s, 200);
    no_legal("chat memory", &j.to_string());
    let (s, _) = get(&format!("{b}/v1/tenants/default/chat/sessions/{session}"), Some(&legal));
    assert_eq!(s, 404, "another key's session reads as absent");
    let (_, j) = get(&format!("{b}/v1/tenants/default/chat/sessions"), Some(&legal));
    assert!(j["sessions"].as_array().unwrap().iter().all(|x| x["session"].as_i64() != Some(session)), "{j}");

    // The OpenAI-compatible route.
    no_legal("the OpenAI-compatible route", &openai(&b, &hr, LEGAL_QUESTION));

    // The audit names the key and its groups, and the groups that granted what it read.
    let rows = audit_of(&data, &config, "hr-analyst");
    assert!(rows.iter().any(|r| r["action"] == "search"), "{rows:?}");
    assert!(rows.iter().all(|r| r["detail"]["who"]["key"] == "hr-analyst" && r["detail"]["who"]["groups"] == serde_json::json!(["hr"])), "{rows:?}");
    assert!(rows.iter().any(|r| r["detail"]["granted_by"] == serde_json::json!(["hr"])), "the salary search was granted by hr: {rows:?}");

    // Quotas: the third question in a minute is refused with Retry-After, and audited.
    for _ in 0..2 {
        let (s, j) = post(&format!("{b}/v1/tenants/default/search"), Some(&limited), &serde_json::json!({ "query": "travel" }));
        assert_eq!(s, 200, "{j}");
    }
    let (s, j, retry) = crate::server::call("POST", &format!("{b}/v1/tenants/default/search"), Some(&limited), Some(br#"{"query":"travel"}"#), "application/json");
    assert_eq!(s, 429, "{j}");
    assert_eq!(j["error"]["code"], "quota_exceeded");
    assert!(retry.and_then(|r| r.parse::<u64>().ok()).is_some_and(|r| (1..=60).contains(&r)));
    assert!(audit_of(&data, &config, "kiosk").iter().any(|r| r["action"] == "quota_exceeded" && r["outcome"] == "denied"));
    let uploader = create_key(&server, &["--tenant", "default", "--role", "writer", "--name", "scanner", "--groups", "limited"]);
    let upload = |name: &str| {
        let (body, ct) = crate::server::multipart(name, b"# Note\n\nA note for the limited group.\n");
        crate::server::call("POST", &format!("{b}/v1/tenants/default/documents"), Some(&uploader), Some(&body), &ct)
    };
    let (s, j, _) = upload("first-note.md");
    assert_eq!(s, 202, "{j}");
    let (s, j, retry) = upload("second-note.md");
    assert_eq!((s, j["error"]["code"].as_str()), (429, Some("quota_exceeded")), "one upload a day: {j}");
    assert!(retry.and_then(|r| r.parse::<u64>().ok()).is_some_and(|r| r > 3600), "until the first upload is a day old");

    // The command line, asked to answer as a member of hr would be.
    for verb in ["search", "ask"] {
        let (code, out, err) = run(ragbox(&data).arg("--config").arg(&config).args([verb, "--groups", "hr", "--json", LEGAL_QUESTION]));
        assert_eq!(code, 0, "{out}\n{err}");
        no_legal(&format!("`ragbox {verb} --groups hr`"), &out);
    }
    let (_, out, _) = run(ragbox(&data).arg("--config").arg(&config).args(["search", "--groups", "legal", "--json", LEGAL_QUESTION]));
    assert!(out.contains("zephyr-matter.md"), "and as legal, it is found");

    // People from the directory: alice (hr) reads the salary bands, not the legal matter; carol
    // (no group) only the open documents; a wrong password is refused in words.
    let alice = ldap_sign_in(&b, "alice", "alice-pw").expect("alice signs in");
    let (s, body) = with_cookie("GET", &format!("{b}/web/session"), &b, &alice, None);
    assert_eq!(s, 200, "{body}");
    let me: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!((me["name"].as_str(), me["person"].as_bool(), me["groups"].clone()), (Some("alice"), Some(true), serde_json::json!(["hr"])), "{me}");
    let (s, body) = with_cookie("POST", &format!("{b}/v1/tenants/default/search"), &b, &alice, Some(&serde_json::json!({ "query": HR_QUESTION, "k": 3 })));
    assert_eq!(s, 200, "{body}");
    assert!(body.contains("salary-bands.md"), "{body}");
    let (_, body) = with_cookie("POST", &format!("{b}/v1/tenants/default/search"), &b, &alice, Some(&serde_json::json!({ "query": LEGAL_QUESTION, "explain": true })));
    no_legal("a person's search", &body);
    let carol = ldap_sign_in(&b, "carol", "carol-pw").expect("carol signs in");
    let (_, body) = with_cookie("GET", &format!("{b}/v1/tenants/default/documents"), &b, &carol, None);
    assert!(!body.contains("salary-bands.md") && !body.contains("zephyr-matter.md"), "{body}");
    let (s, body) = ldap_sign_in(&b, "alice", "wrong").unwrap_err();
    assert_eq!(s, 401);
    assert!(body.contains("user name or password is not right"), "{body}");
    let rows = audit_of(&data, &config, "alice");
    let who = &rows.iter().find(|r| r["action"] == "search").expect("alice's search is audited")["detail"]["who"];
    assert_eq!(who["subject"], "uid=alice,ou=people,dc=ragbox,dc=test", "{who}");
    assert_eq!(who["issuer"].as_str(), Some(ldap.url.as_str()));
    // Signed out, the cookie no longer works.
    let (s, _) = with_cookie("DELETE", &format!("{b}/web/session"), &b, &alice, None);
    assert_eq!(s, 204);
    let (s, _) = with_cookie("GET", &format!("{b}/v1/tenants/default/documents"), &b, &alice, None);
    assert_eq!(s, 401);

    // A change of rules takes effect on the next ingest without re-embedding anything: HR's
    // folder opens to legal too.
    std::fs::write(corpus.join("hr/.ragbox-access"), "groups = [\"hr\", \"legal\"]\n").unwrap();
    let again = ingest(&data, &config, &corpus);
    assert_eq!((again["readers_changed"].as_u64(), again["embedded"].as_u64(), again["added"].as_u64()), (Some(1), Some(0), Some(0)), "{again}");
    assert!(documents(&server, &legal).contains(&"salary-bands.md".to_string()));
    let (_, j) = post(&format!("{b}/v1/tenants/default/search"), Some(&legal), &serde_json::json!({ "query": HR_QUESTION, "k": 3 }));
    assert!(j["retrieval"]["hits"][0].to_string().contains("salary-bands.md"), "the running server serves the new readers: {j}");

    // What hr got is what it gets once the document is gone: the same outcome and sources.
    let before = post(&format!("{b}/v1/tenants/default/search"), Some(&hr), &serde_json::json!({ "query": LEGAL_QUESTION, "k": 5 })).1;
    let (code, out, err) = run(ragbox(&data).arg("--config").arg(&config).arg("rm").arg(corpus.join("legal/zephyr-matter.md")));
    assert_eq!(code, 0, "{out}\n{err}");
    let after = post(&format!("{b}/v1/tenants/default/search"), Some(&hr), &serde_json::json!({ "query": LEGAL_QUESTION, "k": 5 })).1;
    let docs = |j: &serde_json::Value| j["retrieval"]["hits"].as_array().unwrap().iter().map(|h| h["chunk"]["doc_id"].clone()).collect::<Vec<_>>();
    assert_eq!(docs(&before), docs(&after), "the same documents, with or without the one it may not read");
    assert_eq!(before["refused"], after["refused"]);
}

/// `question` through the OpenAI-compatible route with `key`: the whole response (a 200).
fn openai(base: &str, key: &str, question: &str) -> String {
    let (s, j) = post(
        &format!("{base}/v1/chat/completions"),
        Some(key),
        &serde_json::json!({ "model": "ragbox", "messages": [{ "role": "user", "content": question }] }),
    );
    assert_eq!(s, 200, "{j}");
    j.to_string()
}

/// A writer key of `hr`: it may remove what it reads, and nothing else.
fn hr_writer(server: &Server) -> String {
    create_key(server, &["--tenant", "default", "--role", "writer", "--name", "hr-writer", "--groups", "hr"])
}

fn ureq_delete(url: &str, key: &str) -> (u16, String) {
    match ureq::delete(url).set("Authorization", &format!("Bearer {key}")).call() {
        Ok(r) | Err(ureq::Error::Status(_, r)) => (r.status(), r.into_string().unwrap()),
        Err(e) => panic!("DELETE {url}: {e}"),
    }
}

/// The words of the files outside the ingested folder that planted links point to (none of them
/// in the question asked about them, which comes back in its echo).
const VAULT_MARKERS: &[&str] = &["vault-password", "Tr0ub4dor", "escrow code", "vault.md", "escrow.md"];

/// Runs `ragbox ingest --json` (exit 0 or 5: done, with skips) and returns its report.
fn ingest_with_skips(data: &Path, config: &Path, corpus: &Path) -> serde_json::Value {
    let (code, out, err) = run(ragbox(data).arg("--config").arg(config).arg("ingest").arg(corpus).arg("--json"));
    assert!(code == 0 || code == 5, "{code}: {out}\n{err}");
    serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{out}: {e}"))
}

#[test]
fn links_do_not_carry_documents_across_readers() {
    let dir = tempfile::tempdir().unwrap().keep();
    let corpus = corpus(&dir);
    let outside = dir.join("outside");
    std::fs::create_dir_all(outside.join("keys")).unwrap();
    std::fs::write(
        outside.join("vault.md"),
        "# Vault\n\nThe vault-password for the break-glass account is Tr0ub4dor and 3.\n",
    )
    .unwrap();
    std::fs::write(outside.join("keys/escrow.md"), "# Escrow\n\nThe break-glass escrow code is kept in the vault.\n").unwrap();
    // Whoever writes into hr/ plants links: to legal's document, to legal's folder, to a file and
    // a folder outside the ingested folder.
    std::os::unix::fs::symlink("../legal/zephyr-matter.md", corpus.join("hr/zephyr-link.md")).unwrap();
    std::os::unix::fs::symlink("../legal", corpus.join("hr/legal-folder")).unwrap();
    std::os::unix::fs::symlink(outside.join("vault.md"), corpus.join("hr/planted.md")).unwrap();
    std::os::unix::fs::symlink(outside.join("keys"), corpus.join("hr/keys")).unwrap();
    let config = dir.join("server.toml");
    std::fs::write(&config, "[access]\nrules = [{ path = \"**/legal/**\", groups = [\"legal\"] }]\n").unwrap();
    let data = dir.join("data");

    // Each link is reported with its reason, and nothing is read through one.
    let report = ingest_with_skips(&data, &config, &corpus);
    let skipped: Vec<(String, String)> = report["skipped"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["path"].as_str().unwrap().rsplit('/').next().unwrap().to_string(), s["reason"].as_str().unwrap().to_string()))
        .collect();
    for (name, why) in [("zephyr-link.md", "inside the ingested folder"), ("legal-folder", "inside the ingested folder"), ("planted.md", "out of the ingested folder"), ("keys", "out of the ingested folder")] {
        assert!(skipped.iter().any(|(n, r)| n == name && r.contains(why)), "{name}: {skipped:?}");
    }
    let (code, ls, err) = run(ragbox(&data).arg("--config").arg(&config).arg("ls"));
    assert_eq!(code, 0, "{err}");
    assert!(ls.lines().any(|l| l.contains("skipped") && l.contains("hr/planted.md") && l.contains("follow_links")), "{ls}");
    assert!(ls.lines().any(|l| l.contains("hr/zephyr-link.md") && l.contains("not twice")), "{ls}");
    assert_eq!(ls.matches("zephyr-matter.md").count(), 1, "legal's document once, under its own path: {ls}");
    assert!(ls.lines().any(|l| l.contains("legal/zephyr-matter.md") && l.contains("readers: legal")), "{ls}");
    assert!(!ls.contains("escrow") && !ls.contains("vault.md"), "{ls}");

    let no_leak = |face: &str, body: &str| {
        no_legal(face, body);
        for m in VAULT_MARKERS {
            assert!(!body.contains(m), "{face} gave hr the file outside the folder (`{m}`):\n{body}");
        }
    };
    const VAULT_QUESTION: &str = "What is the vault password for the break-glass account?";
    for q in [LEGAL_QUESTION, VAULT_QUESTION] {
        for verb in ["search", "ask"] {
            let (code, out, err) = run(ragbox(&data).arg("--config").arg(&config).args([verb, "--groups", "hr", "--json", q]));
            assert_eq!(code, 0, "{out}\n{err}");
            no_leak(&format!("`ragbox {verb} --groups hr`"), &out);
        }
    }

    // Every face of the server, for an hr key.
    let server = spawn(data.clone(), config.clone());
    let b = server.base.clone();
    let hr = create_key(&server, &["--tenant", "default", "--name", "hr-analyst", "--groups", "hr"]);
    for q in [LEGAL_QUESTION, VAULT_QUESTION] {
        let (s, j) = post(&format!("{b}/v1/tenants/default/search"), Some(&hr), &serde_json::json!({ "query": q, "k": 8, "explain": true }));
        assert_eq!(s, 200, "{j}");
        no_leak("search", &j.to_string());
        let asked = events(&format!("{b}/v1/tenants/default/ask"), &hr, &serde_json::json!({ "question": q }));
        no_leak("ask", &serde_json::to_string(&asked).unwrap());
        let (s, j) = post(&format!("{b}/v1/tenants/default/chat/sessions"), Some(&hr), &serde_json::json!({}));
        assert_eq!(s, 201, "{j}");
        let session = j["session"].as_i64().unwrap();
        let turn = events(&format!("{b}/v1/tenants/default/chat/sessions/{session}/messages"), &hr, &serde_json::json!({ "question": q }));
        no_leak("chat", &serde_json::to_string(&turn).unwrap());
        no_leak("the OpenAI-compatible route", &openai(&b, &hr, q));
    }
    let (s, j) = get(&format!("{b}/v1/tenants/default/documents"), Some(&hr));
    assert_eq!(s, 200, "{j}");
    no_leak("the documents list", &j.to_string());
    let mcp = crate::mcp::client(
        &serde_json::json!([
            ["search", { "query": LEGAL_QUESTION, "k": 10 }],
            ["search", { "query": VAULT_QUESTION, "k": 10 }],
            ["ask", { "question": LEGAL_QUESTION }],
            ["list_documents", {}],
            ["resources/list", {}],
        ]),
        &["http", &format!("{b}/mcp"), &hr],
        &[],
    );
    no_leak("MCP", &mcp.to_string());
    drop(server);

    // Following links out of the folder is a choice: then the outside file is read under the
    // link's path with the link folder's readers; a link inside is still not read twice.
    std::fs::write(&config, "[ingest]\nfollow_links = true\n[access]\nrules = [{ path = \"**/legal/**\", groups = [\"legal\"] }]\n").unwrap();
    let followed = ingest_with_skips(&data, &config, &corpus);
    let read = followed["added"].as_u64().unwrap() + followed["updated"].as_u64().unwrap();
    assert_eq!(read, 2, "hr/planted.md (a skipped link until now) and hr/keys/escrow.md: {followed}");
    let (_, ls, _) = run(ragbox(&data).arg("--config").arg(&config).arg("ls"));
    assert!(ls.lines().any(|l| l.contains("hr/planted.md") && l.contains("readers: hr") && !l.contains("skipped")), "{ls}");
    assert!(ls.lines().any(|l| l.contains("hr/keys/escrow.md") && l.contains("readers: hr")), "{ls}");
    assert_eq!(ls.matches("zephyr-matter.md").count(), 1, "{ls}");
    // And back: what was read through the links is taken out again on the next run.
    std::fs::write(&config, "[access]\nrules = [{ path = \"**/legal/**\", groups = [\"legal\"] }]\n").unwrap();
    ingest_with_skips(&data, &config, &corpus);
    for verb in ["search", "ask"] {
        let (_, out, _) = run(ragbox(&data).arg("--config").arg(&config).args([verb, "--groups", "hr", "--json", VAULT_QUESTION]));
        no_leak(&format!("`ragbox {verb} --groups hr` after follow_links was switched off"), &out);
    }
}
