//! The catalog's database: one SQLite file of a data folder, or the shared PostgreSQL server of
//! several nodes. The catalog's modules write their queries once, in the SQL both understand
//! (`?N` parameters, `ON CONFLICT`, `RETURNING`), against [`Sql`]; [`Database`] runs them in a
//! transaction on either, with values passed as [`Value`] and rows read back as [`Row`].
//!
//! On PostgreSQL every transaction first names the tenant it works for ([`Scope`]): the tables
//! that hold a tenant's rows have row-level security, so a query that forgot its tenant filter
//! still sees only that tenant's rows. SQLite has no such wall; there the queries' own `tenant_id`
//! filters are all there is, as they were always.

use std::sync::{Arc, Mutex, MutexGuard};

use r2d2_postgres::postgres;
use rusqlite::types::{ToSqlOutput, ValueRef};

use super::shared::Postgres;
use crate::error::{Error, Result};

/// Which database a query runs on, for the few statements the two spell differently.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// The data folder's SQLite file.
    Sqlite,
    /// The shared PostgreSQL server.
    Postgres,
}

/// One SQL value, as a parameter or a column.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// NULL.
    Null,
    /// An integer (PostgreSQL: `BIGINT`, or a `BOOLEAN` read back as 0 or 1).
    Int(i64),
    /// A float.
    Real(f64),
    /// Text.
    Text(String),
    /// Bytes (PostgreSQL: `BYTEA`).
    Blob(Vec<u8>),
}

impl From<i64> for Value {
    fn from(v: i64) -> Value {
        Value::Int(v)
    }
}

impl From<u32> for Value {
    fn from(v: u32) -> Value {
        Value::Int(v.into())
    }
}

impl From<bool> for Value {
    fn from(v: bool) -> Value {
        Value::Int(v.into())
    }
}

impl From<&str> for Value {
    fn from(v: &str) -> Value {
        Value::Text(v.to_string())
    }
}

impl From<String> for Value {
    fn from(v: String) -> Value {
        Value::Text(v)
    }
}

impl From<&String> for Value {
    fn from(v: &String) -> Value {
        Value::Text(v.clone())
    }
}

impl From<&[u8]> for Value {
    fn from(v: &[u8]) -> Value {
        Value::Blob(v.to_vec())
    }
}

impl From<Vec<u8>> for Value {
    fn from(v: Vec<u8>) -> Value {
        Value::Blob(v)
    }
}

impl<T: Into<Value>> From<Option<T>> for Value {
    fn from(v: Option<T>) -> Value {
        v.map_or(Value::Null, Into::into)
    }
}

/// Parameters for a query: `params![a, b]` is `&[Value::from(a), Value::from(b)]`.
macro_rules! params {
    ($($v:expr),* $(,)?) => { &[$($crate::store::sql::Value::from($v)),*][..] };
}
pub(crate) use params;

/// One result row.
#[derive(Debug, Clone)]
pub struct Row(Vec<Value>);

impl Row {
    fn at(&self, i: usize) -> Result<&Value> {
        self.0.get(i).ok_or_else(|| Error::Bug(format!("catalog row has no column {i}")))
    }

    fn wrong(&self, i: usize, want: &str) -> Error {
        Error::Bug(format!("catalog column {i} is {:?}, not {want}", self.0.get(i)))
    }

    /// Column `i` as an integer.
    pub fn int(&self, i: usize) -> Result<i64> {
        self.opt_int(i)?.ok_or_else(|| self.wrong(i, "an integer"))
    }

    /// Column `i` as an integer or NULL.
    pub fn opt_int(&self, i: usize) -> Result<Option<i64>> {
        match self.at(i)? {
            Value::Null => Ok(None),
            Value::Int(v) => Ok(Some(*v)),
            _ => Err(self.wrong(i, "an integer")),
        }
    }

    /// Column `i` as a truth value (an integer, non-zero is true).
    pub fn flag(&self, i: usize) -> Result<bool> {
        Ok(self.int(i)? != 0)
    }

    /// Column `i` as text.
    pub fn text(&self, i: usize) -> Result<String> {
        self.opt_text(i)?.ok_or_else(|| self.wrong(i, "text"))
    }

    /// Column `i` as text or NULL.
    pub fn opt_text(&self, i: usize) -> Result<Option<String>> {
        match self.at(i)? {
            Value::Null => Ok(None),
            Value::Text(v) => Ok(Some(v.clone())),
            _ => Err(self.wrong(i, "text")),
        }
    }

