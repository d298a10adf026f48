//! The catalog's one SQLite connection, shared by the catalog and its handles (keys, sessions,
//! answers, the audit events, annotations): behind a mutex, since writes are serialised anyway and
//! reads are short. A handle borrows it and owns its own tables' queries, so no handle module
//! imports the catalog.

use std::sync::{Mutex, MutexGuard};

use rusqlite::Connection;

/// The connection, locked per query or transaction.
pub struct Shared(Mutex<Connection>);

impl Shared {
    pub(super) fn new(conn: Connection) -> Shared {
        Shared(Mutex::new(conn))
    }

    /// The connection, for one query or transaction.
    pub(super) fn lock(&self) -> MutexGuard<'_, Connection> {
        // A panic while holding the lock leaves SQLite itself consistent (transactions roll back).
        self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}
