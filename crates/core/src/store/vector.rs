//! The vector index of one tenant and model: a usearch file with a JSON sidecar recording the
//! generation, model id, dims, metric, quantisation and count it was written with.
//!
//! Writers load the file into memory, change it, and replace it atomically (temporary file, fsync,
//! rename), then replace the sidecar the same way. Readers map the file read-only (`view`).
//! **mmap contract:** a file a reader has mapped is never changed in place, only replaced by
//! rename, so a reader keeps a consistent (older) snapshot until it reopens.
//!
//! Search is exact below [`VectorOptions::exact_below`] vectors and HNSW above.
//!
//! What a reader needs of an index is the [`VectorSearch`] trait: the usearch file implements it,
//! and so, for unit tests of what sits above the store, does [`MemoryVectors`] (exact cosine over
//! vectors held in memory, no file).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use usearch::{Index, IndexOptions, MetricKind, ScalarKind};

use crate::access::ChunkFilter;
use crate::error::{Error, Result};
use crate::store::layout::{rename_durably, temp_path, write_atomically};
use crate::types::ChunkId;

/// How vectors are stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Quantization {
    /// 32-bit floats (exact).
    F32,
    /// 16-bit floats.
    F16,
    /// 8-bit integers (4x smaller, slightly lossy).
    I8,
}

impl Quantization {
    fn scalar(self) -> ScalarKind {
        match self {
            Quantization::F32 => ScalarKind::F32,
            Quantization::F16 => ScalarKind::F16,
            Quantization::I8 => ScalarKind::I8,
        }
    }
}

/// Settings of a vector index.
#[derive(Debug, Clone, Copy)]
pub struct VectorOptions {
    /// Storage type of the vectors.
    pub quantization: Quantization,
    /// Below this many vectors, search is exact (brute force); above, HNSW.
    pub exact_below: usize,
    /// HNSW graph degree.
    pub connectivity: usize,
    /// HNSW search breadth while adding.
    pub expansion_add: usize,
    /// HNSW search breadth while searching.
    pub expansion_search: usize,
}

impl Default for VectorOptions {
    fn default() -> Self {
        VectorOptions { quantization: Quantization::F32, exact_below: 20_000, connectivity: 16, expansion_add: 128, expansion_search: 128 }
    }
}

/// The sidecar: what built the index and which catalog generation it reflects.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VectorMeta {
    /// Catalog generation the index reflects.
    pub generation: u64,
    /// Embedding model id.
    pub model: String,
    /// Vector width.
    pub dims: usize,
    /// Always "cos".
    pub metric: String,
    /// Storage type.
    pub quantization: Quantization,
    /// Vectors in the index.
    pub count: usize,
    /// Size of the index file in bytes, to detect truncation.
    pub file_bytes: u64,
}

/// One scored hit: chunk id and cosine similarity (1 is identical).
pub type VectorHit = (ChunkId, f32);

/// Dense search over one tenant's vectors, as a reader uses it.
pub trait VectorSearch: Send + Sync {
    /// What built the index and which generation it reflects.
    fn meta(&self) -> &VectorMeta;
    /// Vectors held.
    fn len(&self) -> usize;
    /// Whether it holds no vectors.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The `k` nearest chunks to `query`, best first, with cosine similarity; a query of another
    /// width than the index's is [`Error::IndexMismatch`].
    fn search(&self, query: &[f32], k: usize) -> Result<Vec<VectorHit>> {
        self.search_filtered(query, k, None)
    }
    /// [`VectorSearch::search`] over the chunks `filter` allows only, decided inside the search:
    /// `k` hits come back whenever the index holds `k` allowed chunks.
    fn search_filtered(&self, query: &[f32], k: usize, filter: Option<&ChunkFilter>) -> Result<Vec<VectorHit>>;
    /// The stored vectors of `ids`, in input order (`None` where absent).
    fn vectors(&self, ids: &[ChunkId]) -> Result<Vec<Option<Vec<f32>>>>;
    /// Whether each of `ids` has a vector, in input order.
    fn contains(&self, ids: &[ChunkId]) -> Result<Vec<bool>> {
        Ok(self.vectors(ids)?.iter().map(Option::is_some).collect())
    }
}

