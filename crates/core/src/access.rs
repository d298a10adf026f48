//! Who may read which documents. A leaf module (imports only `types` and `error`): the store
//! keeps each document's readers, the indexes filter by them, ingest sets them by rule.
//!
//! - A document's **readers** are groups; a document with none is open to everyone who reaches
//!   its tenant (what every document was before rules were written).
//! - An asker's [`Audience`] is [`Audience::Everyone`] (the command line, admin keys, keys made
//!   without groups) or the groups a person signed in with, or a key was made with. An audience
//!   of groups reads the open documents and those sharing one of its groups.
//! - [`Rules`] decide a document's readers from its path: the first `[[access.rules]]` entry of
//!   the configuration whose glob matches, else the nearest [`ACCESS_FILE`] in the document's
//!   folder or above it, else none (open). Ingest re-applies them on every run to every document
//!   under the folder it walks, so a change of rules takes effect without re-embedding anything.
//! - [`AccessMap`] is a tenant's chunk-to-readers table at one catalog generation, what the
//!   vector and BM25 searches filter with *inside* the index (usearch's filtered search,
//!   tantivy's filter collector), so a filtered top k is as full as an unfiltered one.
//!
//! ```
//! use ragbox_core::access::Audience;
//! let hr = Audience::groups(["hr"]);
//! assert!(hr.may_read(&[]), "open documents are read by every group");
//! assert!(hr.may_read(&["hr".into(), "legal".into()]));
//! assert!(!hr.may_read(&["legal".into()]));
//! assert!(Audience::Everyone.may_read(&["legal".into()]));
//! ```

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::types::ChunkId;

/// The permissions file a folder may hold: TOML, `groups = ["hr", "legal"]` (an empty list opens
/// the folder again below a restricted one). It applies to the folder and every folder below,
/// down to the next such file. The walk skips it like any hidden file.
pub const ACCESS_FILE: &str = ".ragbox-access";

/// Who is reading.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Audience {
    /// Every document of the tenants the caller reaches.
    Everyone,
    /// Open documents and those readable by one of these groups (sorted, distinct).
    Groups(Vec<String>),
}

impl Audience {
    /// An audience of these groups.
    pub fn groups<S: Into<String>>(groups: impl IntoIterator<Item = S>) -> Audience {
        Audience::Groups(normalise(groups.into_iter().map(Into::into)))
    }

    /// Whether a document with these readers may be read.
    pub fn may_read(&self, readers: &[String]) -> bool {
        match self {
            Audience::Everyone => true,
            Audience::Groups(mine) => readers.is_empty() || readers.iter().any(|r| mine.binary_search(r).is_ok()),
        }
    }

    /// The groups that grant this audience a document with these readers (for the audit):
    /// empty for an open document or an audience of everyone.
    pub fn granting(&self, readers: &[String]) -> Vec<String> {
        match self {
            Audience::Everyone => Vec::new(),
            Audience::Groups(mine) => readers.iter().filter(|r| mine.binary_search(r).is_ok()).cloned().collect(),
        }
    }

    /// Whether this audience reads everything.
    pub fn is_everyone(&self) -> bool {
        matches!(self, Audience::Everyone)
    }
}

/// Groups sorted and distinct, blanks dropped.
pub fn normalise(groups: impl IntoIterator<Item = String>) -> Vec<String> {
    let mut v: Vec<String> = groups.into_iter().map(|g| g.trim().to_string()).filter(|g| !g.is_empty()).collect();
    v.sort();
    v.dedup();
    v
}

/// Readers as the catalog stores them: comma-separated, sorted (`""` for an open document).
pub fn encode(readers: &[String]) -> String {
    readers.join(",")
}

/// The inverse of [`encode`].
pub fn decode(text: &str) -> Vec<String> {
    normalise(text.split(',').map(str::to_string))
}

/// One `[[access.rules]]` entry of the configuration.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct AccessRule {
    /// The tenant it applies to; every tenant when absent.
    #[serde(default)]
    pub tenant: Option<String>,
    /// A glob over the document's full path (`**/hr/**`, `/srv/policies/board/*.pdf`).
    pub path: String,
    /// The groups that may read what it matches (empty: open).
    pub groups: Vec<String>,
}

/// A permissions file, as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AccessFile {
    groups: Vec<String>,
}

/// The rules of a configuration, compiled, with the permissions files read so far.
pub struct Rules {
    rules: Vec<(Option<String>, globset::GlobMatcher, Vec<String>)>,
    /// Whether permissions files count (`[access] files`); off: the rules alone decide.
    files: bool,
    /// Folder → the readers its nearest permissions file sets (`None`: no file at or above it).
    folders: Mutex<HashMap<PathBuf, Option<Vec<String>>>>,
    /// Permissions files read so far that open their folder wider than the file above them.
    widenings: Mutex<Vec<Widening>>,
}

