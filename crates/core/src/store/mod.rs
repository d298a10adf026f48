//! The store of a data folder: the catalog (truth) and, per tenant, the derived vector and
//! lexical indexes, kept in step by one commit protocol.
//!
//! May import `types` and `error` only; vectors come in as `&[f32]`, never from `embed`.
//!
//! **Commit protocol.** (1) One catalog transaction writes the documents, chunks and vectors and
//! bumps the tenant's generation to N+1. (2) The vector index is rewritten (temporary file,
//! fsync, rename) and its sidecar stamped N+1; the lexical index commits with payload N+1.
//! (3) The writer acknowledges. A crash before (1) ends leaves generation N everywhere; a crash
//! after it leaves an index behind the catalog, which the next open rebuilds from the catalog
//! (vectors from the embedding cache: a rebuild never re-embeds). So nothing acknowledged is lost
//! and nothing half-written is served.
//!
//! One writer per tenant at a time: [`Store::writer`] takes the tenant's write lock (a lock file in
//! the data folder; with the catalog on PostgreSQL, an advisory lock that every node sees and
//! that the server releases when its holder dies).
//!
//! **Faults.** Opening refuses a data folder it cannot write ([`Error::DataDirNotWritable`]) and a
//! damaged catalog ([`Error::CatalogDamaged`], naming `ragbox restore`). A write that fails for
//! want of space is reported as [`Error::DiskFull`] naming the data folder; the catalog
//! transaction rolls back or the index lags it, which the next open repairs, so freeing space and
//! running again finishes the job. [`backup`] copies a data folder online and restores it.

pub mod annotation;
pub mod backend;
pub mod backup;
pub mod catalog;
#[cfg(any(test, feature = "testing"))]
pub mod contract;
pub mod conversation;
pub mod events;
pub mod export;
pub mod keys;
pub mod layout;
pub mod lexical;
pub mod local;
pub mod migrate;
pub mod quota;
pub mod retention;
mod schema;
pub mod shared;
pub mod sql;
pub mod vector;

use std::collections::{BTreeSet, HashMap};
use std::fs::File;
use std::path::Path;
use std::sync::Arc;

use serde::Serialize;

use crate::access::AccessMap;

pub use annotation::Annotations;
pub use backend::{Backends, Committed, LexicalBackend, LexicalWrite, VectorBackend, VectorWriter};
pub use catalog::{
    Catalog, ChunkRow, CommitBatch, CommitChanges, AnnotatedChunk, DocumentContent, DocumentRow, DocumentStatus,
    DocumentWrite, IndexEntry, TenantRow,
};
pub use conversation::{AnswerRecord, AnswerRow, Answers, FeedbackRow, Rating, Sessions, TurnRow};
pub use crate::types::{text_hash, TextHash};
pub use events::{Audit, BrokenLink, ChainReport, EventFilter, EventRecord, EventRow};
pub use export::{ExportCounts, ExportFilter};
pub use keys::{KeyRole, KeyRow, Keys, KEY_PREFIX};
pub use layout::{check_tenant_name, Layout, DEFAULT_TENANT, SOURCES_DIR, TENANTS_DIR};
pub use local::{LocalLexical, LocalVectors};
pub use retention::{Hold, Reclaimed, Retention, RetentionReport};
pub use lexical::{LexicalHit, LexicalIndex, LexicalSearch, LexicalSearcher};
#[cfg(any(test, feature = "testing"))]
pub use vector::MemoryVectors;
pub use vector::{Quantization, VectorHit, VectorIndex, VectorMeta, VectorOptions, VectorSearch};

use crate::error::{Error, Result};
use crate::types::ChunkId;
use sql::Database;

/// Milliseconds since the epoch (0 if the clock is before it): the time every catalog row is
/// stamped with.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// How long a writer waits for a tenant's lock before giving up.
const WRITER_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// How long a reader waits out a writer's save (see [`Store::view_vector`]).
const READER_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// A data folder, open.
pub struct Store {
    layout: Layout,
    catalog: Catalog,
    backends: Backends,
    /// Each tenant's readers by chunk, with the (generation, readers version) it was read at.
    access: std::sync::Mutex<HashMap<i64, (u64, u64, Arc<AccessMap>)>>,
}

/// What opening a tenant's indexes found and fixed.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Repair {
    /// Why the vector index was rebuilt, if it was.
    pub vector: Option<String>,
    /// Why the lexical index was rebuilt, if it was.
    pub lexical: Option<String>,
}

