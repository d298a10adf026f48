//! The file walker: every regular file under a root, in a stable order, honouring `.gitignore`,
//! `.ignore` and `.ragboxignore` files and skipping hidden entries; anything that cannot be
//! visited (a symlink loop, a dangling link, a folder without permission, a FIFO) comes back as a
//! [`WalkEntry::Skipped`] with its path and reason instead of stopping the walk.

use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

use super::SkipReason;

/// The per-folder ignore file of ragbox, in .gitignore syntax.
pub const IGNORE_FILE: &str = ".ragboxignore";

/// One thing the walk found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WalkEntry {
    /// A regular file.
    File {
        /// Its path (under the root as given, links not resolved).
        path: PathBuf,
        /// Bytes.
        size: u64,
        /// Modification time, ns since the epoch.
        mtime_ns: i64,
    },
    /// Something that could not be visited.
    Skipped {
        /// Its path.
        path: PathBuf,
        /// Why.
        reason: SkipReason,
    },
}

/// Walks `root` (a folder or a single file). Symbolic links are followed; loops are reported.
pub fn walk(root: &Path) -> impl Iterator<Item = WalkEntry> {
    let walker = ignore::WalkBuilder::new(root)
        .hidden(true)
        .parents(true)
        .ignore(true)
        .git_ignore(true)
        .git_global(false)
        .git_exclude(true)
        .require_git(false)
        .follow_links(true)
        .add_custom_ignore_filename(IGNORE_FILE)
        .sort_by_file_name(|a, b| a.cmp(b))
        .build();
    walker.filter_map(|entry| match entry {
        Ok(e) => {
            let path = e.path().to_path_buf();
            let Some(ft) = e.file_type() else { return None };
            if ft.is_dir() {
                return None;
            }
            match std::fs::metadata(&path) {
                Ok(m) if m.is_file() => {
                    let mtime_ns = m
                        .modified()
                        .ok()
                        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
                        .map_or(0, |d| d.as_nanos() as i64);
                    Some(WalkEntry::File { path, size: m.len(), mtime_ns })
                }
                Ok(_) => Some(WalkEntry::Skipped {
                    path,
                    reason: SkipReason::Unreadable { detail: "not a regular file (a FIFO, socket or device)".into() },
                }),
                Err(err) => Some(WalkEntry::Skipped { path, reason: SkipReason::Unreadable { detail: err.to_string() } }),
            }
        }
        Err(err) => {
            let (path, detail) = describe(&err);
            Some(WalkEntry::Skipped { path, reason: SkipReason::Unreadable { detail } })
        }
    })
}

/// The path and a sentence for a walk error.
fn describe(err: &ignore::Error) -> (PathBuf, String) {
    match err {
        ignore::Error::WithPath { path, err } => (path.clone(), describe(err).1),
        ignore::Error::WithDepth { err, .. } | ignore::Error::WithLineNumber { err, .. } => describe(err),
        ignore::Error::Loop { ancestor, child } => {
            (child.clone(), format!("symbolic link loop (points back to {})", ancestor.display()))
        }
        ignore::Error::Io(e) => (PathBuf::new(), e.to_string()),
        other => (PathBuf::new(), other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(root: &Path) -> Vec<String> {
        walk(root)
            .filter_map(|e| match e {
                WalkEntry::File { path, .. } => Some(path.strip_prefix(root).unwrap().display().to_string()),
                WalkEntry::Skipped { .. } => None,
            })
            .collect()
    }

    #[test]
    fn honours_ignore_files_and_hidden_entries() {
        let d = tempfile::tempdir().unwrap();
        let r = d.path();
        std::fs::create_dir_all(r.join("sub/build")).unwrap();
        for f in ["b.md", "a.txt", "sub/c.md", "sub/build/x.md", ".hidden.md", "notes.tmp", "sub/secret.md"] {
            std::fs::write(r.join(f), "x").unwrap();
        }
        std::fs::write(r.join(".gitignore"), "*.tmp\n").unwrap();
        std::fs::write(r.join("sub/.ragboxignore"), "build/\nsecret.md\n").unwrap();
        assert_eq!(files(r), vec!["a.txt", "b.md", "sub/c.md"]);
        assert_eq!(files(&r.join("b.md")), vec![""], "a single file is walked as itself");
    }

    #[cfg(unix)]
    #[test]
    fn loops_dangling_links_and_fifos_are_reported() {
        let d = tempfile::tempdir().unwrap();
        let r = d.path();
        std::fs::write(r.join("ok.md"), "x").unwrap();
        std::os::unix::fs::symlink("loop-b", r.join("loop-a")).unwrap();
        std::os::unix::fs::symlink("loop-a", r.join("loop-b")).unwrap();
        std::os::unix::fs::symlink("missing", r.join("dangling.md")).unwrap();
        std::fs::create_dir(r.join("dir")).unwrap();
        std::os::unix::fs::symlink("..", r.join("dir/up")).unwrap();
        let fifo = r.join("pipe.txt");
        let status = std::process::Command::new("mkfifo").arg(&fifo).status();
        let entries: Vec<WalkEntry> = walk(r).collect();
        let skipped: Vec<(String, String)> = entries
            .iter()
            .filter_map(|e| match e {
                WalkEntry::Skipped { path, reason } => Some((path.display().to_string(), reason.to_string())),
                _ => None,
            })
            .collect();
        assert_eq!(files(r), vec!["ok.md"]);
        for name in ["loop-a", "loop-b", "dangling.md", "up"] {
            assert!(skipped.iter().any(|(p, _)| p.ends_with(name)), "{name} not reported: {skipped:?}");
        }
        assert!(skipped.iter().any(|(_, why)| why.contains("loop")), "{skipped:?}");
        if status.is_ok_and(|s| s.success()) {
            assert!(skipped.iter().any(|(p, why)| p.ends_with("pipe.txt") && why.contains("FIFO")), "{skipped:?}");
        }
    }
}
