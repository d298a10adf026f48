//! ragbox-sources: mailboxes and file shares kept in sync with a local mirror.
//!
//! A `[[sources]]` entry ([`SourceConfig`]) names an IMAP mailbox or an SMB share. [`sync`] brings
//! its mirror, a folder under `<data>/sources/<name>/`, in line with what the server holds now:
//! new and changed items fetched, items gone from the server removed, unchanged ones not fetched
//! again (IMAP: the folder's UIDVALIDITY and each message's UID; SMB: each file's size and
//! modification time). The mirror is then ingested like any local folder, by the same walk,
//! ignore files, hashing and pruning, so the catalog follows the server.
//!
//! What is safe when, which the service above relies on:
//! - Nothing in the mirror changes before the server has been reached, logged in to and listed
//!   to the end: a source that cannot be reached, or drops mid-listing, is an
//!   [`Error::SourceUnreachable`] and its mirror (and so its documents) stay as they were.
//! - Each file lands whole or not at all (written beside, then renamed), so a sync killed at any
//!   moment leaves a mirror the next one finishes, with nothing duplicated: what an item is
//!   called in the mirror depends only on the item (a message's folder, UIDVALIDITY and UID; a
//!   file's path).
//!
//! May import `ragbox-core`'s `config` and `error`. Network I/O runs on a tokio runtime of its
//! own for the length of one call; callers are synchronous, like the stages beside it.

#![warn(missing_docs)]

mod imap;
pub mod mirror;
mod smb;

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub use ragbox_core::config::{SourceConfig, SourceKind, SourceTls};
use ragbox_core::error::{Error, Result};

pub use mirror::Mirror;

/// What one sync did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct SyncReport {
    /// Items (messages, files) the server lists now.
    pub listed: usize,
    /// Items fetched: new, or changed since the last sync.
    pub fetched: usize,
    /// Items already in the mirror as the server has them: not fetched.
    pub unchanged: usize,
    /// Items removed from the mirror because the server no longer lists them.
    pub removed: usize,
    /// Bytes fetched.
    pub bytes: u64,
    /// Items that could not be fetched (`name: why`); they are tried again next time and keep
    /// their earlier copy meanwhile.
    pub problems: Vec<String>,
}

/// Progress of a sync, as it goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SyncEvent {
    /// The server's listing is complete: this many items, this many to fetch.
    Listed {
        /// Items listed.
        items: usize,
        /// Of those, new or changed.
        to_fetch: usize,
    },
    /// One item is in the mirror now.
    Fetched {
        /// Its path in the mirror, relative to the mirror's root.
        path: PathBuf,
        /// Its size.
        bytes: u64,
    },
    /// One item left the mirror.
    Removed {
        /// Its path in the mirror, relative to the mirror's root.
        path: PathBuf,
    },
}

/// Brings `mirror` in line with the source; `password` is the account's.
pub fn sync(source: &SourceConfig, password: &str, mirror: &Mirror, progress: &mut (dyn FnMut(SyncEvent) + Send)) -> Result<SyncReport> {
    match source.kind {
        SourceKind::Imap => imap::sync(source, password, mirror, progress),
        SourceKind::Smb => smb::sync(source, password, mirror, progress),
    }
}

/// Connects, logs in and lists, changing nothing (`ragbox doctor`): the number of items listed.
pub fn probe(source: &SourceConfig, password: &str) -> Result<usize> {
    match source.kind {
        SourceKind::Imap => imap::probe(source, password),
        SourceKind::Smb => smb::probe(source, password),
    }
}

/// Where a file of a source's mirror came from: `imap://user@host:port/FOLDER;UID=N` for a
/// message (and `/PART` after it for an attachment taken out of it), `smb://host:port/share/path`
/// for a file of a share; `None` for a path outside the mirror at `mirror_root`.
pub fn origin(source: &SourceConfig, mirror_root: &Path, path: &Path) -> Option<String> {
    let rel = path.strip_prefix(mirror_root).ok()?;
    match source.kind {
        SourceKind::Imap => imap::origin(source, rel),
        SourceKind::Smb => Some(smb::origin(source, rel)),
    }
}

/// A source's error for "could not be reached / logged in to / listed".
pub(crate) fn unreachable(source: &SourceConfig, detail: impl std::fmt::Display) -> Error {
    Error::SourceUnreachable { source_name: source.name.clone(), server: source.location(), detail: detail.to_string() }
}

/// A current-thread tokio runtime for one call.
pub(crate) fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::Bug(format!("the sources' runtime did not start: {e}")))
}