impl Repair {
    /// Whether anything was rebuilt.
    pub fn any(&self) -> bool {
        self.vector.is_some() || self.lexical.is_some()
    }
}

/// The chunk-id sets of a tenant's catalog and indexes, compared.
#[derive(Debug, Clone, Serialize)]
pub struct Consistency {
    /// Catalog generation.
    pub generation: u64,
    /// Vector index generation (None: missing or damaged).
    pub vector_generation: Option<u64>,
    /// Lexical index generation.
    pub lexical_generation: Option<u64>,
    /// Child chunks in the catalog.
    pub catalog_children: usize,
    /// Vectors in the index.
    pub vector_count: usize,
    /// Chunks in the lexical index.
    pub lexical_count: usize,
    /// Catalog children missing from the vector index.
    pub missing_vectors: usize,
    /// Catalog children missing from the lexical index.
    pub missing_lexical: usize,
    /// Lexical entries that appear more than once.
    pub duplicate_lexical: usize,
    /// Whether all three agree exactly.
    pub consistent: bool,
}

impl Store {
    /// Opens (creating if needed) the data folder. Refuses one it cannot write, and a damaged
    /// catalog.
    pub fn open(data_dir: &Path, vector_options: VectorOptions) -> Result<Store> {
        Store::open_with(data_dir, Backends::local(&Layout::new(data_dir), vector_options))
    }

    /// Opens the data folder with its indexes kept by `backends` (the local files, or shared
    /// servers).
    pub fn open_with(data_dir: &Path, backends: Backends) -> Result<Store> {
        std::fs::create_dir_all(data_dir).map_err(|e| not_writable(data_dir, e))?;
        check_writable(data_dir)?;
        let layout = Layout::new(data_dir);
        let catalog = match &backends.catalog {
            Some(pg) => Catalog::on_postgres(pg.clone())?,
            None => Catalog::open(&layout.catalog()).map_err(|e| explain_write_error(data_dir, e))?,
        };
        backends.lexical.claim(&catalog.id()?)?;
        Ok(Store { layout, catalog, backends, access: Default::default() })
    }

    /// The readers of `tenant`'s chunks at its current generation and readers version (read from
    /// the catalog once per change, then shared): what the retriever's index filters ask.
    pub fn access_map(&self, tenant: &TenantRow) -> Result<Arc<AccessMap>> {
        let version = self.catalog.readers_version(tenant.id)?;
        if let Some((g, v, map)) = self.access.lock().unwrap_or_else(|e| e.into_inner()).get(&tenant.id) {
            if (*g, *v) == (tenant.generation, version) {
                return Ok(map.clone());
            }
        }
        let map = Arc::new(self.catalog.access_map(tenant)?);
        self.access.lock().unwrap_or_else(|e| e.into_inner()).insert(tenant.id, (tenant.generation, version, map.clone()));
        Ok(map)
    }

    /// Where the indexes live.
    pub fn backends(&self) -> &Backends {
        &self.backends
    }

    /// `e`, or [`Error::DiskFull`] naming the data folder when `e` is a write that failed for
    /// want of space.
    pub fn explain_write_error(&self, e: Error) -> Error {
        explain_write_error(self.layout.root(), e)
    }

    /// File layout.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The catalog.
    pub fn catalog(&self) -> &Catalog {
        &self.catalog
    }

    /// The tenant `name`, created for `model`/`dims` if it does not exist. An existing tenant
    /// built with another model is refused with the command that switches it.
    pub fn tenant_for_model(&self, name: &str, model: &str, dims: usize) -> Result<TenantRow> {
        check_tenant_name(name)?;
        match self.catalog.tenant(name)? {
            None => self.catalog.create_tenant(name, model, dims),
            Some(t) if t.model == model => Ok(t),
            Some(t) => Err(Error::IndexMismatch {
                path: self.layout.vector(name, &t.model),
                found: format!("tenant `{name}` embedded with {}", t.model),
                expected: format!("{model}; run `ragbox reembed --tenant {name} --model {model}` to switch it, or drop --model"),
            }),
        }
    }