/// A vector index, open for reading (mapped) or writing (in memory).
pub struct VectorIndex {
    index: Index,
    meta: VectorMeta,
    options: VectorOptions,
}

fn ffi_err(what: String) -> impl FnOnce(cxx::Exception) -> Error {
    move |e| Error::Index { what, source: Box::new(e) }
}

fn usearch_options(dims: usize, o: &VectorOptions) -> IndexOptions {
    IndexOptions {
        dimensions: dims,
        metric: MetricKind::Cos,
        quantization: o.quantization.scalar(),
        connectivity: o.connectivity,
        expansion_add: o.expansion_add,
        expansion_search: o.expansion_search,
        multi: false,
    }
}

impl VectorIndex {
    /// A new, empty index for `model` with `dims` dimensions.
    pub fn create(model: &str, dims: usize, options: VectorOptions) -> Result<VectorIndex> {
        let index = Index::new(&usearch_options(dims, &options)).map_err(ffi_err("creating a vector index".into()))?;
        let meta = VectorMeta {
            generation: 0,
            model: model.to_string(),
            dims,
            metric: "cos".into(),
            quantization: options.quantization,
            count: 0,
            file_bytes: 0,
        };
        Ok(VectorIndex { index, meta, options })
    }

    /// Reads the sidecar of the index at `path` and checks it against the file: size and, from
    /// the usearch header, dims and count. Any disagreement is an error (the caller rebuilds).
    pub fn check(path: &Path, meta_path: &Path) -> Result<VectorMeta> {
        let text = std::fs::read_to_string(meta_path).map_err(Error::path(meta_path))?;
        let meta: VectorMeta = serde_json::from_str(&text).map_err(|e| Error::Index {
            what: format!("vector index metadata {meta_path:?} is unreadable"),
            source: Box::new(e),
        })?;
        let bytes = std::fs::metadata(path).map_err(Error::path(path))?.len();
        let path_str = path_str(path)?;
        let header = Index::metadata(path_str).map_err(ffi_err(format!("vector index {path:?} has a bad header")))?;
        let damaged = |why: String| Error::Index {
            what: format!("vector index {path:?} is damaged: {why}"),
            source: why.clone().into(),
        };
        if bytes != meta.file_bytes {
            return Err(damaged(format!("{bytes} bytes, its metadata says {}", meta.file_bytes)));
        }
        if header.dimensions as usize != meta.dims || header.count_present as usize != meta.count {
            return Err(damaged(format!(
                "header says {} vectors of {} dims, metadata {} of {}",
                header.count_present, header.dimensions, meta.count, meta.dims
            )));
        }
        Ok(meta)
    }

    /// Maps the index at `path` read-only (after [`VectorIndex::check`]).
    pub fn view(path: &Path, meta: VectorMeta, options: VectorOptions) -> Result<VectorIndex> {
        let index = Index::new(&usearch_options(meta.dims, &VectorOptions { quantization: meta.quantization, ..options }))
            .map_err(ffi_err("creating a vector index".into()))?;
        index.view(path_str(path)?).map_err(ffi_err(format!("mapping vector index {path:?}")))?;
        Ok(VectorIndex { index, meta, options })
    }

    /// Loads the index at `path` into memory for changes (after [`VectorIndex::check`]).
    pub fn load(path: &Path, meta: VectorMeta, options: VectorOptions) -> Result<VectorIndex> {
        let index = Index::new(&usearch_options(meta.dims, &VectorOptions { quantization: meta.quantization, ..options }))
            .map_err(ffi_err("creating a vector index".into()))?;
        index.load(path_str(path)?).map_err(ffi_err(format!("loading vector index {path:?}")))?;
        Ok(VectorIndex { index, meta, options })
    }

    /// What built it and which generation it reflects.
    pub fn meta(&self) -> &VectorMeta {
        &self.meta
    }

    /// Vectors held.
    pub fn len(&self) -> usize {
        self.index.size()
    }

    /// Whether it holds no vectors.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether a chunk's vector is present.
    pub fn contains(&self, id: ChunkId) -> bool {
        self.index.contains(id.0)
    }

