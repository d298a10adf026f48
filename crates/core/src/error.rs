//! The library's one error type, and the kind of fault each error is.
//!
//! `Fault` picks the process exit code (and later the HTTP status): a user error says what to do
//! next, a runtime error is the environment's (disk, model files, devices), a bug is ours.

use std::path::PathBuf;

/// Result with the crate's error.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Who is at fault, which picks the exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Bad input or usage; the message says what to do next. Exit code 2.
    User,
    /// The environment failed: I/O, a model file, a device. Exit code 3.
    Runtime,
    /// An invariant broke: a bug in ragbox. Exit code 4.
    Bug,
}

impl Fault {
    /// The process exit code for this kind of fault.
    pub fn exit_code(self) -> i32 {
        match self {
            Fault::User => 2,
            Fault::Runtime => 3,
            Fault::Bug => 4,
        }
    }
}

/// Everything that can go wrong in the library.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The request itself is wrong.
    #[error("invalid request: {0}")]
    Invalid(String),
    /// A configuration file or value is wrong.
    #[error("configuration: {0}")]
    Config(String),
    /// A model name that the manifest does not list.
    #[error("unknown model `{name}`; known models: {}", known.join(", "))]
    UnknownModel {
        /// The name asked for.
        name: String,
        /// The names the manifest lists.
        known: Vec<String>,
    },
    /// A model file is not in the models folder.
    #[error("model `{model}`: file {file} is missing from {dir}; run `{fix}`")]
    ModelMissing {
        /// Manifest name of the model.
        model: String,
        /// File name inside the model.
        file: String,
        /// The models folder searched.
        dir: PathBuf,
        /// The command that provides it.
        fix: String,
    },
    /// A model file is present but is not the pinned file.
    #[error("model `{model}`: {path:?} failed its checksum ({what}: expected {expected}, found {found}); run `{fix}` to replace it")]
    ModelChecksum {
        /// Manifest name of the model.
        model: String,
        /// The file that failed.
        path: PathBuf,
        /// Which check failed (sha256, size, git blob id).
        what: &'static str,
        /// The pinned value.
        expected: String,
        /// The value of the file on disk.
        found: String,
        /// The command that provides a good copy.
        fix: String,
    },
    /// A model file is the wrong kind of model.
    #[error("model `{model}`: {reason}")]
    ModelFormat {
        /// Manifest name (or path) of the model.
        model: String,
        /// What is wrong with it.
        reason: String,
    },
    /// An index built by one model was opened for another.
    #[error("index {path:?} built with {found}, expected {expected}")]
    IndexMismatch {
        /// The index file.
        path: PathBuf,
        /// The model that built it.
        found: String,
        /// The model asked for.
        expected: String,
    },
    /// The tensor library failed while running a model.
    #[error("model computation failed")]
    Candle(#[source] candle_core::Error),
    /// The tokenizer failed.
    #[error("tokenizer failed")]
    Tokenizer(#[source] tokenizers::Error),
    /// Downloading a model failed (only `models pull` downloads).
    #[error("download of {what} failed")]
    Download {
        /// Repository and file.
        what: String,
        /// The hub client's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A feature needed for this was not compiled in.
    #[error("`{0}` not compiled in; rebuild with --features {0}")]
    NotCompiled(&'static str),
    /// File-system failure, with the path involved.
    #[error("{path:?}: {source}")]
    Path {
        /// The file or folder.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// File-system failure without a path.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// The catalog (SQLite) failed.
    #[error("catalog: {0}")]
    Catalog(#[from] rusqlite::Error),
    /// A vector or lexical index failed to open, read or write.
    #[error("{what}")]
    Index {
        /// Which index and what was being done.
        what: String,
        /// The backend's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A tenant name that does not exist.
    #[error("unknown tenant `{name}`; tenants: {}; ingest into it first (`ragbox ingest PATH --tenant {name}`)", if known.is_empty() { "none yet".to_string() } else { known.join(", ") })]
    UnknownTenant {
        /// The name asked for.
        name: String,
        /// The tenants there are.
        known: Vec<String>,
    },
    /// The data folder cannot be written (a read-only mount, permissions).
    #[error("the data folder {path:?} is not writable ({reason}); ragbox writes its catalog and indexes there: fix its permissions or mount, or choose another with --data-dir")]
    DataDirNotWritable {
        /// The folder (or the catalog file in it).
        path: PathBuf,
        /// What the operating system said.
        reason: String,
    },
    /// The device holding the data folder is full.
    #[error("no space left on the device holding the data folder {path:?} ({detail}); free space there and run the command again: everything acknowledged so far is kept and the next run finishes the job")]
    DiskFull {
        /// The data folder.
        path: PathBuf,
        /// The write that failed.
        detail: String,
    },
    /// The catalog file is damaged.
    #[error("the catalog {path:?} is damaged ({detail}); restore the data folder from a backup with `ragbox restore BACKUP_DIR --force`, or ingest again into a fresh --data-dir")]
    CatalogDamaged {
        /// The catalog file.
        path: PathBuf,
        /// What SQLite found.
        detail: String,
    },
    /// The text generator (local LLM or remote backend) failed.
    #[error("generation failed: {0}")]
    Generate(String),
    /// The inference server could not be reached (no connection, or it said it is busy), before
    /// anything was generated.
    #[error("the inference server {server} cannot be reached ({detail}); start it or check generate.openai_base_url, or set generate.fallback = \"local\" to answer with the local model meanwhile")]
    Unreachable {
        /// Its URL and host.
        server: String,
        /// What the connection said.
        detail: String,
    },
    /// A shared backend's server (PostgreSQL or Milvus) failed or could not be reached.
    #[error("the shared store's {server} failed while {what} ({detail}); check that it is running and reachable (`ragbox doctor` checks both servers): nothing half-written is served, and running the command again once it is back finishes the job")]
    SharedServer {
        /// Which server, and where (`Milvus at http://10.0.0.7:19530`).
        server: String,
        /// What ragbox was doing.
        what: String,
        /// What the server or the connection said.
        detail: String,
    },
    /// A `[[sources]]` mailbox or share could not be reached, logged in to, or listed to the end:
    /// nothing of its mirror and none of its documents were changed.
    #[error("source `{source_name}` ({server}) cannot be reached ({detail}); nothing was changed or pruned, and the next sync tries again (`ragbox doctor` checks every source)")]
    SourceUnreachable {
        /// The source's name in the configuration.
        source_name: String,
        /// Where it is (`imap://127.0.0.1:1143`).
        server: String,
        /// What the connection or the server said.
        detail: String,
    },
    /// A thing asked for by id (session, document, answer, job, key) that does not exist, or
    /// that the caller may not see: the two read alike, so existence does not leak.
    #[error("{0}")]
    NotFound(String),
    /// The caller's key lacks the role this needs.
    #[error("{0}")]
    Denied(String),
    /// An invariant broke.
    #[error("internal error (a bug in ragbox): {0}")]
    Bug(String),
}

impl Error {
    /// Who is at fault.
    pub fn fault(&self) -> Fault {
        match self {
            Error::Invalid(_)
            | Error::Config(_)
            | Error::UnknownModel { .. }
            | Error::ModelMissing { .. }
            | Error::IndexMismatch { .. }
            | Error::UnknownTenant { .. }
            | Error::NotCompiled(_)
            | Error::NotFound(_)
            | Error::Denied(_) => Fault::User,
            Error::ModelChecksum { .. }
            | Error::ModelFormat { .. }
            | Error::Candle(_)
            | Error::Tokenizer(_)
            | Error::Download { .. }
            | Error::Path { .. }
            | Error::Io(_)
            | Error::Catalog(_)
            | Error::Index { .. }
            | Error::DataDirNotWritable { .. }
            | Error::DiskFull { .. }
            | Error::CatalogDamaged { .. }
            | Error::Generate(_)
            | Error::Unreachable { .. }
            | Error::SourceUnreachable { .. }
            | Error::SharedServer { .. } => Fault::Runtime,
            Error::Bug(_) => Fault::Bug,
        }
    }

    /// Wraps an I/O error with the path it concerns.
    pub fn path(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> Error {
        let path = path.into();
        move |source| Error::Path { path, source }
    }
}

impl Error {
    /// Wraps an index backend's error with what was being done.
    pub fn index(what: impl Into<String>) -> impl FnOnce(Box<dyn std::error::Error + Send + Sync>) -> Error {
        let what = what.into();
        move |source| Error::Index { what, source }
    }
}

impl From<candle_core::Error> for Error {
    fn from(e: candle_core::Error) -> Self {
        Error::Candle(e)
    }
}

impl From<tokenizers::Error> for Error {
    fn from(e: tokenizers::Error) -> Self {
        Error::Tokenizer(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faults_pick_distinct_exit_codes() {
        assert_eq!(Error::Invalid("x".into()).fault().exit_code(), 2);
        assert_eq!(Error::Io(std::io::Error::other("x")).fault().exit_code(), 3);
        assert_eq!(Error::Bug("x".into()).fault().exit_code(), 4);
    }

    #[test]
    fn unknown_model_lists_the_known_ones() {
        let e = Error::UnknownModel { name: "foo".into(), known: vec!["a".into(), "b".into()] };
        assert_eq!(e.to_string(), "unknown model `foo`; known models: a, b");
    }
}