    /// Takes the tenant's write lock, retrying for up to `wait` (readers hold it only while they
    /// repair an index; another writer holds it for a whole run). With the catalog in a data
    /// folder it is a lock file there; with the catalog on PostgreSQL, an advisory lock of a
    /// connection of its own, which the server lets go of when the holder dies.
    fn lock(&self, tenant: &str, wait: std::time::Duration) -> Result<WriteLock> {
        let started = std::time::Instant::now();
        let busy = |holder: &str| {
            Error::Invalid(format!("another ragbox process is writing to tenant `{tenant}` ({holder}); wait for it to finish"))
        };
        if let Database::Postgres(pg) = self.catalog.database() {
            let mut client = pg.dedicated("taking a tenant's write lock")?;
            let key = lock_key(tenant);
            loop {
                let got: bool = client
                    .query_one("SELECT pg_try_advisory_lock($1)", &[&key])
                    .map_err(|e| pg.failed("taking a tenant's write lock", &e))?
                    .get(0);
                if got {
                    return Ok(WriteLock::Advisory(client));
                }
                if started.elapsed() >= wait {
                    return Err(busy(&format!("advisory lock {key} on {}", pg.server())));
                }
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
        }
        let dir = self.layout.tenant(tenant);
        std::fs::create_dir_all(&dir).map_err(Error::path(&dir))?;
        let path = dir.join("write.lock");
        let f = File::options().create(true).truncate(false).write(true).open(&path).map_err(Error::path(&path))?;
        loop {
            match f.try_lock() {
                Ok(()) => return Ok(WriteLock::File(f)),
                Err(std::fs::TryLockError::WouldBlock) if started.elapsed() < wait => {
                    std::thread::sleep(std::time::Duration::from_millis(50));
                }
                Err(std::fs::TryLockError::WouldBlock) => return Err(busy(&format!("lock {path:?}"))),
                Err(std::fs::TryLockError::Error(e)) => return Err(Error::Path { path, source: e }),
            }
        }
    }

    /// Whether both of the tenant's indexes for its active model are whole and at `tenant`'s
    /// generation (as the caller just read it from the catalog).
    fn is_fresh(&self, tenant: &TenantRow) -> bool {
        let at = Committed::At(tenant.generation);
        self.backends.vectors.committed(tenant, &tenant.model, tenant.dims).is_ok_and(|c| c == at)
            && self.backends.lexical.committed(tenant).is_ok_and(|c| c == at)
    }

    /// Opens a tenant for writing: takes its lock, repairs its indexes for `tenant.model` if they
    /// lag the catalog, and loads them for changes.
    pub fn writer(&self, tenant: &TenantRow) -> Result<TenantWriter<'_>> {
        let lock = self.lock(&tenant.name, WRITER_WAIT)?;
        // Re-read the tenant under the lock: another writer may have committed meanwhile.
        let tenant = &self.catalog.require_tenant(&tenant.name)?;
        let (vector, repair_v) = self.open_vector(tenant, &tenant.model, tenant.dims, true)?;
        let vector = vector.ok_or_else(|| Error::Bug("no vector writer after opening with load".into()))?;
        let repair_l = self.open_lexical(tenant)?;
        let repair = Repair { vector: repair_v, lexical: repair_l };
        Ok(TenantWriter { store: self, tenant: tenant.clone(), vector, repair, _lock: lock })
    }

    /// Opens a tenant for reading with its active model's index. Lagging or damaged indexes are
    /// repaired first when no writer holds the tenant; otherwise the last committed indexes are
    /// served (hits are resolved through the catalog, so removed chunks never surface).
    pub fn reader(&self, tenant: &TenantRow) -> Result<TenantReader> {
        if let Some(reader) = self.fresh_reader(tenant) {
            return Ok(reader);
        }
        let repair = if self.is_fresh(tenant) {
            Repair::default()
        } else {
            match self.lock(&tenant.name, std::time::Duration::ZERO) {
            Ok(_lock) => {
                let tenant = &self.catalog.require_tenant(&tenant.name)?;
                let (_, v) = self.open_vector(tenant, &tenant.model, tenant.dims, false)?;
                let l = self.open_lexical(tenant)?;
                Repair { vector: v, lexical: l }
            }
            Err(Error::Invalid(_)) => Repair::default(),
            Err(e) => return Err(e),
            }
        };
        let tenant = &self.catalog.require_tenant(&tenant.name)?;
        let vector = self.view_vector(tenant)?;
        let lexical = self.backends.lexical.reader(tenant)?;
        Ok(TenantReader { tenant: tenant.clone(), vector, lexical, repair })
    }

