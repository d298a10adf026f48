//! Faults: a disk that fills during ingest, a read-only data folder, a damaged catalog,
//! two processes ingesting one tenant at once. Each must end with a clear message and a store
//! whose catalog and indexes agree, with nothing acknowledged lost and nothing duplicated.
//!
//! The disk-full and read-only tests mount a small tmpfs inside a private mount namespace
//! (`unshare --mount`), which needs root (CI runs as root); elsewhere they print why they skip.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use ragbox_core::store::{DocumentStatus, Store, VectorOptions};

use crate::common::{copy_tree, models_dir, ragbox, run};
use crate::ingest::sample_corpus;

fn open_store(data: &Path) -> Store {
    Store::open(data, VectorOptions::default()).expect("store opens")
}

/// Indexed document paths of the default tenant (empty when it does not exist yet).
fn indexed(data: &Path) -> BTreeSet<PathBuf> {
    let store = open_store(data);
    let Some(t) = store.catalog().tenant("default").unwrap() else { return BTreeSet::new() };
    store
        .catalog()
        .documents(t.id)
        .unwrap()
        .into_iter()
        .filter(|d| d.status == DocumentStatus::Indexed)
        .map(|d| d.path)
        .collect()
}

/// Opens a reader (which repairs lagging indexes, as every command does), then checks that the
/// catalog and both indexes hold the same chunks with no duplicate.
fn assert_consistent(data: &Path, what: &str) {
    let store = open_store(data);
    let Some(t) = store.catalog().tenant("default").unwrap() else { return };
    drop(store.reader(&t).unwrap());
    let t = store.catalog().require_tenant("default").unwrap();
    let c = store.check_consistency(&t).unwrap();
    assert!(c.consistent && c.duplicate_lexical == 0, "{what}: {c:?}");
}

/// Documents acknowledged in a `-v` ingest's stderr.
fn acknowledged(stderr: &str) -> BTreeSet<PathBuf> {
    stderr
        .lines()
        .filter_map(|l| l.strip_prefix("committed added ").or_else(|| l.strip_prefix("committed updated ")))
        .map(PathBuf::from)
        .collect()
}

/// Whether this process may mount file systems in a private namespace; the reason when not.
fn can_mount() -> Result<(), String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err("not root: mounting a tmpfs in a private mount namespace needs root".into());
    }
    let probe = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c", "d=$(mktemp -d) && mount -t tmpfs -o size=1m tmpfs \"$d\" && umount \"$d\" && rmdir \"$d\""])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output();
    match probe {
        Ok(o) if o.status.success() => Ok(()),
        Ok(o) => Err(format!("cannot mount a tmpfs here: {}", String::from_utf8_lossy(&o.stderr).trim())),
        Err(e) => Err(format!("no unshare: {e}")),
    }
}

/// Runs `script` with bash in a private mount namespace, with the ragbox environment of the tests.
fn in_mount_namespace(script: &str, args: &[&Path]) -> (i32, String, String) {
    let mut cmd = Command::new("unshare");
    cmd.args(["--mount", "--propagation", "private", "bash", "-euc", script, "fault-test"]);
    cmd.args(args);
    cmd.env("RAGBOX_BIN", env!("CARGO_BIN_EXE_ragbox"))
        .env("RAGBOX_MODELS_DIR", models_dir())
        .env_remove("RAGBOX_CONFIG")
        .env_remove("RAGBOX_LOG")
        .env_remove("RAGBOX_DATA_DIR");
    run(&mut cmd)
}

/// A small part of the sample corpus (three parsers, a few dozen chunks) and a config that
/// commits every few chunks, so that a fault lands between commits.
fn small_corpus_and_config(tmp: &Path) -> (PathBuf, PathBuf) {
    let corpus = tmp.join("corpus");
    for part in ["policies", "email"] {
        copy_tree(&sample_corpus().join(part), &corpus.join(part));
    }
    let config = tmp.join("small-commits.toml");
    std::fs::write(&config, "[ingest]\ncommit_chunks = 6\n").unwrap();
    (corpus, config)
}