    /// Column `i` as bytes (text is taken as its UTF-8 bytes).
    pub fn blob(&self, i: usize) -> Result<Vec<u8>> {
        match self.at(i)? {
            Value::Blob(v) => Ok(v.clone()),
            Value::Text(v) => Ok(v.clone().into_bytes()),
            _ => Err(self.wrong(i, "bytes")),
        }
    }

    /// Every column.
    pub fn values(&self) -> &[Value] {
        &self.0
    }
}

/// Queries inside one transaction.
pub trait Sql {
    /// Which database this is.
    fn dialect(&self) -> Dialect;
    /// Runs a statement; returns the rows it changed.
    fn execute(&mut self, sql: &str, params: &[Value]) -> Result<u64>;
    /// Runs a query; returns its rows.
    fn query(&mut self, sql: &str, params: &[Value]) -> Result<Vec<Row>>;
    /// Runs statements with no parameters and no results (DDL).
    fn batch(&mut self, sql: &str) -> Result<()>;

    /// The first row, if any.
    fn query_opt(&mut self, sql: &str, params: &[Value]) -> Result<Option<Row>> {
        Ok(self.query(sql, params)?.into_iter().next())
    }

    /// The one row a query must return.
    fn query_one(&mut self, sql: &str, params: &[Value]) -> Result<Row> {
        self.query_opt(sql, params)?.ok_or_else(|| Error::Bug(format!("no row from `{}`", sql.split_whitespace().collect::<Vec<_>>().join(" "))))
    }
}

/// Whose rows a transaction may see and write on PostgreSQL (its row-level security).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// One tenant's rows only.
    Tenant(i64),
    /// Every tenant's: listing tenants, keys and the audit chain, and rows found by their own id
    /// (a session, an answer) whose tenant the caller then checks.
    All,
}

impl Scope {
    /// The value of the `ragbox.tenant` setting the policies compare with.
    fn setting(self) -> String {
        match self {
            Scope::Tenant(id) => id.to_string(),
            Scope::All => "all".into(),
        }
    }
}

/// The catalog's database.
pub enum Database {
    /// A SQLite file (or memory), one connection behind a mutex: writes are serialised anyway
    /// and reads are short.
    Sqlite(Mutex<rusqlite::Connection>),
    /// The shared PostgreSQL server, a pool of connections.
    Postgres(Arc<Postgres>),
}

impl Database {
    /// Which database this is.
    pub fn dialect(&self) -> Dialect {
        match self {
            Database::Sqlite(_) => Dialect::Sqlite,
            Database::Postgres(_) => Dialect::Postgres,
        }
    }

    /// The SQLite connection itself (for what only SQLite does: pragmas, its backup API).
    pub fn sqlite(&self) -> Option<MutexGuard<'_, rusqlite::Connection>> {
        match self {
            // A panic while holding the lock leaves SQLite itself consistent (transactions roll back).
            Database::Sqlite(conn) => Some(conn.lock().unwrap_or_else(|poisoned| poisoned.into_inner())),
            Database::Postgres(_) => None,
        }
    }

    /// Runs `f` in a read transaction (one snapshot).
    pub fn read<T>(&self, scope: Scope, f: impl FnMut(&mut dyn Sql) -> Result<T>) -> Result<T> {
        self.run(scope, false, f)
    }

    /// Runs `f` in a write transaction: SQLite takes its write lock up front (IMMEDIATE: a
    /// deferred transaction that reads and then writes cannot wait for another process's writer;
    /// SQLite answers "database is locked" at once to avoid a deadlock); PostgreSQL runs it again
    /// when the server picked it to break a deadlock.
    pub fn write<T>(&self, scope: Scope, f: impl FnMut(&mut dyn Sql) -> Result<T>) -> Result<T> {
        self.run(scope, true, f)
    }

    fn run<T>(&self, scope: Scope, write: bool, mut f: impl FnMut(&mut dyn Sql) -> Result<T>) -> Result<T> {
        match self {
            Database::Sqlite(_) => {
                let mut conn = self.sqlite().expect("a SQLite database");
                let behaviour = if write { rusqlite::TransactionBehavior::Immediate } else { rusqlite::TransactionBehavior::Deferred };
                let tx = conn.transaction_with_behavior(behaviour)?;
                let out = f(&mut Lite(&tx))?;
                tx.commit()?;
                Ok(out)
            }
            Database::Postgres(pg) => {
                let what = if write { "writing the catalog" } else { "reading the catalog" };
                let mut attempts = 0;
                loop {
                    attempts += 1;
                    let mut client = pg.client(what)?;
                    let result = (|| {
                        let mut tx = client.build_transaction().read_only(!write).start().map_err(|e| pg.failed(what, &e))?;
                        tx.execute("SELECT set_config('ragbox.tenant', $1, true)", &[&scope.setting()]).map_err(|e| pg.failed(what, &e))?;
                        let out = f(&mut Pg { tx: &mut tx, pg, what })?;
                        tx.commit().map_err(|e| pg.failed(what, &e))?;
                        Ok(out)
                    })();
                    match result {
                        Err(e) if attempts < 5 && is_retryable(&e) => continue,
                        other => return other,
                    }
                }
            }
        }
    }
}