/// A permissions file that lets more people read its folder than the permissions file above it
/// does (a folder of `hr` opened to everyone, or to `sales` too): whoever can write the folder
/// decided that, so ingest and `doctor` say so.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Widening {
    /// The permissions file.
    pub file: PathBuf,
    /// The readers above it.
    pub above: Vec<String>,
    /// The readers it sets (empty: everyone).
    pub sets: Vec<String>,
}

impl std::fmt::Display for Widening {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let sets = if self.sets.is_empty() { "everyone".to_string() } else { self.sets.join(", ") };
        write!(
            f,
            "{} opens its folder to {sets}, wider than the permissions file above it ({}); \
             set `[access] files = false` to decide readers by the configuration's rules alone",
            self.file.display(),
            self.above.join(", ")
        )
    }
}

impl Rules {
    /// Compiles `rules`, with permissions files counted when `files` is set; a glob that does not
    /// parse is refused, naming it.
    pub fn new(rules: &[AccessRule], files: bool) -> Result<Rules> {
        let mut compiled = Vec::with_capacity(rules.len());
        for r in rules {
            let glob = globset::GlobBuilder::new(&r.path)
                .literal_separator(true)
                .build()
                .map_err(|e| Error::Config(format!("access.rules: the path glob `{}` does not parse: {e}", r.path)))?;
            compiled.push((r.tenant.clone(), glob.compile_matcher(), normalise(r.groups.iter().cloned())));
        }
        Ok(Rules { rules: compiled, files, folders: Mutex::default(), widenings: Mutex::default() })
    }

    /// The readers of the document at `path` in `tenant`. A permissions file that cannot be read
    /// or parsed is an error naming it: guessing "open" would publish what it meant to close.
    pub fn readers(&self, tenant: &str, path: &Path) -> Result<Vec<String>> {
        for (only, glob, groups) in &self.rules {
            if only.as_deref().is_none_or(|t| t == tenant) && glob.is_match(path) {
                return Ok(groups.clone());
            }
        }
        match path.parent() {
            Some(folder) if self.files => Ok(self.folder_readers(folder)?.unwrap_or_default()),
            _ => Ok(Vec::new()),
        }
    }

    /// The permissions files read so far that widen their folder's readers, in the order read.
    pub fn widenings(&self) -> Vec<Widening> {
        self.widenings.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn folder_readers(&self, folder: &Path) -> Result<Option<Vec<String>>> {
        if let Some(known) = self.folders.lock().unwrap_or_else(|e| e.into_inner()).get(folder) {
            return Ok(known.clone());
        }
        let file = folder.join(ACCESS_FILE);
        let found = match std::fs::read_to_string(&file) {
            Ok(text) => {
                let parsed: AccessFile = toml::from_str(&text).map_err(|e| {
                    Error::Invalid(format!("{}: not a permissions file (`groups = [\"hr\"]`): {e}", file.display()))
                })?;
                let sets = normalise(parsed.groups);
                let above = match folder.parent() {
                    Some(up) => self.folder_readers(up)?.unwrap_or_default(),
                    None => Vec::new(),
                };
                let wider = sets.is_empty() || sets.iter().any(|g| !above.contains(g));
                if !above.is_empty() && wider {
                    let w = Widening { file: file.clone(), above, sets: sets.clone() };
                    self.widenings.lock().unwrap_or_else(|e| e.into_inner()).push(w);
                }
                Some(sets)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => match folder.parent() {
                Some(up) => self.folder_readers(up)?,
                None => None,
            },
            Err(e) => return Err(Error::Invalid(format!("{}: cannot read the permissions file: {e}", file.display()))),
        };
        self.folders.lock().unwrap_or_else(|e| e.into_inner()).insert(folder.to_path_buf(), found.clone());
        Ok(found)
    }
}

/// The permissions files at or above `folders` that someone other than this process's user can
/// change, each with why: another owner, group or world write bits on the file, or on its folder
/// without the sticky bit (whoever can write the folder can replace the file). What `doctor`
/// warns about while `[access] files` is on.
#[cfg(unix)]
pub fn loose_permission_files<'a>(folders: impl IntoIterator<Item = &'a Path>) -> Vec<String> {
    use std::os::unix::fs::MetadataExt;
    let me = unsafe { libc::geteuid() };
    let mut seen = std::collections::HashSet::new();
    let mut found = Vec::new();
    for folder in folders {
        for dir in folder.ancestors() {
            if !seen.insert(dir.to_path_buf()) {
                break;
            }
            let file = dir.join(ACCESS_FILE);
            let Ok(meta) = std::fs::symlink_metadata(&file) else { continue };
            let mut why = Vec::new();
            if meta.file_type().is_symlink() {
                why.push("it is a symbolic link".to_string());
            }
            if meta.uid() != me {
                why.push(format!("it is owned by uid {}, not the service's user (uid {me})", meta.uid()));
            }
            if meta.mode() & 0o022 != 0 {
                why.push(format!("its group or others may write it (mode {:o})", meta.mode() & 0o777));
            }
            if let Ok(d) = std::fs::metadata(dir) {
                if d.uid() != me || (d.mode() & 0o022 != 0 && d.mode() & 0o1000 == 0) {
                    why.push(format!("its folder can be written by others than the service's user (owner uid {}, mode {:o}), who can replace it", d.uid(), d.mode() & 0o7777));
                }
            }
            if !why.is_empty() {
                found.push(format!("{}: {}", file.display(), why.join("; ")));
            }
        }
    }
    found
}

/// One tenant's readers of every chunk at one catalog generation: what the indexes' filters ask.
/// Chunks of open documents are not listed (they pass every filter).
#[derive(Debug, Default)]
pub struct AccessMap {
    /// The generation it was read at.
    pub generation: u64,
    /// Distinct reader lists.
    labels: Vec<Vec<String>>,
    /// Chunk → index into `labels`, for chunks of restricted documents.
    chunks: HashMap<u64, u32>,
}

impl AccessMap {
    /// A map from `(chunk, readers)` rows of restricted documents.
    pub fn new(generation: u64, rows: impl IntoIterator<Item = (ChunkId, Vec<String>)>) -> AccessMap {
        let mut map = AccessMap { generation, ..AccessMap::default() };
        let mut label_of: HashMap<Vec<String>, u32> = HashMap::new();
        for (chunk, readers) in rows {
            if readers.is_empty() {
                continue;
            }
            let next = map.labels.len() as u32;
            let label = *label_of.entry(readers.clone()).or_insert_with(|| {
                map.labels.push(readers);
                next
            });
            map.chunks.insert(chunk.0, label);
        }
        map
    }