#[test]
fn disk_full_during_ingest_loses_nothing_and_the_next_run_finishes() {
    if let Err(why) = can_mount() {
        eprintln!("skipped: {why}");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let (_, config) = small_corpus_and_config(tmp.path());
    // 240 small documents: ingest commits after each batch of 64 files parsed, so the disk fills
    // after some documents are acknowledged.
    let corpus = tmp.path().join("many");
    crate::common::notices(&corpus, 240);
    let (mnt, out) = (tmp.path().join("mnt"), tmp.path().join("out"));
    std::fs::create_dir_all(&mnt).unwrap();
    std::fs::create_dir_all(&out).unwrap();
    // A 32 MiB tmpfs, filled but for 1 MiB: the first commits fit, a later one does not. Then
    // the filler goes (space freed) and ingest runs again. Copies of the data folder after each
    // run are left in OUT for the checks below (the tmpfs dies with the namespace).
    let script = r#"
mnt=$1; out=$2; corpus=$3; config=$4
mount -t tmpfs -o size=32m tmpfs "$mnt"
avail=$(df -B1 --output=avail "$mnt" | tail -1)
fallocate -l $((avail - 1048576)) "$mnt/filler"
set +e
RAGBOX_DATA_DIR="$mnt/data" "$RAGBOX_BIN" --config "$config" ingest -v "$corpus" >"$out/first.out" 2>"$out/first.err"
echo $? >"$out/first.code"
set -e
cp -a "$mnt/data" "$out/after-full"
rm "$mnt/filler"
set +e
RAGBOX_DATA_DIR="$mnt/data" "$RAGBOX_BIN" --config "$config" ingest -v "$corpus" >"$out/second.out" 2>"$out/second.err"
echo $? >"$out/second.code"
set -e
cp -a "$mnt/data" "$out/after-retry"
"#;
    let (code, stdout, stderr) = in_mount_namespace(script, &[&mnt, &out, &corpus, &config]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    let read = |name: &str| std::fs::read_to_string(out.join(name)).unwrap();
    let (first_code, first_err) = (read("first.code"), read("first.err"));
    assert_eq!(first_code.trim(), "3", "a full disk is a runtime error: {first_err}");
    let data_on_mount = mnt.join("data");
    assert!(
        first_err.contains("no space left on the device holding the data folder") && first_err.contains(&format!("{data_on_mount:?}")),
        "the error names the data folder: {first_err}"
    );
    assert!(first_err.contains("run the command again"), "{first_err}");

    // Nothing acknowledged before the disk filled is lost; the store is consistent (after the
    // repair any command makes on open).
    let acked = acknowledged(&first_err);
    let full = out.join("after-full");
    let present = indexed(&full);
    assert!(acked.is_subset(&present), "acknowledged but lost: {:?}", acked.difference(&present));
    assert_consistent(&full, "after the disk filled");

    // With space freed, the next run finishes the job: every document, each once.
    let (second_code, second_err) = (read("second.code"), read("second.err"));
    assert_eq!(second_code.trim(), "0", "{second_err}");
    let retry = out.join("after-retry");
    let all = indexed(&retry);
    assert_eq!(all.len(), ragbox_core::source::walk::walk(&corpus, ragbox_core::source::walk::Links::Inside).count(), "{all:?}");
    assert_consistent(&retry, "after the next run");
    eprintln!("disk full: {} documents acknowledged before the disk filled, {} after the retry", acked.len(), all.len());
    eprintln!("disk full: the first run said: {}", first_err.lines().last().unwrap_or_default());
    assert!(!acked.is_empty() && acked.len() < all.len(), "the disk filled between commits: {} of {}", acked.len(), all.len());
}

#[test]
fn a_read_only_data_folder_is_refused_at_start() {
    let tmp = tempfile::tempdir().unwrap();
    let (corpus, data) = (tmp.path().join("corpus"), tmp.path().join("data"));
    std::fs::create_dir_all(&corpus).unwrap();
    std::fs::write(corpus.join("a.md"), "# A\n\nThe read-only test document.\n").unwrap();
    let (code, _, err) = run(ragbox(&data).arg("ingest").arg(&corpus));
    assert_eq!(code, 0, "{err}");

    match can_mount() {
        Ok(()) => {
            // The data folder on a tmpfs remounted read-only.
            let mnt = tmp.path().join("mnt");
            std::fs::create_dir_all(&mnt).unwrap();
            let script = r#"
mnt=$1; data=$2; corpus=$3
mount -t tmpfs -o size=16m tmpfs "$mnt"
cp -a "$data" "$mnt/data"
mount -o remount,ro "$mnt"
for cmd in "ingest $corpus" "ls"; do
  set +e
  RAGBOX_DATA_DIR="$mnt/data" "$RAGBOX_BIN" $cmd 2>&1
  echo "exit $?"
  set -e
done
"#;
            let (code, out, err) = in_mount_namespace(script, &[&mnt, &data, &corpus]);
            assert_eq!(code, 0, "{out}{err}");
            assert_eq!(out.matches("exit 3").count(), 2, "both refused: {out}");
            assert_eq!(out.matches("is not writable").count(), 2, "{out}");
            assert!(out.contains("Read-only file system"), "the system's reason is given: {out}");
            assert!(out.contains("--data-dir"), "and what to do: {out}");
        }
        Err(why) if unsafe { libc::geteuid() } == 0 => eprintln!("skipped the read-only mount: {why}"),
        Err(_) => {
            // Not root: permissions do it.
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o555)).unwrap();
            let (code, _, err) = run(ragbox(&data).arg("ls"));
            std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o755)).unwrap();
            assert_eq!(code, 3, "{err}");
            assert!(err.contains("is not writable") && err.contains("ermission denied"), "{err}");
        }
    }
}