    /// The common case of [`Store::reader`], each index opened once: both at `tenant`'s
    /// generation (as the caller just read it from the catalog) and whole. `None` sends the
    /// reader down the careful path (repair, a writer mid-save, a newer commit).
    fn fresh_reader(&self, tenant: &TenantRow) -> Option<TenantReader> {
        let vector = self.backends.vectors.reader_at(tenant, &tenant.model, tenant.dims, tenant.generation).ok()??;
        let lexical = self.backends.lexical.reader_at(tenant, tenant.generation).ok()??;
        Some(TenantReader { tenant: tenant.clone(), vector, lexical, repair: Repair::default() })
    }

    /// Opens the last commit of the tenant's vector index. A local writer's save replaces the
    /// index file and then its sidecar, so a reader that looks between the two renames sees a
    /// file its sidecar does not describe; while a writer holds the tenant such a failure is
    /// retried for up to [`READER_WAIT`], after which (or with no writer) it is reported.
    fn view_vector(&self, tenant: &TenantRow) -> Result<Box<dyn VectorSearch>> {
        let started = std::time::Instant::now();
        loop {
            match self.backends.vectors.reader(tenant, &tenant.model, tenant.dims) {
                Ok(reader) => return Ok(reader),
                Err(e) if started.elapsed() >= READER_WAIT || !self.writer_active(&tenant.name)? => return Err(e),
                Err(_) => std::thread::sleep(std::time::Duration::from_millis(10)),
            }
        }
    }

    /// Whether another writer holds the tenant's lock now.
    fn writer_active(&self, tenant: &str) -> Result<bool> {
        match self.lock(tenant, std::time::Duration::ZERO) {
            Ok(_lock) => Ok(false),
            Err(Error::Invalid(_)) => Ok(true),
            Err(e) => Err(e),
        }
    }

    /// Rebuilds the vector index of `model` from the catalog when it is missing, damaged, of
    /// another model, or behind the catalog; and why it was rebuilt. With `load`, also a writer
    /// over it (a whole index is loaded for changes only then: readers and backups repair and go).
    fn open_vector(&self, tenant: &TenantRow, model: &str, dims: usize, load: bool) -> Result<(Option<Box<dyn VectorWriter>>, Option<String>)> {
        let vectors = &self.backends.vectors;
        let problem = match vectors.committed(tenant, model, dims)? {
            Committed::At(g) if g == tenant.generation => {
                return Ok((if load { Some(vectors.writer(tenant, model, dims, false)?) } else { None }, None))
            }
            Committed::At(g) => Some(format!("at generation {g}, catalog at {}", tenant.generation)),
            Committed::Damaged(why) => Some(why),
            Committed::Missing if tenant.generation == 0 => None,
            Committed::Missing => Some(format!("no index in {}", vectors.describe())),
        };
        let mut index = vectors.writer(tenant, model, dims, true)?;
        if let Some(why) = &problem {
            tracing::warn!(tenant = %tenant.name, model, "rebuilding the vector index from the catalog: {why}");
            let entries = self.catalog.index_entries(tenant.id)?;
            let hashes: Vec<TextHash> = entries.iter().map(|e| e.hash).collect();
            let vectors = self.catalog.vectors(model, &hashes)?;
            let missing = vectors.iter().filter(|v| v.is_none()).count();
            if missing > 0 {
                return Err(Error::Invalid(format!(
                    "{missing} chunks of tenant `{}` have no cached {model} vector; run `ragbox reembed --tenant {} --model {model}`",
                    tenant.name, tenant.name
                )));
            }
            let items: Vec<(ChunkId, &[f32])> =
                entries.iter().zip(&vectors).filter_map(|(e, v)| v.as_deref().map(|v| (e.id, v))).collect();
            index.upsert(&items)?;
        }
        index.commit(tenant.generation)?;
        Ok((load.then_some(index), problem))
    }

    /// Rebuilds the lexical index from the catalog when it cannot be opened or lags the catalog;
    /// why it was rebuilt.
    fn open_lexical(&self, tenant: &TenantRow) -> Result<Option<String>> {
        let (reset, problem) = match self.backends.lexical.committed(tenant)? {
            Committed::At(g) if g == tenant.generation => return Ok(None),
            Committed::At(g) => (false, format!("at generation {g}, catalog at {}", tenant.generation)),
            Committed::Missing => (false, format!("no index in {}", self.backends.lexical.describe())),
            Committed::Damaged(why) => (true, why),
        };
        tracing::warn!(tenant = %tenant.name, "rebuilding the lexical index from the catalog: {problem}");
        let mut w = self.backends.lexical.writer(tenant, reset)?;
        w.clear()?;
        for e in self.catalog.index_entries(tenant.id)? {
            w.add(e.id, e.doc, &e.text)?;
        }
        w.commit(tenant.generation)?;
        Ok(Some(problem))
    }

