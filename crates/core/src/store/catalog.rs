//! The catalog: the truth of a data folder, in one SQLite file (WAL) or, for several nodes, on
//! the shared PostgreSQL server: tenants, documents with their normalised text, chunks with all
//! their metadata, the embedding cache and the generation counter the derived indexes are
//! checked against.
//!
//! Every write is one transaction ([`Catalog::commit`]); the usearch and tantivy indexes are
//! rebuilt from these rows (vectors from the embedding cache) whenever they disagree.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, MutexGuard};

use rusqlite::{Connection, OptionalExtension};
use serde::Serialize;

use crate::access::{self, AccessMap};
use crate::error::{Error, Result};
use super::annotation::Annotations;
use super::shared::Postgres;
use super::sql::{params, Database, Dialect, Row, Scope, Sql};
use super::conversation::{Answers, Sessions};
use super::events::Audit;
use super::keys::Keys;
use crate::types::{indexed_text, text_hash, Chunk, ChunkId, ChunkRole, DocId, Lines, ParsedDocument, Span, TextHash};

/// Catalogs up to this size are integrity-checked on open (about 0.1 s per 64 MiB).
pub const QUICK_CHECK_BYTES: u64 = 64 << 20;

/// How long a catalog waits for another process's lock: SQLite's busy timeout, and the retries
/// of [`Catalog::open`].
const BUSY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// SQLite's "database is busy / locked".
fn is_busy(e: &Error) -> bool {
    matches!(e, Error::Catalog(rusqlite::Error::SqliteFailure(f, _))
        if matches!(f.code, rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked))
}

/// `e` as [`Error::CatalogDamaged`] when SQLite says the file is not a database or is corrupt.
fn damaged(path: &Path, e: Error) -> Error {
    match &e {
        Error::Catalog(rusqlite::Error::SqliteFailure(f, msg))
            if matches!(f.code, rusqlite::ErrorCode::NotADatabase | rusqlite::ErrorCode::DatabaseCorrupt) =>
        {
            let detail = msg.clone().unwrap_or_else(|| f.to_string());
            Error::CatalogDamaged { path: path.to_path_buf(), detail }
        }
        _ => e,
    }
}

/// Bumped when the schema changes incompatibly; [`Catalog::open`] migrates a catalog of an older
/// version it knows (1: the answer log was the table `audit`, see `schema::v1_to_v2`) and refuses
/// any other.
const SCHEMA_VERSION: i64 = 2;

/// The schema version a catalog records; `None` for a new one (no `meta` table, or no version in
/// it yet).
fn stored_version(conn: &Connection) -> Result<Option<String>> {
    let has_meta: bool = conn.query_row(
        "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta')",
        [],
        |r| r.get(0),
    )?;
    if !has_meta {
        return Ok(None);
    }
    Ok(conn.query_row("SELECT value FROM meta WHERE key = 'schema_version'", [], |r| r.get(0)).optional()?)
}

/// The error for a catalog of schema `version`, which this build neither uses nor migrates.
fn schema_mismatch(path: &Path, version: &str) -> Error {
    Error::IndexMismatch {
        path: path.to_path_buf(),
        found: format!("catalog schema {version}"),
        expected: format!("schema {SCHEMA_VERSION}; use a new --data-dir or the matching ragbox version"),
    }
}

/// Brings a catalog of an older schema up to [`SCHEMA_VERSION`], in one IMMEDIATE transaction
/// (another process opening it at the same time waits, then finds it migrated), and refuses one
/// of a version this build does not know before anything is written to it. A new catalog is left
/// alone: the tables are made at this version.
fn migrate(conn: &mut Connection, path: &Path) -> Result<()> {
    let current = SCHEMA_VERSION.to_string();
    match stored_version(conn)? {
        None => return Ok(()),
        Some(v) if v == current => return Ok(()),
        Some(v) if v == "1" => {}
        Some(v) => return Err(schema_mismatch(path, &v)),
    }
    let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    if stored_version(&tx)?.as_deref() == Some("1") {
        super::schema::v1_to_v2(&tx)?;
        tx.execute("UPDATE meta SET value = ?1 WHERE key = 'schema_version'", [&current])?;
        tx.commit()?;
        tracing::info!(path = %path.display(), "catalog schema 1 migrated to {current}: the answer log `audit` is now `answers`");
    }
    Ok(())
}


/// A tenant as the catalog knows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TenantRow {
    /// Row id.
    pub id: i64,
    /// Name (also its folder name).
    pub name: String,
    /// The embedding model its active vector index is built with.
    pub model: String,
    /// That model's dimensions.
    pub dims: usize,
    /// Generation of the catalog's latest committed change for this tenant.
    pub generation: u64,
}

/// Whether a document was indexed or skipped (and stays skipped until it changes).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DocumentStatus {
    /// Parsed, chunked and indexed.
    Indexed,
    /// Not ingested; the reason (JSON of a `SkipReason`) is kept.
    Skipped,
}

/// A document row, without its text.
#[derive(Debug, Clone, Serialize)]
pub struct DocumentRow {
    /// Row id.
    pub id: DocId,
    /// Absolute path.
    pub path: PathBuf,
    /// Hex sha256 of the file's bytes.
    pub sha256: String,
    /// Bytes.
    pub size: u64,
    /// Modification time, ns since the epoch.
    pub mtime_ns: i64,
    /// Indexed or skipped.
    pub status: DocumentStatus,
    /// Why it was skipped (a human sentence), when it was.
    pub skip_reason: Option<String>,
    /// Parser name.
    pub parser: Option<String>,
    /// Title.
    pub title: Option<String>,
    /// Chunks stored for it (parents and children).
    pub chunks: usize,
    /// The groups that may read it (empty: everyone who reaches the tenant).
    pub readers: Vec<String>,
}