/// A PostgreSQL deadlock or serialisation failure: the transaction is safe to run again.
fn is_retryable(e: &Error) -> bool {
    matches!(e, Error::SharedServer { detail, .. } if detail.starts_with("40P01") || detail.starts_with("40001"))
}

/// A SQLite transaction.
struct Lite<'a>(&'a rusqlite::Connection);

impl rusqlite::ToSql for Value {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(ToSqlOutput::Borrowed(match self {
            Value::Null => ValueRef::Null,
            Value::Int(v) => ValueRef::Integer(*v),
            Value::Real(v) => ValueRef::Real(*v),
            Value::Text(v) => ValueRef::Text(v.as_bytes()),
            Value::Blob(v) => ValueRef::Blob(v),
        }))
    }
}

fn from_sqlite(v: ValueRef<'_>) -> Result<Value> {
    Ok(match v {
        ValueRef::Null => Value::Null,
        ValueRef::Integer(i) => Value::Int(i),
        ValueRef::Real(r) => Value::Real(r),
        ValueRef::Text(t) => Value::Text(String::from_utf8(t.to_vec()).map_err(|e| Error::Bug(format!("catalog text is not UTF-8: {e}")))?),
        ValueRef::Blob(b) => Value::Blob(b.to_vec()),
    })
}

impl Sql for Lite<'_> {
    fn dialect(&self) -> Dialect {
        Dialect::Sqlite
    }

    fn execute(&mut self, sql: &str, params: &[Value]) -> Result<u64> {
        let mut st = self.0.prepare_cached(sql)?;
        Ok(st.execute(rusqlite::params_from_iter(params))? as u64)
    }

    fn query(&mut self, sql: &str, params: &[Value]) -> Result<Vec<Row>> {
        let mut st = self.0.prepare_cached(sql)?;
        let n = st.column_count();
        let mut rows = st.query(rusqlite::params_from_iter(params))?;
        let mut out = Vec::new();
        while let Some(r) = rows.next()? {
            out.push(Row((0..n).map(|i| from_sqlite(r.get_ref(i)?)).collect::<Result<Vec<_>>>()?));
        }
        Ok(out)
    }

    fn batch(&mut self, sql: &str) -> Result<()> {
        Ok(self.0.execute_batch(sql)?)
    }
}

/// A PostgreSQL transaction.
struct Pg<'a, 'b> {
    tx: &'a mut postgres::Transaction<'b>,
    pg: &'a Postgres,
    what: &'static str,
}

/// `sql` with SQLite's `?N` parameters as PostgreSQL's `$N`.
fn dollar_params(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len());
    let mut chars = sql.chars().peekable();
    let mut quoted = false;
    while let Some(c) = chars.next() {
        if c == '\'' {
            quoted = !quoted;
        }
        if c == '?' && !quoted && chars.peek().is_some_and(|n| n.is_ascii_digit()) {
            out.push('$');
        } else {
            out.push(c);
        }
    }
    out
}

impl postgres::types::ToSql for Value {
    fn to_sql(&self, ty: &postgres::types::Type, out: &mut bytes::BytesMut) -> std::result::Result<postgres::types::IsNull, Box<dyn std::error::Error + Sync + Send>> {
        use postgres::types::Type;
        match self {
            Value::Null => Ok(postgres::types::IsNull::Yes),
            Value::Int(v) if *ty == Type::INT4 => i32::try_from(*v)?.to_sql(ty, out),
            Value::Int(v) if *ty == Type::INT2 => i16::try_from(*v)?.to_sql(ty, out),
            Value::Int(v) if *ty == Type::BOOL => (*v != 0).to_sql(ty, out),
            Value::Int(v) if *ty == Type::TEXT => v.to_string().to_sql(ty, out),
            Value::Int(v) => v.to_sql(ty, out),
            Value::Real(v) => v.to_sql(ty, out),
            Value::Text(v) => v.to_sql(ty, out),
            Value::Blob(v) => v.to_sql(ty, out),
        }
    }

