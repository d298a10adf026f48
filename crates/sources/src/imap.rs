//! IMAP mailboxes (being written).
use std::path::Path;

use crate::{Mirror, SourceConfig, SyncEvent, SyncReport};
use ragbox_core::error::Result;

pub(crate) fn sync(source: &SourceConfig, _password: &str, _mirror: &Mirror, _progress: &mut (dyn FnMut(SyncEvent) + Send)) -> Result<SyncReport> {
    Err(crate::unreachable(source, "imap is not built yet"))
}

pub(crate) fn probe(source: &SourceConfig, _password: &str) -> Result<usize> {
    Err(crate::unreachable(source, "imap is not built yet"))
}

pub(crate) fn origin(source: &SourceConfig, rel: &Path) -> Option<String> {
    let rel = rel.to_string_lossy().replace('\\', "/");
    Some(format!("{}/{rel}", source.location()))
}