/// One file's new state, written by [`Catalog::commit`].
#[derive(Debug, Clone)]
pub struct DocumentWrite {
    /// Absolute path.
    pub path: PathBuf,
    /// Hex sha256 of the bytes.
    pub sha256: String,
    /// Bytes.
    pub size: u64,
    /// Modification time, ns since the epoch.
    pub mtime_ns: i64,
    /// What happened to it.
    pub content: DocumentContent,
    /// The groups that may read it (`access`; empty: everyone who reaches the tenant), written
    /// in the same transaction as the document, so it is never served before its readers are set.
    pub readers: Vec<String>,
}

/// A parsed document with its chunks, or why the file was skipped.
#[derive(Debug, Clone)]
pub enum DocumentContent {
    /// Parsed and chunked.
    Indexed {
        /// The parser's output.
        doc: ParsedDocument,
        /// Chunker name.
        chunker: String,
        /// Its chunks, each with its situating context.
        chunks: Vec<AnnotatedChunk>,
    },
    /// Skipped, with the reason shown to the user.
    Skipped {
        /// A human sentence.
        reason: String,
    },
}

/// A chunk with the context that is embedded and indexed with it (children only).
#[derive(Debug, Clone)]
pub struct AnnotatedChunk {
    /// The chunk.
    pub chunk: Chunk,
    /// Its situating context; empty for parents.
    pub context: String,
}

/// One commit's worth of changes to a tenant.
#[derive(Debug, Clone, Default)]
pub struct CommitBatch {
    /// Documents added or replaced (by path).
    pub documents: Vec<DocumentWrite>,
    /// Documents removed.
    pub removed: Vec<DocId>,
    /// Vectors to add to the embedding cache for the tenant's model.
    pub embeddings: Vec<(TextHash, Vec<f32>)>,
}

impl CommitBatch {
    /// Whether there is nothing to write.
    pub fn is_empty(&self) -> bool {
        self.documents.is_empty() && self.removed.is_empty()
    }
}

/// What a commit changed, for the indexes.
#[derive(Debug, Clone, Default)]
pub struct CommitChanges {
    /// The tenant's new generation.
    pub generation: u64,
    /// Children added: id, document, text to index.
    pub added: Vec<IndexEntry>,
    /// Children removed (old versions of replaced documents, removed documents).
    pub removed: Vec<ChunkId>,
    /// Documents whose chunks were removed or replaced.
    pub removed_docs: Vec<DocId>,
}

/// A child chunk as the indexes need it.
#[derive(Debug, Clone)]
pub struct IndexEntry {
    /// Chunk id (the key in both indexes).
    pub id: ChunkId,
    /// Its document.
    pub doc: DocId,
    /// Context + text, as embedded and indexed for BM25.
    pub text: String,
    /// sha256 of `text`: the embedding cache key.
    pub hash: TextHash,
}

/// A stored chunk resolved for display.
#[derive(Debug, Clone, Serialize)]
pub struct ChunkRow {
    /// Chunk id.
    pub id: ChunkId,
    /// Its document.
    pub doc: DocId,
    /// The document's path.
    pub path: PathBuf,
    /// The document's title.
    pub title: String,
    /// Position in the document.
    pub ordinal: u32,
    /// Parent or child.
    pub role: ChunkRole,
    /// The parent chunk's id, for children.
    pub parent: Option<ChunkId>,
    /// Heading breadcrumb.
    pub section_path: Vec<String>,
    /// Byte span in the document's normalised text.
    pub span: Span,
    /// Page, for paged formats.
    pub page: Option<u32>,
    /// Lines.
    pub lines: Lines,
    /// Tokens.
    pub tokens: usize,
    /// Situating context.
    pub context: String,
    /// The chunk's text: the document text at `span`.
    pub text: String,
    /// The groups that may read its document, as the catalog holds them (empty: open).
    pub readers: Vec<String>,
}

/// The catalog: tenants, documents, chunks and the embedding cache here, and through its handles
/// ([`Catalog::keys`], [`Catalog::sessions`], [`Catalog::answers`], [`Catalog::audit`],
/// [`Catalog::annotations`]) the rest of its tables, all over one [`Database`]: the data folder's
/// SQLite file, or the shared PostgreSQL server ([`Catalog::on_postgres`]).
pub struct Catalog {
    db: Database,
    path: PathBuf,
}

fn role_str(role: ChunkRole) -> &'static str {
    match role {
        ChunkRole::Parent => "parent",
        ChunkRole::Child => "child",
    }
}