    /// Builds (or refreshes) the tenant's vector index for another model from the catalog, with
    /// vectors from `vectors` (called for the texts whose vectors are not cached yet), then
    /// switches the tenant to it. The old index keeps serving readers until the switch.
    pub fn reembed(
        &self,
        tenant: &TenantRow,
        model: &str,
        dims: usize,
        vectors: &mut dyn FnMut(&[&str]) -> Result<Vec<Vec<f32>>>,
        batch: usize,
    ) -> Result<ReembedReport> {
        let _lock = self.lock(&tenant.name, WRITER_WAIT)?;
        let tenant = &self.catalog.require_tenant(&tenant.name)?;
        let entries = self.catalog.index_entries(tenant.id)?;
        let hashes: Vec<TextHash> = entries.iter().map(|e| e.hash).collect();
        let cached = self.catalog.cached_embeddings(model, &hashes)?;
        let mut todo: Vec<&IndexEntry> = Vec::new();
        let mut seen = BTreeSet::new();
        for e in &entries {
            if !cached.contains_key(&e.hash) && seen.insert(e.hash) {
                todo.push(e);
            }
        }
        let mut fresh: HashMap<TextHash, Vec<f32>> = HashMap::new();
        for group in todo.chunks(batch.max(1)) {
            let texts: Vec<&str> = group.iter().map(|e| e.text.as_str()).collect();
            let out = vectors(&texts)?;
            if out.iter().any(|v| v.len() != dims) {
                return Err(Error::Bug(format!("{model} returned vectors that are not {dims} wide")));
            }
            let new: Vec<(TextHash, Vec<f32>)> = group.iter().map(|e| e.hash).zip(out).collect();
            self.catalog.put_embeddings(model, &new)?;
            fresh.extend(new);
        }
        let mut index = self.backends.vectors.writer(tenant, model, dims, true)?;
        let items: Vec<(ChunkId, &[f32])> = entries
            .iter()
            .filter_map(|e| cached.get(&e.hash).or_else(|| fresh.get(&e.hash)).map(|v| (e.id, v.as_slice())))
            .collect();
        index.upsert(&items)?;
        // The catalog generation cannot move while we hold the lock.
        index.commit(tenant.generation)?;
        self.catalog.set_tenant_model(tenant.id, model, dims)?;
        Ok(ReembedReport { chunks: entries.len(), embedded: todo.len(), cached: entries.len() - todo.len() })
    }

    /// Compares the chunk ids of a tenant's catalog, vector index and lexical index.
    pub fn check_consistency(&self, tenant: &TenantRow) -> Result<Consistency> {
        let entries = self.catalog.index_entries(tenant.id)?;
        let vector = self.backends.vectors.reader(tenant, &tenant.model, tenant.dims).ok();
        let lexical_generation = self.backends.lexical.committed(tenant)?.generation();
        let lexical_ids = match lexical_generation {
            Some(_) => self.backends.lexical.chunk_ids(tenant)?,
            None => Vec::new(),
        };
        let lexical_set: BTreeSet<ChunkId> = lexical_ids.iter().copied().collect();
        let missing_vectors = match &vector {
            Some(v) => {
                let ids: Vec<ChunkId> = entries.iter().map(|e| e.id).collect();
                v.contains(&ids)?.iter().filter(|present| !**present).count()
            }
            None => entries.len(),
        };
        let missing_lexical = entries.iter().filter(|e| !lexical_set.contains(&e.id)).count();
        let vector_count = vector.as_ref().map_or(0, |v| v.len());
        let vector_generation = vector.as_ref().map(|v| v.meta().generation);
        let duplicate_lexical = lexical_ids.len() - lexical_set.len();
        let consistent = missing_vectors == 0
            && missing_lexical == 0
            && duplicate_lexical == 0
            && vector_count == entries.len()
            && lexical_ids.len() == entries.len()
            && vector_generation == Some(tenant.generation)
            && lexical_generation == Some(tenant.generation);
        Ok(Consistency {
            generation: tenant.generation,
            vector_generation,
            lexical_generation,
            catalog_children: entries.len(),
            vector_count,
            lexical_count: lexical_ids.len(),
            missing_vectors,
            missing_lexical,
            duplicate_lexical,
            consistent,
        })
    }
}

