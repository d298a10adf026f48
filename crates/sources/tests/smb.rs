//! The SMB connector against a real Samba smbd on loopback (scripts/sources/smb-launch.sh):
//! first sync, unchanged sync, changes, a server that is down, a wrong password, and the time of
//! an unchanged 1,000-file sync. Skipped, with a message, where /usr/sbin/smbd is not installed
//! (scripts/setup/smb-server.sh installs it).

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use ragbox_core::error::Error;
use ragbox_sources::{probe, sync, Mirror, SourceConfig, SyncEvent, SyncReport};

const PASSWORD: &str = "reader-pw";

#[path = "../../../tests/support/servers.rs"]
#[allow(dead_code)]
mod servers;

use servers::Samba;

/// The source that reads `server`'s share.
fn source(server: &Samba) -> SourceConfig {
    let text = format!(
        "name = \"share\"\nkind = \"smb\"\nhost = \"127.0.0.1\"\nport = {}\nuser = \"reader\"\nshare = \"docs\"\ntimeout_ms = 5000\n",
        server.port
    );
    toml::from_str(&text).expect("a source")
}

fn put(root: &Path, rel: &str, bytes: &[u8], mtime: SystemTime) {
    let path = root.join(rel);
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(&path, bytes).unwrap();
    fs::File::options().write(true).open(&path).unwrap().set_modified(mtime).unwrap();
}

fn at(secs: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(secs) + Duration::from_nanos(123_400)
}

/// Every file under `root`, by relative path, with its bytes.
fn tree(root: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for item in fs::read_dir(&dir).unwrap() {
            let path = item.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                out.insert(path.strip_prefix(root).unwrap().to_path_buf(), fs::read(&path).unwrap());
            }
        }
    }
    out
}

/// The mirror's files less its own state file, which must match the share's exactly.
fn assert_mirrors(mirror: &Mirror, share: &Path) {
    let mut have = tree(mirror.root());
    assert_eq!(have.remove(Path::new(".ragbox-sync.json")).as_deref(), Some(&b"{}"[..]), "the mirror's state file stays");
    assert_eq!(have, tree(share), "the mirror holds what the share holds");
    let share_times: BTreeMap<PathBuf, SystemTime> =
        tree(share).keys().map(|rel| (rel.clone(), fs::metadata(share.join(rel)).unwrap().modified().unwrap())).collect();
    for (rel, entry) in mirror.files(Path::new("")).unwrap() {
        if let Some(t) = share_times.get(&rel) {
            assert_eq!(entry.mtime, *t, "{} keeps the server's modification time", rel.display());
        }
    }
}

fn run(source: &SourceConfig, mirror: &Mirror) -> (ragbox_core::error::Result<SyncReport>, Vec<SyncEvent>) {
    let mut events = Vec::new();
    let report = sync(source, PASSWORD, mirror, &mut |e| events.push(e));
    (report, events)
}

