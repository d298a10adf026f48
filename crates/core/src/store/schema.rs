//! The catalog's SQLite tables, all in one place: [`Catalog::open`](super::catalog::Catalog::open)
//! runs [`ALL`] in order, every statement `IF NOT EXISTS`, so a catalog made by an older release
//! gains the tables added since; a change that `IF NOT EXISTS` cannot make (a rename) is a
//! migration from one schema version to the next ([`v1_to_v2`]), run before them. The modules that
//! read and write the tables (`catalog`, `conversation`, `annotation`, `keys`, `events`) hold only
//! their queries.

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

/// The conversation tables, added to a catalog of any age on open: sessions, their turns, the
/// answer log (`answers`, one row per answer; its id is the answer id users rate) and feedback.
/// Schema 1 called the answer log `audit` (and its references `audit_id`); [`v1_to_v2`] renames
/// them.
pub(super) const CONVERSATIONS: &str = "
CREATE TABLE IF NOT EXISTS sessions (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant_id INTEGER NOT NULL REFERENCES tenants(id),
    created_ms INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS answers (
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
    created_ms INTEGER NOT NULL,
    outcome TEXT NOT NULL DEFAULT '',
    evidence TEXT NOT NULL DEFAULT 'null',
    asker TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS answers_by_tenant ON answers(tenant_id, id);
CREATE TABLE IF NOT EXISTS turns (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id INTEGER NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    question TEXT NOT NULL,
    standalone TEXT NOT NULL,
    answer TEXT NOT NULL,
    answer_id INTEGER REFERENCES answers(id),
    created_ms INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS turns_by_session ON turns(session_id, id);
CREATE TABLE IF NOT EXISTS feedback (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    answer_id INTEGER NOT NULL REFERENCES answers(id),
    rating TEXT NOT NULL CHECK (rating IN ('up', 'down')),
    comment TEXT,
    created_ms INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS feedback_by_answer ON feedback(answer_id, id);
";

/// Schema 1 to 2: the answer log's table `audit` becomes `answers`, and the `audit_id` columns of
/// `turns` and `feedback` that point into it become `answer_id`. SQLite rewrites the foreign keys
/// and indexes that name them; rows, ids and the `AUTOINCREMENT` counter stay, so answer ids
/// already handed out still rate the same answers. The old indexes are dropped and [`CONVERSATIONS`]
/// makes them under the new names (and any of the tables a catalog lacks: the first release had
/// none of them). The hash-chained `events`, the real audit log, are not touched.
///
/// Each step runs only where the schema 1 name is there, so a catalog with some of the tables
/// migrates as well as one with all. The caller runs it in one transaction with the version's
/// update: the catalog is either all schema 1 or all schema 2.
pub(super) fn v1_to_v2(conn: &rusqlite::Connection) -> rusqlite::Result<()> {
    let table = |name: &str| -> rusqlite::Result<bool> {
        conn.query_row("SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?1)", [name], |r| r.get(0))
    };
    let column = |table: &str, name: &str| -> rusqlite::Result<bool> {
        conn.query_row("SELECT EXISTS (SELECT 1 FROM pragma_table_info(?1) WHERE name = ?2)", [table, name], |r| r.get(0))
    };
    if table("audit")? {
        conn.execute_batch("ALTER TABLE audit RENAME TO answers;")?;
    }
    for child in ["turns", "feedback"] {
        if column(child, "audit_id")? {
            conn.execute_batch(&format!("ALTER TABLE {child} RENAME COLUMN audit_id TO answer_id;"))?;
        }
    }
    conn.execute_batch("DROP INDEX IF EXISTS audit_by_tenant; DROP INDEX IF EXISTS feedback_by_audit;")?;
    conn.execute_batch(CONVERSATIONS)
}

/// Columns the answer log gained after its table was first made (`ADD COLUMN` has no `IF NOT
/// EXISTS`): each is added where it is missing, old rows taking its default. Run after [`ALL`].
pub(super) fn answer_columns(conn: &rusqlite::Connection) -> rusqlite::Result<()> {
    for (name, decl) in [("outcome", "TEXT NOT NULL DEFAULT ''"), ("evidence", "TEXT NOT NULL DEFAULT 'null'"), ("asker", "TEXT NOT NULL DEFAULT ''")] {
        let there: bool =
            conn.query_row("SELECT EXISTS (SELECT 1 FROM pragma_table_info('answers') WHERE name = ?1)", [name], |r| r.get(0))?;
        if !there {
            conn.execute_batch(&format!("ALTER TABLE answers ADD COLUMN {name} {decl};"))?;
        }
    }
    Ok(())
}

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

/// The events table and the triggers that keep it append-only: no row is ever deleted, and the
/// one change allowed is a retention run's redaction (`events::Audit`), which blanks a row's
/// question, chunks and detail, stamps `redacted_ms` and leaves every hash as it was.
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
    hash TEXT NOT NULL,
    redacted_ms INTEGER
);
CREATE INDEX IF NOT EXISTS events_by_tenant ON events(tenant, id);
CREATE TRIGGER IF NOT EXISTS events_no_update BEFORE UPDATE ON events
WHEN NOT (OLD.redacted_ms IS NULL AND NEW.redacted_ms IS NOT NULL
    AND NEW.question = '' AND NEW.chunk_ids = '[]' AND NEW.detail = '{}'
    AND NEW.id = OLD.id AND NEW.time_ms = OLD.time_ms AND NEW.key_id IS OLD.key_id AND NEW.key_name = OLD.key_name
    AND NEW.tenant = OLD.tenant AND NEW.action = OLD.action AND NEW.model = OLD.model AND NEW.outcome = OLD.outcome
    AND NEW.prev_hash = OLD.prev_hash AND NEW.hash = OLD.hash)
BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END;
CREATE TRIGGER IF NOT EXISTS events_no_delete BEFORE DELETE ON events
BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END;
";

/// Who may read what: the groups each restricted document is open to (a document without a row
/// is open to everyone who reaches its tenant; `access`), the owner of each conversation (a
/// person or key; the command line's sessions have none), and the groups a key reads. Added
/// later; an older catalog gains the tables on open.
pub(super) const ACCESS: &str = "
CREATE TABLE IF NOT EXISTS document_readers (
    doc_id INTEGER PRIMARY KEY REFERENCES documents(id) ON DELETE CASCADE,
    tenant_id INTEGER NOT NULL,
    readers TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS session_owners (
    session_id INTEGER PRIMARY KEY REFERENCES sessions(id) ON DELETE CASCADE,
    tenant_id INTEGER NOT NULL,
    owner TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS key_groups (
    key_id INTEGER PRIMARY KEY REFERENCES api_keys(id) ON DELETE CASCADE,
    groups TEXT NOT NULL
);
";

/// Legal holds (`store::retention`): while one is in place, the retention runs delete nothing of
/// its tenant, or of its person in that tenant. Released holds stay, with when they were lifted.
pub(super) const RETENTION: &str = "
CREATE TABLE IF NOT EXISTS legal_holds (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant TEXT NOT NULL,
    person TEXT NOT NULL DEFAULT '',
    reason TEXT NOT NULL,
    placed_ms INTEGER NOT NULL,
    released_ms INTEGER
);
";

/// Quota counters (`store::quota`): one row per counted request within the longest window.
pub(super) const QUOTAS: &str = "
CREATE TABLE IF NOT EXISTS quota_uses (
    who TEXT NOT NULL,
    what TEXT NOT NULL,
    at_ms INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS quota_uses_by_who ON quota_uses(who, what, at_ms);
";

/// Every table, in the order they are created.
pub(super) const ALL: [&str; 8] = [CATALOG, CONVERSATIONS, ANNOTATIONS, KEYS, EVENTS, ACCESS, RETENTION, QUOTAS];

/// The events table before retention: no `redacted_ms` column, and an update trigger that refused
/// every change. The column is added and the trigger replaced (by the one in [`EVENTS`]), in one
/// IMMEDIATE transaction so that two processes opening the catalog at once do it once. Run
/// after [`ALL`].
pub(super) fn event_columns(conn: &mut rusqlite::Connection) -> rusqlite::Result<()> {
    let current = |conn: &rusqlite::Connection| -> rusqlite::Result<bool> {
        conn.query_row("SELECT EXISTS (SELECT 1 FROM pragma_table_info('events') WHERE name = 'redacted_ms')", [], |r| r.get(0))
    };
    if current(conn)? {
        return Ok(());
    }
    let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    if !current(&tx)? {
        tx.execute_batch("ALTER TABLE events ADD COLUMN redacted_ms INTEGER; DROP TRIGGER IF EXISTS events_no_update;")?;
        tx.execute_batch(EVENTS)?;
    }
    tx.commit()
}

/// The catalog on the shared PostgreSQL server: the same tables and columns as the SQLite file's
/// (so one set of queries serves both, and `ragbox migrate` copies rows as they are), with
/// PostgreSQL's types, the audit chain append-only by trigger, and row-level security on every
/// table that holds a tenant's rows: a transaction sees and writes only the rows of the tenant
/// it names in the `ragbox.tenant` setting (`all` for the few that list every tenant's). The
/// policies are forced on the tables' owner too; a superuser, or a role with BYPASSRLS, passes
/// them anyway (`ragbox doctor` says so).
pub(super) const POSTGRES: &str = "
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS tenants (
    id BIGSERIAL PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    model TEXT NOT NULL,
    dims BIGINT NOT NULL,
    generation BIGINT NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS documents (
    id BIGSERIAL PRIMARY KEY,
    tenant_id BIGINT NOT NULL REFERENCES tenants(id),
    path TEXT NOT NULL,
    sha256 TEXT NOT NULL,
    size BIGINT NOT NULL,
    mtime_ns BIGINT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('indexed', 'skipped')),
    skip_reason TEXT,
    parser TEXT,
    chunker TEXT,
    title TEXT,
    metadata TEXT,
    text TEXT,
    generation BIGINT NOT NULL,
    UNIQUE (tenant_id, path)
);
CREATE TABLE IF NOT EXISTS chunks (
    id BIGSERIAL PRIMARY KEY,
    doc_id BIGINT NOT NULL REFERENCES documents(id) ON DELETE CASCADE,
    tenant_id BIGINT NOT NULL,
    ordinal BIGINT NOT NULL,
    role TEXT NOT NULL CHECK (role IN ('parent', 'child')),
    parent_id BIGINT,
    section_path TEXT NOT NULL,
    start BIGINT NOT NULL,
    \"end\" BIGINT NOT NULL,
    page BIGINT,
    line_first BIGINT NOT NULL,
    line_last BIGINT NOT NULL,
    tokens BIGINT NOT NULL,
    context TEXT NOT NULL,
    embed_sha256 BYTEA
);
CREATE INDEX IF NOT EXISTS chunks_by_doc ON chunks(doc_id);
CREATE INDEX IF NOT EXISTS chunks_by_tenant ON chunks(tenant_id, role);
CREATE TABLE IF NOT EXISTS embeddings (
    model TEXT NOT NULL,
    sha256 BYTEA NOT NULL,
    vector BYTEA NOT NULL,
    PRIMARY KEY (model, sha256)
);
CREATE TABLE IF NOT EXISTS sessions (
    id BIGSERIAL PRIMARY KEY,
    tenant_id BIGINT NOT NULL REFERENCES tenants(id),
    created_ms BIGINT NOT NULL
);
CREATE TABLE IF NOT EXISTS answers (
    id BIGSERIAL PRIMARY KEY,
    tenant_id BIGINT NOT NULL REFERENCES tenants(id),
    session_id BIGINT,
    question TEXT NOT NULL,
    standalone TEXT NOT NULL,
    chunk_ids TEXT NOT NULL,
    model TEXT NOT NULL,
    refused BIGINT NOT NULL,
    answer TEXT NOT NULL,
    timings TEXT NOT NULL,
    created_ms BIGINT NOT NULL,
    outcome TEXT NOT NULL DEFAULT '',
    evidence TEXT NOT NULL DEFAULT 'null',
    asker TEXT NOT NULL DEFAULT ''
);
ALTER TABLE answers ADD COLUMN IF NOT EXISTS asker TEXT NOT NULL DEFAULT '';
CREATE INDEX IF NOT EXISTS answers_by_tenant ON answers(tenant_id, id);
CREATE TABLE IF NOT EXISTS turns (
    id BIGSERIAL PRIMARY KEY,
    session_id BIGINT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    question TEXT NOT NULL,
    standalone TEXT NOT NULL,
    answer TEXT NOT NULL,
    answer_id BIGINT REFERENCES answers(id),
    created_ms BIGINT NOT NULL
);
CREATE INDEX IF NOT EXISTS turns_by_session ON turns(session_id, id);
CREATE TABLE IF NOT EXISTS feedback (
    id BIGSERIAL PRIMARY KEY,
    answer_id BIGINT NOT NULL REFERENCES answers(id),
    rating TEXT NOT NULL CHECK (rating IN ('up', 'down')),
    comment TEXT,
    created_ms BIGINT NOT NULL
);
CREATE INDEX IF NOT EXISTS feedback_by_answer ON feedback(answer_id, id);
CREATE TABLE IF NOT EXISTS annotations (
    key BYTEA PRIMARY KEY,
    contextualizer TEXT NOT NULL,
    context TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS api_keys (
    id BIGSERIAL PRIMARY KEY,
    name TEXT NOT NULL,
    tenant TEXT,
    role TEXT NOT NULL CHECK (role IN ('reader', 'writer', 'admin')),
    sha256 TEXT NOT NULL UNIQUE,
    created_ms BIGINT NOT NULL,
    revoked_ms BIGINT
);
CREATE TABLE IF NOT EXISTS events (
    id BIGSERIAL PRIMARY KEY,
    time_ms BIGINT NOT NULL,
    key_id BIGINT,
    key_name TEXT NOT NULL,
    tenant TEXT NOT NULL,
    action TEXT NOT NULL,
    question TEXT NOT NULL,
    chunk_ids TEXT NOT NULL,
    model TEXT NOT NULL,
    outcome TEXT NOT NULL,
    detail TEXT NOT NULL,
    prev_hash TEXT NOT NULL,
    hash TEXT NOT NULL,
    redacted_ms BIGINT
);
ALTER TABLE events ADD COLUMN IF NOT EXISTS redacted_ms BIGINT;
CREATE INDEX IF NOT EXISTS events_by_tenant ON events(tenant, id);
CREATE TABLE IF NOT EXISTS legal_holds (
    id BIGSERIAL PRIMARY KEY,
    tenant TEXT NOT NULL,
    person TEXT NOT NULL DEFAULT '',
    reason TEXT NOT NULL,
    placed_ms BIGINT NOT NULL,
    released_ms BIGINT
);
CREATE TABLE IF NOT EXISTS quota_uses (
    who TEXT NOT NULL,
    what TEXT NOT NULL,
    at_ms BIGINT NOT NULL
);
CREATE INDEX IF NOT EXISTS quota_uses_by_who ON quota_uses(who, what, at_ms);
CREATE TABLE IF NOT EXISTS document_readers (
    doc_id BIGINT PRIMARY KEY REFERENCES documents(id) ON DELETE CASCADE,
    tenant_id BIGINT NOT NULL,
    readers TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS session_owners (
    session_id BIGINT PRIMARY KEY REFERENCES sessions(id) ON DELETE CASCADE,
    tenant_id BIGINT NOT NULL,
    owner TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS key_groups (
    key_id BIGINT PRIMARY KEY REFERENCES api_keys(id) ON DELETE CASCADE,
    groups TEXT NOT NULL
);
CREATE OR REPLACE FUNCTION ragbox_append_only() RETURNS trigger LANGUAGE plpgsql AS
$$ BEGIN
    IF TG_OP = 'UPDATE' AND OLD.redacted_ms IS NULL AND NEW.redacted_ms IS NOT NULL
        AND NEW.question = '' AND NEW.chunk_ids = '[]' AND NEW.detail = '{}'
        AND NEW.id = OLD.id AND NEW.time_ms = OLD.time_ms AND NEW.key_id IS NOT DISTINCT FROM OLD.key_id
        AND NEW.key_name = OLD.key_name AND NEW.tenant = OLD.tenant AND NEW.action = OLD.action
        AND NEW.model = OLD.model AND NEW.outcome = OLD.outcome AND NEW.prev_hash = OLD.prev_hash AND NEW.hash = OLD.hash THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION 'the audit log is append-only';
END $$;
CREATE OR REPLACE TRIGGER events_no_change BEFORE UPDATE OR DELETE ON events
    FOR EACH ROW EXECUTE FUNCTION ragbox_append_only();
DO $$
DECLARE t TEXT;
BEGIN
    FOREACH t IN ARRAY ARRAY['documents', 'chunks', 'sessions', 'answers', 'document_readers', 'session_owners'] LOOP
        EXECUTE format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY', t);
        EXECUTE format('ALTER TABLE %I FORCE ROW LEVEL SECURITY', t);
        IF NOT EXISTS (SELECT 1 FROM pg_policies WHERE tablename = t AND policyname = 'tenant_wall') THEN
            EXECUTE format($p$CREATE POLICY tenant_wall ON %I
                USING (current_setting('ragbox.tenant', true) = 'all'
                       OR tenant_id::text = current_setting('ragbox.tenant', true))$p$, t);
        END IF;
    END LOOP;
END $$;
";

/// The tables `ragbox migrate` copies between the two catalogs, parents before children, each
/// with the columns it copies (both catalogs have them all, in this order).
pub(super) const TABLES: [&str; 16] = [
    "meta",
    "tenants",
    "documents",
    "chunks",
    "embeddings",
    "sessions",
    "answers",
    "turns",
    "feedback",
    "annotations",
    "api_keys",
    "events",
    "document_readers",
    "session_owners",
    "key_groups",
    "legal_holds",
];

#[cfg(test)]
pub(super) mod tests {
    use std::collections::BTreeMap;
    use std::path::Path;

    use rusqlite::types::Value;
    use rusqlite::Connection;

    use super::super::catalog::Catalog;
    use super::super::events::EventFilter;
    use super::super::conversation::Rating;

    /// The id of the answer in the schema 1 catalog of [`v1_catalog`].
    pub(in crate::store) const V1_ANSWER: i64 = 41;

    /// Copies a schema 1 catalog to `path`: `tests/fixtures/store/catalog-v1.sqlite`, written with
    /// schema 1's DDL (the answer log was `audit`, and `turns` and `feedback` pointed into it by
    /// `audit_id`). It holds tenant `t` (model `m`, 8 dims, no documents), answer [`V1_ANSWER`] in
    /// `audit`, a turn and a feedback pointing at it, and beside them a document, a chunk, an
    /// embedding, an annotation, an API key and three hash-chained events.
    pub(in crate::store) fn v1_catalog(path: &Path) {
        let fixture = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).join("tests/fixtures/store/catalog-v1.sqlite");
        std::fs::copy(fixture, path).unwrap();
    }

    /// Every table's rows (sorted, as text), by table name.
    fn rows(conn: &Connection) -> BTreeMap<String, Vec<String>> {
        let names: Vec<String> = conn
            .prepare("SELECT name FROM sqlite_master WHERE type = 'table'")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
        let mut out = BTreeMap::new();
        for name in names {
            let mut st = conn.prepare(&format!("SELECT * FROM \"{name}\"")).unwrap();
            let n = st.column_count();
            let mut rows: Vec<String> = st
                .query_map([], |r| (0..n).map(|i| r.get::<_, Value>(i)).collect::<rusqlite::Result<Vec<_>>>().map(|v| format!("{v:?}")))
                .unwrap()
                .collect::<rusqlite::Result<_>>()
                .unwrap();
            rows.sort();
            out.insert(name, rows);
        }
        out
    }

    /// Every schema object's SQL, by (type, name).
    fn objects(conn: &Connection) -> BTreeMap<(String, String), Option<String>> {
        conn.prepare("SELECT type, name, sql FROM sqlite_master")
            .unwrap()
            .query_map([], |r| Ok(((r.get(0)?, r.get(1)?), r.get(2)?)))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap()
    }

    /// The SQL of schema object `name`.
    fn after_objects_sql(conn: &Connection, name: &str) -> String {
        conn.query_row("SELECT sql FROM sqlite_master WHERE name = ?1", [name], |r| r.get(0)).unwrap()
    }

    fn columns(conn: &Connection, table: &str) -> Vec<String> {
        conn.prepare("SELECT name FROM pragma_table_info(?1)")
            .unwrap()
            .query_map([table], |r| r.get(0))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap()
    }

    /// The tables and indexes the migration renames, under either name.
    const RENAMED: [&str; 8] =
        ["audit", "answers", "turns", "feedback", "audit_by_tenant", "answers_by_tenant", "feedback_by_audit", "feedback_by_answer"];

    #[test]
    fn a_schema_1_catalog_is_migrated_on_open() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("catalog.sqlite");
        v1_catalog(&path);
        let (rows_before, objects_before) = {
            let conn = Connection::open(&path).unwrap();
            (rows(&conn), objects(&conn))
        };
        assert_eq!(rows_before["audit"].len(), 1);
        assert_eq!(rows_before["events"].len(), 3);

        let cat = Catalog::open(&path).unwrap();
        let chain = cat.audit().verify().unwrap();
        {
            let conn = cat.conn();
            let version: String = conn.query_row("SELECT value FROM meta WHERE key = 'schema_version'", [], |r| r.get(0)).unwrap();
            assert_eq!(version, "2");

            // The rows are there, unchanged, under the new names.
            let after = rows(&conn);
            assert!(!after.contains_key("audit"), "the old table is gone");
            // Each row as it was, and the columns added since (`answer_columns`) at their defaults.
            let gained: Vec<String> = rows_before["audit"].iter().map(|r| format!("{}, Text(\"\"), Text(\"null\"), Text(\"\")]", r.trim_end_matches(']'))).collect();
            assert_eq!(after["answers"], gained);
            assert_eq!(after["turns"], rows_before["turns"]);
            assert_eq!(after["feedback"], rows_before["feedback"]);
            assert_eq!(columns(&conn, "turns"), ["id", "session_id", "question", "standalone", "answer", "answer_id", "created_ms"]);
            assert_eq!(columns(&conn, "feedback"), ["id", "answer_id", "rating", "comment", "created_ms"]);
            let parents: Vec<(String, String, String)> = conn
                .prepare("SELECT m.name, f.\"table\", f.\"from\" FROM sqlite_master m, pragma_foreign_key_list(m.name) f
                          WHERE m.name IN ('turns', 'feedback') AND f.\"table\" <> 'sessions' ORDER BY m.name")
                .unwrap()
                .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
                .unwrap()
                .collect::<rusqlite::Result<_>>()
                .unwrap();
            assert_eq!(
                parents,
                [("feedback".into(), "answers".into(), "answer_id".into()), ("turns".into(), "answers".into(), "answer_id".into())]
            );
            let dangling: i64 = conn.query_row("SELECT COUNT(*) FROM pragma_foreign_key_check", [], |r| r.get(0)).unwrap();
            assert_eq!(dangling, 0);
            let integrity: String = conn.query_row("PRAGMA integrity_check", [], |r| r.get(0)).unwrap();
            assert_eq!(integrity, "ok");

            // The indexes under their new names only, and the AUTOINCREMENT counter moved along.
            let after_objects = objects(&conn);
            let index = |name: &str| after_objects.contains_key(&("index".to_string(), name.to_string()));
            assert!(index("answers_by_tenant") && index("feedback_by_answer") && index("turns_by_session"));
            assert!(!index("audit_by_tenant") && !index("feedback_by_audit"));
            let sequence: i64 = conn.query_row("SELECT seq FROM sqlite_sequence WHERE name = 'answers'", [], |r| r.get(0)).unwrap();
            assert_eq!(sequence, V1_ANSWER);

            // Nothing else changed: every other table's rows (but the version, checked above) and
            // every other object's SQL.
            // The access tables are added on open, empty.
            const ADDED: [&str; 5] = ["document_readers", "session_owners", "key_groups", "legal_holds", "quota_uses"];
            const ADDED_INDEXES: [&str; 1] = ["quota_uses_by_who"];
            assert!(ADDED.iter().all(|t| after.get(*t).is_some_and(Vec::is_empty)), "{after:?}");
            // The audit log gains `redacted_ms` (each row's is null) and the update trigger that
            // lets a retention run blank a row; its rows and the delete trigger are as they were.
            let gained: Vec<String> = rows_before["events"].iter().map(|r| format!("{}, Null]", r.trim_end_matches(']'))).collect();
            assert_eq!(after["events"], gained);
            assert!(after_objects_sql(&conn, "events_no_update").contains("redacted_ms"));
            const UPGRADED: [&str; 2] = ["events", "events_no_update"];
            let untouched = |name: &str| {
                !RENAMED.contains(&name) && !["sqlite_sequence", "meta"].contains(&name) && !ADDED.contains(&name) && !ADDED_INDEXES.contains(&name) && !UPGRADED.contains(&name)
            };
            let others = |rows: &BTreeMap<String, Vec<String>>| {
                rows.iter().filter(|(k, _)| untouched(k)).map(|(k, v)| (k.clone(), v.clone())).collect::<BTreeMap<_, _>>()
            };
            assert_eq!(others(&after), others(&rows_before));
            let mut sequences: Vec<String> =
                rows_before["sqlite_sequence"].iter().map(|r| r.replace("Text(\"audit\")", "Text(\"answers\")")).collect();
            sequences.sort();
            assert_eq!(after["sqlite_sequence"], sequences);
            let other_objects = |o: &BTreeMap<(String, String), Option<String>>| {
                o.iter().filter(|((_, name), _)| untouched(name)).map(|(k, v)| (k.clone(), v.clone())).collect::<BTreeMap<_, _>>()
            };
            assert_eq!(other_objects(&after_objects), other_objects(&objects_before));
            // "audit" is left only to the hash-chained audit log (its triggers' message).
            for ((kind, name), sql) in &after_objects {
                let sql = sql.as_deref().unwrap_or("");
                assert!(!sql.contains("audit") || name.starts_with("events_"), "{kind} {name} still says audit: {sql}");
            }

            // The audit log's triggers still refuse edits and deletions.
            assert!(conn.execute("UPDATE events SET question = 'x' WHERE id = 2", []).is_err());
            assert!(conn.execute("DELETE FROM events WHERE id = 2", []).is_err());
        }
        // The hash-chained events are whole: same rows, same head, intact.
        assert_eq!((chain.rows, chain.broken.is_none()), (3, true), "{chain:?}");
        assert_eq!(cat.audit().list(&EventFilter::default()).unwrap()[1].detail["answer_id"], V1_ANSWER);

        // The catalog reads and writes the answer log as before.
        let answer = cat.answers().get(V1_ANSWER).unwrap().unwrap();
        assert_eq!((answer.tenant.as_str(), answer.session, answer.answer.as_str()), ("t", Some(7), "Line managers [1]."));
        assert_eq!(answer.feedback.len(), 1);
        assert_eq!((answer.feedback[0].answer_id, answer.feedback[0].rating), (V1_ANSWER, Rating::Down));
        assert_eq!(cat.sessions().recent_turns(7, 5).unwrap()[0].answer_id, Some(V1_ANSWER));
        cat.answers().add_feedback(V1_ANSWER, Rating::Up, None).unwrap();
        let v = serde_json::json!({});
        let next = cat
            .answers().record(&super::super::conversation::AnswerRecord {
                tenant: 1,
                session: Some(7),
                question: "q",
                standalone: "q",
                chunk_ids: &[],
                model: "",
                refused: true,
                outcome: "no_good_source",
                answer: "a",
                evidence: &serde_json::Value::Null,
                timings: &v,
                asker: "",
            })
            .unwrap();
        assert_eq!(next, V1_ANSWER + 1, "answer ids are not reused");
        drop(cat);

        // Opening again changes nothing.
        let cat = Catalog::open(&path).unwrap();
        assert_eq!(cat.answers().get(V1_ANSWER).unwrap().unwrap().feedback.len(), 2);
        let again = cat.audit().verify().unwrap();
        assert_eq!((again.rows, again.head.as_str()), (chain.rows, chain.head.as_str()));
    }

    #[test]
    fn a_catalog_of_an_unknown_schema_is_refused_untouched() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("catalog.sqlite");
        v1_catalog(&path);
        let conn = Connection::open(&path).unwrap();
        conn.execute("UPDATE meta SET value = '3' WHERE key = 'schema_version'", []).unwrap();
        let before = objects(&conn);
        let e = Catalog::open(&path).err().expect("schema 3 is refused");
        assert!(e.to_string().contains("catalog schema 3"), "{e}");
        assert_eq!(objects(&conn), before, "nothing is made or renamed in a catalog of another schema");
    }
}