    /// Adds vectors (replacing any with the same id). Parallel over rayon's threads.
    pub fn add(&mut self, items: &[(ChunkId, &[f32])]) -> Result<()> {
        use rayon::prelude::*;
        for (id, v) in items {
            if v.len() != self.meta.dims {
                return Err(Error::Bug(format!("vector of {} dims for a {}-dim index (chunk {})", v.len(), self.meta.dims, id.0)));
            }
        }
        let needed = self.index.size() + items.len();
        if needed > self.index.capacity() {
            let threads = rayon::current_num_threads().max(1);
            self.index
                .reserve_capacity_and_threads(needed.max(self.index.capacity() * 3 / 2), threads)
                .map_err(ffi_err("reserving vector index capacity".into()))?;
        }
        for (id, _) in items {
            if self.index.contains(id.0) {
                self.index.remove(id.0).map_err(ffi_err("replacing a vector".into()))?;
            }
        }
        let index = &self.index;
        items
            .par_iter()
            .try_for_each(|(id, v)| index.add(id.0, v).map_err(ffi_err(format!("adding vector {}", id.0))))?;
        Ok(())
    }

    /// Removes vectors by id (ids not present are ignored).
    pub fn remove(&mut self, ids: &[ChunkId]) -> Result<()> {
        for id in ids {
            if self.index.contains(id.0) {
                self.index.remove(id.0).map_err(ffi_err(format!("removing vector {}", id.0)))?;
            }
        }
        Ok(())
    }

    /// The stored vectors of `ids`, in input order (dequantised to f32; `None` where absent).
    pub fn vectors(&self, ids: &[ChunkId]) -> Result<Vec<Option<Vec<f32>>>> {
        let dims = self.meta.dims;
        ids.iter()
            .map(|id| {
                let mut v = vec![0f32; dims];
                let found = self.index.get(id.0, &mut v).map_err(ffi_err(format!("reading the vector of chunk {}", id.0)))?;
                Ok((found > 0).then_some(v))
            })
            .collect()
    }

    /// The `k` nearest chunks to `query`, best first, with cosine similarity.
    pub fn search(&self, query: &[f32], k: usize) -> Result<Vec<VectorHit>> {
        self.search_filtered(query, k, None)
    }

    /// The `k` nearest chunks that `filter` allows: the HNSW walk asks the filter of each
    /// candidate (usearch's filtered search), so it walks on past refused ones and fills `k`;
    /// below `exact_below` the exact scan is widened until `k` pass.
    pub fn search_filtered(&self, query: &[f32], k: usize, filter: Option<&ChunkFilter>) -> Result<Vec<VectorHit>> {
        check_query(&self.meta, query)?;
        let size = self.index.size();
        if size == 0 || k == 0 {
            return Ok(Vec::new());
        }
        let k = k.min(size);
        let hits = |m: usearch::ffi::Matches| m.keys.into_iter().zip(m.distances).map(|(key, d)| (ChunkId(key), 1.0 - d)).collect::<Vec<_>>();
        let failed = || ffi_err("searching the vector index".into());
        match filter {
            None if size < self.options.exact_below => Ok(hits(self.index.exact_search(query, k).map_err(failed())?)),
            None => Ok(hits(self.index.search(query, k).map_err(failed())?)),
            Some(f) if size < self.options.exact_below => {
                widened(k, size, f, |h: &VectorHit| h.0 .0, |n| Ok(hits(self.index.exact_search(query, n).map_err(failed())?)))
            }
            Some(f) => Ok(hits(self.index.filtered_search(query, k, |key| f.allows(key)).map_err(failed())?)),
        }
    }

