//! The file walker: every regular file under a root, in a stable order, honouring `.gitignore`,
//! `.ignore` and `.ragboxignore` files and skipping hidden entries; anything that cannot be
//! visited (a symlink loop, a dangling link, a folder without permission, a FIFO) comes back as a
//! [`WalkEntry::Skipped`] with its path and reason instead of stopping the walk.
//!
//! Symbolic links are never read as themselves: a document's readers follow the folder it lies
//! in, so a link would give its folder's readers whatever it points to. A link to a file or folder
//! inside the root is left to its target, which the walk reads under its own path (one copy, with
//! its own readers); a link out of the root is not followed unless [`Links::FollowOut`] says so
//! (`[ingest] follow_links = true`). Either comes back as a [`WalkEntry::Link`] with its reason.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

use super::SkipReason;

/// The per-folder ignore file of ragbox, in .gitignore syntax.
pub const IGNORE_FILE: &str = ".ragboxignore";

/// Which symbolic links the walk follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Links {
    /// None: a link inside the root is left to its target, a link out of it is reported.
    #[default]
    Inside,
    /// Links out of the root too: what they point to is read under the link's path, with the
    /// readers of the link's folder. Links inside the root are still left to their targets.
    FollowOut,
}

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
    /// A symbolic link that is not read ([`SkipReason::Link`] says why).
    Link {
        /// The link's path.
        path: PathBuf,
        /// Why it is not read.
        reason: SkipReason,
    },
    /// Something that could not be visited.
    Skipped {
        /// Its path.
        path: PathBuf,
        /// Why.
        reason: SkipReason,
    },
}

/// Walks `root` (a folder or a single file). Symbolic links are read as [`Links`] says; the root
/// itself, when it is a link, is judged against the folder it lies in.
pub fn walk(root: &Path, links: Links) -> impl Iterator<Item = WalkEntry> {
    let mut out = Vec::new();
    let is_link = std::fs::symlink_metadata(root).is_ok_and(|m| m.file_type().is_symlink());
    let scope = match root.parent() {
        Some(parent) if is_link => std::fs::canonicalize(parent).unwrap_or_else(|_| parent.to_path_buf()),
        _ => std::fs::canonicalize(root).unwrap_or_else(|_| root.to_path_buf()),
    };
    let mut walker = Walker { scope, links, followed: HashSet::new(), out: &mut out };
    if is_link {
        walker.link(root);
    } else {
        walker.folder(root, root, true);
    }
    out.into_iter()
}

/// One walk's state: the canonical folder links are judged against and the folders already
/// entered through links (so that links between followed folders cannot loop).
struct Walker<'a> {
    scope: PathBuf,
    links: Links,
    followed: HashSet<PathBuf>,
    out: &'a mut Vec<WalkEntry>,
}

