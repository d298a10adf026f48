//! Moving a data folder to another backend (`ragbox migrate --to shared|local`).
//!
//! When the catalog changes place (the data folder's SQLite file to the shared PostgreSQL server,
//! or back), its rows are copied first, every table in one transaction on each side, ids kept:
//! documents, chunks, the embedding cache, keys, sessions, the answer log and the audit chain
//! (which still verifies, its hashes being over the same fields). Then each tenant's vector and
//! lexical indexes are built on the target from the copied catalog, vectors from the embedding
//! cache (nothing is re-embedded), under the tenant's write lock. The source is left as it was,
//! so switching `store.backend` back is safe until the target is trusted.
//!
//! A target catalog is written only when it is empty or holds an earlier copy of this same
//! catalog (the same catalog id): an earlier copy is replaced (on PostgreSQL its tables are
//! truncated; a SQLite file is moved aside, not deleted). A target that holds another catalog
//! is refused.

use std::path::Path;

use serde::Serialize;

use super::schema::TABLES;
use super::sql::{params, Database, Dialect, Scope, Sql};
use crate::error::{Error, Result};
use crate::store::{Backends, Catalog, Consistency, Layout, Store};

/// What migrating one tenant did.
#[derive(Debug, Clone, Serialize)]
pub struct Migrated {
    /// The tenant.
    pub tenant: String,
    /// Its catalog generation.
    pub generation: u64,
    /// Why the target's vector index was built (None: it was already at this generation).
    pub vector: Option<String>,
    /// Why the target's lexical index was built.
    pub lexical: Option<String>,
    /// The target's indexes against the catalog, afterwards.
    pub consistency: Consistency,
    /// Seconds it took.
    pub seconds: f64,
}

/// What a migration did.
#[derive(Debug, Clone, Serialize)]
pub struct Migration {
    /// The catalog's copy, when it changed place.
    pub catalog: Option<CatalogCopy>,
    /// Each tenant's indexes.
    pub tenants: Vec<Migrated>,
}

/// The catalog copied from one database to another.
#[derive(Debug, Clone, Serialize)]
pub struct CatalogCopy {
    /// Where from (a file, or `PostgreSQL at host:port/db`).
    pub from: String,
    /// Where to.
    pub to: String,
    /// Rows copied, by table.
    pub rows: Vec<(String, usize)>,
    /// Where an earlier copy was moved aside, when one was.
    pub replaced: Option<String>,
}

/// Moves the data folder `data_dir` from the backends `source` to `target`: the catalog first
/// when it changes place, then every tenant's indexes.
pub fn migrate(data_dir: &Path, source: Backends, target: Backends) -> Result<Migration> {
    let catalog = match (&source.catalog, &target.catalog) {
        (None, None) => None,
        (Some(a), Some(b)) if a.server() == b.server() => None,
        _ => Some(copy_catalog(data_dir, &source, &target)?),
    };
    let store = Store::open_with(data_dir, target)?;
    let mut tenants = Vec::new();
    for tenant in store.catalog().tenants()? {
        let started = std::time::Instant::now();
        let writer = store.writer(&tenant)?;
        let repair = writer.repair().clone();
        let tenant = writer.tenant().clone();
        drop(writer);
        let consistency = store.check_consistency(&tenant)?;
        tenants.push(Migrated {
            tenant: tenant.name.clone(),
            generation: tenant.generation,
            vector: repair.vector,
            lexical: repair.lexical,
            consistency,
            seconds: started.elapsed().as_secs_f64(),
        });
    }
    Ok(Migration { catalog, tenants })
}

/// Opens the catalog `backends` keeps for `data_dir`.
fn open_catalog(data_dir: &Path, backends: &Backends) -> Result<Catalog> {
    match &backends.catalog {
        Some(pg) => Catalog::on_postgres(pg.clone()),
        None => Catalog::open(&Layout::new(data_dir).catalog()),
    }
}

/// The catalog's identity as stored, without making one.
fn stored_id(catalog: &Catalog) -> Result<Option<String>> {
    catalog.database().read(Scope::All, |sql| {
        sql.query_opt("SELECT value FROM meta WHERE key = 'catalog_id'", &[])?.map(|r| r.text(0)).transpose()
    })
}

