//! Backup and restore: ingest the sample corpus, back it up, restore it into a fresh
//! data folder, and get the same search results (chunk ids and order) from a consistent store
//! whose audit chain verifies.

use std::path::Path;

use ragbox_core::store::{Store, VectorOptions};

use crate::common::{copy_tree, ragbox, run};
use crate::ingest::sample_corpus;

/// Chunk ids of `ragbox search --json` hits, in rank order.
fn search_ids(data: &Path, query: &str) -> Vec<i64> {
    let (code, out, err) = run(ragbox(data).args(["search", "--json", "--no-rerank", "-k", "8", query]));
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{out}: {e}"));
    v["retrieval"]["hits"].as_array().unwrap().iter().map(|h| h["chunk"]["id"].as_i64().unwrap()).collect()
}

/// `ragbox audit verify --json`, which must find the chain intact.
fn audit_verify(data: &Path) -> serde_json::Value {
    let (code, out, err) = run(ragbox(data).args(["audit", "verify", "--json"]));
    assert_eq!(code, 0, "{out}{err}");
    serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{out}: {e}"))
}

#[test]
fn backup_then_restore_into_a_fresh_folder_gives_the_same_results() {
    let tmp = tempfile::tempdir().unwrap();
    let (corpus, data) = (tmp.path().join("corpus"), tmp.path().join("data"));
    copy_tree(&sample_corpus(), &corpus);
    let (code, _, err) = run(ragbox(&data).arg("ingest").arg(&corpus));
    assert_eq!(code, 0, "{err}");
    let queries = ["how long do we keep personal data", "travel expenses per diem", "who do I call when the scanner breaks", "fire drill"];
    let before: Vec<Vec<i64>> = queries.iter().map(|q| search_ids(&data, q)).collect();
    assert!(before.iter().all(|ids| !ids.is_empty()));

    // The audit chain as the backup will hold it (the backup's own event is written after it).
    let original_chain = audit_verify(&data);
    let dest = tmp.path().join("backup");
    let (code, out, err) = run(ragbox(&data).args(["backup", "--json"]).arg(&dest));
    assert_eq!(code, 0, "{err}");
    let manifest: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    let files = manifest["files"].as_array().unwrap();
    assert_eq!(files[0]["path"], "catalog.sqlite");
    assert!(files.iter().any(|f| f["path"].as_str().unwrap().ends_with(".usearch")), "{manifest}");
    assert!(files.iter().any(|f| f["path"].as_str().unwrap().contains("/lexical/")), "{manifest}");
    assert!(files.iter().all(|f| f["sha256"].as_str().unwrap().len() == 64));
    assert!(dest.join("ragbox-backup.json").exists());
    // Into the same folder again: refused.
    let (code, _, err) = run(ragbox(&data).arg("backup").arg(&dest));
    assert_eq!(code, 2, "{err}");

    // Restore into a fresh folder: same results, same ids, same order; a consistent store.
    let fresh = tmp.path().join("fresh");
    let (code, out, err) = run(ragbox(&fresh).arg("restore").arg(&dest));
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("restored into"), "{out}");
    // The hash-chained audit log came along whole: the restored chain verifies, row for row, up to
    // the backup; the original goes on with the two backup attempts, each on record.
    let restored_chain = audit_verify(&fresh);
    assert!(original_chain["rows"].as_u64().unwrap() > 0, "{original_chain}");
    assert_eq!((&restored_chain["rows"], &restored_chain["head"]), (&original_chain["rows"], &original_chain["head"]));
    assert_eq!(audit_verify(&data)["rows"].as_u64().unwrap(), original_chain["rows"].as_u64().unwrap() + 2);
    let (code, out, _) = run(ragbox(&data).args(["audit", "--json"]));
    assert_eq!(code, 0);
    let rows: Vec<serde_json::Value> = out.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let backups: Vec<&serde_json::Value> = rows.iter().filter(|r| r["action"] == "backup").collect();
    assert_eq!(backups.len(), 2, "{out}");
    assert_eq!(backups[0]["outcome"], "ok", "{out}");
    assert!(backups[1]["outcome"].as_str().unwrap().starts_with("error:"), "{out}");
    let after: Vec<Vec<i64>> = queries.iter().map(|q| search_ids(&fresh, q)).collect();
    assert_eq!(before, after);
    let store = Store::open(&fresh, VectorOptions::default()).unwrap();
    let t = store.catalog().require_tenant("default").unwrap();
    let c = store.check_consistency(&t).unwrap();
    assert!(c.consistent, "{c:?}");
    let original = Store::open(&data, VectorOptions::default()).unwrap();
    let o = original.catalog().require_tenant("default").unwrap();
    assert_eq!((t.generation, original.catalog().counts(o.id).unwrap()), (o.generation, store.catalog().counts(t.id).unwrap()));
    // The restored store did not need a repair: its indexes were at the catalog's generation.
    assert!(!store.reader(&t).unwrap().repair.any());
    assert_eq!(store.catalog().answers().list(t.id, 1000).unwrap().len(), original.catalog().answers().list(o.id, 1000).unwrap().len());

    // A used folder needs --force; a damaged backup is refused before anything is touched.
    let (code, _, err) = run(ragbox(&fresh).arg("restore").arg(&dest));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--force"), "{err}");
    let vector = std::fs::read_dir(dest.join("tenants/default/vector")).unwrap().map(|e| e.unwrap().path()).find(|p| p.extension().is_some_and(|x| x == "usearch")).unwrap();
    let mut bytes = std::fs::read(&vector).unwrap();
    bytes[100] ^= 1;
    std::fs::write(&vector, bytes).unwrap();
    let (code, _, err) = run(ragbox(&fresh).args(["restore", "--force"]).arg(&dest));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("is damaged"), "{err}");
    assert_eq!(after[0], search_ids(&fresh, queries[0]), "the refused restore left the folder as it was");
    // Rows appended after the restore extend the restored chain.
    assert!(audit_verify(&fresh)["rows"].as_u64().unwrap() > restored_chain["rows"].as_u64().unwrap());
}