impl Walker<'_> {
    /// Walks the folder (or file) `dir`, naming what it finds under `shown` instead of `dir`
    /// (they differ for a folder reached through a followed link).
    fn folder(&mut self, dir: &Path, shown: &Path, parents: bool) {
        let walker = ignore::WalkBuilder::new(dir)
            .hidden(true)
            .parents(parents)
            .ignore(true)
            .git_ignore(true)
            .git_global(false)
            .git_exclude(true)
            .require_git(false)
            .follow_links(false)
            .add_custom_ignore_filename(IGNORE_FILE)
            .sort_by_file_name(|a, b| a.cmp(b))
            .build();
        for entry in walker {
            let e = match entry {
                Ok(e) => e,
                Err(err) => {
                    let (path, detail) = describe(&err);
                    self.out.push(WalkEntry::Skipped { path, reason: SkipReason::Unreadable { detail } });
                    continue;
                }
            };
            let Some(ft) = e.file_type() else { continue };
            let path = match e.path().strip_prefix(dir) {
                Ok(rel) if shown != dir => shown.join(rel),
                _ => e.path().to_path_buf(),
            };
            if ft.is_dir() {
                continue;
            }
            if ft.is_symlink() {
                self.link(&path);
            } else {
                self.file(path, e.path());
            }
        }
    }

    /// A file found at `path` (its bytes at `real`).
    fn file(&mut self, path: PathBuf, real: &Path) {
        let entry = match std::fs::metadata(real) {
            Ok(m) if m.is_file() => {
                let mtime_ns = m
                    .modified()
                    .ok()
                    .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
                    .map_or(0, |d| d.as_nanos() as i64);
                WalkEntry::File { path, size: m.len(), mtime_ns }
            }
            Ok(_) => WalkEntry::Skipped {
                path,
                reason: SkipReason::Unreadable { detail: "not a regular file (a FIFO, socket or device)".into() },
            },
            Err(err) => WalkEntry::Skipped { path, reason: SkipReason::Unreadable { detail: err.to_string() } },
        };
        self.out.push(entry);
    }

    /// The symbolic link at `path` (shown there; it lies at the same place on disk unless it was
    /// reached through a followed folder, whose real path `canonicalize` resolves the same).
    fn link(&mut self, path: &Path) {
        let target = match std::fs::canonicalize(path) {
            Ok(t) => t,
            Err(err) => {
                let detail = if err.raw_os_error() == Some(libc::ELOOP) {
                    "symbolic link loop".to_string()
                } else {
                    let to = std::fs::read_link(path).map(|t| t.display().to_string()).unwrap_or_default();
                    format!("a symbolic link to {to}, which cannot be reached: {err}")
                };
                self.out.push(WalkEntry::Skipped { path: path.to_path_buf(), reason: SkipReason::Unreadable { detail } });
                return;
            }
        };
        let inside = target.starts_with(&self.scope);
        if inside || self.links == Links::Inside {
            let reason = SkipReason::Link { target: target.display().to_string(), inside };
            self.out.push(WalkEntry::Link { path: path.to_path_buf(), reason });
        } else if target.is_dir() {
            if self.followed.insert(target.clone()) {
                self.folder(&target, path, false);
            }
        } else {
            self.file(path.to_path_buf(), &target);
        }
    }
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
        walk(root, Links::Inside)
            .filter_map(|e| match e {
                WalkEntry::File { path, .. } => Some(path.strip_prefix(root).unwrap().display().to_string()),
                WalkEntry::Skipped { .. } | WalkEntry::Link { .. } => None,
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
        let entries: Vec<WalkEntry> = walk(r, Links::Inside).collect();
        let skipped: Vec<(String, String)> = entries
            .iter()
            .filter_map(|e| match e {
                WalkEntry::Skipped { path, reason } => Some((path.display().to_string(), reason.to_string())),
                _ => None,
            })
            .collect();
        assert_eq!(files(r), vec!["ok.md"]);
        for name in ["loop-a", "loop-b", "dangling.md"] {
            assert!(skipped.iter().any(|(p, _)| p.ends_with(name)), "{name} not reported: {skipped:?}");
        }
        assert!(
            entries.iter().any(|e| matches!(e, WalkEntry::Link { path, reason: SkipReason::Link { inside: true, .. } } if path.ends_with("up"))),
            "a link back up the tree is left to its target: {entries:?}"
        );
        assert!(skipped.iter().any(|(_, why)| why.contains("loop")), "{skipped:?}");
        if status.is_ok_and(|s| s.success()) {
            assert!(skipped.iter().any(|(p, why)| p.ends_with("pipe.txt") && why.contains("FIFO")), "{skipped:?}");
        }
    }

    fn links(root: &Path, mode: Links) -> Vec<(String, bool)> {
        walk(root, mode)
            .filter_map(|e| match e {
                WalkEntry::Link { path, reason: SkipReason::Link { inside, .. } } => {
                    Some((path.strip_prefix(root).unwrap().display().to_string(), inside))
                }
                _ => None,
            })
            .collect()
    }

    #[cfg(unix)]
    #[test]
    fn links_are_left_to_their_targets_and_not_followed_out_of_the_root() {
        let d = tempfile::tempdir().unwrap();
        let (r, outside) = (d.path().join("drop"), d.path().join("outside"));
        for dir in [r.join("hr"), r.join("legal"), outside.join("vault")] {
            std::fs::create_dir_all(dir).unwrap();
        }
        std::fs::write(r.join("hr/bands.md"), "x").unwrap();
        std::fs::write(r.join("legal/zander.md"), "x").unwrap();
        std::fs::write(outside.join("notes.md"), "x").unwrap();
        std::fs::write(outside.join("vault/key.md"), "x").unwrap();
        std::os::unix::fs::symlink("../legal/zander.md", r.join("hr/zander-link.md")).unwrap();
        std::os::unix::fs::symlink("../legal", r.join("hr/legal-folder")).unwrap();
        std::os::unix::fs::symlink(outside.join("notes.md"), r.join("hr/planted.md")).unwrap();
        std::os::unix::fs::symlink(outside.join("vault"), r.join("hr/vault")).unwrap();

        assert_eq!(files(&r), vec!["hr/bands.md", "legal/zander.md"], "each file once, under its own path");
        assert_eq!(
            links(&r, Links::Inside),
            vec![
                ("hr/legal-folder".to_string(), true),
                ("hr/planted.md".to_string(), false),
                ("hr/vault".to_string(), false),
                ("hr/zander-link.md".to_string(), true),
            ]
        );

        let followed: Vec<String> = walk(&r, Links::FollowOut)
            .filter_map(|e| match e {
                WalkEntry::File { path, .. } => Some(path.strip_prefix(&r).unwrap().display().to_string()),
                _ => None,
            })
            .collect();
        assert_eq!(followed, vec!["hr/bands.md", "hr/planted.md", "hr/vault/key.md", "legal/zander.md"]);
        assert_eq!(
            links(&r, Links::FollowOut),
            vec![("hr/legal-folder".to_string(), true), ("hr/zander-link.md".to_string(), true)],
            "links inside are never read twice"
        );

        // A root that is itself a link is judged against the folder it lies in.
        let one: Vec<WalkEntry> = walk(&r.join("hr/planted.md"), Links::Inside).collect();
        assert!(matches!(&one[..], [WalkEntry::Link { reason: SkipReason::Link { inside: false, .. }, .. }]), "{one:?}");
        let one: Vec<WalkEntry> = walk(&r.join("hr/zander-link.md"), Links::Inside).collect();
        assert!(matches!(&one[..], [WalkEntry::Link { reason: SkipReason::Link { inside: false, .. }, .. }]), "{one:?}");
    }
}
