//! `[[sources]]` end to end with the real binary and models: a Dovecot mailbox
//! (scripts/sources/imap-launch.sh) synced by `ragbox sync` into the catalog (messages and their
//! PDF and Word attachments searchable, each document's origin and the source's readers
//! recorded), nothing fetched or embedded twice, deletes and moves followed, a sync killed
//! mid-way finished by the next with nothing lost or duplicated, and a server that is down
//! pruning nothing; then `ragbox serve`'s schedule: the admin route and `/metrics` following the
//! syncs, a fault while serving, the retry once the server is back.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::{ragbox, run};
use crate::server::{create_key, get, post, spawn};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A Dovecot on loopback, stopped on drop.
struct Dovecot {
    dir: PathBuf,
    port: u16,
}

impl Dovecot {
    fn start(dir: &Path, port: u16, keep_mail: bool) -> Dovecot {
        let out = Command::new(repo().join("scripts/sources/imap-launch.sh"))
            .arg(dir)
            .arg(port.to_string())
            .env("IMAP_KEEP_MAIL", if keep_mail { "1" } else { "0" })
            .output()
            .unwrap();
        assert!(out.status.success(), "imap-launch: {}", String::from_utf8_lossy(&out.stderr));
        Dovecot { dir: dir.to_path_buf(), port }
    }

    fn stop(&self) {
        let Ok(pid) = std::fs::read_to_string(self.dir.join("dovecot.pid")) else { return };
        let _ = std::fs::remove_file(self.dir.join("dovecot.pid"));
        let pid = pid.trim().to_string();
        let _ = Command::new("kill").arg(&pid).status();
        let end = Instant::now() + Duration::from_secs(10);
        while Path::new(&format!("/proc/{pid}")).exists() && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn fill(&self, folder: &str, args: &[&str]) {
        let out = Command::new("python3")
            .arg(repo().join("scripts/sources/imap-fill.py"))
            .args(["127.0.0.1", &self.port.to_string(), "archive", "archive-pw", folder])
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "imap-fill: {}", String::from_utf8_lossy(&out.stderr));
    }

    fn change(&self, args: &[&str]) {
        let out = Command::new("python3")
            .arg(repo().join("scripts/sources/imap-change.py"))
            .args(["127.0.0.1", &self.port.to_string(), "archive", "archive-pw"])
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "imap-change: {}", String::from_utf8_lossy(&out.stderr));
    }
}

