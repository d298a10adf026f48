//! The models folder: hub cache layout, lookup, and verification against the manifest.
//!
//! `models/models--ORG--NAME/snapshots/REV/FILE`, with `refs/main` naming `REV`: the layout
//! hf-hub writes, so the fetch script, `models import` and `models pull` all produce one tree.
//! Every file is verified (size, then sha256 or git blob id) before it is used: in full by `doctor`,
//! `models` and after every download or import ([`Check::Full`]); on load, in full the first time
//! and whenever the file's size, modification time or inode have changed since it last passed
//! ([`Check::Stamped`]: a stamp per pinned checksum under `MODELS/.verified/`). Hashing the 0.5 GB
//! LLM took 0.35-0.6 s of every load; a file corrupted on disk with its time and inode unchanged
//! (not a download, an import or an edit: those change them) is then caught by `doctor`, not by
//! the load.

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

/// How thoroughly a model file is checked against its pin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check {
    /// Every byte hashed, every time.
    Full,
    /// Hashed the first time and after any change of the file's size, modification time or
    /// inode; otherwise the stamp its last full check left stands.
    Stamped,
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
        self.check_file(spec, file, &path, Check::Stamped)?;
        Ok(path)
    }

    /// Checks `path` against `file`'s pins as `check` says (see [`Check`]).
    fn check_file(&self, spec: &ModelSpec, file: &ModelFile, path: &Path, check: Check) -> Result<()> {
        let stamp = match check {
            Check::Full => None,
            Check::Stamped => file.sha256.as_ref().or(file.git_blob_sha1.as_ref()).map(|pin| self.dir.join(".verified").join(pin)),
        };
        let seen = stamp.as_ref().and_then(|_| file_identity(path));
        if let (Some(stamp), Some(seen)) = (&stamp, &seen) {
            if std::fs::read_to_string(stamp).is_ok_and(|kept| kept == *seen) {
                return Ok(());
            }
        }
        verify_file(spec, file, path)?;
        if let (Some(stamp), Some(seen)) = (stamp, seen) {
            // Best effort: a models folder we may not write to is hashed on every load instead.
            let _ = stamp.parent().map(std::fs::create_dir_all);
            let tmp = stamp.with_extension("tmp");
            if std::fs::write(&tmp, &seen).is_ok() {
                let _ = std::fs::rename(&tmp, &stamp);
            }
        }
        Ok(())
    }

    /// Every file of a model, verified, in manifest order.
    pub fn verified_files(&self, spec: &ModelSpec) -> Result<Vec<PathBuf>> {
        spec.files.iter().map(|f| self.verified_file(spec, &f.name)).collect()
    }

    /// The state of every file of a model (for `doctor` and `models`: [`Check::Full`]; for a
    /// load's "missing or corrupt?": [`Check::Stamped`]); never fails.
    pub fn status(&self, spec: &ModelSpec, check: Check) -> ModelStatus {
        let files: Vec<FileStatus> = spec
            .files
            .iter()
            .map(|f| {
                let path = self.locate(spec, f).filter(|p| p.is_file());
                let (state, detail) = match &path {
                    None => ("missing", None),
                    Some(p) => match self.check_file(spec, f, p, check) {
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

/// What identifies a file's current contents without reading them: its path, size, modification
/// time and (on Unix) device and inode, as one line; `None` when they cannot be read.
fn file_identity(path: &Path) -> Option<String> {
    let m = std::fs::metadata(path).ok()?;
    let modified = m.modified().ok()?.duration_since(std::time::UNIX_EPOCH).ok()?.as_nanos();
    #[cfg(unix)]
    let node = {
        use std::os::unix::fs::MetadataExt;
        format!("{} {}", m.dev(), m.ino())
    };
    #[cfg(not(unix))]
    let node = String::new();
    Some(format!("{} {} {modified} {node}", path.display(), m.len()))
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
        assert!(err.contains("scripts/setup/fetch-models.sh all-minilm-l6-v2"), "{err}");
        assert!(!store.status(spec, Check::Full).ready);
    }

    /// A stamped check hashes the first time and after any change of the file's size or time;
    /// what it cannot see, a change in place with the time put back, the full check catches.
    #[test]
    fn a_stamp_stands_until_the_file_changes_and_the_full_check_always_hashes() {
        let dir = tempfile::tempdir().unwrap();
        let store = ModelStore::new(dir.path());
        let spec = crate::testing::tiny_embed_spec(16);
        let path = dir.path().join("weights.bin");
        std::fs::write(&path, b"the pinned bytes").unwrap();
        let file = ModelFile {
            name: "weights.bin".into(),
            repo: None,
            sha256: Some(crate::model::checksum::sha256_file(&path).unwrap()),
            size: Some(16),
            git_blob_sha1: None,
            pypi: None,
        };
        store.check_file(&spec, &file, &path, Check::Stamped).unwrap();
        let stamp = dir.path().join(".verified").join(file.sha256.as_ref().unwrap());
        assert!(stamp.is_file(), "a passed check leaves its stamp");

        // Same size, other bytes, a new time: hashed again, refused.
        let modified = std::fs::metadata(&path).unwrap().modified().unwrap();
        std::fs::write(&path, b"the pinned byteZ").unwrap();
        let later = modified + std::time::Duration::from_secs(5);
        std::fs::File::options().write(true).open(&path).unwrap().set_modified(later).unwrap();
        assert!(store.check_file(&spec, &file, &path, Check::Stamped).is_err());

        // Changed in place with the old time put back: the stamp stands, the full check refuses.
        std::fs::File::options().write(true).open(&path).unwrap().set_modified(modified).unwrap();
        store.check_file(&spec, &file, &path, Check::Stamped).expect("the stamp of the pinned bytes stands");
        assert!(store.check_file(&spec, &file, &path, Check::Full).is_err());
    }
}
