//! Online backup and restore of a data folder.
//!
//! [`Store::backup`] takes every tenant's write lock (writers wait; readers, and so a running
//! server's searches, go on), brings each tenant's indexes to the catalog's generation, copies the
//! catalog with SQLite's online backup API (a consistent snapshot even while other connections
//! write sessions, answers or audit events), then copies each tenant's index files, which no
//! writer can change while the locks are held. So the copy's indexes are at exactly the copy's
//! catalog generations.
//! A manifest ([`MANIFEST_FILE`]) written last lists every file with its size and sha256; a folder
//! without it is an unfinished backup.
//!
//! [`restore`] checks every file of a backup against its manifest, copies it into a staging folder
//! inside the data folder, and only then moves it into place; it refuses a data folder that holds
//! anything unless asked to replace it. It ends by opening the restored store (which migrates a
//! catalog of an older schema, as every open does) and checking that each tenant's catalog and
//! indexes agree.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::Digest;

use super::layout::{CATALOG_FILE, TENANTS_DIR};
use super::{Store, VectorOptions, WRITER_WAIT};
use crate::error::{Error, Result};

/// The manifest's file name, in the backup folder.
pub const MANIFEST_FILE: &str = "ragbox-backup.json";
/// Version of the backup format.
pub const BACKUP_FORMAT: u32 = 1;

/// A tenant as it is in a backup.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TenantState {
    /// Name.
    pub name: String,
    /// Active embedding model.
    pub model: String,
    /// Catalog generation (and that of the indexes copied with it).
    pub generation: u64,
    /// Documents.
    pub documents: usize,
    /// Child chunks.
    pub chunks: usize,
}

/// One file of a backup.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileEntry {
    /// Path relative to the backup (and data) folder, `/`-separated.
    pub path: String,
    /// Size in bytes.
    pub bytes: u64,
    /// sha256, hex.
    pub sha256: String,
}

/// What a backup holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackupManifest {
    /// [`BACKUP_FORMAT`].
    pub format: u32,
    /// The ragbox version that wrote it.
    pub ragbox_version: String,
    /// Seconds since the epoch when it was taken.
    pub created_unix_s: u64,
    /// The data folder it was taken from.
    pub source: PathBuf,
    /// Tenants, by name.
    pub tenants: Vec<TenantState>,
    /// Files, the catalog first.
    pub files: Vec<FileEntry>,
}

impl BackupManifest {
    /// Total bytes of the files.
    pub fn bytes(&self) -> u64 {
        self.files.iter().map(|f| f.bytes).sum()
    }
}

/// Copies `from` to `to` (created, fsynced), returning its size and sha256.
fn copy_hashed(from: &Path, to: &Path) -> Result<(u64, String)> {
    if let Some(dir) = to.parent() {
        std::fs::create_dir_all(dir).map_err(Error::path(dir))?;
    }
    let mut src = std::fs::File::open(from).map_err(Error::path(from))?;
    let mut dst = std::fs::File::create(to).map_err(Error::path(to))?;
    let mut hasher = sha2::Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut bytes = 0u64;
    loop {
        let n = src.read(&mut buf).map_err(Error::path(from))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        dst.write_all(&buf[..n]).map_err(Error::path(to))?;
        bytes += n as u64;
    }
    dst.sync_all().map_err(Error::path(to))?;
    Ok((bytes, hex::encode(hasher.finalize())))
}

fn hash_file(path: &Path) -> Result<(u64, String)> {
    let mut f = std::fs::File::open(path).map_err(Error::path(path))?;
    let mut hasher = sha2::Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut bytes = 0u64;
    loop {
        let n = f.read(&mut buf).map_err(Error::path(path))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        bytes += n as u64;
    }
    Ok((bytes, hex::encode(hasher.finalize())))
}

/// Files under `dir`, relative to `root`, sorted; lock and temporary files left out.
fn index_files(root: &Path, dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    if !dir.exists() {
        return Ok(());
    }
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .map_err(Error::path(dir))?
        .collect::<std::io::Result<Vec<_>>>()
        .map_err(Error::path(dir))?;
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let path = e.path();
        let name = e.file_name().to_string_lossy().into_owned();
        if path.is_dir() {
            index_files(root, &path, out)?;
        } else if !(name.ends_with(".lock") || name.contains(".tmp")) {
            out.push(path.strip_prefix(root).map_err(|e| Error::Bug(e.to_string()))?.to_path_buf());
        }
    }
    Ok(())
}

