//! Where each store file lives under the data folder, and the rules for names.
//!
//! ```text
//! <data>/catalog.sqlite                      the catalog (source of truth)
//! <data>/tenants/<t>/vector/<model>.usearch  vectors of one tenant and model (derived)
//! <data>/tenants/<t>/vector/<model>.json     its generation, model id, dims, metric
//! <data>/tenants/<t>/lexical/                tantivy index (derived); generation in the commit payload
//! ```

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// The catalog's file name.
pub const CATALOG_FILE: &str = "catalog.sqlite";
/// The folder holding one folder per tenant.
pub const TENANTS_DIR: &str = "tenants";
/// A tenant's vector indexes.
pub const VECTOR_DIR: &str = "vector";
/// A tenant's lexical index.
pub const LEXICAL_DIR: &str = "lexical";
/// Extension of a vector index file.
pub const VECTOR_EXT: &str = "usearch";
/// Extension of a vector index's metadata file.
pub const VECTOR_META_EXT: &str = "json";
/// A tenant's uploads folder name.
pub const UPLOADS_DIR: &str = "uploads";
/// The folder holding one mirror per `[[sources]]` entry (`<data>/sources/<name>/`): derived
/// data, fetched again from its server when lost.
pub const SOURCES_DIR: &str = "sources";
/// The tenant used when none is named.
pub const DEFAULT_TENANT: &str = "default";

/// Paths of one data folder.
#[derive(Debug, Clone)]
pub struct Layout {
    root: PathBuf,
}

impl Layout {
    /// The layout rooted at `data_dir`.
    pub fn new(data_dir: impl Into<PathBuf>) -> Self {
        Layout { root: data_dir.into() }
    }

    /// The data folder.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The catalog file.
    pub fn catalog(&self) -> PathBuf {
        self.root.join(CATALOG_FILE)
    }

    /// A tenant's folder.
    pub fn tenant(&self, tenant: &str) -> PathBuf {
        self.root.join(TENANTS_DIR).join(tenant)
    }

    /// A tenant's managed uploads folder: files sent over the HTTP API are stored here, under
    /// names the server checked, never at a path the client chose.
    pub fn uploads(&self, tenant: &str) -> PathBuf {
        self.tenant(tenant).join(UPLOADS_DIR)
    }

    /// A tenant's vector index for a model.
    pub fn vector(&self, tenant: &str, model: &str) -> PathBuf {
        self.tenant(tenant).join(VECTOR_DIR).join(format!("{model}.{VECTOR_EXT}"))
    }

    /// The metadata file beside a tenant's vector index.
    pub fn vector_meta(&self, tenant: &str, model: &str) -> PathBuf {
        self.tenant(tenant).join(VECTOR_DIR).join(format!("{model}.{VECTOR_META_EXT}"))
    }

    /// A tenant's lexical index folder.
    pub fn lexical(&self, tenant: &str) -> PathBuf {
        self.tenant(tenant).join(LEXICAL_DIR)
    }
}

/// Checks a tenant name: 1-64 characters from `[A-Za-z0-9_-]`, so that it is safe as a folder name.
pub fn check_tenant_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(Error::Invalid(format!(
            "tenant name `{name}` is not allowed: use 1-64 letters, digits, `-` or `_`"
        )))
    }
}

/// Writes `bytes` to `path` atomically: a temporary file beside it, fsync, rename, fsync the folder.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> Result<()> {
    use std::io::Write;
    let tmp = temp_path(path);
    let written = std::fs::File::create(&tmp).and_then(|mut f| {
        f.write_all(bytes)?;
        f.sync_all()
    });
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(Error::Path { path: tmp, source: e });
    }
    rename_durably(&tmp, path)
}

/// A temporary name beside `path` (same folder, so a rename is atomic): the name plus
/// `.tmp<pid>`, or, for a name too long to take the suffix (file names stop at 255 bytes), a
/// hash of the name in its place.
pub fn temp_path(path: &Path) -> PathBuf {
    use std::hash::{Hash, Hasher};
    let mut name = path.file_name().map(|n| n.to_os_string()).unwrap_or_default();
    if name.len() > 200 {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        name.hash(&mut h);
        name = format!(".{:016x}", h.finish()).into();
    }
    name.push(format!(".tmp{}", std::process::id()));
    path.with_file_name(name)
}

/// Renames `from` over `to` and fsyncs the folder so the rename survives a power cut.
pub fn rename_durably(from: &Path, to: &Path) -> Result<()> {
    std::fs::rename(from, to).map_err(Error::path(to))?;
    if let Some(dir) = to.parent() {
        if let Ok(d) = std::fs::File::open(dir) {
            let _ = d.sync_all();
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_name_gets_a_short_temporary_name() {
        let long = format!("/d/x-{}.md", "ab".repeat(120));
        let t = temp_path(Path::new(&long));
        assert!(t.file_name().unwrap().len() < 40 && t.parent() == Some(Path::new("/d")), "{t:?}");
        assert_ne!(t, temp_path(Path::new(&long.replace("ab", "ac"))));
        assert_eq!(temp_path(Path::new("/d/a.md")), Path::new(&format!("/d/a.md.tmp{}", std::process::id())));
    }

    #[test]
    fn tenant_names() {
        assert!(check_tenant_name("acme-eu_1").is_ok());
        for bad in ["", "../x", "a/b", "é", &"x".repeat(65)] {
            assert!(check_tenant_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn paths() {
        let l = Layout::new("/d");
        assert_eq!(l.vector("t", "m"), PathBuf::from("/d/tenants/t/vector/m.usearch"));
        assert_eq!(l.lexical("t"), PathBuf::from("/d/tenants/t/lexical"));
    }
}