    /// Chunks of restricted documents.
    pub fn restricted(&self) -> usize {
        self.chunks.len()
    }

    /// The readers of a chunk (empty: open).
    pub fn readers(&self, chunk: u64) -> &[String] {
        self.chunks.get(&chunk).map(|l| self.labels[*l as usize].as_slice()).unwrap_or(&[])
    }

    /// What `audience` may read, as a predicate over chunk ids: `None` when it reads everything
    /// (no filter at all, the unfiltered search's own speed). The labels are decided once here,
    /// so the predicate the index calls per candidate is one hash lookup.
    pub fn filter(self: &std::sync::Arc<Self>, audience: &Audience) -> Option<ChunkFilter> {
        if audience.is_everyone() || self.chunks.is_empty() {
            return None;
        }
        let allowed: Vec<bool> = self.labels.iter().map(|readers| audience.may_read(readers)).collect();
        Some(ChunkFilter { map: self.clone(), allowed: std::sync::Arc::new(allowed) })
    }

    /// Plants `readers` on `chunk` in this copy only (not in the catalog): what a stale or
    /// damaged index filter would say, for the test that the catalog check catches it.
    #[cfg(any(test, feature = "testing"))]
    pub fn plant(&mut self, chunk: ChunkId, readers: Vec<String>) {
        if readers.is_empty() {
            self.chunks.remove(&chunk.0);
            return;
        }
        self.labels.push(readers);
        self.chunks.insert(chunk.0, (self.labels.len() - 1) as u32);
    }
}

/// Whether a chunk may be served, as the indexes ask it for each candidate.
#[derive(Clone)]
pub struct ChunkFilter {
    map: std::sync::Arc<AccessMap>,
    allowed: std::sync::Arc<Vec<bool>>,
}

impl ChunkFilter {
    /// Whether `chunk` passes.
    pub fn allows(&self, chunk: u64) -> bool {
        self.map.chunks.get(&chunk).is_none_or(|l| self.allowed[*l as usize])
    }
}

impl std::fmt::Debug for ChunkFilter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ChunkFilter({} restricted chunks)", self.map.restricted())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_match_first_then_the_nearest_file_then_open() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("hr/payroll")).unwrap();
        std::fs::create_dir_all(root.join("hr/open")).unwrap();
        std::fs::write(root.join("hr").join(ACCESS_FILE), "groups = [\"hr\"]\n").unwrap();
        std::fs::write(root.join("hr/open").join(ACCESS_FILE), "groups = []\n").unwrap();
        let rules = Rules::new(&[
            AccessRule { tenant: Some("acme".into()), path: "**/board/**".into(), groups: vec!["board".into(), " board".into()] },
            AccessRule { tenant: None, path: "**/*.secret".into(), groups: vec!["legal".into()] },
        ], true)
        .unwrap();
        assert_eq!(rules.readers("acme", &root.join("board/minutes.md")).unwrap(), vec!["board"]);
        assert_eq!(rules.readers("globex", &root.join("board/minutes.md")).unwrap(), Vec::<String>::new(), "another tenant's rule");
        assert_eq!(rules.readers("acme", &root.join("hr/payroll/2024.xlsx")).unwrap(), vec!["hr"], "the file above applies");
        assert_eq!(rules.readers("acme", &root.join("hr/open/handbook.md")).unwrap(), Vec::<String>::new(), "a nearer file reopens");
        assert_eq!(rules.readers("acme", &root.join("hr/x.secret")).unwrap(), vec!["legal"], "configuration rules come first");
        assert_eq!(rules.readers("acme", &root.join("policies/travel.md")).unwrap(), Vec::<String>::new());
        let widened = rules.widenings();
        assert_eq!(widened.len(), 1, "{widened:?}");
        assert_eq!((widened[0].file.clone(), widened[0].above.clone()), (root.join("hr/open").join(ACCESS_FILE), vec!["hr".to_string()]));
        assert!(widened[0].to_string().contains("opens its folder to everyone"), "{}", widened[0]);
    }

    #[cfg(unix)]
    #[test]
    fn loose_permission_files_are_named() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let (tight, loose) = (dir.path().join("tight"), dir.path().join("loose"));
        for d in [&tight, &loose] {
            std::fs::create_dir_all(d).unwrap();
            std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).unwrap();
            std::fs::write(d.join(ACCESS_FILE), "groups = [\"hr\"]\n").unwrap();
            std::fs::set_permissions(d.join(ACCESS_FILE), std::fs::Permissions::from_mode(0o644)).unwrap();
        }
        std::fs::set_permissions(loose.join(ACCESS_FILE), std::fs::Permissions::from_mode(0o666)).unwrap();
        let found = loose_permission_files([tight.as_path(), loose.as_path()]);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].contains("loose") && found[0].contains("mode 666"), "{found:?}");
    }

    #[test]
    fn without_files_the_rules_alone_decide() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("hr/sales")).unwrap();
        std::fs::write(root.join("hr").join(ACCESS_FILE), "groups = [\"hr\"]\n").unwrap();
        std::fs::write(root.join("hr/sales").join(ACCESS_FILE), "groups = [\"hr\", \"sales\"]\n").unwrap();
        let rule = [AccessRule { tenant: None, path: "**/hr/**".into(), groups: vec!["people".into()] }];
        let files = Rules::new(&[], true).unwrap();
        assert_eq!(files.readers("t", &root.join("hr/sales/q3.md")).unwrap(), vec!["hr", "sales"]);
        assert_eq!(files.widenings().len(), 1, "sales was added below hr: {:?}", files.widenings());
        let rules_only = Rules::new(&rule, false).unwrap();
        assert_eq!(rules_only.readers("t", &root.join("hr/sales/q3.md")).unwrap(), vec!["people"]);
        assert_eq!(Rules::new(&[], false).unwrap().readers("t", &root.join("hr/a.md")).unwrap(), Vec::<String>::new());
    }

    #[test]
    fn a_broken_permissions_file_is_an_error_not_open() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(ACCESS_FILE), "groups = hr").unwrap();
        let err = Rules::new(&[], true).unwrap().readers("t", &dir.path().join("a.md")).unwrap_err().to_string();
        assert!(err.contains(ACCESS_FILE), "{err}");
        assert!(Rules::new(&[AccessRule { tenant: None, path: "a/[".into(), groups: vec![] }], true).is_err());
    }

    #[test]
    fn the_filter_passes_open_chunks_and_the_audiences_groups() {
        let map = std::sync::Arc::new(AccessMap::new(
            3,
            [(ChunkId(1), vec!["hr".to_string()]), (ChunkId(2), vec!["legal".to_string()]), (ChunkId(3), vec![])],
        ));
        assert!(map.filter(&Audience::Everyone).is_none());
        let hr = map.filter(&Audience::groups(["hr"])).unwrap();
        assert!(hr.allows(1) && !hr.allows(2) && hr.allows(3) && hr.allows(99));
        let none = map.filter(&Audience::groups(Vec::<String>::new())).unwrap();
        assert!(!none.allows(1) && !none.allows(2) && none.allows(3));
        assert_eq!(decode(&encode(&["hr".into(), "legal".into()])), vec!["hr", "legal"]);
        assert_eq!(decode(""), Vec::<String>::new());
    }
}