fn vector_to_blob(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn blob_to_vector(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

/// Adds vectors to the embedding cache of `model` (existing entries are kept), in hash order:
/// two PostgreSQL transactions that insert overlapping keys then wait for each other in one
/// order, never in a cycle.
fn insert_embeddings(sql: &mut dyn Sql, model: &str, vectors: &[(TextHash, Vec<f32>)]) -> Result<()> {
    let mut sorted: Vec<&(TextHash, Vec<f32>)> = vectors.iter().collect();
    sorted.sort_by(|a, b| a.0.cmp(&b.0));
    for (hash, v) in sorted {
        sql.execute(
            "INSERT INTO embeddings (model, sha256, vector) VALUES (?1, ?2, ?3) ON CONFLICT DO NOTHING",
            params![model, &hash[..], vector_to_blob(v)],
        )?;
    }
    Ok(())
}

impl Catalog {
    /// Opens (creating if needed) the catalog at `path`, in WAL mode with foreign keys on. A file
    /// that is not a SQLite database, or whose pages SQLite finds damaged, is
    /// [`Error::CatalogDamaged`]; catalogs up to [`QUICK_CHECK_BYTES`] are checked page by page
    /// (`PRAGMA quick_check`) on every open, larger ones only as far as opening reads them.
    pub fn open(path: &Path) -> Result<Catalog> {
        // Two processes opening a new catalog at once: switching it to WAL takes an exclusive
        // lock, and SQLite answers "database is locked" there without waiting out the busy
        // timeout (one of two concurrent first ingests failed so, about one run in six). The
        // open is tried again for as long as the busy timeout allows.
        let deadline = std::time::Instant::now() + BUSY_TIMEOUT;
        loop {
            match Self::open_unchecked(path) {
                Err(e) if is_busy(&e) && std::time::Instant::now() < deadline => {
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                other => return other.map_err(|e| damaged(path, e)),
            }
        }
    }

    fn open_unchecked(path: &Path) -> Result<Catalog> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(Error::path(dir))?;
        }
        let size = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
        let conn = Connection::open(path)?;
        // Before anything reads: another process creating or writing the catalog makes this one
        // wait rather than fail with "database is locked" (the quick check below reads it all).
        conn.busy_timeout(BUSY_TIMEOUT)?;
        if size > 0 && size <= QUICK_CHECK_BYTES {
            let verdict: String = conn.query_row("PRAGMA quick_check(1)", [], |r| r.get(0))?;
            if verdict != "ok" {
                return Err(Error::CatalogDamaged { path: path.to_path_buf(), detail: verdict.split_whitespace().collect::<Vec<_>>().join(" ") });
            }
        }
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "FULL")?;
        Self::prepared(conn, path)
    }

    /// A catalog held in memory (SQLite's `:memory:`), for unit tests of what sits above the store:
    /// the same schema and queries as a file's, gone when dropped.
    #[cfg(any(test, feature = "testing"))]
    pub fn in_memory() -> Result<Catalog> {
        Self::prepared(Connection::open_in_memory()?, Path::new(":memory:"))
    }

    /// `conn` with foreign keys on, migrated and given the current schema (`path` names it in
    /// errors).
    fn prepared(mut conn: Connection, path: &Path) -> Result<Catalog> {
        conn.pragma_update(None, "foreign_keys", "ON")?;
        // Before the tables are made: those renamed since an older schema would otherwise be made
        // afresh, empty, beside the old ones.
        migrate(&mut conn, path)?;
        for tables in super::schema::ALL {
            conn.execute_batch(tables)?;
        }
        super::schema::answer_columns(&conn)?;
        super::schema::event_columns(&mut conn)?;
        let catalog = Catalog { db: Database::Sqlite(std::sync::Mutex::new(conn)), path: path.to_path_buf() };
        catalog.stamp_version()?;
        Ok(catalog)
    }

    /// The catalog on the shared PostgreSQL server, its tables made (or completed) on first use.
    /// Nodes starting at once make them one after the other (an advisory lock for the length of
    /// the transaction).
    pub fn on_postgres(pg: Arc<Postgres>) -> Result<Catalog> {
        let path = PathBuf::from(pg.server());
        let db = Database::Postgres(pg);
        db.write(Scope::All, |sql| {
            sql.query("SELECT pg_advisory_xact_lock(?1)", params![SCHEMA_LOCK])?;
            sql.batch(super::schema::POSTGRES)
        })?;
        let catalog = Catalog { db, path };
        catalog.stamp_version()?;
        Ok(catalog)
    }

    /// Gives a new catalog this build's version, and refuses one of another.
    fn stamp_version(&self) -> Result<()> {
        // `ON CONFLICT`: two processes creating the catalog at once both find none (a plain
        // insert failed the second: "UNIQUE constraint failed").
        let version = self.db.write(Scope::All, |sql| {
            sql.execute("INSERT INTO meta (key, value) VALUES ('schema_version', ?1) ON CONFLICT DO NOTHING", params![SCHEMA_VERSION.to_string()])?;
            sql.query_one("SELECT value FROM meta WHERE key = 'schema_version'", &[])?.text(0)
        })?;
        if version != SCHEMA_VERSION.to_string() {
            return Err(schema_mismatch(&self.path, &version));
        }
        Ok(())
    }

    /// The catalog file (on PostgreSQL: the server, as `PostgreSQL at host:port/db`).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The database the catalog is in.
    pub fn database(&self) -> &Database {
        &self.db
    }

    /// The SQLite connection, for SQLite's own tools (pragmas, the backup API) and tests; `None`
    /// for a catalog on PostgreSQL.
    pub(super) fn sqlite(&self) -> Option<MutexGuard<'_, Connection>> {
        self.db.sqlite()
    }

    /// The SQLite connection of a catalog that must be a file's.
    #[cfg(test)]
    pub(super) fn conn(&self) -> MutexGuard<'_, Connection> {
        self.sqlite().expect("a SQLite catalog")
    }

    /// This catalog's identity, made once (random) and kept: what a shared index backend
    /// records as its owner, so that a second catalog is refused rather than mixed in.
    pub fn id(&self) -> Result<String> {
        let made = {
            let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
            hex::encode(&crate::types::text_hash(&format!("{nanos} {} {:?}", std::process::id(), self.path))[..16])
        };
        self.db.write(Scope::All, |sql| {
            sql.execute("INSERT INTO meta (key, value) VALUES ('catalog_id', ?1) ON CONFLICT DO NOTHING", params![&made])?;
            sql.query_one("SELECT value FROM meta WHERE key = 'catalog_id'", &[])?.text(0)
        })
    }

    /// The API keys.
    pub fn keys(&self) -> Keys<'_> {
        Keys::new(&self.db)
    }

    /// The conversations: sessions and their turns.
    pub fn sessions(&self) -> Sessions<'_> {
        Sessions::new(&self.db)
    }

    /// The answer log, with its feedback.
    pub fn answers(&self) -> Answers<'_> {
        Answers::new(&self.db)
    }

    /// The hash-chained audit events.
    pub fn audit(&self) -> Audit<'_> {
        Audit::new(&self.db)
    }

    /// Its quota counters.
    pub fn quotas(&self) -> super::quota::Quotas<'_> {
        super::quota::Quotas::new(&self.db)
    }

    /// Its retention runs and legal holds.
    pub fn retention(&self) -> super::Retention<'_> {
        super::Retention::new(&self.db)
    }

    /// The annotation cache.
    pub fn annotations(&self) -> Annotations<'_> {
        Annotations::new(&self.db)
    }

    /// All tenants, by name.
    pub fn tenants(&self) -> Result<Vec<TenantRow>> {
        self.db.read(Scope::All, |sql| {
            sql.query("SELECT id, name, model, dims, generation FROM tenants ORDER BY name", &[])?.iter().map(tenant_from_row).collect()
        })
    }

    /// The tenant called `name`, if any.
    pub fn tenant(&self, name: &str) -> Result<Option<TenantRow>> {
        self.db.read(Scope::All, |sql| {
            sql.query_opt("SELECT id, name, model, dims, generation FROM tenants WHERE name = ?1", params![name])?
                .as_ref()
                .map(tenant_from_row)
                .transpose()
        })
    }

    /// The tenant called `name`, or [`Error::UnknownTenant`].
    pub fn require_tenant(&self, name: &str) -> Result<TenantRow> {
        match self.tenant(name)? {
            Some(t) => Ok(t),
            None => Err(Error::UnknownTenant {
                name: name.to_string(),
                known: self.tenants()?.into_iter().map(|t| t.name).collect(),
            }),
        }
    }

    /// Creates a tenant whose vectors come from `model` (`dims` wide).
    pub fn create_tenant(&self, name: &str, model: &str, dims: usize) -> Result<TenantRow> {
        // ON CONFLICT: two processes creating one tenant at once both get it.
        self.db.write(Scope::All, |sql| {
            sql.execute("INSERT INTO tenants (name, model, dims) VALUES (?1, ?2, ?3) ON CONFLICT DO NOTHING", params![name, model, dims as i64])
        })?;
        self.tenant(name)?.ok_or_else(|| Error::Bug("tenant vanished after insert".into()))
    }

    /// Switches a tenant's active model (after its index for that model is built).
    pub fn set_tenant_model(&self, tenant: i64, model: &str, dims: usize) -> Result<()> {
        self.db.write(Scope::Tenant(tenant), |sql| {
            sql.execute("UPDATE tenants SET model = ?2, dims = ?3 WHERE id = ?1", params![tenant, model, dims as i64])
        })?;
        Ok(())
    }

    /// The tenant's documents (indexed and skipped), by path.
    pub fn documents(&self, tenant: i64) -> Result<Vec<DocumentRow>> {
        let rows = self.db.read(Scope::Tenant(tenant), |sql| {
            sql.query(
                "SELECT d.id, d.path, d.sha256, d.size, d.mtime_ns, d.status, d.skip_reason, d.parser, d.title,
                        (SELECT COUNT(*) FROM chunks c WHERE c.doc_id = d.id), COALESCE(r.readers, '')
                 FROM documents d LEFT JOIN document_readers r ON r.doc_id = d.id
                 WHERE d.tenant_id = ?1 ORDER BY d.path",
                params![tenant],
            )
        })?;
        rows.iter()
            .map(|r| {
                Ok(DocumentRow {
                    id: DocId(r.int(0)? as u64),
                    path: PathBuf::from(r.text(1)?),
                    sha256: r.text(2)?,
                    size: r.int(3)? as u64,
                    mtime_ns: r.int(4)?,
                    status: if r.text(5)? == "indexed" { DocumentStatus::Indexed } else { DocumentStatus::Skipped },
                    skip_reason: r.opt_text(6)?,
                    parser: r.opt_text(7)?,
                    title: r.opt_text(8)?,
                    chunks: r.int(9)? as usize,
                    readers: access::decode(&r.text(10)?),
                })
            })
            .collect()
    }

    /// Sets the readers of documents of `tenant` (`access`), all in one transaction, and bumps
    /// the tenant's readers version so every reader's [`AccessMap`] is read again; returns how
    /// many documents changed. Documents of other tenants are not touched.
    pub fn set_readers(&self, tenant: i64, changes: &[(DocId, Vec<String>)]) -> Result<usize> {
        if changes.is_empty() {
            return Ok(0);
        }
        self.db.write(Scope::Tenant(tenant), |sql| {
            let mut changed = 0;
            for (doc, readers) in changes {
                let owned = sql.query_opt("SELECT id FROM documents WHERE id = ?1 AND tenant_id = ?2", params![doc.0 as i64, tenant])?;
                if owned.is_some() {
                    write_readers(sql, tenant, doc.0 as i64, readers)?;
                    changed += 1;
                }
            }
            sql.execute(
                "INSERT INTO meta (key, value) VALUES (?1, '1')
                 ON CONFLICT (key) DO UPDATE SET value = CAST(CAST(meta.value AS INTEGER) + 1 AS TEXT)",
                params![readers_key(tenant)],
            )?;
            Ok(changed)
        })
    }

    /// How many times the readers of `tenant`'s documents were changed by
    /// [`Catalog::set_readers`] (with the tenant's generation, what an [`AccessMap`] is valid for).
    pub fn readers_version(&self, tenant: i64) -> Result<u64> {
        let row = self.db.read(Scope::All, |sql| sql.query_opt("SELECT value FROM meta WHERE key = ?1", params![readers_key(tenant)]))?;
        Ok(row.map(|r| r.text(0)).transpose()?.and_then(|v| v.parse().ok()).unwrap_or(0))
    }

    /// The readers of every child chunk of `tenant`'s restricted documents.
    pub fn access_map(&self, tenant: &TenantRow) -> Result<AccessMap> {
        let rows = self.db.read(Scope::Tenant(tenant.id), |sql| {
            sql.query(
                "SELECT c.id, r.readers FROM chunks c JOIN document_readers r ON r.doc_id = c.doc_id
                 WHERE c.tenant_id = ?1 AND c.role = 'child'",
                params![tenant.id],
            )
        })?;
        let mut parsed = Vec::with_capacity(rows.len());
        for r in &rows {
            parsed.push((ChunkId(r.int(0)? as u64), access::decode(&r.text(1)?)));
        }
        Ok(AccessMap::new(tenant.generation, parsed))
    }

    /// Records who owns chat session `session` (a person or a key; see `ragbox-service`).
    pub fn set_session_owner(&self, tenant: i64, session: i64, owner: &str) -> Result<()> {
        self.db.write(Scope::Tenant(tenant), |sql| {
            sql.execute(
                "INSERT INTO session_owners (session_id, tenant_id, owner) VALUES (?1, ?2, ?3)
                 ON CONFLICT (session_id) DO UPDATE SET owner = excluded.owner",
                params![session, tenant, owner],
            )?;
            Ok(())
        })
    }

    /// The owners of `tenant`'s sessions that have one.
    pub fn session_owners(&self, tenant: i64) -> Result<HashMap<i64, String>> {
        let rows = self.db.read(Scope::Tenant(tenant), |sql| {
            sql.query("SELECT session_id, owner FROM session_owners WHERE tenant_id = ?1", params![tenant])
        })?;
        rows.iter().map(|r| Ok((r.int(0)?, r.text(1)?))).collect()
    }

    /// Vectors cached for `model`, for those of `hashes` it has.
    pub fn cached_embeddings(&self, model: &str, hashes: &[TextHash]) -> Result<HashMap<TextHash, Vec<f32>>> {
        self.db.read(Scope::All, |sql| {
            let mut out = HashMap::new();
            for h in hashes {
                if out.contains_key(h) {
                    continue;
                }
                if let Some(r) = sql.query_opt("SELECT vector FROM embeddings WHERE model = ?1 AND sha256 = ?2", params![model, &h[..]])? {
                    out.insert(*h, blob_to_vector(&r.blob(0)?));
                }
            }
            Ok(out)
        })
    }

    /// Adds vectors to the embedding cache of `model` (existing entries are kept).
    pub fn put_embeddings(&self, model: &str, vectors: &[(TextHash, Vec<f32>)]) -> Result<()> {
        self.db.write(Scope::All, |sql| insert_embeddings(sql, model, vectors))
    }

    /// Writes one batch of changes for `tenant` in a single transaction and bumps its generation.
    /// Returns what the indexes must do to catch up.
    pub fn commit(&self, tenant: &TenantRow, batch: &CommitBatch) -> Result<CommitChanges> {
        self.db.write(Scope::Tenant(tenant.id), |sql| commit_batch(sql, tenant, batch))
    }

    /// Every child chunk of a tenant as the indexes need it, document by document, in id order
    /// within each.
    pub fn index_entries(&self, tenant: i64) -> Result<Vec<IndexEntry>> {
        self.db.read(Scope::Tenant(tenant), |sql| {
            // The document's text is read once per document, not joined into every chunk row: a
            // join sorted by (doc, chunk) had SQLite's sorter hold each document's whole text once
            // per chunk (2.5 GB of peak memory for a `reembed` of 9,797 rust-doc chunks).
            let rows = sql.query(
                "SELECT id, doc_id, context, start, \"end\", embed_sha256 FROM chunks
                 WHERE tenant_id = ?1 AND role = 'child' ORDER BY doc_id, id",
                params![tenant],
            )?;
            let mut out = Vec::with_capacity(rows.len());
            let mut current: Option<(i64, String)> = None;
            for r in &rows {
                let doc = r.int(1)?;
                if current.as_ref().map(|(id, _)| *id) != Some(doc) {
                    let text = sql.query_one("SELECT text FROM documents WHERE id = ?1", params![doc])?.text(0)?;
                    current = Some((doc, text));
                }
                let text = &current.as_ref().expect("set just above").1;
                let context = r.text(2)?;
                let (start, end) = (r.int(3)? as usize, r.int(4)? as usize);
                let slice = text.get(start..end).ok_or_else(|| Error::Bug(format!("chunk span {start}..{end} outside its document")))?;
                out.push(IndexEntry {
                    id: ChunkId(r.int(0)? as u64),
                    doc: DocId(doc as u64),
                    text: indexed_text(&context, slice),
                    hash: r.blob(5)?.try_into().map_err(|_| Error::Bug("embedding hash is not 32 bytes".into()))?,
                });
            }
            Ok(out)
        })
    }

    /// Chunks by id, resolved through their documents, restricted to `tenant` (ids of other
    /// tenants are dropped: defence in depth behind the per-tenant indexes; on PostgreSQL the
    /// row-level security is a second wall). Input order is kept.
    pub fn chunks(&self, tenant: i64, ids: &[ChunkId]) -> Result<Vec<ChunkRow>> {
        let rows = self.db.read(Scope::Tenant(tenant), |sql| {
            // The chunk's text is its byte span of the document's text.
            let slice = match sql.dialect() {
                Dialect::Sqlite => "substr(CAST(d.text AS BLOB), c.start + 1, c.\"end\" - c.start)",
                Dialect::Postgres => "substring(convert_to(d.text, 'UTF8') from (c.start + 1)::int for (c.\"end\" - c.start)::int)",
            };
            let query = format!(
                "SELECT c.id, c.doc_id, d.path, d.title, c.ordinal, c.role, c.parent_id, c.section_path, c.start, c.\"end\",
                        c.page, c.line_first, c.line_last, c.tokens, c.context, {slice}, COALESCE(r.readers, '')
                 FROM chunks c JOIN documents d ON d.id = c.doc_id LEFT JOIN document_readers r ON r.doc_id = d.id
                 WHERE c.id = ?1 AND c.tenant_id = ?2"
            );
            let mut found = Vec::with_capacity(ids.len());
            for id in ids {
                found.extend(sql.query_opt(&query, params![id.0 as i64, tenant])?);
            }
            Ok(found)
        })?;
        rows.iter()
            .map(|r| {
                Ok(ChunkRow {
                    id: ChunkId(r.int(0)? as u64),
                    doc: DocId(r.int(1)? as u64),
                    path: PathBuf::from(r.text(2)?),
                    title: r.opt_text(3)?.unwrap_or_default(),
                    ordinal: r.int(4)? as u32,
                    role: if r.text(5)? == "parent" { ChunkRole::Parent } else { ChunkRole::Child },
                    parent: r.opt_int(6)?.map(|p| ChunkId(p as u64)),
                    section_path: serde_json::from_str(&r.text(7)?).map_err(|e| Error::Bug(format!("section path: {e}")))?,
                    span: Span::new(r.int(8)? as usize, r.int(9)? as usize),
                    page: r.opt_int(10)?.map(|p| p as u32),
                    lines: Lines { first: r.int(11)? as u32, last: r.int(12)? as u32 },
                    tokens: r.int(13)? as usize,
                    context: r.text(14)?,
                    text: String::from_utf8(r.blob(15)?).map_err(|e| Error::Bug(format!("chunk text: {e}")))?,
                    readers: access::decode(&r.text(16)?),
                })
            })
            .collect()
    }

    /// Vectors of `model` for the given text hashes, in input order; `None` where not cached.
    pub fn vectors(&self, model: &str, hashes: &[TextHash]) -> Result<Vec<Option<Vec<f32>>>> {
        let cached = self.cached_embeddings(model, hashes)?;
        Ok(hashes.iter().map(|h| cached.get(h).cloned()).collect())
    }

    /// Counts for doctor and tests: (indexed documents, skipped documents, parents, children).
    pub fn counts(&self, tenant: i64) -> Result<(usize, usize, usize, usize)> {
        self.db.read(Scope::Tenant(tenant), |sql| {
            let mut q = |query: &str| -> Result<usize> { Ok(sql.query_one(query, params![tenant])?.int(0)? as usize) };
            Ok((
                q("SELECT COUNT(*) FROM documents WHERE tenant_id = ?1 AND status = 'indexed'")?,
                q("SELECT COUNT(*) FROM documents WHERE tenant_id = ?1 AND status = 'skipped'")?,
                q("SELECT COUNT(*) FROM chunks WHERE tenant_id = ?1 AND role = 'parent'")?,
                q("SELECT COUNT(*) FROM chunks WHERE tenant_id = ?1 AND role = 'child'")?,
            ))
        })
    }
}