impl Drop for Dovecot {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A message with the sample corpus's Word policy and PDF plan attached.
fn with_attachments(dir: &Path) -> PathBuf {
    use base64::Engine as _;
    let b64 = |p: &str| {
        let bytes = std::fs::read(repo().join("tests/data/corpus-office").join(p)).unwrap();
        let text = base64::engine::general_purpose::STANDARD.encode(bytes);
        text.as_bytes().chunks(76).map(|c| std::str::from_utf8(c).unwrap()).collect::<Vec<_>>().join("\r\n")
    };
    let raw = format!(
        "From: Compliance <compliance@example.org>\r\nTo: staff@example.org\r\nSubject: Policies for the audit\r\n\
Date: Tue, 3 Sep 2024 10:00:00 +0000\r\nMIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary=\"P\"\r\n\r\n\
--P\r\nContent-Type: text/plain\r\n\r\nThe acceptable-use policy and the continuity plan are attached.\r\n\
--P\r\nContent-Type: application/vnd.openxmlformats-officedocument.wordprocessingml.document\r\n\
Content-Disposition: attachment; filename=\"acceptable-use.docx\"\r\nContent-Transfer-Encoding: base64\r\n\r\n{}\r\n\
--P\r\nContent-Type: application/pdf\r\nContent-Disposition: attachment; filename=\"continuity.pdf\"\r\n\
Content-Transfer-Encoding: base64\r\n\r\n{}\r\n--P--\r\n",
        b64("policies/information-security-acceptable-use.docx"),
        b64("plans/business-continuity-plan.pdf")
    );
    let path = dir.join("policies-for-the-audit.eml");
    std::fs::write(&path, raw).unwrap();
    path
}

fn config(dir: &Path, port: u16, interval: &str) -> PathBuf {
    let path = dir.join("sources.toml");
    std::fs::write(dir.join("imap-password"), "archive-pw\n").unwrap();
    std::fs::write(&path, format!(
        "[[sources]]\nname = \"mail\"\nkind = \"imap\"\nhost = \"127.0.0.1\"\nport = {port}\nuser = \"archive\"\n\
password_file = \"{}\"\ntls = \"starttls\"\nca_file = \"{}\"\nfolders = [\"INBOX\", \"Board\"]\n\
groups = [\"compliance\"]\ninterval = \"{interval}\"\ntimeout_ms = 3000\n",
        dir.join("imap-password").display(),
        dir.join("imap/tls/ca.pem").display()
    )).unwrap();
    path
}

fn cmd(data: &Path, config: &Path) -> Command {
    let mut c = ragbox(data);
    c.arg("--config").arg(config);
    c
}

fn sync(data: &Path, config: &Path) -> Value {
    let (code, out, err) = run(cmd(data, config).args(["--json", "sync"]));
    assert_eq!(code, 0, "{out}\n{err}");
    let v: Value = serde_json::from_str(out.trim()).unwrap();
    v[0]["result"].clone()
}

fn documents(data: &Path, config: &Path) -> Vec<Value> {
    let (code, out, err) = run(cmd(data, config).args(["--json", "ls"]));
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(out.trim()).unwrap();
    v["documents"].as_array().unwrap().clone()
}

fn paths(docs: &[Value]) -> Vec<String> {
    let mut p: Vec<String> = docs.iter().map(|d| d["path"].as_str().unwrap().to_string()).collect();
    p.sort();
    p
}

#[test]
fn a_mailbox_kept_in_sync_from_the_command_line_and_the_server() {
    let dir = tempfile::Builder::new().prefix("ragbox-src").tempdir_in("/tmp").unwrap().keep();
    let port = free_port();
    let server = Dovecot::start(&dir.join("imap"), port, false);
    server.fill("INBOX", &[repo().join("tests/data/corpus/email/fire-drills-q3-2024.eml").to_str().unwrap()]);
    server.fill("INBOX", &[with_attachments(&dir).to_str().unwrap()]);
    server.fill("INBOX", &["--generate", "6"]);
    server.fill("Board", &["--generate", "2", "--seed", "3"]);
    let config = config(&dir, port, "2s");
    let data = dir.join("data");

    // First sync: 10 messages, the two attachments taken out and parsed by their own parsers.
    let first = sync(&data, &config);
    assert_eq!((first["sync"]["listed"].as_u64(), first["sync"]["fetched"].as_u64()), (Some(10), Some(10)), "{first}");
    assert_eq!(first["ingest"]["added"].as_u64(), Some(12), "10 messages and 2 attachments: {first}");
    let docs = documents(&data, &config);
    assert_eq!(docs.len(), 12);
    for d in &docs {
        assert_eq!(d["readers"], serde_json::json!(["compliance"]), "the source's groups read it: {d}");
        let origin = d["origin"].as_str().unwrap_or_else(|| panic!("no origin: {d}"));
        assert!(origin.starts_with(&format!("imap://archive@127.0.0.1:{port}/")) && origin.contains(";UID="), "{origin}");
    }
    let docx = docs.iter().find(|d| d["path"].as_str().unwrap().ends_with("acceptable-use.docx")).expect("the Word attachment");
    assert_eq!(docx["parser"], "docx");
    assert!(docs.iter().any(|d| d["path"].as_str().unwrap().ends_with("continuity.pdf") && d["parser"] == "pdf"));
    let (code, out, err) = run(cmd(&data, &config).args(["--json", "search", "-k", "3", "fire drill assembly point"]));
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("fire-drills") || out.contains("Fire drill"), "the message is searchable: {out}");

    // Unchanged: nothing fetched, nothing embedded.
    let again = sync(&data, &config);
    assert_eq!((again["sync"]["fetched"].as_u64(), again["sync"]["unchanged"].as_u64()), (Some(0), Some(10)), "{again}");
    assert_eq!((again["ingest"]["added"].as_u64(), again["ingest"]["embedded"].as_u64()), (Some(0), Some(0)), "{again}");

    // Deleted, moved out of the configured folders, added: the catalog follows.
    server.change(&["delete", "INBOX", "Policies for the audit"]);
    server.change(&["move", "INBOX", "Fire drill", "Archive"]);
    server.fill("Board", &["--generate", "1", "--seed", "11"]);
    let third = sync(&data, &config);
    assert_eq!((third["sync"]["listed"].as_u64(), third["sync"]["fetched"].as_u64(), third["sync"]["removed"].as_u64()), (Some(9), Some(1), Some(2)), "{third}");
    assert_eq!((third["ingest"]["added"].as_u64(), third["ingest"]["removed"].as_u64()), (Some(1), Some(4)), "a message and its two attachments, a moved message: {third}");
    let docs = documents(&data, &config);
    assert_eq!(docs.len(), 9);
    assert!(!paths(&docs).iter().any(|p| p.ends_with(".docx") || p.ends_with(".pdf")));

