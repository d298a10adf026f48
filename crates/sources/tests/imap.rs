//! The IMAP connector against a real Dovecot (scripts/sources/imap-launch.sh) on loopback:
//! first sync, nothing fetched twice, deletes and moves followed, attachments taken out,
//! UIDVALIDITY changes, an unreachable server changes nothing, a sync cut short finishes.

use std::path::{Path, PathBuf};

use ragbox_sources::{probe, sync, Mirror, SourceConfig, SourceKind, SourceTls, SyncEvent};

#[path = "../../../tests/support/servers.rs"]
#[allow(dead_code)]
mod servers;

use servers::{free_port, repo, Dovecot};

fn source(port: u16, ca: &Path, folders: &[&str]) -> SourceConfig {
    SourceConfig {
        name: "mail".into(),
        kind: SourceKind::Imap,
        tenant: "default".into(),
        host: "127.0.0.1".into(),
        port: Some(port),
        user: "archive".into(),
        password_file: None,
        password_env: Some("UNUSED".into()),
        tls: SourceTls::Starttls,
        ca_file: Some(ca.to_path_buf()),
        folders: folders.iter().map(|f| f.to_string()).collect(),
        share: None,
        path: String::new(),
        domain: None,
        interval: "15m".into(),
        groups: vec![],
        timeout_ms: 5000,
    }
}

/// A message with a PDF attachment (the sample corpus's plan) and a markdown one.
fn message_with_attachments(dir: &Path) -> PathBuf {
    use std::io::Write;
    let pdf = std::fs::read(repo().join("tests/data/corpus-office/plans/business-continuity-plan.pdf")).unwrap();
    let b64 = base64_lines(&pdf);
    let path = dir.join("with-pdf.eml");
    let mut f = std::fs::File::create(&path).unwrap();
    write!(
        f,
        "From: Ops <ops@example.org>\r\nTo: all@example.org\r\nSubject: Continuity plan attached\r\nDate: Mon, 2 Sep 2024 09:00:00 +0000\r\n\
MIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary=\"XX\"\r\n\r\n--XX\r\nContent-Type: text/plain\r\n\r\nThe plan is attached.\r\n\
--XX\r\nContent-Type: application/pdf\r\nContent-Disposition: attachment; filename=\"continuity.pdf\"\r\nContent-Transfer-Encoding: base64\r\n\r\n{b64}\r\n--XX--\r\n"
    )
    .unwrap();
    path
}