/// The advisory lock key nodes take while they make the catalog's tables.
const SCHEMA_LOCK: i64 = 0x7261_6762_6f78_0001;

/// The meta key of a tenant's readers version.
fn readers_key(tenant: i64) -> String {
    format!("readers_version.{tenant}")
}

/// Sets a document's readers (none: the row goes, the document is open).
fn write_readers(sql: &mut dyn Sql, tenant: i64, doc: i64, readers: &[String]) -> Result<()> {
    if readers.is_empty() {
        sql.execute("DELETE FROM document_readers WHERE doc_id = ?1", params![doc])?;
    } else {
        sql.execute(
            "INSERT INTO document_readers (doc_id, tenant_id, readers) VALUES (?1, ?2, ?3)
             ON CONFLICT (doc_id) DO UPDATE SET readers = excluded.readers",
            params![doc, tenant, access::encode(readers)],
        )?;
    }
    Ok(())
}

/// [`Catalog::commit`]'s transaction.
fn commit_batch(sql: &mut dyn Sql, tenant: &TenantRow, batch: &CommitBatch) -> Result<CommitChanges> {
    // The bump first: on PostgreSQL it locks the tenant's row, so a second writer waits here.
    let generation = sql.query_one("UPDATE tenants SET generation = generation + 1 WHERE id = ?1 RETURNING generation", params![tenant.id])?.int(0)?;
    let mut changes = CommitChanges { generation: generation as u64, ..Default::default() };
    let removed_ids = |sql: &mut dyn Sql, doc: i64, changes: &mut CommitChanges| -> Result<()> {
        for r in sql.query("SELECT id FROM chunks WHERE doc_id = ?1 AND role = 'child' ORDER BY id", params![doc])? {
            changes.removed.push(ChunkId(r.int(0)? as u64));
        }
        changes.removed_docs.push(DocId(doc as u64));
        Ok(())
    };
    for doc in &batch.removed {
        removed_ids(sql, doc.0 as i64, &mut changes)?;
        sql.execute("DELETE FROM chunks WHERE doc_id = ?1", params![doc.0 as i64])?;
        sql.execute("DELETE FROM documents WHERE id = ?1 AND tenant_id = ?2", params![doc.0 as i64, tenant.id])?;
    }
    for d in &batch.documents {
        let path = path_text(&d.path)?;
        let existing = sql.query_opt("SELECT id FROM documents WHERE tenant_id = ?1 AND path = ?2", params![tenant.id, path])?;
        let existing = existing.map(|r| r.int(0)).transpose()?;
        if let Some(id) = existing {
            removed_ids(sql, id, &mut changes)?;
            sql.execute("DELETE FROM chunks WHERE doc_id = ?1", params![id])?;
        }
        let (status, skip, parser, chunker, title, metadata, text) = match &d.content {
            DocumentContent::Indexed { doc, chunker, .. } => (
                "indexed",
                None,
                Some(doc.parser.as_str()),
                Some(chunker.as_str()),
                Some(doc.title.as_str()),
                Some(serde_json::to_string(&doc.metadata).map_err(|e| Error::Bug(e.to_string()))?),
                Some(doc.text.as_str()),
            ),
            DocumentContent::Skipped { reason } => ("skipped", Some(reason.as_str()), None, None, None, None, None),
        };
        let doc_id = match existing {
            Some(id) => {
                sql.execute(
                    "UPDATE documents SET sha256 = ?2, size = ?3, mtime_ns = ?4, status = ?5, skip_reason = ?6,
                            parser = ?7, chunker = ?8, title = ?9, metadata = ?10, text = ?11, generation = ?12
                     WHERE id = ?1",
                    params![id, d.sha256.as_str(), d.size as i64, d.mtime_ns, status, skip, parser, chunker, title, metadata, text, generation],
                )?;
                id
            }
            None => sql
                .query_one(
                    "INSERT INTO documents (tenant_id, path, sha256, size, mtime_ns, status, skip_reason, parser,
                                            chunker, title, metadata, text, generation)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13) RETURNING id",
                    params![tenant.id, path, d.sha256.as_str(), d.size as i64, d.mtime_ns, status, skip, parser, chunker, title, metadata, text, generation],
                )?
                .int(0)?,
        };
        write_readers(sql, tenant.id, doc_id, &d.readers)?;
        let DocumentContent::Indexed { doc, chunks, .. } = &d.content else { continue };
        // Ordinal -> chunk id, for the parent links (parents come before their children
        // in ordinal order only by convention, so resolve after inserting all).
        let mut ids: HashMap<u32, i64> = HashMap::new();
        for c in chunks {
            let ch = &c.chunk;
            let text = doc.text.get(ch.span.range()).ok_or_else(|| {
                Error::Bug(format!("chunk span {:?} outside {:?}", ch.span, d.path))
            })?;
            let hash = (ch.role == ChunkRole::Child).then(|| text_hash(&indexed_text(&c.context, text)));
            let id = sql
                .query_one(
                    "INSERT INTO chunks (doc_id, tenant_id, ordinal, role, parent_id, section_path, start, \"end\", page,
                                         line_first, line_last, tokens, context, embed_sha256)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14) RETURNING id",
                    params![
                        doc_id,
                        tenant.id,
                        ch.ordinal,
                        role_str(ch.role),
                        Option::<i64>::None,
                        serde_json::to_string(&ch.section_path).map_err(|e| Error::Bug(e.to_string()))?,
                        ch.span.start as i64,
                        ch.span.end as i64,
                        ch.page,
                        ch.lines.first,
                        ch.lines.last,
                        ch.tokens as i64,
                        c.context.as_str(),
                        hash.as_ref().map(|h| &h[..]),
                    ],
                )?
                .int(0)?;
            ids.insert(ch.ordinal, id);
            if let Some(hash) = hash {
                changes.added.push(IndexEntry {
                    id: ChunkId(id as u64),
                    doc: DocId(doc_id as u64),
                    text: indexed_text(&c.context, text),
                    hash,
                });
            }
        }
        for c in chunks {
            if let Some(parent) = c.chunk.parent {
                let parent_id = ids.get(&parent).ok_or_else(|| {
                    Error::Bug(format!("chunk {} of {:?} names a missing parent {parent}", c.chunk.ordinal, d.path))
                })?;
                sql.execute("UPDATE chunks SET parent_id = ?2 WHERE id = ?1", params![ids[&c.chunk.ordinal], *parent_id])?;
            }
        }
    }
    insert_embeddings(sql, &tenant.model, &batch.embeddings)?;
    Ok(changes)
}