#[test]
fn a_share_is_mirrored_incrementally_and_never_pruned_while_down() {
    let share_dir = tempfile::tempdir().unwrap();
    let share = share_dir.path().join("share");
    put(&share, "a.md", b"# A\n", at(1_700_000_000));
    put(&share, "sub/b.txt", b"bee", at(1_700_000_100));
    put(&share, "sub/deep/c.txt", b"sea", at(1_700_000_200));
    put(&share, ".ragbox-access", b"* staff\n", at(1_700_000_300));
    put(&share, ".ragboxignore", b"*.tmp\n", at(1_700_000_400));
    let Some(server) = Samba::start(&share) else { return };
    let source = source(&server);
    let mirror = Mirror::open(share_dir.path().join("mirror")).unwrap();
    fs::write(mirror.root().join(".ragbox-sync.json"), b"{}").unwrap();

    // First sync: everything.
    let (report, events) = run(&source, &mirror);
    let report = report.expect("the first sync");
    assert_eq!((report.listed, report.fetched, report.unchanged, report.removed), (5, 5, 0, 0), "{report:?}");
    assert_eq!(report.bytes, 4 + 3 + 3 + 8 + 6);
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    assert_eq!(events[0], SyncEvent::Listed { items: 5, to_fetch: 5 });
    assert_eq!(events.iter().filter(|e| matches!(e, SyncEvent::Fetched { .. })).count(), 5);
    assert_mirrors(&mirror, &share);
    assert_eq!(probe(&source, PASSWORD).expect("probe"), 5);

    // Nothing changed: nothing fetched.
    let (report, events) = run(&source, &mirror);
    let report = report.expect("the unchanged sync");
    assert_eq!((report.listed, report.fetched, report.unchanged, report.removed, report.bytes), (5, 0, 5, 0, 0), "{report:?}");
    assert_eq!(events, vec![SyncEvent::Listed { items: 5, to_fetch: 0 }]);

    // One file grows, one keeps its size but gets a new time, one is new (large: many reads),
    // one goes (and its folder with it).
    put(&share, "a.md", b"# A, revised\n", at(1_700_001_000));
    put(&share, "sub/b.txt", b"BEE", at(1_700_001_100));
    let big: Vec<u8> = (0..20_000_000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8).collect();
    put(&share, "sub/new/big.bin", &big, at(1_700_001_200));
    fs::remove_file(share.join("sub/deep/c.txt")).unwrap();
    fs::remove_dir(share.join("sub/deep")).unwrap();
    let (report, events) = run(&source, &mirror);
    let report = report.expect("the sync of changes");
    assert_eq!((report.listed, report.fetched, report.unchanged, report.removed), (5, 3, 2, 1), "{report:?}");
    assert_eq!(report.bytes, 13 + 3 + big.len() as u64);
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    assert!(events.contains(&SyncEvent::Removed { path: PathBuf::from("sub/deep/c.txt") }), "{events:?}");
    assert!(events.contains(&SyncEvent::Fetched { path: PathBuf::from("sub/new/big.bin"), bytes: big.len() as u64 }), "{events:?}");
    assert!(!mirror.root().join("sub/deep").exists(), "an emptied folder leaves the mirror");
    assert_mirrors(&mirror, &share);

    // The server is down: an error, and the mirror exactly as it was, though the share changed.
    server.stop();
    let before = tree(mirror.root());
    fs::remove_file(share.join("a.md")).unwrap();
    let (report, events) = run(&source, &mirror);
    match report {
        Err(Error::SourceUnreachable { source_name, detail, .. }) => {
            assert_eq!(source_name, "share");
            eprintln!("down: {detail}");
        }
        other => panic!("a down server is unreachable, not {other:?}"),
    }
    assert!(events.is_empty(), "{events:?}");
    assert_eq!(tree(mirror.root()), before, "nothing is pruned while the server is down");
    assert!(matches!(probe(&source, PASSWORD), Err(Error::SourceUnreachable { .. })));

    // Back up: the removal lands.
    server.launch();
    let report = run(&source, &mirror).0.expect("the sync after the restart");
    assert_eq!((report.listed, report.fetched, report.unchanged, report.removed), (4, 0, 4, 1), "{report:?}");
    assert_mirrors(&mirror, &share);

    // A wrong password, a wrong share, a wrong folder: unreachable, nothing changes.
    let before = tree(mirror.root());
    let wrong = sync(&source, "not-the-password", &mirror, &mut |_| {});
    assert!(matches!(wrong, Err(Error::SourceUnreachable { .. })), "{wrong:?}");
    let mut no_share = source.clone();
    no_share.share = Some("nothere".into());
    let wrong = sync(&no_share, PASSWORD, &mirror, &mut |_| {});
    assert!(matches!(wrong, Err(Error::SourceUnreachable { .. })), "{wrong:?}");
    let mut no_folder = source.clone();
    no_folder.path = "no/such/folder".into();
    let wrong = sync(&no_folder, PASSWORD, &mirror, &mut |_| {});
    assert!(matches!(wrong, Err(Error::SourceUnreachable { .. })), "{wrong:?}");
    assert_eq!(tree(mirror.root()), before);

    // A folder inside the share as the source: mirror paths start below it.
    let mut sub = source.clone();
    sub.path = "/sub/".into();
    let sub_mirror = Mirror::open(share_dir.path().join("sub-mirror")).unwrap();
    let report = sync(&sub, PASSWORD, &sub_mirror, &mut |_| {}).expect("a sub-folder source");
    assert_eq!((report.listed, report.fetched), (2, 2), "{report:?}");
    assert_eq!(tree(sub_mirror.root()), tree(&share.join("sub")));
}

#[test]
fn a_server_that_never_answers_is_unreachable_within_the_time_limit() {
    if !Path::new("/usr/sbin/smbd").exists() {
        eprintln!("SKIPPED: /usr/sbin/smbd is not installed (scripts/setup/smb-server.sh installs it)");
        return;
    }
    // Accepts the connection, then says nothing.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        if let Ok((_socket, _)) = listener.accept() {
            std::thread::sleep(Duration::from_secs(5));
        }
    });
    let text = format!("name = \"mute\"\nkind = \"smb\"\nhost = \"127.0.0.1\"\nport = {port}\nuser = \"reader\"\nshare = \"docs\"\ntimeout_ms = 500\n");
    let source: SourceConfig = toml::from_str(&text).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mirror = Mirror::open(dir.path().join("mirror")).unwrap();
    fs::write(mirror.root().join("kept.md"), b"kept").unwrap();
    let t = Instant::now();
    let result = sync(&source, PASSWORD, &mirror, &mut |_| {});
    let took = t.elapsed();
    assert!(matches!(result, Err(Error::SourceUnreachable { .. })), "{result:?}");
    assert!(took < Duration::from_secs(3), "the step's time limit holds: {took:?}");
    assert_eq!(fs::read(mirror.root().join("kept.md")).unwrap(), b"kept");
}

#[test]
fn an_unchanged_share_of_1000_files_syncs_quickly() {
    // Flat-ish (20 folders of 50) and deep (200 folders of 5, two levels down).
    for (label, folder) in [("20 folders", (|i: u64| format!("dir{:02}", i % 20)) as fn(u64) -> String), ("200 nested folders", |i| format!("d{:02}/e{}", i % 40, i % 5))] {
        let share_dir = tempfile::tempdir().unwrap();
        let share = share_dir.path().join("share");
        for i in 0..1000u64 {
            put(&share, &format!("{}/doc-{i:04}.md", folder(i)), format!("document {i}\n").as_bytes(), at(1_700_000_000 + i));
        }
        let Some(server) = Samba::start(&share) else { return };
        let source = source(&server);
        let mirror = Mirror::open(share_dir.path().join("mirror")).unwrap();

        let t = Instant::now();
        let first = run(&source, &mirror).0.expect("the first sync");
        let first_time = t.elapsed();
        assert_eq!((first.listed, first.fetched), (1000, 1000), "{first:?}");

        let t = Instant::now();
        let again = run(&source, &mirror).0.expect("the unchanged sync");
        let unchanged_time = t.elapsed();
        assert_eq!((again.listed, again.fetched, again.unchanged), (1000, 0, 1000), "{again:?}");
        eprintln!("smb: 1,000 files in {label}: first sync {first_time:.2?}, unchanged sync {unchanged_time:.2?}");
    }
}