    /// Writes the index to `path` and its sidecar to `meta_path`, both atomically, stamped with
    /// `generation`. The index file is renamed before the sidecar, so a sidecar never describes a
    /// file that is not there; a crash between the two leaves an older generation in the sidecar,
    /// which the next open detects and repairs.
    pub fn save(&mut self, path: &Path, meta_path: &Path, generation: u64) -> Result<()> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(Error::path(dir))?;
        }
        let tmp = temp_path(path);
        let written = self
            .index
            .save(path_str(&tmp)?)
            .map_err(ffi_err(format!("writing vector index {tmp:?}")))
            .and_then(|()| std::fs::File::open(&tmp).and_then(|f| f.sync_all()).map_err(Error::path(&tmp)))
            .and_then(|()| Ok(std::fs::metadata(&tmp).map_err(Error::path(&tmp))?.len()));
        let file_bytes = match written {
            Ok(n) => n,
            Err(e) => {
                // A half-written temporary file (a full disk) must not keep its space.
                let _ = std::fs::remove_file(&tmp);
                return Err(e);
            }
        };
        rename_durably(&tmp, path)?;
        self.meta.generation = generation;
        self.meta.count = self.index.size();
        self.meta.file_bytes = file_bytes;
        let json = serde_json::to_vec_pretty(&self.meta).map_err(|e| Error::Bug(e.to_string()))?;
        write_atomically(meta_path, &json)
    }
}

impl VectorSearch for VectorIndex {
    fn meta(&self) -> &VectorMeta {
        VectorIndex::meta(self)
    }
    fn len(&self) -> usize {
        VectorIndex::len(self)
    }
    fn search_filtered(&self, query: &[f32], k: usize, filter: Option<&ChunkFilter>) -> Result<Vec<VectorHit>> {
        VectorIndex::search_filtered(self, query, k, filter)
    }
    fn vectors(&self, ids: &[ChunkId]) -> Result<Vec<Option<Vec<f32>>>> {
        VectorIndex::vectors(self, ids)
    }
    fn contains(&self, ids: &[ChunkId]) -> Result<Vec<bool>> {
        Ok(ids.iter().map(|id| VectorIndex::contains(self, *id)).collect())
    }
}

/// The first `k` hits that `filter` allows, from a search that can only be asked for its top `n`
/// (an exact scan, a remote index): asked again for four times as many until `k` pass or the
/// `total` candidates are exhausted, so the list comes back full.
pub(crate) fn widened<H>(
    k: usize,
    total: usize,
    filter: &ChunkFilter,
    id: impl Fn(&H) -> u64,
    mut search: impl FnMut(usize) -> Result<Vec<H>>,
) -> Result<Vec<H>> {
    let mut ask = k.saturating_mul(2).max(32).min(total.max(1));
    loop {
        let got = search(ask)?;
        let exhausted = got.len() < ask || ask >= total;
        let kept: Vec<H> = got.into_iter().filter(|h| filter.allows(id(h))).take(k).collect();
        if kept.len() >= k || exhausted {
            return Ok(kept);
        }
        ask = ask.saturating_mul(4).min(total);
    }
}

/// A query of the index's width, or [`Error::IndexMismatch`].
pub(crate) fn check_query(meta: &VectorMeta, query: &[f32]) -> Result<()> {
    if query.len() == meta.dims {
        return Ok(());
    }
    Err(Error::IndexMismatch {
        path: PathBuf::from(&meta.model),
        found: format!("a {}-dim query", query.len()),
        expected: format!("{} dims ({})", meta.dims, meta.model),
    })
}

/// Vectors held in memory and searched exactly (cosine): a [`VectorSearch`] for unit tests of
/// what sits above the store, with no file and no usearch.
#[cfg(any(test, feature = "testing"))]
pub struct MemoryVectors {
    meta: VectorMeta,
    rows: Vec<(ChunkId, Vec<f32>)>,
}

#[cfg(any(test, feature = "testing"))]
impl MemoryVectors {
    /// An empty index for `model` with `dims` dimensions.
    pub fn new(model: &str, dims: usize) -> MemoryVectors {
        let meta = VectorMeta {
            generation: 0,
            model: model.to_string(),
            dims,
            metric: "cos".into(),
            quantization: Quantization::F32,
            count: 0,
            file_bytes: 0,
        };
        MemoryVectors { meta, rows: Vec::new() }
    }

    /// Adds vectors (replacing any with the same id), as [`VectorIndex::add`].
    pub fn add(&mut self, items: &[(ChunkId, &[f32])]) -> Result<()> {
        for (id, v) in items {
            if v.len() != self.meta.dims {
                return Err(Error::Bug(format!("vector of {} dims for a {}-dim index (chunk {})", v.len(), self.meta.dims, id.0)));
            }
            self.rows.retain(|(have, _)| have != id);
            self.rows.push((*id, v.to_vec()));
        }
        self.meta.count = self.rows.len();
        Ok(())
    }
}