fn tenant_from_row(r: &Row) -> Result<TenantRow> {
    Ok(TenantRow {
        id: r.int(0)?,
        name: r.text(1)?,
        model: r.text(2)?,
        dims: r.int(3)? as usize,
        generation: r.int(4)? as u64,
    })
}

/// Paths are stored as UTF-8 text; a path that is not UTF-8 is refused (reported and skipped by
/// the walker before it gets here).
fn path_text(p: &Path) -> Result<&str> {
    p.to_str().ok_or_else(|| Error::Invalid(format!("path {p:?} is not valid UTF-8")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{Block, BlockKind};
    use std::collections::BTreeMap;

    fn parsed(text: &str) -> ParsedDocument {
        ParsedDocument {
            parser: "text".into(),
            title: "T".into(),
            text: text.into(),
            blocks: vec![Block {
                kind: BlockKind::Paragraph,
                span: Span::new(0, text.len()),
                page: None,
                lines: Lines { first: 1, last: 1 },
            }],
            metadata: BTreeMap::new(),
        }
    }

    fn write(path: &str, text: &str) -> DocumentWrite {
        let doc = parsed(text);
        let parent = Chunk {
            ordinal: 0,
            role: ChunkRole::Parent,
            parent: None,
            section_path: vec![],
            span: Span::new(0, text.len()),
            page: None,
            lines: Lines { first: 1, last: 1 },
            tokens: 3,
        };
        let child = Chunk { ordinal: 1, role: ChunkRole::Child, parent: Some(0), ..parent.clone() };
        DocumentWrite {
            path: path.into(),
            sha256: "ab".into(),
            size: text.len() as u64,
            mtime_ns: 1,
            content: DocumentContent::Indexed {
                doc,
                chunker: "structural".into(),
                chunks: vec![
                    AnnotatedChunk { chunk: parent, context: String::new() },
                    AnnotatedChunk { chunk: child, context: "T".into() },
                ],
            },
            readers: Vec::new(),
        }
    }

    #[test]
    fn commit_replace_remove_and_tenant_check() {
        let dir = tempfile::tempdir().unwrap();
        let cat = Catalog::open(&dir.path().join("c.sqlite")).unwrap();
        let t = cat.create_tenant("a", "m", 4).unwrap();
        let other = cat.create_tenant("b", "m", 4).unwrap();
        let batch = CommitBatch { documents: vec![write("/x/one.txt", "héllo world")], ..Default::default() };
        let c1 = cat.commit(&t, &batch).unwrap();
        assert_eq!(c1.generation, 1);
        assert_eq!(c1.added.len(), 1);
        assert_eq!(c1.added[0].text, "T\n\nhéllo world");
        let rows = cat.chunks(t.id, &[c1.added[0].id]).unwrap();
        assert_eq!(rows[0].text, "héllo world");
        assert!(rows[0].parent.is_some());
        assert!(cat.chunks(other.id, &[c1.added[0].id]).unwrap().is_empty(), "another tenant's chunk is not resolved");

        // Replacing the document removes the old child in the same commit; ids are never reused.
        let batch = CommitBatch { documents: vec![write("/x/one.txt", "changed")], ..Default::default() };
        let c2 = cat.commit(&t, &batch).unwrap();
        assert_eq!(c2.generation, 2);
        assert_eq!(c2.removed, vec![c1.added[0].id]);
        assert!(c2.added[0].id > c1.added[0].id);
        assert_eq!(cat.documents(t.id).unwrap().len(), 1);
        assert_eq!(cat.index_entries(t.id).unwrap().len(), 1);

        let doc = cat.documents(t.id).unwrap()[0].id;
        let c3 = cat.commit(&t, &CommitBatch { removed: vec![doc], ..Default::default() }).unwrap();
        assert_eq!(c3.removed, vec![c2.added[0].id]);
        assert_eq!(cat.counts(t.id).unwrap(), (0, 0, 0, 0));
    }

    #[test]
    fn the_catalog_contract_holds_in_sqlite() {
        let dir = tempfile::tempdir().unwrap();
        crate::store::contract::catalog(&Catalog::open(&dir.path().join("c.sqlite")).unwrap());
    }

    #[test]
    fn embedding_cache_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let cat = Catalog::open(&dir.path().join("c.sqlite")).unwrap();
        let t = cat.create_tenant("a", "m", 2).unwrap();
        let h = text_hash("x");
        let batch = CommitBatch { embeddings: vec![(h, vec![0.5, -1.0])], ..Default::default() };
        cat.commit(&t, &batch).unwrap();
        assert_eq!(cat.vectors("m", &[h, text_hash("y")]).unwrap(), vec![Some(vec![0.5, -1.0]), None]);
        assert!(cat.vectors("other", &[h]).unwrap()[0].is_none(), "the cache is per model");
    }

    #[test]
    fn writers_in_two_connections_wait_for_each_other() {
        // Two processes ingesting two tenants of one data folder: each commit reads, then writes.
        // Deferred transactions would fail with "database is locked" when they interleave.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.sqlite");
        let (a, b) = (Catalog::open(&path).unwrap(), Catalog::open(&path).unwrap());
        let (ta, tb) = (a.create_tenant("a", "m", 4).unwrap(), b.create_tenant("b", "m", 4).unwrap());
        std::thread::scope(|s| {
            for (cat, t) in [(&a, &ta), (&b, &tb)] {
                s.spawn(move || {
                    for i in 0..40 {
                        let doc = write(&format!("/{}/{i}.txt", t.name), "some words here");
                        let batch = CommitBatch { documents: vec![doc], ..Default::default() };
                        cat.commit(t, &batch).unwrap();
                    }
                });
            }
        });
        assert_eq!(a.counts(ta.id).unwrap().0, 40);
        assert_eq!(a.counts(tb.id).unwrap().0, 40);
    }
}