/// An error creating or probing the data folder, as [`Error::DataDirNotWritable`] (or
/// [`Error::DiskFull`]).
fn not_writable(path: &Path, e: std::io::Error) -> Error {
    if is_enospc(&e) {
        return Error::DiskFull { path: path.to_path_buf(), detail: e.to_string() };
    }
    Error::DataDirNotWritable { path: path.to_path_buf(), reason: e.to_string() }
}

/// Creates and removes a probe file in the data folder, and opens the catalog for writing when it
/// exists: a read-only mount or a folder without write permission is refused here, before any
/// work, rather than at the first commit.
fn check_writable(data_dir: &Path) -> Result<()> {
    use std::io::Write;
    let probe = data_dir.join(format!(".write-probe-{}", std::process::id()));
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&probe)
        .and_then(|mut f| f.write_all(b"ragbox"));
    let _ = std::fs::remove_file(&probe);
    written.map_err(|e| not_writable(data_dir, e))?;
    let catalog = data_dir.join(layout::CATALOG_FILE);
    if catalog.exists() {
        std::fs::OpenOptions::new().write(true).open(&catalog).map_err(|e| not_writable(&catalog, e))?;
    }
    Ok(())
}

fn is_enospc(e: &std::io::Error) -> bool {
    e.raw_os_error() == Some(libc::ENOSPC) || e.kind() == std::io::ErrorKind::StorageFull
}

/// Whether `e` (or any error in its chain) says the device is full.
fn says_disk_full(e: &Error) -> bool {
    if let Error::Catalog(rusqlite::Error::SqliteFailure(f, _)) = e {
        if f.code == rusqlite::ErrorCode::DiskFull {
            return true;
        }
    }
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cause {
        if c.downcast_ref::<std::io::Error>().is_some_and(is_enospc) {
            return true;
        }
        let text = c.to_string().to_ascii_lowercase();
        if text.contains("no space left") || text.contains("disk is full") || text.contains("disk full") {
            return true;
        }
        cause = c.source();
    }
    false
}

/// Bytes free to us on the device holding `path`, when the system says.
fn free_bytes(path: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: `c` is a valid NUL-terminated path and `st` a zeroed out-parameter statvfs fills.
    unsafe {
        let mut st: libc::statvfs = std::mem::zeroed();
        (libc::statvfs(c.as_ptr(), &mut st) == 0).then(|| st.f_bavail as u64 * st.f_frsize as u64)
    }
}

/// `e` as [`Error::DiskFull`] when it says the device is full, or when it is a write error and
/// the device holding the data folder has (almost) no space left (some index libraries report a
/// failed write without the system's reason).
fn explain_write_error(data_dir: &Path, e: Error) -> Error {
    if matches!(e, Error::DiskFull { .. } | Error::DataDirNotWritable { .. } | Error::CatalogDamaged { .. }) {
        return e;
    }
    let full = says_disk_full(&e)
        || (matches!(e, Error::Index { .. } | Error::Path { .. } | Error::Io(_) | Error::Catalog(_))
            && free_bytes(data_dir).is_some_and(|b| b < 1 << 20));
    if full {
        return Error::DiskFull { path: data_dir.to_path_buf(), detail: format!("{e:#}") };
    }
    e
}

/// What `reembed` did.
#[derive(Debug, Clone, Serialize)]
pub struct ReembedReport {
    /// Child chunks in the new index.
    pub chunks: usize,
    /// Texts embedded now.
    pub embedded: usize,
    /// Chunks whose vectors came from the cache.
    pub cached: usize,
}

/// A tenant's write lock, held until dropped.
enum WriteLock {
    /// The tenant's `write.lock` file in the data folder, locked.
    File(#[allow(dead_code)] File),
    /// A PostgreSQL connection holding the tenant's advisory lock; closing it lets go.
    Advisory(#[allow(dead_code)] r2d2_postgres::postgres::Client),
}

/// The advisory lock key of `tenant`'s writers: 63 bits of the sha256 of its name.
fn lock_key(tenant: &str) -> i64 {
    let h = text_hash(&format!("ragbox write lock: {tenant}"));
    i64::from_le_bytes(h[..8].try_into().expect("8 bytes")) & i64::MAX
}

/// A tenant open for writing; holds its lock until dropped.
pub struct TenantWriter<'s> {
    store: &'s Store,
    tenant: TenantRow,
    vector: Box<dyn VectorWriter>,
    repair: Repair,
    _lock: WriteLock,
}

impl TenantWriter<'_> {
    /// The tenant (its generation advances with each commit).
    pub fn tenant(&self) -> &TenantRow {
        &self.tenant
    }

