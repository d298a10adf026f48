//! A source's mirror: the local folder its items are copied into, which ingest then reads.
//!
//! Every file is written beside its final name (a hidden `.NAME.part`, which the ingest walk
//! skips like any hidden file), synced, then renamed over it, so a reader or a crash sees the old
//! copy or the new one, never half of one; leftover `.part` files are removed by the next
//! [`Mirror::files`]. A remote name becomes a mirror path only through [`Mirror::safe`], which
//! refuses `..`, absolute paths and empty parts, so nothing lands outside the mirror. The mirror
//! keeps a file's remote modification time, so an unchanged file looks unchanged to ingest too.

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::path::{Component, Path, PathBuf};
use std::time::SystemTime;

use serde::{de::DeserializeOwned, Serialize};

use ragbox_core::error::{Error, Result};

/// Suffix of a file being written.
const PART_SUFFIX: &str = ".part";

/// One file in the mirror.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    /// Bytes.
    pub size: u64,
    /// Modification time.
    pub mtime: SystemTime,
}

/// A mirror folder.
#[derive(Debug, Clone)]
pub struct Mirror {
    root: PathBuf,
}

impl Mirror {
    /// Opens (creating) the mirror at `root`.
    pub fn open(root: impl Into<PathBuf>) -> Result<Mirror> {
        let root = root.into();
        fs::create_dir_all(&root).map_err(Error::path(&root))?;
        Ok(Mirror { root })
    }

    /// Its folder.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// A relative mirror path made of these remote name parts, or `None` when one of them could
    /// leave the folder (`..`, `/`, `\`, NUL, empty, `.`).
    pub fn safe<'a>(parts: impl IntoIterator<Item = &'a str>) -> Option<PathBuf> {
        let mut out = PathBuf::new();
        for part in parts {
            if part.is_empty() || part == "." || part == ".." || part.contains(['/', '\\', '\0']) {
                return None;
            }
            out.push(part);
        }
        let normal = out.components().all(|c| matches!(c, Component::Normal(_)));
        (normal && !out.as_os_str().is_empty()).then_some(out)
    }

    /// Writes `bytes` as `rel`, whole or not at all, with `mtime` as its modification time when given.
    pub fn write(&self, rel: &Path, bytes: &[u8], mtime: Option<SystemTime>) -> Result<()> {
        let path = self.root.join(rel);
        let dir = path.parent().unwrap_or(&self.root);
        fs::create_dir_all(dir).map_err(Error::path(dir))?;
        let name = path.file_name().ok_or_else(|| Error::Bug(format!("mirror path without a name: {}", rel.display())))?;
        let part = dir.join(format!(".{}{PART_SUFFIX}", name.to_string_lossy()));
        let mut f = fs::File::create(&part).map_err(Error::path(&part))?;
        f.write_all(bytes).map_err(Error::path(&part))?;
        if let Some(t) = mtime {
            f.set_modified(t).map_err(Error::path(&part))?;
        }
        f.sync_all().map_err(Error::path(&part))?;
        drop(f);
        fs::rename(&part, &path).map_err(Error::path(&path))
    }

    /// Removes `rel` (a file, or a folder and everything in it), then the folders it leaves empty.
    pub fn remove(&self, rel: &Path) -> Result<()> {
        let path = self.root.join(rel);
        let gone = match fs::symlink_metadata(&path) {
            Ok(m) if m.is_dir() => fs::remove_dir_all(&path),
            Ok(_) => fs::remove_file(&path),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e),
        };
        gone.map_err(Error::path(&path))?;
        let mut dir = path.parent();
        while let Some(d) = dir {
            if d == self.root || fs::remove_dir(d).is_err() {
                break;
            }
            dir = d.parent();
        }
        Ok(())
    }

    /// Every regular file under `under` (relative to the root), hidden ones included, keyed by
    /// relative path; stale `.part` files are removed on the way.
    pub fn files(&self, under: &Path) -> Result<BTreeMap<PathBuf, Entry>> {
        let mut out = BTreeMap::new();
        let start = self.root.join(under);
        if !start.exists() {
            return Ok(out);
        }
        let mut stack = vec![start];
        while let Some(dir) = stack.pop() {
            for item in fs::read_dir(&dir).map_err(Error::path(&dir))? {
                let item = item.map_err(Error::path(&dir))?;
                let path = item.path();
                let meta = item.metadata().map_err(Error::path(&path))?;
                if meta.is_dir() {
                    stack.push(path);
                } else if meta.is_file() {
                    let name = item.file_name();
                    let name = name.to_string_lossy();
                    if name.starts_with('.') && name.ends_with(PART_SUFFIX) {
                        let _ = fs::remove_file(&path);
                        continue;
                    }
                    let rel = path.strip_prefix(&self.root).map_err(|_| Error::Bug("mirror walk left its root".into()))?.to_path_buf();
                    let mtime = meta.modified().map_err(Error::path(&path))?;
                    out.insert(rel, Entry { size: meta.len(), mtime });
                }
            }
        }
        Ok(out)
    }

    /// Reads a state file of the mirror (JSON), `None` when absent or unreadable (a mirror whose
    /// state is lost is rebuilt by comparing, never trusted blindly).
    pub fn state<T: DeserializeOwned>(&self, rel: &Path) -> Option<T> {
        let text = fs::read(self.root.join(rel)).ok()?;
        serde_json::from_slice(&text).ok()
    }

    /// Writes a state file of the mirror (JSON), whole or not at all.
    pub fn set_state<T: Serialize>(&self, rel: &Path, value: &T) -> Result<()> {
        let bytes = serde_json::to_vec_pretty(value).map_err(|e| Error::Bug(format!("mirror state: {e}")))?;
        self.write(rel, &bytes, None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn safe_paths_stay_inside() {
        assert_eq!(Mirror::safe(["INBOX", "17.eml"]), Some(PathBuf::from("INBOX/17.eml")));
        for bad in [vec![".."], vec!["a", ""], vec!["a/../../etc"], vec!["."], vec!["x\\y"], vec![]] {
            assert_eq!(Mirror::safe(bad.clone()), None, "{bad:?}");
        }
    }

    #[test]
    fn writes_are_whole_and_removals_tidy() {
        let dir = tempfile::tempdir().unwrap();
        let m = Mirror::open(dir.path().join("m")).unwrap();
        let t = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_700_000_000);
        m.write(Path::new("a/b/c.txt"), b"hello", Some(t)).unwrap();
        std::fs::write(m.root().join("a/.d.txt.part"), b"half").unwrap();
        let files = m.files(Path::new("")).unwrap();
        assert_eq!(files.len(), 1, "{files:?}");
        assert_eq!(files[&PathBuf::from("a/b/c.txt")], Entry { size: 5, mtime: t });
        assert!(!m.root().join("a/.d.txt.part").exists(), "a stale part is cleared");
        m.remove(Path::new("a/b/c.txt")).unwrap();
        assert!(!m.root().join("a").exists(), "emptied folders go");
        assert!(m.root().exists());
        m.set_state(Path::new(".state.json"), &vec![1, 2]).unwrap();
        assert_eq!(m.state::<Vec<i32>>(Path::new(".state.json")), Some(vec![1, 2]));
    }
}