#[cfg(any(test, feature = "testing"))]
impl VectorSearch for MemoryVectors {
    fn meta(&self) -> &VectorMeta {
        &self.meta
    }
    fn len(&self) -> usize {
        self.rows.len()
    }
    fn search_filtered(&self, query: &[f32], k: usize, filter: Option<&ChunkFilter>) -> Result<Vec<VectorHit>> {
        check_query(&self.meta, query)?;
        let norm = |v: &[f32]| v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-12);
        let q = norm(query);
        let mut hits: Vec<VectorHit> =
            self.rows
                .iter()
                .filter(|(id, _)| filter.is_none_or(|f| f.allows(id.0)))
                .map(|(id, v)| (*id, v.iter().zip(query).map(|(a, b)| a * b).sum::<f32>() / (norm(v) * q)))
                .collect();
        hits.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0 .0.cmp(&b.0 .0)));
        hits.truncate(k);
        Ok(hits)
    }
    fn vectors(&self, ids: &[ChunkId]) -> Result<Vec<Option<Vec<f32>>>> {
        Ok(ids.iter().map(|id| self.rows.iter().find(|(have, _)| have == id).map(|(_, v)| v.clone())).collect())
    }
}

fn path_str(p: &Path) -> Result<&str> {
    p.to_str().ok_or_else(|| Error::Invalid(format!("data folder path {p:?} is not valid UTF-8")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unit(v: &[f32]) -> Vec<f32> {
        let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        v.iter().map(|x| x / n).collect()
    }

    /// A filter that refuses nine chunks in ten still gets `k` hits back, all allowed and in
    /// similarity order, on the exact path and the HNSW path alike, and the in-memory stand-in
    /// agrees with the exact one.
    #[test]
    fn a_filtered_search_keeps_its_top_k_full() {
        use crate::access::{AccessMap, Audience};
        let n = 3000u64;
        let vectors: Vec<Vec<f32>> = (0..n).map(|i| unit(&[(i as f32 * 0.37).sin(), (i as f32 * 0.11).cos(), (i % 17) as f32 / 17.0, 1.0])).collect();
        let items: Vec<(ChunkId, &[f32])> = vectors.iter().enumerate().map(|(i, v)| (ChunkId(i as u64 + 1), v.as_slice())).collect();
        // Nine chunks in ten belong to `legal`; the asker is in `hr`.
        let rows = (1..=n).filter(|i| i % 10 != 0).map(|i| (ChunkId(i), vec!["legal".to_string()]));
        let map = std::sync::Arc::new(AccessMap::new(1, rows));
        let filter = map.filter(&Audience::groups(["hr"])).expect("a filter for a restricted audience");
        let query = unit(&[0.3, 0.9, 0.2, 1.0]);
        for exact_below in [usize::MAX, 0] {
            let mut ix = VectorIndex::create("m", 4, VectorOptions { exact_below, ..VectorOptions::default() }).unwrap();
            ix.add(&items).unwrap();
            let hits = ix.search_filtered(&query, 20, Some(&filter)).unwrap();
            assert_eq!(hits.len(), 20, "the top k stays full (exact_below {exact_below})");
            assert!(hits.iter().all(|h| h.0 .0 % 10 == 0), "only allowed chunks");
            assert!(hits.windows(2).all(|w| w[0].1 >= w[1].1 - 1e-6), "best first");
            if exact_below == usize::MAX {
                let mut memory = MemoryVectors::new("m", 4);
                memory.add(&items).unwrap();
                let want: Vec<ChunkId> = memory.search_filtered(&query, 20, Some(&filter)).unwrap().iter().map(|h| h.0).collect();
                assert_eq!(hits.iter().map(|h| h.0).collect::<Vec<_>>(), want);
            }
        }
    }

    /// The in-memory stand-in answers as the usearch index does: the same order and similarities
    /// (exact search below `exact_below`), the same stored vectors, the same width check.
    #[test]
    fn memory_vectors_answer_as_the_usearch_index_does() {
        let mut real = VectorIndex::create("m", 4, VectorOptions::default()).unwrap();
        let mut memory = MemoryVectors::new("m", 4);
        let vectors: Vec<Vec<f32>> = (0..12u32).map(|i| unit(&[1.0 + i as f32, (i % 3) as f32, (i % 5) as f32 - 2.0, 0.5])).collect();
        let items: Vec<(ChunkId, &[f32])> = vectors.iter().enumerate().map(|(i, v)| (ChunkId(i as u64 + 1), v.as_slice())).collect();
        real.add(&items).unwrap();
        memory.add(&items).unwrap();
        let (real, memory): (&dyn VectorSearch, &dyn VectorSearch) = (&real, &memory);
        assert_eq!(real.len(), memory.len());
        let query = unit(&[2.0, 1.0, -1.0, 0.5]);
        let (a, b) = (real.search(&query, 5).unwrap(), memory.search(&query, 5).unwrap());
        assert_eq!(a.iter().map(|h| h.0).collect::<Vec<_>>(), b.iter().map(|h| h.0).collect::<Vec<_>>());
        assert!(a.iter().zip(&b).all(|(x, y)| (x.1 - y.1).abs() < 1e-5), "{a:?} vs {b:?}");
        assert_eq!(real.vectors(&[ChunkId(3), ChunkId(99)]).unwrap(), memory.vectors(&[ChunkId(3), ChunkId(99)]).unwrap());
        assert!(matches!(memory.search(&[1.0], 1), Err(Error::IndexMismatch { .. })));
    }

    #[test]
    fn add_search_save_view_and_detect_damage() {
        let dir = tempfile::tempdir().unwrap();
        let (path, meta_path) = (dir.path().join("v/m.usearch"), dir.path().join("v/m.json"));
        let mut ix = VectorIndex::create("m", 3, VectorOptions::default()).unwrap();
        let (a, b, c) = (unit(&[1.0, 0.0, 0.0]), unit(&[0.0, 1.0, 0.0]), unit(&[1.0, 1.0, 0.0]));
        ix.add(&[(ChunkId(1), &a), (ChunkId(2), &b), (ChunkId(3), &c)]).unwrap();
        let hits = ix.search(&a, 2).unwrap();
        assert_eq!(hits[0].0, ChunkId(1));
        assert!((hits[0].1 - 1.0).abs() < 1e-5);
        assert_eq!(hits[1].0, ChunkId(3));
        ix.remove(&[ChunkId(1)]).unwrap();
        assert_eq!(ix.search(&a, 1).unwrap()[0].0, ChunkId(3));
        ix.save(&path, &meta_path, 7).unwrap();

        let meta = VectorIndex::check(&path, &meta_path).unwrap();
        assert_eq!((meta.generation, meta.count, meta.dims), (7, 2, 3));
        let view = VectorIndex::view(&path, meta.clone(), VectorOptions::default()).unwrap();
        assert_eq!(view.search(&b, 1).unwrap()[0].0, ChunkId(2));
        let got = view.vectors(&[ChunkId(2), ChunkId(1)]).unwrap();
        assert!(got[0].as_ref().unwrap().iter().zip(&b).all(|(x, y)| (x - y).abs() < 1e-6), "mapped vectors read back");
        assert!(got[1].is_none(), "a removed vector is absent");
        assert!(matches!(view.search(&[1.0, 0.0], 1), Err(Error::IndexMismatch { .. })));

        // Writers reload, add, and replace the file; the mapped reader keeps its snapshot.
        let mut w = VectorIndex::load(&path, meta, VectorOptions::default()).unwrap();
        w.add(&[(ChunkId(9), &a)]).unwrap();
        w.save(&path, &meta_path, 8).unwrap();
        assert_eq!(view.len(), 2);
        assert_eq!(VectorIndex::check(&path, &meta_path).unwrap().count, 3);

        // Truncation and garbage are detected.
        let bytes = std::fs::read(&path).unwrap();
        std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
        assert!(VectorIndex::check(&path, &meta_path).is_err());
        std::fs::write(&path, vec![7u8; bytes.len()]).unwrap();
        assert!(VectorIndex::check(&path, &meta_path).is_err());
        std::fs::remove_file(&path).unwrap();
        assert!(VectorIndex::check(&path, &meta_path).is_err());
    }
}
