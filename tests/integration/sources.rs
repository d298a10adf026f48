//! `[[sources]]` end to end with the real binary and models: a Dovecot mailbox
//! (scripts/sources/imap-launch.sh) synced by `ragbox sync` into the catalog (messages and their
//! PDF and Word attachments searchable, each document's origin and the source's readers
//! recorded), nothing fetched or embedded twice, deletes and moves followed, a sync killed
//! mid-way finished by the next with nothing lost or duplicated, and a server that is down
//! pruning nothing; then `ragbox serve`'s schedule: the admin route and `/metrics` following the
//! syncs, a fault while serving, the retry once the server is back. And a Samba share holding a
//! copy of the office sample corpus (scripts/sources/smb-launch.sh): synced into the same
//! documents, chunks and hashes as `ragbox ingest` of the folder itself (its `.ragboxignore`
//! honoured), then added, changed, touched and deleted files followed, a server that is down
//! pruning nothing, and `serve`'s schedule and "sync now".

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::{ragbox, run};
use crate::server::{create_key, get, post, spawn};
use crate::servers::{free_port, repo, Dovecot, Samba};

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

/// `ragbox sync` of source `name`, whose server is down: an error naming it, the catalog's
/// documents still `listed`, and `doctor` saying the source is not reached and its sync failed.
fn unreachable_prunes_nothing(data: &Path, config: &Path, name: &str, listed: &[String]) {
    let (code, out, err) = run(cmd(data, config).arg("sync"));
    assert_ne!(code, 0, "{out}");
    assert!(err.contains(&format!("`{name}`")) && err.contains("cannot be reached") && err.contains("nothing was changed"), "{err}");
    assert_eq!(paths(&documents(data, config)), listed, "an unreachable source prunes nothing");
    let (_, out, _) = run(cmd(data, config).arg("doctor"));
    assert!(out.contains(&format!("source:     {name}")) && out.contains("NOT REACHED") && out.contains("last sync FAILED"), "{out}");
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
    unreachable_prunes_nothing(&data, &config, "mail", &listed);

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

/// Copies the folder `from` to `to`, keeping each file's modification time.
fn copy_tree(from: &Path, to: &Path) {
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::create_dir_all(to).unwrap();
            std::fs::copy(entry.path(), &target).unwrap();
            let mtime = entry.metadata().unwrap().modified().unwrap();
            std::fs::File::options().write(true).open(&target).unwrap().set_modified(mtime).unwrap();
        }
    }
}

fn smb_config(dir: &Path, port: u16) -> PathBuf {
    let path = dir.join("share.toml");
    std::fs::write(dir.join("smb-password"), "reader-pw\n").unwrap();
    std::fs::write(&path, format!(
        "[[sources]]\nname = \"share\"\nkind = \"smb\"\nhost = \"127.0.0.1\"\nport = {port}\nuser = \"reader\"\n\
password_file = \"{}\"\nshare = \"docs\"\ngroups = [\"ops\"]\ninterval = \"2s\"\ntimeout_ms = 3000\n",
        dir.join("smb-password").display()
    )).unwrap();
    path
}

/// Each document by its path below `root`: (parser, sha256, chunks).
fn by_relative_path(docs: &[Value], root: &Path) -> std::collections::BTreeMap<String, (Value, Value, Value)> {
    docs.iter()
        .map(|d| {
            let path = Path::new(d["path"].as_str().unwrap()).strip_prefix(root).unwrap_or_else(|_| panic!("{d} is not under {}", root.display()));
            (path.to_string_lossy().into_owned(), (d["parser"].clone(), d["sha256"].clone(), d["chunks"].clone()))
        })
        .collect()
}