fn base64_lines(bytes: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for (i, c) in bytes.chunks(3).enumerate() {
        if i > 0 && i % 19 == 0 {
            out.push_str("\r\n");
        }
        let n = (c[0] as u32) << 16 | (*c.get(1).unwrap_or(&0) as u32) << 8 | *c.get(2).unwrap_or(&0) as u32;
        for k in 0..4 {
            if k <= c.len() {
                out.push(A[(n >> (18 - 6 * k) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

fn emls(mirror: &Mirror) -> Vec<PathBuf> {
    mirror.files(Path::new("")).unwrap().into_keys().filter(|p| p.extension().is_some_and(|e| e == "eml")).collect()
}

#[test]
fn a_mailbox_mirrored_and_followed() {
    if !Path::new("/usr/sbin/dovecot").exists() {
        eprintln!("skipped: Dovecot is not installed (scripts/setup/mail-server.sh installs it)");
        return;
    }
    let tmp = tempfile::Builder::new().prefix("ragbox-imap").tempdir_in("/tmp").unwrap();
    let port = free_port();
    let server = Dovecot::start(&tmp.path().join("srv"), port, false);
    let ca = server.dir.join("tls/ca.pem");
    server.fill("INBOX", &["--generate", "6"]);
    server.fill("INBOX", &[repo().join("tests/data/corpus-office/email/fire-drills-q3-2024.eml").to_str().unwrap()]);
    server.fill("INBOX", &[message_with_attachments(tmp.path()).to_str().unwrap()]);
    server.fill("Policies/2026", &["--generate", "2", "--seed", "9"]);
    let src = source(port, &ca, &["INBOX", "Policies/2026"]);
    let mirror = Mirror::open(tmp.path().join("mirror")).unwrap();

    assert_eq!(probe(&src, "archive-pw").unwrap(), 10);
    let mut events = Vec::new();
    let first = sync(&src, "archive-pw", &mirror, &mut |e| events.push(e)).unwrap();
    assert_eq!((first.listed, first.fetched, first.unchanged, first.removed), (10, 10, 0, 0), "{first:?}");
    assert!(first.problems.is_empty(), "{:?}", first.problems);
    assert_eq!(events[0], SyncEvent::Listed { items: 10, to_fetch: 10 });
    let files = emls(&mirror);
    assert_eq!(files.len(), 10);
    assert_eq!(files.iter().filter(|p| p.starts_with("Policies/2026")).count(), 2);
    let all = mirror.files(Path::new("")).unwrap();
    let pdf: Vec<_> = all.keys().filter(|p| p.extension().is_some_and(|e| e == "pdf")).collect();
    assert_eq!(pdf.len(), 1, "the PDF attachment is taken out: {all:?}");
    let original = std::fs::read(repo().join("tests/data/corpus-office/plans/business-continuity-plan.pdf")).unwrap();
    assert_eq!(std::fs::read(mirror.root().join(pdf[0])).unwrap(), original, "byte for byte");
    assert!(pdf[0].to_string_lossy().ends_with(".parts/1-continuity.pdf"), "{pdf:?}");

    // Nothing fetched twice.
    let again = sync(&src, "archive-pw", &mirror, &mut |_| {}).unwrap();
    assert_eq!((again.fetched, again.unchanged, again.removed, again.bytes), (0, 10, 0, 0), "{again:?}");

    // Delete one message, move another out, add one.
    server.change(&["delete", "INBOX", "Continuity plan"]);
    server.change(&["move", "INBOX", "Fire drill", "Archive"]);
    server.fill("INBOX", &["--generate", "1", "--seed", "77"]);
    let third = sync(&src, "archive-pw", &mirror, &mut |_| {}).unwrap();
    assert_eq!((third.listed, third.fetched, third.removed), (9, 1, 2), "{third:?}");
    let all = mirror.files(Path::new("")).unwrap();
    assert!(!all.keys().any(|p| p.extension().is_some_and(|e| e == "pdf")), "the deleted message's parts go with it");
    assert!(!all.keys().any(|p| p.to_string_lossy().contains(".parts")), "{all:?}");
    assert_eq!(emls(&mirror).len(), 9);

    // A sync cut short: messages written, then the process died before the rest.
    let victims: Vec<PathBuf> = emls(&mirror).into_iter().take(3).collect();
    for v in &victims {
        std::fs::remove_file(mirror.root().join(v)).unwrap();
    }
    std::fs::write(mirror.root().join("INBOX/.half.eml.part"), b"half a message").unwrap();
    let resumed = sync(&src, "archive-pw", &mirror, &mut |_| {}).unwrap();
    assert_eq!((resumed.fetched, resumed.unchanged, resumed.removed), (3, 6, 0), "{resumed:?}");
    assert_eq!(emls(&mirror).len(), 9, "nothing duplicated");
    assert!(!mirror.root().join("INBOX/.half.eml.part").exists());

    // Folders no longer configured leave the mirror.
    let inbox_only = source(port, &ca, &["INBOX"]);
    let fewer = sync(&inbox_only, "archive-pw", &mirror, &mut |_| {}).unwrap();
    assert_eq!(fewer.removed, 2, "{fewer:?}");
    assert!(emls(&mirror).iter().all(|p| p.starts_with("INBOX")));
    let before = mirror.files(Path::new("")).unwrap();

    // Wrong password, then a server gone: an error naming the source, the mirror untouched.
    let refused = sync(&inbox_only, "wrong", &mirror, &mut |_| {}).unwrap_err().to_string();
    assert!(refused.contains("`mail`") && refused.contains("LOGIN"), "{refused}");
    server.stop();
    let gone = sync(&inbox_only, "archive-pw", &mirror, &mut |_| {}).unwrap_err().to_string();
    assert!(gone.contains("cannot be reached") && gone.contains("127.0.0.1"), "{gone}");
    assert_eq!(mirror.files(Path::new("")).unwrap(), before, "an unreachable source changes nothing");

    // Back with the same mail: nothing to do. A new mailbox (new UIDVALIDITY): fetched again.
    let server = Dovecot::start(&tmp.path().join("srv"), port, true);
    let back = sync(&inbox_only, "archive-pw", &mirror, &mut |_| {}).unwrap();
    assert_eq!((back.fetched, back.unchanged, back.removed), (0, 7, 0), "{back:?}");
    drop(server);
    let server = Dovecot::start(&tmp.path().join("srv"), port, false);
    server.fill("INBOX", &["--generate", "2", "--seed", "5"]);
    let fresh = sync(&inbox_only, "archive-pw", &mirror, &mut |_| {}).unwrap();
    assert_eq!((fresh.fetched, fresh.removed), (2, 7), "{fresh:?}");
    assert_eq!(emls(&mirror).len(), 2);
}
