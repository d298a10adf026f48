//! The default index backend: a tenant's vectors in a usearch file per model and its BM25 index in
//! a tantivy folder, under the data folder ([`Layout`]).
//!
//! A vector commit rewrites the usearch file and then its sidecar (each by temporary file, fsync,
//! rename), so the sidecar's generation is the commit point; a lexical commit is tantivy's own,
//! its payload carrying the generation.

use crate::error::{Error, Result};
use crate::store::backend::{Backends, Committed, LexicalBackend, LexicalWrite, VectorBackend, VectorWriter};
use crate::store::catalog::TenantRow;
use crate::store::layout::Layout;
use crate::store::lexical::{LexicalIndex, LexicalSearch, LexicalWriter};
use crate::store::vector::{VectorIndex, VectorOptions, VectorSearch};
use crate::types::{ChunkId, DocId};

impl Backends {
    /// The default: usearch and tantivy files in the data folder laid out by `layout`.
    pub fn local(layout: &Layout, options: VectorOptions) -> Backends {
        Backends {
            vectors: Box::new(LocalVectors::new(layout.clone(), options)),
            lexical: Box::new(LocalLexical::new(layout.clone())),
            catalog: None,
        }
    }
}

/// Vector indexes as usearch files in the data folder.
pub struct LocalVectors {
    layout: Layout,
    options: VectorOptions,
}

impl LocalVectors {
    /// The vector indexes of the data folder laid out by `layout`.
    pub fn new(layout: Layout, options: VectorOptions) -> LocalVectors {
        LocalVectors { layout, options }
    }
}

impl VectorBackend for LocalVectors {
    fn describe(&self) -> String {
        format!("usearch files in {}", self.layout.root().display())
    }

    fn committed(&self, tenant: &TenantRow, model: &str, dims: usize) -> Result<Committed> {
        let path = self.layout.vector(&tenant.name, model);
        let meta_path = self.layout.vector_meta(&tenant.name, model);
        Ok(match VectorIndex::check(&path, &meta_path) {
            Ok(meta) if meta.model != model || meta.dims != dims => Committed::Damaged(format!("built with {} ({} dims)", meta.model, meta.dims)),
            Ok(meta) => Committed::At(meta.generation),
            Err(_) if !path.exists() && !meta_path.exists() => Committed::Missing,
            Err(e) => Committed::Damaged(format!("{e:#}")),
        })
    }

    fn reader_at(&self, tenant: &TenantRow, model: &str, dims: usize, generation: u64) -> Result<Option<Box<dyn VectorSearch>>> {
        let path = self.layout.vector(&tenant.name, model);
        let Some(meta) = VectorIndex::check(&path, &self.layout.vector_meta(&tenant.name, model))
            .ok()
            .filter(|m| m.generation == generation && m.model == model && m.dims == dims)
        else {
            return Ok(None);
        };
        Ok(VectorIndex::view(&path, meta, self.options).ok().map(|v| Box::new(v) as Box<dyn VectorSearch>))
    }

    fn reader(&self, tenant: &TenantRow, model: &str, _dims: usize) -> Result<Box<dyn VectorSearch>> {
        let path = self.layout.vector(&tenant.name, model);
        let meta = VectorIndex::check(&path, &self.layout.vector_meta(&tenant.name, model))?;
        Ok(Box::new(VectorIndex::view(&path, meta, self.options)?))
    }

    fn writer(&self, tenant: &TenantRow, model: &str, dims: usize, empty: bool) -> Result<Box<dyn VectorWriter>> {
        let path = self.layout.vector(&tenant.name, model);
        let meta_path = self.layout.vector_meta(&tenant.name, model);
        let index = if empty {
            VectorIndex::create(model, dims, self.options)?
        } else {
            VectorIndex::load(&path, VectorIndex::check(&path, &meta_path)?, self.options)?
        };
        Ok(Box::new(LocalVectorWriter { index, path, meta_path }))
    }

    fn drop_tenant(&self, tenant: &TenantRow) -> Result<()> {
        let dir = self.layout.vector(&tenant.name, &tenant.model);
        let dir = dir.parent().expect("a vector index sits in a folder");
        match std::fs::remove_dir_all(dir) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(Error::path(dir)(e)),
            _ => Ok(()),
        }
    }
}

