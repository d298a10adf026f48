//! The models folder: hub cache layout, lookup, and verification against the manifest.
//!
//! `models/models--ORG--NAME/snapshots/REV/FILE`, with `refs/main` naming `REV`: the layout
//! hf-hub writes, so the fetch script, `models import` and `models pull` all produce one tree.
//! Every file is verified (size, then sha256 or git blob id) before it is used.

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::error::{Error, Result};
use crate::model::checksum::{git_blob_sha1_file, sha256_file};
use crate::model::manifest::{Manifest, ModelFile, ModelSpec};

/// Snapshot name used when a model arrives by the fetch script or by import.
pub const PINNED_REVISION: &str = "pinned";

/// The hub cache folder of a repository: `models--ORG--NAME`.
pub fn repo_folder(repo: &str) -> String {
    format!("models--{}", repo.replace('/', "--"))
}

/// A models folder and the manifest its files are checked against.
#[derive(Debug, Clone)]
pub struct ModelStore {
    dir: PathBuf,
    manifest: &'static Manifest,
}

/// What `doctor` reports of one file.
#[derive(Debug, Clone, Serialize)]
pub struct FileStatus {
    /// File name.
    pub name: String,
    /// Where it was found.
    pub path: Option<PathBuf>,
    /// `ok`, `missing` or `corrupt`.
    pub state: &'static str,
    /// Why, when not ok.
    pub detail: Option<String>,
}

/// What `doctor` reports of one model.
#[derive(Debug, Clone, Serialize)]
pub struct ModelStatus {
    /// Manifest name.
    pub name: String,
    /// Role.
    pub role: String,
    /// True when every file is present and verified.
    pub ready: bool,
    /// Each file.
    pub files: Vec<FileStatus>,
    /// The command that fixes a model that is not ready.
    pub fix: Option<String>,
}

impl ModelStatus {
    /// `ok`, `CORRUPT` (a file failed its checksum) or `missing`.
    pub fn summary(&self) -> &'static str {
        if self.ready {
            "ok"
        } else if self.files.iter().any(|f| f.state == "corrupt") {
            "CORRUPT"
        } else {
            "missing"
        }
    }
}

impl ModelStore {
    /// A store over `dir`, checked against the built-in manifest.
    pub fn new(dir: impl Into<PathBuf>) -> ModelStore {
        ModelStore { dir: dir.into(), manifest: Manifest::builtin() }
    }

    /// A store checked against another manifest (tests, and tools that ship their own).
    pub fn with_manifest(dir: impl Into<PathBuf>, manifest: &'static Manifest) -> ModelStore {
        ModelStore { dir: dir.into(), manifest }
    }

    /// The folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The manifest.
    pub fn manifest(&self) -> &'static Manifest {
        self.manifest
    }

    /// The snapshot folder of a repository: the revision `refs/main` names, if any.
    pub fn snapshot_dir(&self, repo: &str) -> Option<PathBuf> {
        let root = self.dir.join(repo_folder(repo));
        let rev = std::fs::read_to_string(root.join("refs").join("main")).ok()?;
        Some(root.join("snapshots").join(rev.trim()))
    }

    /// Where a file of a model would be, whether or not it is there.
    pub fn locate(&self, spec: &ModelSpec, file: &ModelFile) -> Option<PathBuf> {
        Some(self.snapshot_dir(spec.repo_of(file))?.join(&file.name))
    }

    /// The verified path of one file of a model.
    pub fn verified_file(&self, spec: &ModelSpec, name: &str) -> Result<PathBuf> {
        let file = spec.file(name).ok_or_else(|| {
            Error::Bug(format!("model {} has no file {name} in the manifest", spec.name))
        })?;
        let path = self
            .locate(spec, file)
            .filter(|p| p.is_file())
            .ok_or_else(|| Error::ModelMissing {
                model: spec.name.clone(),
                file: file.name.clone(),
                dir: self.dir.clone(),
                fix: spec.fix_command(),
            })?;
        verify_file(spec, file, &path)?;
        Ok(path)
    }

    /// Every file of a model, verified, in manifest order.
    pub fn verified_files(&self, spec: &ModelSpec) -> Result<Vec<PathBuf>> {
        spec.files.iter().map(|f| self.verified_file(spec, &f.name)).collect()
    }

    /// The state of every file of a model, for `doctor`; never fails.
    pub fn status(&self, spec: &ModelSpec) -> ModelStatus {
        let files: Vec<FileStatus> = spec
            .files
            .iter()
            .map(|f| {
                let path = self.locate(spec, f).filter(|p| p.is_file());
                let (state, detail) = match &path {
                    None => ("missing", None),
                    Some(p) => match verify_file(spec, f, p) {
                        Ok(()) => ("ok", None),
                        Err(e) => ("corrupt", Some(e.to_string())),
                    },
                };
                FileStatus { name: f.name.clone(), path, state, detail }
            })
            .collect();
        let ready = files.iter().all(|f| f.state == "ok");
        ModelStatus {
            name: spec.name.clone(),
            role: spec.role.to_string(),
            ready,
            files,
            fix: (!ready).then(|| spec.fix_command()),
        }
    }
}

/// Checks a file against its pins: size first (cheap), then sha256 or the git blob id.
pub fn verify_file(spec: &ModelSpec, file: &ModelFile, path: &Path) -> Result<()> {
    let fail = |what, expected: String, found: String| Error::ModelChecksum {
        model: spec.name.clone(),
        path: path.to_path_buf(),
        what,
        expected,
        found,
        fix: spec.fix_command(),
    };
    if let Some(size) = file.size {
        let found = std::fs::metadata(path).map_err(Error::path(path))?.len();
        if found != size {
            return Err(fail("size", size.to_string(), found.to_string()));
        }
    }
    if let Some(expected) = &file.sha256 {
        let found = sha256_file(path)?;
        if !found.eq_ignore_ascii_case(expected) {
            return Err(fail("sha256", expected.clone(), found));
        }
    } else if let Some(expected) = &file.git_blob_sha1 {
        let found = git_blob_sha1_file(path)?;
        if !found.eq_ignore_ascii_case(expected) {
            return Err(fail("git blob id", expected.clone(), found));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repo_folder_follows_the_hub_layout() {
        assert_eq!(
            repo_folder("sentence-transformers/all-MiniLM-L6-v2"),
            "models--sentence-transformers--all-MiniLM-L6-v2"
        );
    }

    #[test]
    fn missing_model_names_the_fetch_command() {
        let dir = tempfile::tempdir().unwrap();
        let store = ModelStore::new(dir.path());
        let spec = store.manifest().get("all-minilm-l6-v2").unwrap();
        let err = store.verified_file(spec, "model.safetensors").unwrap_err().to_string();
        assert!(err.contains("scripts/fetch-models.sh all-minilm-l6-v2"), "{err}");
        assert!(!store.status(spec).ready);
    }
}