    fn accepts(_: &postgres::types::Type) -> bool {
        true
    }

    postgres::types::to_sql_checked!();
}

impl<'a> postgres::types::FromSql<'a> for Value {
    fn from_sql(ty: &postgres::types::Type, raw: &'a [u8]) -> std::result::Result<Value, Box<dyn std::error::Error + Sync + Send>> {
        use postgres::types::Type;
        Ok(match *ty {
            Type::INT2 => Value::Int(i16::from_sql(ty, raw)?.into()),
            Type::INT4 => Value::Int(i32::from_sql(ty, raw)?.into()),
            Type::INT8 => Value::Int(i64::from_sql(ty, raw)?),
            Type::BOOL => Value::Int(bool::from_sql(ty, raw)?.into()),
            Type::FLOAT4 => Value::Real(f32::from_sql(ty, raw)?.into()),
            Type::FLOAT8 => Value::Real(f64::from_sql(ty, raw)?),
            Type::BYTEA => Value::Blob(<Vec<u8>>::from_sql(ty, raw)?),
            Type::VOID => Value::Null,
            _ => Value::Text(String::from_sql(ty, raw)?),
        })
    }

    fn from_sql_null(_: &postgres::types::Type) -> std::result::Result<Value, Box<dyn std::error::Error + Sync + Send>> {
        Ok(Value::Null)
    }

    fn accepts(ty: &postgres::types::Type) -> bool {
        use postgres::types::Type;
        [Type::INT2, Type::INT4, Type::INT8, Type::BOOL, Type::FLOAT4, Type::FLOAT8, Type::BYTEA, Type::TEXT, Type::VARCHAR, Type::NAME, Type::BPCHAR, Type::VOID]
            .contains(ty)
    }
}

impl Pg<'_, '_> {
    fn params(params: &[Value]) -> Vec<&(dyn postgres::types::ToSql + Sync)> {
        params.iter().map(|v| v as &(dyn postgres::types::ToSql + Sync)).collect()
    }
}

impl Sql for Pg<'_, '_> {
    fn dialect(&self) -> Dialect {
        Dialect::Postgres
    }

    fn execute(&mut self, sql: &str, params: &[Value]) -> Result<u64> {
        self.tx.execute(dollar_params(sql).as_str(), &Self::params(params)).map_err(|e| self.pg.failed(self.what, &e))
    }

    fn query(&mut self, sql: &str, params: &[Value]) -> Result<Vec<Row>> {
        let rows = self.tx.query(dollar_params(sql).as_str(), &Self::params(params)).map_err(|e| self.pg.failed(self.what, &e))?;
        rows.iter()
            .map(|r| (0..r.len()).map(|i| r.try_get::<_, Value>(i)).collect::<std::result::Result<Vec<_>, _>>().map(Row))
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|e| self.pg.failed(self.what, &e))
    }

    fn batch(&mut self, sql: &str) -> Result<()> {
        self.tx.batch_execute(sql).map_err(|e| self.pg.failed(self.what, &e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameters_are_renumbered_outside_quotes_only() {
        assert_eq!(dollar_params("SELECT a FROM t WHERE b = ?1 AND c = '?2' AND d = ?12"), "SELECT a FROM t WHERE b = $1 AND c = '?2' AND d = $12");
    }

    #[test]
    fn values_round_trip_through_sqlite() {
        let db = Database::Sqlite(Mutex::new(rusqlite::Connection::open_in_memory().unwrap()));
        let row = db
            .write(Scope::All, |sql| {
                sql.batch("CREATE TABLE t (a INTEGER, b TEXT, c BLOB, d INTEGER)")?;
                sql.execute("INSERT INTO t VALUES (?1, ?2, ?3, ?4)", params![7i64, "x", &b"\x00\xff"[..], Option::<i64>::None])?;
                sql.query_one("SELECT a, b, c, d, EXISTS (SELECT 1 FROM t) FROM t", &[])
            })
            .unwrap();
        assert_eq!((row.int(0).unwrap(), row.text(1).unwrap(), row.blob(2).unwrap()), (7, "x".to_string(), vec![0, 255]));
        assert_eq!((row.opt_int(3).unwrap(), row.flag(4).unwrap()), (None, true));
        assert!(row.text(0).is_err(), "a column is read as what it is");
    }
}