#[test]
fn a_share_kept_in_sync_from_the_command_line_and_the_server() {
    let dir = tempfile::Builder::new().prefix("ragbox-smb").tempdir_in("/tmp").unwrap().keep();
    let share = dir.join("share");
    copy_tree(&repo().join("tests/data/corpus-office"), &share);
    let Some(samba) = Samba::start(&share) else { return };
    let config = smb_config(&dir, samba.port);
    let data = dir.join("data");

    // First sync: every file fetched; the catalog is the one `ragbox ingest` makes of the folder
    // itself (the share's .ragboxignore keeps QUESTIONS.md out of both).
    let first = sync(&data, &config);
    assert_eq!((first["sync"]["listed"].as_u64(), first["sync"]["fetched"].as_u64()), (Some(18), Some(18)), "{first}");
    let local = dir.join("local");
    let (code, _, err) = run(ragbox(&local).arg("ingest").arg(&share));
    assert_eq!(code, 0, "{err}");
    let docs = documents(&data, &config);
    let mirrored = by_relative_path(&docs, &data.join("sources/share"));
    assert_eq!(mirrored, by_relative_path(&documents(&local, &config), &share), "the same documents, hashes and chunks as a local ingest");
    assert_eq!(mirrored.len(), 16);
    assert!(!mirrored.contains_key("QUESTIONS.md"));
    for d in &docs {
        assert_eq!(d["readers"], serde_json::json!(["ops"]), "the source's groups read it: {d}");
        let rel = Path::new(d["path"].as_str().unwrap()).strip_prefix(data.join("sources/share")).unwrap().to_string_lossy().into_owned();
        assert_eq!(d["origin"], format!("smb://127.0.0.1:{}/docs/{rel}", samba.port), "{d}");
    }

    // Unchanged: nothing fetched, nothing embedded.
    let again = sync(&data, &config);
    assert_eq!((again["sync"]["fetched"].as_u64(), again["sync"]["unchanged"].as_u64()), (Some(0), Some(18)), "{again}");
    assert_eq!((again["ingest"]["added"].as_u64(), again["ingest"]["embedded"].as_u64()), (Some(0), Some(0)), "{again}");

    // Added, changed, touched (same bytes, a new time: fetched, then found unchanged by its
    // hash), deleted: the catalog follows.
    std::fs::write(share.join("policies/visitor-badges.md"), "# Visitor badges\n\nVisitors wear an orange badge and are escorted at all times in the Kestrel depot.\n").unwrap();
    let csv = share.join("tables/retention-schedule.csv");
    let mut rows = std::fs::read_to_string(&csv).unwrap();
    rows.push_str("Quarry ledger,Finance,twelve years,Shred\n");
    std::fs::write(&csv, rows).unwrap();
    let eml = share.join("email/fire-drills-q3-2024.eml");
    std::fs::File::options().write(true).open(&eml).unwrap().set_modified(std::time::SystemTime::now()).unwrap();
    std::fs::remove_file(share.join("slides/information-security-acceptable-use.odp")).unwrap();
    let third = sync(&data, &config);
    assert_eq!((third["sync"]["listed"].as_u64(), third["sync"]["fetched"].as_u64(), third["sync"]["removed"].as_u64()), (Some(18), Some(3), Some(1)), "{third}");
    let i = &third["ingest"];
    assert_eq!((i["added"].as_u64(), i["updated"].as_u64(), i["removed"].as_u64()), (Some(1), Some(1), Some(1)), "{third}");
    let (code, out, err) = run(cmd(&data, &config).args(["--json", "search", "-k", "3", "orange visitor badge escorted"]));
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("visitor-badges.md"), "the new file is searchable: {out}");
    let (code, out, err) = run(cmd(&data, &config).args(["--json", "search", "-k", "3", "Quarry ledger retention"]));
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("Quarry ledger"), "the changed file's new row is searchable: {out}");
    let listed = paths(&documents(&data, &config));
    assert_eq!(listed.len(), 16);

    // The server down: an error naming the source, nothing pruned though a file went meanwhile.
    samba.stop();
    std::fs::remove_file(share.join("policies/visitor-badges.md")).unwrap();
    unreachable_prunes_nothing(&data, &config, "share", &listed);

    // Under `ragbox serve`, the server back: the schedule lands the removal; "sync now" a new file.
    samba.launch();
    let http = spawn(data.clone(), config.clone());
    let key = create_key(&http, &["--name", "ops", "--role", "admin"]);
    let documents_served = || -> usize {
        let (code, v) = get(&format!("{}/v1/tenants/default/documents", http.base), Some(&key));
        assert_eq!(code, 200, "{v}");
        v["documents"].as_array().unwrap().len()
    };
    // The source's last sync, once it is one that `want` accepts (its documents are committed
    // before the sync's result is written).
    let last = |want: &dyn Fn(&Value) -> bool| -> Value {
        let end = Instant::now() + Duration::from_secs(120);
        loop {
            let (code, v) = get(&format!("{}/v1/admin/sources", http.base), Some(&key));
            assert_eq!(code, 200, "{v}");
            assert_eq!(v["sources"][0]["config"]["name"], "share", "{v}");
            let last = v["sources"][0]["last"].clone();
            if want(&last) {
                return last;
            }
            assert!(Instant::now() < end, "timed out; last: {last}");
            std::thread::sleep(Duration::from_millis(200));
        }
    };
    let back = last(&|l| l["ok"] == true);
    assert_eq!((back["removed"].as_u64(), documents_served()), (Some(1), 15), "the removal landed: {back}");
    let text = ureq_text(&format!("{}/metrics", http.base));
    assert!(text.contains("ragbox_source_up{source=\"share\"} 1"), "{text}");
    std::fs::write(share.join("policies/clean-desk.md"), "# Clean desk\n\nDesks are cleared of papers at the end of each day.\n").unwrap();
    let before = back["finished_ms"].as_u64().unwrap();
    let (code, v) = post(&format!("{}/v1/admin/sources/share/sync", http.base), Some(&key), &serde_json::json!({}));
    assert_eq!(code, 202, "{v}");
    // The schedule (every 2 s) or "sync now", whichever comes first: the new file lands.
    last(&|l| l["ok"] == true && l["finished_ms"].as_u64() > Some(before) && documents_served() == 16);
    drop(http);
    drop(samba);
    let _ = std::fs::remove_dir_all(&dir);
}

fn ureq_text(url: &str) -> String {
    let (code, v, _) = crate::server::call("GET", url, None, None, "");
    assert_eq!(code, 200);
    v.as_str().map(str::to_string).unwrap_or_else(|| v.to_string())
}