/// A usearch index loaded into memory for changes, saved over its file on commit.
struct LocalVectorWriter {
    index: VectorIndex,
    path: std::path::PathBuf,
    meta_path: std::path::PathBuf,
}

impl VectorWriter for LocalVectorWriter {
    fn upsert(&mut self, items: &[(ChunkId, &[f32])]) -> Result<()> {
        self.index.add(items)
    }
    fn remove(&mut self, ids: &[ChunkId]) -> Result<()> {
        self.index.remove(ids)
    }
    fn commit(&mut self, generation: u64) -> Result<()> {
        self.index.save(&self.path, &self.meta_path, generation)
    }
    fn len(&self) -> Result<usize> {
        Ok(self.index.len())
    }
}

/// Lexical indexes as tantivy folders in the data folder.
pub struct LocalLexical {
    layout: Layout,
}

impl LocalLexical {
    /// The lexical indexes of the data folder laid out by `layout`.
    pub fn new(layout: Layout) -> LocalLexical {
        LocalLexical { layout }
    }

    fn open(&self, tenant: &TenantRow) -> Result<LexicalIndex> {
        LexicalIndex::open_or_create(&self.layout.lexical(&tenant.name))
    }
}

impl LexicalBackend for LocalLexical {
    fn describe(&self) -> String {
        format!("tantivy folders in {}", self.layout.root().display())
    }

    fn committed(&self, tenant: &TenantRow) -> Result<Committed> {
        Ok(match self.open(tenant).and_then(|ix| ix.generation()) {
            Ok(g) => Committed::At(g),
            Err(e) => Committed::Damaged(format!("{e:#}")),
        })
    }

    fn reader_at(&self, tenant: &TenantRow, generation: u64) -> Result<Option<Box<dyn LexicalSearch>>> {
        let Ok(ix) = self.open(tenant) else { return Ok(None) };
        if ix.generation().ok() != Some(generation) {
            return Ok(None);
        }
        Ok(ix.searcher().ok().map(|s| Box::new(s) as Box<dyn LexicalSearch>))
    }

    fn reader(&self, tenant: &TenantRow) -> Result<Box<dyn LexicalSearch>> {
        Ok(Box::new(self.open(tenant)?.searcher()?))
    }

    fn writer(&self, tenant: &TenantRow, reset: bool) -> Result<Box<dyn LexicalWrite>> {
        let dir = self.layout.lexical(&tenant.name);
        if reset && dir.exists() {
            std::fs::remove_dir_all(&dir).map_err(Error::path(&dir))?;
        }
        Ok(Box::new(self.open(tenant)?.writer()?))
    }

    fn chunk_ids(&self, tenant: &TenantRow) -> Result<Vec<ChunkId>> {
        self.open(tenant)?.all_chunk_ids()
    }

    fn claim(&self, _catalog_id: &str) -> Result<()> {
        // The data folder's files belong to the catalog beside them.
        Ok(())
    }

    fn drop_tenant(&self, tenant: &TenantRow) -> Result<()> {
        let dir = self.layout.lexical(&tenant.name);
        match std::fs::remove_dir_all(&dir) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(Error::path(&dir)(e)),
            _ => Ok(()),
        }
    }
}

impl LexicalWrite for LexicalWriter {
    fn add(&mut self, chunk: ChunkId, doc: DocId, text: &str) -> Result<()> {
        LexicalWriter::add(self, chunk, doc, text)
    }
    fn remove_document(&mut self, doc: DocId) -> Result<()> {
        LexicalWriter::remove_document(self, doc);
        Ok(())
    }
    fn clear(&mut self) -> Result<()> {
        LexicalWriter::clear(self)
    }
    fn commit(self: Box<Self>, generation: u64) -> Result<()> {
        LexicalWriter::commit(*self, generation)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::contract;

    #[test]
    fn the_local_vector_backend_keeps_the_contract() {
        let dir = tempfile::tempdir().unwrap();
        contract::vectors(&LocalVectors::new(Layout::new(dir.path()), VectorOptions::default()));
    }

    #[test]
    fn the_local_lexical_backend_keeps_the_contract() {
        let dir = tempfile::tempdir().unwrap();
        contract::lexical(&LocalLexical::new(Layout::new(dir.path())));
    }
}
