//! A pool of connections to the shared PostgreSQL server (15 or later), and its errors as
//! [`Error::SharedServer`] naming the server (never the password).
//!
//! Connections are checked out per call: a server that went away and came back is reconnected on
//! the next call, and the call in flight when it went away fails with a clear error.

use std::str::FromStr;
use std::time::Duration;

use r2d2_postgres::postgres::{self, NoTls};
use r2d2_postgres::PostgresConnectionManager;

use crate::error::{Error, Result};

/// The most connections one process holds.
const POOL_SIZE: u32 = 8;
/// How long a call waits for a connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The shared PostgreSQL server.
pub struct Postgres {
    pool: r2d2::Pool<PostgresConnectionManager<NoTls>>,
    config: postgres::Config,
    server: String,
}

impl Postgres {
    /// Connects to `url` (`postgresql://user@host:port/db`, or libpq's `key=value` form) and
    /// checks the connection.
    pub fn connect(url: &str) -> Result<Postgres> {
        let config = postgres::Config::from_str(url).map_err(|e| Error::Config(format!("store.shared.postgres is not a PostgreSQL URL: {e}")))?;
        let server = describe(&config);
        let manager = PostgresConnectionManager::new(config.clone(), NoTls);
        let pool = r2d2::Pool::builder()
            .max_size(POOL_SIZE)
            .min_idle(Some(0))
            .connection_timeout(CONNECT_TIMEOUT)
            .test_on_check_out(true)
            .build_unchecked(manager);
        let pg = Postgres { pool, config, server };
        pg.with("connecting", |c| c.simple_query("SELECT 1").map(|_| ()))?;
        Ok(pg)
    }

    /// Where the server is, for messages: `PostgreSQL at host:port/db`.
    pub fn server(&self) -> &str {
        &self.server
    }

    /// Runs `f` on a pooled connection; a failure names the server and `what` was being done.
    pub fn with<T>(&self, what: &str, f: impl FnOnce(&mut postgres::Client) -> std::result::Result<T, postgres::Error>) -> Result<T> {
        let mut conn = self.client(what)?;
        f(&mut conn).map_err(|e| self.failed(what, &e))
    }

    /// A pooled connection; a failure names the server and `what` was being done.
    pub fn client(&self, what: &str) -> Result<r2d2::PooledConnection<PostgresConnectionManager<NoTls>>> {
        self.pool.get().map_err(|e| self.error(what, e.to_string()))
    }

    /// A connection of its own, outside the pool, for what lives as long as a connection does
    /// (a session's advisory lock: the server lets go of it when the connection dies).
    pub fn dedicated(&self, what: &str) -> Result<postgres::Client> {
        self.config.connect(NoTls).map_err(|e| self.failed(what, &e))
    }

    /// `e`, a failure while doing `what`, as an error of this server.
    pub fn failed(&self, what: &str, e: &postgres::Error) -> Error {
        self.error(what, explain(e))
    }

    /// An error of this server.
    pub fn error(&self, what: &str, detail: String) -> Error {
        Error::SharedServer { server: self.server.clone(), what: what.into(), detail }
    }
}

/// A PostgreSQL error with the server's own message, when it sent one.
fn explain(e: &postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{}: {}", db.code().code(), db.message()),
        None => e.to_string(),
    }
}

/// `PostgreSQL at host:port/db`, from a parsed URL (without its password).
fn describe(config: &postgres::Config) -> String {
    let host = match config.get_hosts().first() {
        Some(postgres::config::Host::Tcp(h)) => h.clone(),
        Some(postgres::config::Host::Unix(p)) => p.display().to_string(),
        None => "localhost".into(),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    format!("PostgreSQL at {host}:{port}/{}", config.get_dbname().unwrap_or("postgres"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_server_is_named_without_its_password() {
        let config = postgres::Config::from_str("postgresql://ragbox:s3cret@10.0.0.7:6543/acme").unwrap();
        assert_eq!(describe(&config), "PostgreSQL at 10.0.0.7:6543/acme");
        assert!(matches!(Postgres::connect("not a url at all ::"), Err(Error::Config(_))));
    }
}