fn copy_catalog(data_dir: &Path, source: &Backends, target: &Backends) -> Result<CatalogCopy> {
    let from = open_catalog(data_dir, source)?;
    let id = from.id()?;
    let mut to = open_catalog(data_dir, target)?;
    let mut replaced = None;
    let target_id = stored_id(&to)?;
    if !to.tenants()?.is_empty() || target_id.is_some() {
        match target_id {
            Some(other) if other == id => {}
            other => {
                return Err(Error::Invalid(format!(
                    "{} already holds another catalog (id {}); point the target at an empty database or data folder",
                    to.path().display(),
                    other.as_deref().unwrap_or("none")
                )))
            }
        }
        // An earlier copy of this catalog: replaced by the current one.
        match to.database() {
            Database::Postgres(_) => {
                to.database().write(Scope::All, |sql| sql.batch(&format!("TRUNCATE {} RESTART IDENTITY CASCADE", TABLES.join(", "))))?;
                replaced = Some(format!("the earlier copy on {} (truncated)", to.path().display()));
            }
            Database::Sqlite(_) => {
                let path = to.path().to_path_buf();
                drop(to);
                let stamp = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
                let aside = path.with_extension(format!("sqlite.before-migrate-{stamp}"));
                for suffix in ["", "-wal", "-shm"] {
                    let file = std::path::PathBuf::from(format!("{}{suffix}", path.display()));
                    if file.exists() {
                        let moved = std::path::PathBuf::from(format!("{}{suffix}", aside.display()));
                        std::fs::rename(&file, &moved).map_err(Error::path(&file))?;
                    }
                }
                replaced = Some(aside.display().to_string());
                to = Catalog::open(&path)?;
            }
        }
    }
    let tables = from.database().read(Scope::All, |src| {
        let mut out = Vec::new();
        for table in TABLES {
            let cols = columns(src, table)?;
            let rows = src.query(&format!("SELECT {} FROM {table}", quoted(&cols)), &[])?;
            out.push((table, cols, rows));
        }
        Ok(out)
    })?;
    let rows = to.database().write(Scope::All, |dst| {
        let mut counts = Vec::new();
        for (table, cols, rows) in &tables {
            let theirs = columns(dst, table)?;
            let missing: Vec<&String> = cols.iter().filter(|c| !theirs.contains(c)).collect();
            if !missing.is_empty() {
                return Err(Error::Bug(format!("table {table} of the target has no column {missing:?}")));
            }
            let placeholders: Vec<String> = (1..=cols.len()).map(|i| format!("?{i}")).collect();
            // The meta rows replace the new catalog's own (its id becomes the source's).
            let conflict = if *table == "meta" { "ON CONFLICT (key) DO UPDATE SET value = excluded.value" } else { "" };
            let insert = format!("INSERT INTO {table} ({}) VALUES ({}) {conflict}", quoted(cols), placeholders.join(", "));
            for r in rows {
                dst.execute(&insert, r.values())?;
            }
            counts.push((table.to_string(), rows.len()));
        }
        if dst.dialect() == Dialect::Postgres {
            // The copied ids were given explicitly; the sequences go on after them.
            for table in TABLES.iter().filter(|t| !["meta", "embeddings", "annotations", "document_readers", "session_owners", "key_groups"].contains(t)) {
                dst.query(
                    &format!("SELECT setval(pg_get_serial_sequence(?1, 'id'), GREATEST((SELECT MAX(id) FROM {table}), 1), (SELECT MAX(id) FROM {table}) IS NOT NULL)"),
                    params![*table],
                )?;
            }
        }
        Ok(counts)
    })?;
    let verdict = to.audit().verify()?;
    if let Some(broken) = verdict.broken {
        return Err(Error::Bug(format!("the copied audit chain does not verify at row {}: {}", broken.id, broken.reason)));
    }
    Ok(CatalogCopy { from: from.path().display().to_string(), to: to.path().display().to_string(), rows, replaced })
}

/// A table's columns, in their order.
fn columns(sql: &mut dyn Sql, table: &str) -> Result<Vec<String>> {
    let query = match sql.dialect() {
        Dialect::Sqlite => "SELECT name FROM pragma_table_info(?1) ORDER BY cid",
        Dialect::Postgres => {
            "SELECT column_name::text FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = ?1 ORDER BY ordinal_position"
        }
    };
    sql.query(query, params![table])?.iter().map(|r| r.text(0)).collect()
}

fn quoted(cols: &[String]) -> String {
    cols.iter().map(|c| format!("\"{c}\"")).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::contract::batch;
    use crate::store::VectorOptions;

    #[test]
    fn a_data_folder_moves_to_fresh_indexes_without_re_embedding() {
        let (data, elsewhere) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let store = Store::open(data.path(), VectorOptions::default()).unwrap();
        let t = store.tenant_for_model("acme", "fake", 8).unwrap();
        store.writer(&t).unwrap().commit(&batch(&[("/a.txt", &["alpha one", "beta two"])])).unwrap();
        drop(store);
        // Another place for the indexes: the same kind, in another folder (the shared servers run
        // the same code in tests/integration/shared.rs).
        let local = || Backends::local(&Layout::new(data.path()), VectorOptions::default());
        let target = Backends::local(&Layout::new(elsewhere.path()), VectorOptions::default());
        let report = migrate(data.path(), local(), target).unwrap();
        assert!(report.catalog.is_none(), "the catalog stays in the data folder");
        assert_eq!(report.tenants.len(), 1);
        assert!(report.tenants[0].vector.is_some() && report.tenants[0].lexical.is_some(), "{report:?}");
        assert!(report.tenants[0].consistency.consistent, "{report:?}");
        let again = migrate(data.path(), local(), Backends::local(&Layout::new(elsewhere.path()), VectorOptions::default())).unwrap();
        assert!(again.tenants[0].vector.is_none() && again.tenants[0].lexical.is_none(), "a second run finds the target current: {again:?}");
    }
}