    /// What opening it repaired.
    pub fn repair(&self) -> &Repair {
        &self.repair
    }

    /// Vectors in its index now.
    pub fn vector_len(&self) -> Result<usize> {
        self.vector.len()
    }

    /// Commits a batch by the protocol in the module docs. `batch.embeddings` must hold a vector
    /// for every child chunk of the batch's documents that is not cached already.
    pub fn commit(&mut self, batch: &CommitBatch) -> Result<CommitChanges> {
        self.commit_inner(batch).map_err(|e| self.store.explain_write_error(e))
    }

    fn commit_inner(&mut self, batch: &CommitBatch) -> Result<CommitChanges> {
        let changes = self.store.catalog.commit(&self.tenant, batch)?;
        self.tenant.generation = changes.generation;

        let mut vectors: HashMap<TextHash, &[f32]> = batch.embeddings.iter().map(|(h, v)| (*h, v.as_slice())).collect();
        let missing: Vec<TextHash> = changes.added.iter().map(|e| e.hash).filter(|h| !vectors.contains_key(h)).collect();
        let cached = self.store.catalog.cached_embeddings(&self.tenant.model, &missing)?;
        vectors.extend(cached.iter().map(|(h, v)| (*h, v.as_slice())));
        let mut items = Vec::with_capacity(changes.added.len());
        for e in &changes.added {
            let v = vectors.get(&e.hash).ok_or_else(|| Error::Bug(format!("no vector for chunk {}", e.id.0)))?;
            items.push((e.id, *v));
        }
        self.vector.remove(&changes.removed)?;
        self.vector.upsert(&items)?;
        self.vector.commit(changes.generation)?;

        let mut w = self.store.backends.lexical.writer(&self.tenant, false)?;
        for doc in &changes.removed_docs {
            w.remove_document(*doc)?;
        }
        for e in &changes.added {
            w.add(e.id, e.doc, &e.text)?;
        }
        w.commit(changes.generation)?;
        Ok(changes)
    }
}

/// A tenant open for searching: its vector index mapped, its lexical index at the last commit
/// ([`Store::reader`]; unit tests may assemble one from in-memory indexes).
pub struct TenantReader {
    /// The tenant.
    pub tenant: TenantRow,
    /// Dense search.
    pub vector: Box<dyn VectorSearch>,
    /// BM25 search.
    pub lexical: Box<dyn LexicalSearch>,
    /// What opening it repaired.
    pub repair: Repair,
}

/// A tenant held in memory, for unit tests of what sits above the store (no files): documents
/// committed to an in-memory catalog and indexed in [`MemoryVectors`] and an in-memory
/// [`LexicalIndex`], as a [`TenantWriter`] commits them.
#[cfg(any(test, feature = "testing"))]
pub mod in_memory {
    use super::*;
    use crate::types::{Block, BlockKind, Chunk, ChunkRole, Lines, ParsedDocument, Span};

    /// A plain-text document of `paragraphs`, each one child chunk, as an ingest writes it; and
    /// the chunks' texts.
    pub fn doc_write(path: &str, paragraphs: &[&str]) -> (DocumentWrite, Vec<String>) {
        let text = paragraphs.join("\n\n");
        let mut blocks = Vec::new();
        let mut chunks = Vec::new();
        let mut at = 0;
        for (i, p) in paragraphs.iter().enumerate() {
            let span = Span::new(at, at + p.len());
            blocks.push(Block { kind: BlockKind::Paragraph, span, page: None, lines: Lines { first: 1, last: 1 } });
            let chunk = Chunk {
                ordinal: i as u32,
                role: ChunkRole::Child,
                parent: None,
                section_path: vec![],
                span,
                page: None,
                lines: Lines { first: 1, last: 1 },
                tokens: 1,
            };
            chunks.push(AnnotatedChunk { chunk, context: String::new() });
            at += p.len() + 2;
        }
        let doc = ParsedDocument { parser: "text".into(), title: path.into(), text, blocks, metadata: Default::default() };
        let texts = paragraphs.iter().map(|s| s.to_string()).collect();
        let w = DocumentWrite {
            path: path.into(),
            sha256: path.into(),
            size: 1,
            mtime_ns: 0,
            content: DocumentContent::Indexed { doc, chunker: "test".into(), chunks },
            readers: Vec::new(),
        };
        (w, texts)
    }

