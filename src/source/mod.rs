//! Documents in: one parser per format, each turning a file's bytes into a [`ParsedDocument`]
//! (normalised text plus structural [`Block`](crate::types::Block)s), and the reasons a file is
//! skipped.
//!
//! May import `types` and `error` only. A file that cannot be parsed is never fatal: the parser
//! returns a [`SkipReason`] and the caller reports it with the path and goes on.

pub mod walk;

use std::fmt;
use std::path::Path;

use serde::Serialize;

use crate::types::ParsedDocument;

/// Why a file was not ingested. Shown to the user next to the path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum SkipReason {
    /// The file has no content (or only whitespace).
    Empty,
    /// The bytes look binary (NUL bytes or mostly control characters).
    Binary,
    /// A text format whose bytes are not UTF-8.
    NotUtf8 {
        /// Byte offset of the first invalid sequence.
        offset: usize,
    },
    /// Bigger than the configured limit.
    TooLarge {
        /// The file's size.
        bytes: u64,
        /// The limit.
        limit: u64,
    },
    /// The file could not be read (permissions, I/O error, a symlink loop...).
    Unreadable {
        /// What the operating system said.
        detail: String,
    },
    /// No parser handles this file type.
    Unsupported,
    /// The format's parser rejected the content.
    Corrupt {
        /// What the parser said.
        detail: String,
    },
}

impl fmt::Display for SkipReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SkipReason::Empty => f.write_str("empty file"),
            SkipReason::Binary => f.write_str("binary content"),
            SkipReason::NotUtf8 { offset } => write!(f, "not valid UTF-8 (first bad byte at offset {offset})"),
            SkipReason::TooLarge { bytes, limit } => {
                write!(f, "too large ({bytes} bytes; the limit is {limit}, setting ingest.max_file_bytes)")
            }
            SkipReason::Unreadable { detail } => write!(f, "unreadable: {detail}"),
            SkipReason::Unsupported => f.write_str("unsupported file type"),
            SkipReason::Corrupt { detail } => write!(f, "could not be parsed: {detail}"),
        }
    }
}

/// Turns one format's bytes into a parsed document.
pub trait Parser: Send + Sync {
    /// Short name, stored in the catalog (`markdown`, `html`...).
    fn name(&self) -> &'static str;
    /// Parses `bytes`, read from `path` (used for the title fallback and the language of code).
    fn parse(&self, path: &Path, bytes: &[u8]) -> Result<ParsedDocument, SkipReason>;
}
