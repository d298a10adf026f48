//! The catalog's SQLite tables, all in one place: [`Catalog::open`](super::catalog::Catalog::open)
//! runs [`ALL`] in order, every statement `IF NOT EXISTS`, so a catalog made by an older release
//! gains the tables added since. The modules that read and write them (`catalog`, `conversation`,
//! `annotation`, `keys`, `events`) hold only their queries.

/// The tables of the first release: the schema version, tenants, documents, chunks, embeddings.
pub(super) const CATALOG: &str = "
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS tenants (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    model TEXT NOT NULL,
    dims INTEGER NOT NULL,
    generation INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS documents (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant_id INTEGER NOT NULL REFERENCES tenants(id),
    path TEXT NOT NULL,
    sha256 TEXT NOT NULL,
    size INTEGER NOT NULL,
    mtime_ns INTEGER NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('indexed', 'skipped')),
    skip_reason TEXT,
    parser TEXT,
    chunker TEXT,
    title TEXT,
    metadata TEXT,
    text TEXT,
    generation INTEGER NOT NULL,
    UNIQUE (tenant_id, path)
);
CREATE TABLE IF NOT EXISTS chunks (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    doc_id INTEGER NOT NULL REFERENCES documents(id) ON DELETE CASCADE,
    tenant_id INTEGER NOT NULL,
    ordinal INTEGER NOT NULL,
    role TEXT NOT NULL CHECK (role IN ('parent', 'child')),
    parent_id INTEGER,
    section_path TEXT NOT NULL,
    start INTEGER NOT NULL,
    end INTEGER NOT NULL,
    page INTEGER,
    line_first INTEGER NOT NULL,
    line_last INTEGER NOT NULL,
    tokens INTEGER NOT NULL,
    context TEXT NOT NULL,
    embed_sha256 BLOB
);
CREATE INDEX IF NOT EXISTS chunks_by_doc ON chunks(doc_id);
CREATE INDEX IF NOT EXISTS chunks_by_tenant ON chunks(tenant_id, role);
CREATE TABLE IF NOT EXISTS embeddings (
    model TEXT NOT NULL,
    sha256 BLOB NOT NULL,
    vector BLOB NOT NULL,
    PRIMARY KEY (model, sha256)
) WITHOUT ROWID;
";

/// The conversation tables, added to a catalog of any age on open.
pub(super) const CONVERSATIONS: &str = "
CREATE TABLE IF NOT EXISTS sessions (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant_id INTEGER NOT NULL REFERENCES tenants(id),
    created_ms INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS audit (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant_id INTEGER NOT NULL REFERENCES tenants(id),
    session_id INTEGER,
    question TEXT NOT NULL,
    standalone TEXT NOT NULL,
    chunk_ids TEXT NOT NULL,
    model TEXT NOT NULL,
    refused INTEGER NOT NULL,
    answer TEXT NOT NULL,
    timings TEXT NOT NULL,
    created_ms INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS audit_by_tenant ON audit(tenant_id, id);
CREATE TABLE IF NOT EXISTS turns (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id INTEGER NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    question TEXT NOT NULL,
    standalone TEXT NOT NULL,
    answer TEXT NOT NULL,
    audit_id INTEGER REFERENCES audit(id),
    created_ms INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS turns_by_session ON turns(session_id, id);
CREATE TABLE IF NOT EXISTS feedback (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    audit_id INTEGER NOT NULL REFERENCES audit(id),
    rating TEXT NOT NULL CHECK (rating IN ('up', 'down')),
    comment TEXT,
    created_ms INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS feedback_by_audit ON feedback(audit_id, id);
";

/// The contextual annotations of chunks (added later; an older catalog gains the table on open).
pub(super) const ANNOTATIONS: &str = "
CREATE TABLE IF NOT EXISTS annotations (
    key BLOB PRIMARY KEY,
    contextualizer TEXT NOT NULL,
    context TEXT NOT NULL
) WITHOUT ROWID;
";

/// The keys table, added to a catalog of any age on open.
pub(super) const KEYS: &str = "
CREATE TABLE IF NOT EXISTS api_keys (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    name TEXT NOT NULL,
    tenant TEXT,
    role TEXT NOT NULL CHECK (role IN ('reader', 'writer', 'admin')),
    sha256 TEXT NOT NULL UNIQUE,
    created_ms INTEGER NOT NULL,
    revoked_ms INTEGER
);
";

/// The events table and the triggers that keep it append-only.
pub(super) const EVENTS: &str = "
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    time_ms INTEGER NOT NULL,
    key_id INTEGER,
    key_name TEXT NOT NULL,
    tenant TEXT NOT NULL,
    action TEXT NOT NULL,
    question TEXT NOT NULL,
    chunk_ids TEXT NOT NULL,
    model TEXT NOT NULL,
    outcome TEXT NOT NULL,
    detail TEXT NOT NULL,
    prev_hash TEXT NOT NULL,
    hash TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS events_by_tenant ON events(tenant, id);
CREATE TRIGGER IF NOT EXISTS events_no_update BEFORE UPDATE ON events
BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END;
CREATE TRIGGER IF NOT EXISTS events_no_delete BEFORE DELETE ON events
BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END;
";

/// Every table, in the order they are created.
pub(super) const ALL: [&str; 5] = [CATALOG, CONVERSATIONS, ANNOTATIONS, KEYS, EVENTS];