fn relative(path: &Path) -> String {
    path.components().map(|c| c.as_os_str().to_string_lossy()).collect::<Vec<_>>().join("/")
}

/// Whether `dir` is missing or an empty folder.
fn is_empty_dir(dir: &Path) -> Result<bool> {
    match std::fs::read_dir(dir) {
        Ok(mut entries) => Ok(entries.next().is_none()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(true),
        Err(e) => Err(Error::Path { path: dir.to_path_buf(), source: e }),
    }
}

fn sync_dir(dir: &Path) {
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
}

impl Store {
    /// Backs the data folder up into `dest` (a new or empty folder) while it stays in use: see
    /// the module docs. Writers wait for it (up to their lock timeout).
    pub fn backup(&self, dest: &Path) -> Result<BackupManifest> {
        if self.catalog.sqlite().is_none() {
            return Err(Error::Invalid(format!(
                "the catalog is on {}: back it up with the server's own tools (pg_dump, and Milvus's backup), or `ragbox migrate --to local` and back that up",
                self.catalog.path().display()
            )));
        }
        if !is_empty_dir(dest)? {
            return Err(Error::Invalid(format!("the backup folder {dest:?} is not empty; give a new or empty folder")));
        }
        std::fs::create_dir_all(dest).map_err(Error::path(dest))?;
        // Every tenant's write lock, in name order (writers take one lock only, so no deadlock),
        // including tenants created while the locks were being taken.
        let mut locked: Vec<String> = Vec::new();
        let mut locks = Vec::new();
        loop {
            let names: Vec<String> = self.catalog.tenants()?.into_iter().map(|t| t.name).filter(|n| !locked.contains(n)).collect();
            if names.is_empty() {
                break;
            }
            for name in names {
                locks.push(self.lock(&name, WRITER_WAIT)?);
                locked.push(name);
            }
        }
        let mut tenants = Vec::new();
        for t in self.catalog.tenants()? {
            // Indexes that lag the catalog (a crash mid-commit) are brought up to it first.
            self.open_vector(&t, &t.model, t.dims, false)?;
            self.open_lexical(&t)?;
            let (documents, _, _, chunks) = self.catalog.counts(t.id)?;
            tenants.push(TenantState { name: t.name.clone(), model: t.model.clone(), generation: t.generation, documents, chunks });
        }
        let catalog_copy = dest.join(CATALOG_FILE);
        {
            let conn = self.catalog.sqlite().ok_or_else(|| Error::Bug("a SQLite catalog was checked above".into()))?;
            conn.backup(rusqlite::MAIN_DB, &catalog_copy, None)?;
        }
        // The copy is a complete database on its own: check it, and make it durable.
        {
            let copy = rusqlite::Connection::open(&catalog_copy)?;
            let verdict: String = copy.query_row("PRAGMA quick_check(1)", [], |r| r.get(0))?;
            if verdict != "ok" {
                return Err(Error::CatalogDamaged { path: self.catalog.path().to_path_buf(), detail: verdict });
            }
            // A single file (no -wal beside it); opening it as a catalog switches it back to WAL.
            let _: String = copy.query_row("PRAGMA journal_mode = DELETE", [], |r| r.get(0))?;
        }
        let (bytes, sha256) = hash_file(&catalog_copy)?;
        let mut files = vec![FileEntry { path: CATALOG_FILE.to_string(), bytes, sha256 }];
        let root = self.layout.root();
        let mut rel = Vec::new();
        index_files(root, &root.join(TENANTS_DIR), &mut rel)?;
        for r in rel {
            let (bytes, sha256) = copy_hashed(&root.join(&r), &dest.join(&r))?;
            files.push(FileEntry { path: relative(&r), bytes, sha256 });
        }
        drop(locks);
        let manifest = BackupManifest {
            format: BACKUP_FORMAT,
            ragbox_version: env!("CARGO_PKG_VERSION").to_string(),
            created_unix_s: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            source: root.to_path_buf(),
            tenants,
            files,
        };
        let json = serde_json::to_vec_pretty(&manifest).map_err(|e| Error::Bug(e.to_string()))?;
        super::layout::write_atomically(&dest.join(MANIFEST_FILE), &json)?;
        sync_dir(dest);
        Ok(manifest)
    }
}

/// Reads a backup's manifest and checks every file against it (size and sha256).
pub fn verify(src: &Path) -> Result<BackupManifest> {
    let manifest = read_manifest(src)?;
    for f in &manifest.files {
        let (bytes, sha256) = hash_file(&src.join(&f.path))?;
        if bytes != f.bytes || sha256 != f.sha256 {
            return Err(damaged_file(src, f, bytes, &sha256));
        }
    }
    Ok(manifest)
}

fn read_manifest(src: &Path) -> Result<BackupManifest> {
    let path = src.join(MANIFEST_FILE);
    let text = std::fs::read(&path).map_err(|e| {
        Error::Invalid(format!("{src:?} is not a complete ragbox backup ({MANIFEST_FILE}: {e}); `ragbox backup DEST` makes one"))
    })?;
    let manifest: BackupManifest =
        serde_json::from_slice(&text).map_err(|e| Error::Invalid(format!("{path:?} is not a backup manifest: {e}")))?;
    if manifest.format != BACKUP_FORMAT {
        return Err(Error::Invalid(format!("{path:?} is backup format {}, this ragbox reads {BACKUP_FORMAT}", manifest.format)));
    }
    if manifest.files.iter().any(|f| f.path.split('/').any(|c| c == ".." || c.is_empty()) || f.path.starts_with('/')) {
        return Err(Error::Invalid(format!("{path:?} names a file outside the backup")));
    }
    Ok(manifest)
}

fn damaged_file(src: &Path, f: &FileEntry, bytes: u64, sha256: &str) -> Error {
    Error::Invalid(format!(
        "backup file {:?} is damaged: {bytes} bytes with sha256 {sha256}, the manifest says {} bytes with {}; the backup cannot be restored",
        src.join(&f.path),
        f.bytes,
        f.sha256
    ))
}

/// What a restore did.
#[derive(Debug, Clone, Serialize)]
pub struct RestoreReport {
    /// The backup's manifest.
    pub manifest: BackupManifest,
    /// The data folder restored into.
    pub data_dir: PathBuf,
    /// Whether something there was replaced.
    pub replaced: bool,
}

/// Restores the backup in `src` into `data_dir`: see the module docs. Without `force`, a data
/// folder that holds anything is refused. Stop every ragbox process using `data_dir` first.
pub fn restore(src: &Path, data_dir: &Path, force: bool) -> Result<RestoreReport> {
    let manifest = read_manifest(src)?;
    let replaced = !is_empty_dir(data_dir)?;
    if replaced && !force {
        return Err(Error::Invalid(format!(
            "the data folder {data_dir:?} is not empty; restore into a new or empty folder, or pass --force to replace its catalog and indexes"
        )));
    }
    std::fs::create_dir_all(data_dir).map_err(Error::path(data_dir))?;
    let staging = data_dir.join(format!(".restore-{}", std::process::id()));
    if staging.exists() {
        std::fs::remove_dir_all(&staging).map_err(Error::path(&staging))?;
    }
    let staged = (|| {
        for f in &manifest.files {
            let (bytes, sha256) = copy_hashed(&src.join(&f.path), &staging.join(&f.path))?;
            if bytes != f.bytes || sha256 != f.sha256 {
                return Err(damaged_file(src, f, bytes, &sha256));
            }
        }
        Ok(())
    })();
    if let Err(e) = staged {
        let _ = std::fs::remove_dir_all(&staging);
        return Err(e);
    }
    // Everything is checked and staged: swap it in.
    let catalog = data_dir.join(CATALOG_FILE);
    for suffix in ["", "-wal", "-shm", "-journal"] {
        let p = PathBuf::from(format!("{}{suffix}", catalog.display()));
        if p.exists() {
            std::fs::remove_file(&p).map_err(Error::path(&p))?;
        }
    }
    let tenants = data_dir.join(TENANTS_DIR);
    if tenants.exists() {
        std::fs::remove_dir_all(&tenants).map_err(Error::path(&tenants))?;
    }
    std::fs::rename(staging.join(CATALOG_FILE), &catalog).map_err(Error::path(&catalog))?;
    if staging.join(TENANTS_DIR).exists() {
        std::fs::rename(staging.join(TENANTS_DIR), &tenants).map_err(Error::path(&tenants))?;
    }
    std::fs::remove_dir_all(&staging).map_err(Error::path(&staging))?;
    sync_dir(data_dir);
    // The restored store must open with every tenant's indexes in step with its catalog.
    let store = Store::open(data_dir, VectorOptions::default())?;
    for t in &manifest.tenants {
        let row = store.catalog().require_tenant(&t.name)?;
        let c = store.check_consistency(&row)?;
        if row.generation != t.generation || !c.consistent {
            return Err(Error::Bug(format!(
                "restored tenant `{}` is not consistent (generation {} for {} in the manifest): {c:?}",
                t.name, row.generation, t.generation
            )));
        }
    }
    Ok(RestoreReport { manifest, data_dir: data_dir.to_path_buf(), replaced })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_and_damage() {
        let tmp = tempfile::tempdir().unwrap();
        let data = tmp.path().join("data");
        let store = Store::open(&data, VectorOptions::default()).unwrap();
        store.tenant_for_model("t", "m", 8).unwrap();
        let dest = tmp.path().join("backup");
        std::fs::create_dir_all(&dest).unwrap();
        std::fs::write(dest.join("x"), b"x").unwrap();
        assert!(store.backup(&dest).unwrap_err().to_string().contains("not empty"));
        std::fs::remove_file(dest.join("x")).unwrap();
        let m = store.backup(&dest).unwrap();
        assert_eq!(m.tenants.len(), 1);
        assert_eq!(m.files[0].path, CATALOG_FILE);
        assert_eq!(verify(&dest).unwrap(), m);

        // Into a fresh folder; an occupied one needs force.
        let fresh = tmp.path().join("fresh");
        restore(&dest, &fresh, false).unwrap();
        let e = restore(&dest, &fresh, false).unwrap_err().to_string();
        assert!(e.contains("--force"), "{e}");
        assert!(restore(&dest, &fresh, true).unwrap().replaced);
        assert_eq!(Store::open(&fresh, VectorOptions::default()).unwrap().catalog().require_tenant("t").unwrap().model, "m");

        // A damaged file is found before anything is touched.
        let cat = dest.join(CATALOG_FILE);
        let mut bytes = std::fs::read(&cat).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 0xff;
        std::fs::write(&cat, bytes).unwrap();
        assert!(verify(&dest).unwrap_err().to_string().contains("damaged"));
        let e = restore(&dest, &tmp.path().join("other"), false).unwrap_err().to_string();
        assert!(e.contains("is damaged"), "{e}");
        assert!(restore(tmp.path(), &tmp.path().join("x"), false).unwrap_err().to_string().contains("not a complete ragbox backup"));
    }

    #[test]
    fn a_schema_1_backup_is_migrated_when_restored() {
        use super::super::schema::tests::{v1_catalog, V1_ANSWER};
        let tmp = tempfile::tempdir().unwrap();
        let data = tmp.path().join("data");
        let store = Store::open(&data, VectorOptions::default()).unwrap();
        store.tenant_for_model("t", "m", 8).unwrap();
        let dest = tmp.path().join("backup");
        store.backup(&dest).unwrap();
        // The backup's catalog as a schema 1 ragbox wrote it (the answer log in `audit`), with
        // the manifest to match.
        let old = tmp.path().join("old").join(CATALOG_FILE);
        std::fs::create_dir_all(old.parent().unwrap()).unwrap();
        v1_catalog(&old);
        std::fs::copy(&old, dest.join(CATALOG_FILE)).unwrap();
        let mut manifest = read_manifest(&dest).unwrap();
        (manifest.files[0].bytes, manifest.files[0].sha256) = hash_file(&dest.join(CATALOG_FILE)).unwrap();
        std::fs::write(dest.join(MANIFEST_FILE), serde_json::to_vec_pretty(&manifest).unwrap()).unwrap();

        let fresh = tmp.path().join("fresh");
        restore(&dest, &fresh, false).unwrap();
        let restored = Store::open(&fresh, VectorOptions::default()).unwrap();
        let version: String =
            restored.catalog().conn().query_row("SELECT value FROM meta WHERE key = 'schema_version'", [], |r| r.get(0)).unwrap();
        assert_eq!(version, "2");
        let answer = restored.catalog().answers().get(V1_ANSWER).unwrap().expect("the answer came through the restore");
        assert_eq!(answer.feedback.len(), 1);
        assert_eq!(restored.catalog().sessions().recent_turns(7, 5).unwrap()[0].answer_id, Some(V1_ANSWER));
        assert!(restored.catalog().audit().verify().unwrap().broken.is_none());
    }
}
