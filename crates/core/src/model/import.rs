//! `models import DIR`: copy model files carried into an air gap into the models folder.
//!
//! The source folder may be a hub cache (`models--ORG--NAME/snapshots/REV/FILE`), a folder per
//! model (`DIR/NAME/FILE` or `DIR/ORG--NAME/FILE`), or the files themselves (`DIR/FILE`). Each file
//! is verified against the manifest before it is copied, copied to a temporary name, synced, then
//! renamed, so the models folder never holds a half-written or unverified file.

use std::fs;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::error::{Error, Result};
use crate::model::manifest::{ModelFile, ModelSpec};
use crate::model::store::{repo_folder, verify_file, ModelStore, PINNED_REVISION};

/// What happened to one file.
#[derive(Debug, Clone, Serialize)]
pub struct ImportedFile {
    /// Manifest name of the model.
    pub model: String,
    /// File name.
    pub file: String,
    /// `imported`, `present` (already there and verified) or `not found`.
    pub state: &'static str,
    /// Where it came from.
    pub source: Option<PathBuf>,
}

fn candidates(src: &Path, spec: &ModelSpec, file: &ModelFile) -> Vec<PathBuf> {
    let repo = spec.repo_of(file);
    let mut out = vec![
        src.join(&spec.name).join(&file.name),
        src.join(repo.replace('/', "--")).join(&file.name),
        src.join(repo.rsplit('/').next().unwrap_or(repo)).join(&file.name),
        src.join(&file.name),
    ];
    let hub = src.join(repo_folder(repo));
    if let Ok(rev) = fs::read_to_string(hub.join("refs").join("main")) {
        out.insert(0, hub.join("snapshots").join(rev.trim()).join(&file.name));
    }
    if let Ok(entries) = fs::read_dir(hub.join("snapshots")) {
        out.extend(entries.flatten().map(|e| e.path().join(&file.name)));
    }
    out
}

/// Copies `from` to `to` through a temporary file in the same folder: write, fsync, rename.
pub(crate) fn copy_atomically(from: &Path, to: &Path) -> Result<()> {
    let dir = to.parent().ok_or_else(|| Error::Bug(format!("{to:?} has no parent")))?;
    fs::create_dir_all(dir).map_err(Error::path(dir))?;
    let tmp = dir.join(format!(
        ".{}.partial-{}",
        to.file_name().and_then(|n| n.to_str()).unwrap_or("file"),
        std::process::id()
    ));
    let result = (|| {
        fs::copy(from, &tmp).map_err(Error::path(&tmp))?;
        fs::File::open(&tmp).and_then(|f| f.sync_all()).map_err(Error::path(&tmp))?;
        fs::rename(&tmp, to).map_err(Error::path(to))
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// Points `refs/main` of a repository at the snapshot files are imported into, and returns it.
fn snapshot_for_import(store: &ModelStore, repo: &str) -> Result<PathBuf> {
    if let Some(dir) = store.snapshot_dir(repo) {
        return Ok(dir);
    }
    let root = store.dir().join(repo_folder(repo));
    let refs = root.join("refs");
    fs::create_dir_all(&refs).map_err(Error::path(&refs))?;
    fs::write(refs.join("main"), PINNED_REVISION).map_err(Error::path(&refs))?;
    Ok(root.join("snapshots").join(PINNED_REVISION))
}

/// Imports the files of `specs` found under `src`. A file found but failing its checksum is an
/// error (nothing of it is copied); a file not found is reported as such.
pub fn import_models(store: &ModelStore, src: &Path, specs: &[&ModelSpec]) -> Result<Vec<ImportedFile>> {
    if !src.is_dir() {
        return Err(Error::Invalid(format!("{src:?} is not a folder; give the folder that holds the model files")));
    }
    let mut report = Vec::new();
    for spec in specs {
        for file in &spec.files {
            let present = store.verified_file(spec, &file.name).is_ok();
            let found = candidates(src, spec, file).into_iter().find(|p| p.is_file());
            let state = match (&found, present) {
                (_, true) => "present",
                (None, false) => "not found",
                (Some(from), false) => {
                    verify_file(spec, file, from)?;
                    let to = snapshot_for_import(store, spec.repo_of(file))?.join(&file.name);
                    copy_atomically(from, &to)?;
                    verify_file(spec, file, &to)?;
                    "imported"
                }
            };
            report.push(ImportedFile {
                model: spec.name.clone(),
                file: file.name.clone(),
                state,
                source: found,
            });
        }
    }
    Ok(report)
}