    /// Tenant `name` of `catalog` holding `docs` (path, paragraphs), its vectors from `embed`
    /// (`model`, `dims` wide), open for reading.
    pub fn tenant(catalog: &Catalog, name: &str, (model, dims): (&str, usize), embed: &dyn Fn(&str) -> Vec<f32>, docs: &[(&str, &[&str])]) -> Result<TenantReader> {
        let mut tenant = catalog.create_tenant(name, model, dims)?;
        let mut batch = CommitBatch::default();
        for (path, paragraphs) in docs {
            batch.documents.push(doc_write(path, paragraphs).0);
        }
        let changes = catalog.commit(&tenant, &batch)?;
        tenant.generation = changes.generation;
        let vectors: Vec<(ChunkId, Vec<f32>)> = changes.added.iter().map(|e| (e.id, embed(&e.text))).collect();
        let mut vector = MemoryVectors::new(model, dims);
        vector.add(&vectors.iter().map(|(id, v)| (*id, v.as_slice())).collect::<Vec<_>>())?;
        let lexical = LexicalIndex::in_memory();
        let mut w = lexical.writer()?;
        for e in &changes.added {
            w.add(e.id, e.doc, &e.text)?;
        }
        w.commit(changes.generation)?;
        Ok(TenantReader { tenant, vector: Box::new(vector), lexical: Box::new(lexical.searcher()?), repair: Repair::default() })
    }
}

#[cfg(test)]
mod tests {
    use super::contract::batch;
    use super::*;

    #[test]
    fn the_commit_protocol_holds_over_the_local_files() {
        let dir = tempfile::tempdir().unwrap();
        contract::store(&Store::open(dir.path(), VectorOptions::default()).unwrap());
    }

    #[test]
    fn damaged_local_files_are_rebuilt_from_the_catalog() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), VectorOptions::default()).unwrap();
        let t = store.tenant_for_model("acme", "fake", 8).unwrap();
        store.writer(&t).unwrap().commit(&batch(&[("/a.txt", &["alpha one", "beta two"]), ("/b.txt", &["gamma three"])])).unwrap();
        let t = store.catalog().require_tenant("acme").unwrap();

        std::fs::write(store.layout().vector("acme", "fake"), b"garbage").unwrap();
        std::fs::remove_dir_all(store.layout().lexical("acme")).unwrap();
        std::fs::create_dir_all(store.layout().lexical("acme")).unwrap();
        std::fs::write(store.layout().lexical("acme").join("meta.json"), b"{not json").unwrap();
        let r = store.reader(&t).unwrap();
        assert!(r.repair.vector.is_some() && r.repair.lexical.is_some(), "{:?}", r.repair);
        assert_eq!(r.lexical.search("gamma", 1).unwrap().len(), 1);
        drop(r);
        assert!(store.check_consistency(&t).unwrap().consistent);
    }

    #[test]
    fn readers_opened_while_a_writer_saves_never_see_a_half_replaced_index() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), VectorOptions::default()).unwrap();
        let t = store.tenant_for_model("acme", "fake", 8).unwrap();
        store.writer(&t).unwrap().commit(&batch(&[("/a.txt", &["alpha one"])])).unwrap();
        let done = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                // Another process, as far as the files are concerned: its own catalog connection
                // and lock file handle.
                let store = Store::open(dir.path(), VectorOptions::default()).unwrap();
                let mut w = store.writer(&t).unwrap();
                for i in 0..60 {
                    let texts: Vec<String> = (0..=i % 7).map(|j| format!("text {i} {j}")).collect();
                    let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
                    w.commit(&batch(&[(&format!("/{i}.txt"), &texts)])).unwrap();
                }
                done.store(true, std::sync::atomic::Ordering::SeqCst);
            });
            let mut opened = 0;
            while !done.load(std::sync::atomic::Ordering::SeqCst) {
                let t = store.catalog().require_tenant("acme").unwrap();
                let r = store.reader(&t).unwrap_or_else(|e| panic!("reader {opened} failed while a writer saved: {e:#}"));
                assert!(!r.vector.is_empty());
                opened += 1;
            }
            assert!(opened > 0);
        });
    }
}