#[test]
fn a_damaged_catalog_is_detected_at_open_with_the_command_that_restores_it() {
    let tmp = tempfile::tempdir().unwrap();
    let (corpus, data) = (tmp.path().join("corpus"), tmp.path().join("data"));
    copy_tree(&sample_corpus().join("policies"), &corpus);
    let (code, _, err) = run(ragbox(&data).arg("ingest").arg(&corpus));
    assert_eq!(code, 0, "{err}");
    let catalog = data.join("catalog.sqlite");
    assert!(!data.join("catalog.sqlite-wal").exists() || std::fs::metadata(data.join("catalog.sqlite-wal")).unwrap().len() == 0);
    let good = std::fs::read(&catalog).unwrap();

    let damage = |name: &str, bytes: Vec<u8>| {
        std::fs::write(&catalog, bytes).unwrap();
        let (code, _, err) = run(ragbox(&data).arg("ls"));
        assert_eq!(code, 3, "{name}: {err}");
        assert!(err.contains("is damaged") && err.contains("ragbox restore BACKUP_DIR --force"), "{name}: {err}");
        assert!(err.contains("catalog.sqlite"), "{name}: names the file: {err}");
        let (code, _, err) = run(ragbox(&data).arg("ingest").arg(&corpus));
        assert_eq!(code, 3, "{name}: ingest refuses too: {err}");
    };
    // The header overwritten: not a database any more.
    let mut header = good.clone();
    header[..64].copy_from_slice(&[0x5a; 64]);
    damage("header", header);
    // A page in the middle overwritten: found by the integrity check on open.
    let page = 4096;
    let mut middle = good.clone();
    let pages = middle.len() / page;
    assert!(pages >= 4, "{pages} pages");
    for p in [pages / 2, pages / 2 + 1] {
        for (i, b) in middle[p * page..(p + 1) * page].iter_mut().enumerate() {
            *b = (i as u8).wrapping_mul(151).wrapping_add(7);
        }
    }
    damage("middle pages", middle);
    // Put back, it works again.
    std::fs::write(&catalog, &good).unwrap();
    let (code, _, err) = run(ragbox(&data).arg("ls"));
    assert_eq!(code, 0, "{err}");
}

#[test]
fn two_ingests_of_one_tenant_at_once_end_consistent_without_duplicates() {
    let tmp = tempfile::tempdir().unwrap();
    let (corpus, config) = small_corpus_and_config(tmp.path());
    let data = tmp.path().join("data");
    let start = || {
        ragbox(&data)
            .arg("--config")
            .arg(&config)
            .args(["ingest", "-v"])
            .arg(&corpus)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (a, b) = (start(), start());
    let outputs = [a.wait_with_output().unwrap(), b.wait_with_output().unwrap()];
    let mut finished = 0;
    for o in &outputs {
        let err = String::from_utf8_lossy(&o.stderr);
        match o.status.code() {
            Some(0) => finished += 1,
            // The other one held the tenant longer than a writer waits: a clear refusal.
            Some(2) => assert!(err.contains("another ragbox process is writing to tenant `default`"), "{err}"),
            other => panic!("exit {other:?}: {err}"),
        }
    }
    assert!(finished >= 1, "at least one finishes");
    let files = ragbox_core::source::walk::walk(&corpus, ragbox_core::source::walk::Links::Inside).count();
    let docs = indexed(&data);
    assert_eq!(docs.len(), files, "every document once: {docs:?}");
    assert_consistent(&data, "after two concurrent ingests");
    // The catalog holds each path once, and a third run has nothing to do.
    let store = open_store(&data);
    let t = store.catalog().require_tenant("default").unwrap();
    let rows = store.catalog().documents(t.id).unwrap();
    let paths: BTreeSet<&PathBuf> = rows.iter().map(|d| &d.path).collect();
    assert_eq!(paths.len(), rows.len(), "no duplicated document");
    let (code, out, err) = run(ragbox(&data).args(["ingest", "--json"]).arg(&corpus));
    assert_eq!(code, 0, "{err}");
    let report: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!((report["unchanged"].as_u64(), report["added"].as_u64()), (Some(files as u64), Some(0)), "{report}");
}