    // A sync killed mid-way, then the next: everything once.
    server.fill("INBOX", &["--generate", "60", "--seed", "21"]);
    let mut child = cmd(&data, &config).args(["--quiet", "sync"]).spawn().unwrap();
    let mirror = data.join("sources/mail/INBOX");
    let end = Instant::now() + Duration::from_secs(60);
    while std::fs::read_dir(&mirror).map_or(0, |d| d.count()) < 20 && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(300));
    child.kill().unwrap();
    child.wait().unwrap();
    let resumed = sync(&data, &config);
    assert_eq!(resumed["sync"]["listed"].as_u64(), Some(69), "{resumed}");
    let docs = documents(&data, &config);
    let listed = paths(&docs);
    let mut distinct = listed.clone();
    distinct.dedup();
    assert_eq!((docs.len(), distinct.len()), (69, 69), "nothing lost or duplicated");
    let settled = sync(&data, &config);
    assert_eq!((settled["sync"]["fetched"].as_u64(), settled["ingest"]["added"].as_u64(), settled["ingest"]["embedded"].as_u64()), (Some(0), Some(0), Some(0)), "{settled}");

    // The server down: an error naming the source, nothing pruned; doctor says so.
    server.stop();
    let (code, out, err) = run(cmd(&data, &config).arg("sync"));
    assert_ne!(code, 0, "{out}");
    assert!(err.contains("`mail`") && err.contains("cannot be reached") && err.contains("nothing was changed"), "{err}");
    assert_eq!(paths(&documents(&data, &config)), listed, "an unreachable source prunes nothing");
    let (_, out, _) = run(cmd(&data, &config).arg("doctor"));
    assert!(out.contains("source:     mail") && out.contains("NOT REACHED") && out.contains("last sync FAILED"), "{out}");

    // Under `ragbox serve`: synced on its schedule, shown to admins, measured; a fault while
    // serving prunes nothing and is retried.
    let server = Dovecot::start(&dir.join("imap"), port, true);
    server.fill("INBOX", &["--generate", "1", "--seed", "31"]);
    let http = spawn(data.clone(), config.clone());
    let key = create_key(&http, &["--name", "ops", "--role", "admin"]);
    let status = |want: &dyn Fn(&Value) -> bool| -> Value {
        let end = Instant::now() + Duration::from_secs(120);
        loop {
            let (code, v) = get(&format!("{}/v1/admin/sources", http.base), Some(&key));
            assert_eq!(code, 200, "{v}");
            let s = v["sources"][0].clone();
            if want(&s) {
                return s;
            }
            assert!(Instant::now() < end, "timed out; last: {s}");
            std::thread::sleep(Duration::from_millis(200));
        }
    };
    let ok = status(&|s| s["last"]["ok"] == true && s["last"]["sync"]["listed"] == 70);
    assert_eq!(ok["last"]["added"], 1, "{ok}");
    let text = ureq_text(&format!("{}/metrics", http.base));
    assert!(text.contains("ragbox_source_up{source=\"mail\"} 1") && text.contains("ragbox_source_items{source=\"mail\"} 70"), "{text}");
    server.stop();
    let (code, v) = post(&format!("{}/v1/admin/sources/mail/sync", http.base), Some(&key), &serde_json::json!({}));
    assert_eq!(code, 202, "{v}");
    let failed = status(&|s| s["last"]["ok"] == false);
    assert!(failed["last"]["error"].as_str().unwrap().contains("cannot be reached"), "{failed}");
    let (_, docs) = get(&format!("{}/v1/tenants/default/documents", http.base), Some(&key));
    assert_eq!(docs["documents"].as_array().unwrap().len(), 70, "nothing pruned while the server is down");
    let text = ureq_text(&format!("{}/metrics", http.base));
    assert!(text.contains("ragbox_source_up{source=\"mail\"} 0") && !text.contains("ragbox_source_failures_total{source=\"mail\"} 0"), "{text}");
    let _server = Dovecot::start(&dir.join("imap"), port, true);
    let back = status(&|s| s["last"]["ok"] == true);
    assert_eq!(back["last"]["failures_in_a_row"], 0, "{back}");
    let (code, v) = get(&format!("{}/v1/admin/sources", http.base), None);
    assert_eq!(code, 401, "{v}");
    let reader = create_key(&http, &["--name", "r", "--role", "reader", "--tenant", "default"]);
    let (code, _) = get(&format!("{}/v1/admin/sources", http.base), Some(&reader));
    assert_eq!(code, 403, "the sources are for admins");
    let _ = std::fs::remove_dir_all(&dir);
}

fn ureq_text(url: &str) -> String {
    let (code, v, _) = crate::server::call("GET", url, None, None, "");
    assert_eq!(code, 200);
    v.as_str().map(str::to_string).unwrap_or_else(|| v.to_string())
}
