//! The seam between the store's commit protocol and where a tenant's derived indexes live: the
//! data folder's usearch and tantivy files ([`LocalVectors`], [`LocalLexical`]) or shared
//! servers (Milvus for vectors, PostgreSQL for BM25; `store::shared`).
//!
//! Every backend keeps, beside its contents, the catalog generation its last commit reflects,
//! written as the commit's last step (the usearch sidecar, tantivy's commit payload, a marker row
//! on a server). The store reads it to decide whether an index is fresh, lags the catalog (a crash
//! between the catalog's commit and the index's) or is damaged, and rebuilds from the catalog
//! when it is not fresh. A reader only ever resolves hits through the catalog, so a chunk an
//! unfinished commit left behind in a server's index is never served, and one it has not yet
//! removed is dropped on the way out.
//!
//! The contract each backend keeps is one test suite, `store::contract`, run against every
//! implementation.

use crate::error::Result;
use crate::store::catalog::TenantRow;
use crate::store::lexical::LexicalSearch;
use crate::store::vector::VectorSearch;
use crate::types::{ChunkId, DocId};

/// What a backend found when asked for a tenant's index generation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Committed {
    /// Never written.
    Missing,
    /// Whole, at this catalog generation.
    At(u64),
    /// Present but unusable (truncated, another model, unreadable): the reason.
    Damaged(String),
}

impl Committed {
    /// The generation, when the index is whole.
    pub fn generation(&self) -> Option<u64> {
        match self {
            Committed::At(g) => Some(*g),
            _ => None,
        }
    }
}

/// The vector indexes of every tenant, one per tenant and model.
pub trait VectorBackend: Send + Sync {
    /// Where the vectors live, for messages (`the data folder`, `Milvus at http://…`).
    fn describe(&self) -> String;
    /// The generation of `tenant`'s index for `model` (`dims` wide).
    fn committed(&self, tenant: &TenantRow, model: &str, dims: usize) -> Result<Committed>;
    /// A reader over the index for `model` when it is whole and at exactly `generation`;
    /// `None` when it is not (the caller takes the careful path).
    fn reader_at(&self, tenant: &TenantRow, model: &str, dims: usize, generation: u64) -> Result<Option<Box<dyn VectorSearch>>>;
    /// A reader over the last commit of the index for `model`.
    fn reader(&self, tenant: &TenantRow, model: &str, dims: usize) -> Result<Box<dyn VectorSearch>>;
    /// A writer over the index for `model`: its current contents when `empty` is false (after
    /// [`VectorBackend::committed`] said it is whole), an empty index replacing it on commit when
    /// `empty` is true (a rebuild).
    fn writer(&self, tenant: &TenantRow, model: &str, dims: usize, empty: bool) -> Result<Box<dyn VectorWriter>>;
    /// Removes every index of `tenant`.
    fn drop_tenant(&self, tenant: &TenantRow) -> Result<()>;
}

/// Changes to one vector index, made visible by [`VectorWriter::commit`].
pub trait VectorWriter: Send {
    /// Adds vectors, replacing any with the same id.
    fn upsert(&mut self, items: &[(ChunkId, &[f32])]) -> Result<()>;
    /// Removes vectors by id (ids not present are ignored).
    fn remove(&mut self, ids: &[ChunkId]) -> Result<()>;
    /// Makes the changes durable and stamps the index with `generation`, as the last step.
    fn commit(&mut self, generation: u64) -> Result<()>;
    /// Vectors in the index, counting uncommitted changes.
    fn len(&self) -> Result<usize>;
}

/// The lexical (BM25) index of every tenant.
pub trait LexicalBackend: Send + Sync {
    /// Where the index lives, for messages.
    fn describe(&self) -> String;
    /// The generation of `tenant`'s index (`At(0)` for a new one).
    fn committed(&self, tenant: &TenantRow) -> Result<Committed>;
    /// A searcher over the index when it is at exactly `generation`; `None` when it is not.
    fn reader_at(&self, tenant: &TenantRow, generation: u64) -> Result<Option<Box<dyn LexicalSearch>>>;
    /// A searcher over the last commit.
    fn reader(&self, tenant: &TenantRow) -> Result<Box<dyn LexicalSearch>>;
    /// A writer for changes. `reset` first discards an index that cannot be opened.
    fn writer(&self, tenant: &TenantRow, reset: bool) -> Result<Box<dyn LexicalWrite>>;
    /// Every chunk id in the last commit, with repeats if any (a consistency check counts them).
    fn chunk_ids(&self, tenant: &TenantRow) -> Result<Vec<ChunkId>>;
    /// Removes the index of `tenant`.
    fn drop_tenant(&self, tenant: &TenantRow) -> Result<()>;
    /// Records that these indexes belong to the catalog `catalog_id`, or refuses when another
    /// catalog holds them (two data folders pointed at one shared deployment would mix their
    /// chunk ids).
    fn claim(&self, catalog_id: &str) -> Result<()>;
}

/// Pending changes to one tenant's lexical index.
pub trait LexicalWrite: Send {
    /// Adds one chunk's contextualised text.
    fn add(&mut self, chunk: ChunkId, doc: DocId, text: &str) -> Result<()>;
    /// Removes every chunk of a document.
    fn remove_document(&mut self, doc: DocId) -> Result<()>;
    /// Removes everything.
    fn clear(&mut self) -> Result<()>;
    /// Commits the changes atomically, stamped with the catalog `generation`.
    fn commit(self: Box<Self>, generation: u64) -> Result<()>;
}

/// Where a store keeps its indexes and its catalog.
pub struct Backends {
    /// Dense vectors.
    pub vectors: Box<dyn VectorBackend>,
    /// BM25.
    pub lexical: Box<dyn LexicalBackend>,
    /// The PostgreSQL server that holds the catalog, the tenants' write locks and everything
    /// else the nodes share; `None`: the data folder's SQLite file and lock files.
    pub catalog: Option<std::sync::Arc<super::shared::Postgres>>,
}
