//! `ragbox bench vectors`: the vector index at scale, through the public [`VectorIndex`] API:
//! build (add) speed, save time, file size and memory; exact and HNSW search speed (one thread,
//! k = 10) and recall@10 against exact f32 search; and what a memory-mapped open costs when the
//! file is not in the page cache (cold) and when it is (warm).
//!
//! The data is synthetic but shaped like text embeddings, and deterministic: a seeded mixture of
//! topics on the unit sphere. Each topic has a centre and a few directions of its own along which
//! its points spread (so neighbourhoods have a low intrinsic dimension, as real embeddings do),
//! plus small isotropic noise; topic sizes are skewed. Queries come from the same mixture but a
//! different stream, so none is in the index. Vectors are made in chunks and never all held.
//!
//! Each (n, quantisation) writes one index file into `--dir` (default: a temporary folder) and
//! deletes it when done. Exact and HNSW search run on the same mapped file (`exact_below` set to
//! `usize::MAX` or 0). "Cold" means the file was dropped from the page cache with
//! `posix_fadvise(POSIX_FADV_DONTNEED)` and checked with `mincore`; where that did not work the
//! output says so.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::Args;
use rayon::prelude::*;
use serde::Serialize;

use ragbox_core::store::{Quantization, VectorHit, VectorIndex, VectorOptions};
use ragbox_core::types::ChunkId;

use ragbox_eval::metrics::percentile;

use super::{sorted, status_mb, SeededRng};
use ragbox_cli::{print_json, GlobalArgs};

/// Neighbours asked for, and the depth of recall.
const K: usize = 10;
/// Queries timed for the cold and warm first-touch figures.
const FIRST: usize = 100;
/// Vectors generated and added at a time.
const CHUNK: usize = 50_000;
/// Directions of its own along which each topic spreads.
const TOPIC_RANK: usize = 16;
/// Length of a point's spread along its topic's directions, relative to the unit centre.
const TOPIC_SPREAD: f32 = 0.8;
/// Length of a point's isotropic noise.
const NOISE: f32 = 0.35;
/// Data streams of [`SeededRng::for_item`].
const CORPUS: u64 = 0;
const QUERIES: u64 = 1;

/// Options of `ragbox bench vectors`.
#[derive(Debug, Args)]
pub struct VectorsArgs {
    /// Index sizes, comma-separated.
    #[arg(long, value_delimiter = ',', default_values_t = [100_000usize, 1_000_000])]
    n: Vec<usize>,
    /// Vector width.
    #[arg(long, default_value_t = 384)]
    dims: usize,
    /// Queries, drawn like the data but not in the index.
    #[arg(long, default_value_t = 1000)]
    queries: usize,
    /// Storage types, comma-separated (f32, f16, i8); recall is always against exact f32 search.
    #[arg(long, value_delimiter = ',', default_values = ["f32", "i8"], value_parser = parse_quantization)]
    quantization: Vec<Quantization>,
    /// Folder for the index files (default: a temporary folder); they are deleted afterwards.
    #[arg(long, value_name = "PATH")]
    dir: Option<PathBuf>,
    /// Topics (mixture components) of the synthetic data.
    #[arg(long, default_value_t = 1000)]
    topics: usize,
    /// Seed of the synthetic data.
    #[arg(long, default_value_t = 7)]
    seed: u64,
    /// HNSW graph degree (default: the library's).
    #[arg(long)]
    connectivity: Option<usize>,
    /// HNSW search breadth while adding (default: the library's).
    #[arg(long)]
    expansion_add: Option<usize>,
    /// HNSW search breadth while searching (default: the library's).
    #[arg(long)]
    expansion_search: Option<usize>,
}

fn parse_quantization(s: &str) -> Result<Quantization, String> {
    match s.trim() {
        "f32" => Ok(Quantization::F32),
        "f16" => Ok(Quantization::F16),
        "i8" => Ok(Quantization::I8),
        other => Err(format!("`{other}`: use f32, f16 or i8")),
    }
}

fn quantization_name(q: Quantization) -> &'static str {
    match q {
        Quantization::F32 => "f32",
        Quantization::F16 => "f16",
        Quantization::I8 => "i8",
    }
}

/// The synthetic embedding-like distribution.
pub(super) struct Mixture {
    dims: usize,
    /// `topics × dims`, unit rows.
    centres: Vec<f32>,
    /// `topics × TOPIC_RANK × dims`, unit rows.
    directions: Vec<f32>,
    seed: u64,
}

fn normalise(v: &mut [f32]) {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        v.iter_mut().for_each(|x| *x /= norm);
    }
}

impl Mixture {
    pub(super) fn new(dims: usize, topics: usize, seed: u64) -> Mixture {
        let mut rng = SeededRng::new(seed);
        let mut unit_rows = |rows: usize| {
            let mut m = vec![0f32; rows * dims];
            rng.fill_normal(&mut m);
            m.chunks_mut(dims).for_each(normalise);
            m
        };
        let centres = unit_rows(topics.max(1));
        let directions = unit_rows(topics.max(1) * TOPIC_RANK);
        Mixture { dims, centres, directions, seed }
    }

    fn topics(&self) -> usize {
        self.centres.len() / self.dims
    }

    /// Writes point `i` of `stream` into `out` (`dims` long), unit length.
    fn point(&self, stream: u64, i: u64, out: &mut [f32]) {
        let d = self.dims;
        let mut rng = SeededRng::for_item(self.seed, stream, i);
        // Skewed topic sizes: topic t is drawn with density ∝ 1/√t.
        let u = rng.uniform();
        let topic = ((u * u * self.topics() as f64) as usize).min(self.topics() - 1);
        let mut coef = [0f32; TOPIC_RANK];
        rng.fill_normal(&mut coef);
        rng.fill_normal(out);
        let noise = NOISE / (d as f32).sqrt();
        let spread = TOPIC_SPREAD / (TOPIC_RANK as f32).sqrt();
        let centre = &self.centres[topic * d..(topic + 1) * d];
        for (x, c) in out.iter_mut().zip(centre) {
            *x = c + *x * noise;
        }
        for (j, a) in coef.iter().enumerate() {
            let row = (topic * TOPIC_RANK + j) * d;
            let a = a * spread;
            for (x, e) in out.iter_mut().zip(&self.directions[row..row + d]) {
                *x += a * e;
            }
        }
        normalise(out);
    }

    /// Points `start..start + count` of `stream`, row after row (made in parallel).
    pub(super) fn points(&self, stream: u64, start: usize, count: usize) -> Vec<f32> {
        let mut out = vec![0f32; count * self.dims];
        out.par_chunks_mut(self.dims)
            .enumerate()
            .for_each(|(j, v)| self.point(stream, (start + j) as u64, v));
        out
    }
}

/// Mean over queries of the share of each query's true neighbours that `found` holds.
fn recall(truth: &[Vec<u64>], found: &[Vec<u64>]) -> f64 {
    if truth.is_empty() {
        return 0.0;
    }
    let per_query = truth.iter().zip(found).map(|(t, f)| {
        if t.is_empty() {
            1.0
        } else {
            t.iter().filter(|id| f.contains(id)).count() as f64 / t.len() as f64
        }
    });
    per_query.sum::<f64>() / truth.len() as f64
}

/// Whether the page cache was emptied of the index file before a cold open, and how we know.
#[derive(Debug, Clone, Serialize)]
struct Eviction {
    /// True only when `posix_fadvise` succeeded and `mincore` then found (almost) no page cached.
    evicted: bool,
    resident_before_pct: Option<f64>,
    resident_after_pct: Option<f64>,
    note: String,
}

/// Share of `path`'s pages in the page cache, from `mincore` on a fresh mapping (which reads
/// nothing).
fn resident_pct(path: &Path) -> std::io::Result<f64> {
    let file = File::open(path)?;
    // SAFETY: read-only mapping of our own benchmark file, which nothing changes while mapped;
    // only its page residency is inspected, never its bytes.
    let map = unsafe { memmap2::Mmap::map(&file)? };
    if map.is_empty() {
        return Ok(0.0);
    }
    // SAFETY: sysconf has no preconditions.
    let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096).max(1);
    let pages = map.len().div_ceil(page);
    let mut resident = vec![0u8; pages];
    // SAFETY: the mapping is page-aligned and `map.len()` long; `resident` has one byte per page.
    let rc = unsafe { libc::mincore(map.as_ptr() as *mut libc::c_void, map.len(), resident.as_mut_ptr()) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(100.0 * resident.iter().filter(|b| *b & 1 == 1).count() as f64 / pages as f64)
}

/// Drops `path` from the page cache (it must not be mapped by us) and checks that it worked.
fn evict(path: &Path) -> Eviction {
    let before = resident_pct(path).ok();
    let advised = File::open(path).and_then(|f| {
        f.sync_all()?;
        // SAFETY: a valid open descriptor; offset 0, length 0 means the whole file.
        match unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) } {
            0 => Ok(()),
            errno => Err(std::io::Error::from_raw_os_error(errno)),
        }
    });
    let after = resident_pct(path);
    let (evicted, note) = match (&advised, &after) {
        (Err(e), _) => (false, format!("posix_fadvise(DONTNEED) failed: {e}; cold figures are not cold")),
        (Ok(()), Err(e)) => (false, format!("posix_fadvise succeeded but mincore failed ({e}): eviction unverified")),
        (Ok(()), Ok(pct)) if *pct > 1.0 => {
            (false, format!("posix_fadvise succeeded but {pct:.0}% of the file is still cached (tmpfs?); cold figures are not cold"))
        }
        (Ok(()), Ok(pct)) => (true, format!("evicted: {pct:.1}% of the file cached before the open")),
    };
    Eviction { evicted, resident_before_pct: before, resident_after_pct: after.ok(), note }
}

/// One search mode on the mapped file.
#[derive(Debug, Serialize)]
struct ModeResult {
    mode: &'static str,
    eviction: Eviction,
    open_cold_s: f64,
    open_warm_s: f64,
    cold_first_query_s: f64,
    cold_first_100_s: f64,
    warm_first_query_s: f64,
    warm_first_100_s: f64,
    /// Share of the file in the page cache after the cold open and first 100 queries.
    resident_after_cold_pct: Option<f64>,
    queries: usize,
    qps: f64,
    p50_ms: f64,
    p99_ms: f64,
    mean_ms: f64,
    recall_at_10: f64,
    /// Resident memory gained by opening the view and running every query (mapped pages count).
    rss_growth_mb: Option<f64>,
}

/// One index size and storage type.
#[derive(Debug, Serialize)]
struct RunResult {
    n: usize,
    quantization: &'static str,
    build_s: f64,
    build_vectors_per_s: f64,
    save_s: f64,
    file_bytes: u64,
    /// Resident memory gained while building the in-memory index.
    rss_growth_build_mb: Option<f64>,
    modes: Vec<ModeResult>,
}

#[derive(Debug, Serialize)]
struct Report {
    bench: &'static str,
    data: String,
    dims: usize,
    topics: usize,
    seed: u64,
    queries: usize,
    /// Queries in the cold and warm first-touch figures (`*_first_100_s`): 100, or all if fewer.
    first_queries: usize,
    k: usize,
    build_threads: usize,
    search_threads: usize,
    connectivity: usize,
    expansion_add: usize,
    expansion_search: usize,
    ground_truth: &'static str,
    /// Per n: mean cosine of each query's nearest and 10th nearest point (exact f32).
    truth_cosine: Vec<TruthCosine>,
    runs: Vec<RunResult>,
    peak_rss_mb: Option<f64>,
}

#[derive(Debug, Serialize)]
struct TruthCosine {
    n: usize,
    nearest: f64,
    tenth: f64,
}

/// Where the index files go; removes what it made when dropped.
struct Scratch {
    dir: PathBuf,
    owned: bool,
}

impl Scratch {
    fn new(dir: Option<PathBuf>) -> anyhow::Result<Scratch> {
        let (dir, owned) = match dir {
            Some(d) => (d, false),
            None => (std::env::temp_dir().join(format!("ragbox-bench-vectors-{}", std::process::id())), true),
        };
        std::fs::create_dir_all(&dir)?;
        Ok(Scratch { dir, owned })
    }

    fn files(&self, n: usize, q: Quantization) -> (PathBuf, PathBuf) {
        let stem = format!("ragbox-bench-{n}-{}", quantization_name(q));
        (self.dir.join(format!("{stem}.usearch")), self.dir.join(format!("{stem}.json")))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if self.owned {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// Removes an index file and its sidecar when dropped (also on error).
struct Cleanup<'a>(&'a Path, &'a Path);

impl Drop for Cleanup<'_> {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(self.0);
        let _ = std::fs::remove_file(self.1);
    }
}

/// Times each query; returns per-query seconds and the hits.
fn run_queries(index: &VectorIndex, queries: &[f32], dims: usize) -> anyhow::Result<(Vec<f64>, Vec<Vec<VectorHit>>)> {
    let mut times = Vec::with_capacity(queries.len() / dims.max(1));
    let mut hits = Vec::with_capacity(times.capacity());
    for q in queries.chunks(dims) {
        let start = Instant::now();
        let h = index.search(q, K)?;
        times.push(start.elapsed().as_secs_f64());
        hits.push(h);
    }
    Ok((times, hits))
}

fn ids(hits: &[Vec<VectorHit>]) -> Vec<Vec<u64>> {
    hits.iter().map(|h| h.iter().map(|(id, _)| id.0).collect()).collect()
}

/// Builds, saves and measures one (n, quantisation); returns the result (recall not yet filled
/// in) and each mode's hits, exact then HNSW.
fn measure(
    args: &VectorsArgs,
    mix: &Mixture,
    queries: &[f32],
    options: VectorOptions,
    n: usize,
    scratch: &Scratch,
) -> anyhow::Result<(RunResult, [Vec<Vec<VectorHit>>; 2])> {
    let q = options.quantization;
    let label = format!("n = {n}, {}", quantization_name(q));
    let (path, meta_path) = scratch.files(n, q);
    let _cleanup = Cleanup(&path, &meta_path);

    eprintln!("{label}: building");
    let rss_before = status_mb("VmRSS");
    let mut index = VectorIndex::create("bench", args.dims, options)?;
    let mut build_s = 0.0;
    for start in (0..n).step_by(CHUNK) {
        let count = CHUNK.min(n - start);
        let data = mix.points(CORPUS, start, count);
        let items: Vec<(ChunkId, &[f32])> =
            data.chunks(args.dims).enumerate().map(|(j, v)| (ChunkId((start + j) as u64), v)).collect();
        let t = Instant::now();
        index.add(&items)?;
        build_s += t.elapsed().as_secs_f64();
    }
    let rss_growth_build_mb = rss_before.zip(status_mb("VmRSS")).map(|(a, b)| b - a);
    let t = Instant::now();
    index.save(&path, &meta_path, 1)?;
    let save_s = t.elapsed().as_secs_f64();
    drop(index);
    let meta = VectorIndex::check(&path, &meta_path)?;

    let mut modes = Vec::new();
    let mut hits_of = Vec::new();
    let first = FIRST.min(args.queries);
    for (mode, exact_below) in [("exact", usize::MAX), ("hnsw", 0)] {
        eprintln!("{label}: {mode} search");
        let opts = VectorOptions { exact_below, ..options };
        let eviction = evict(&path);
        let rss_before = status_mb("VmRSS");
        let t = Instant::now();
        let view = VectorIndex::view(&path, meta.clone(), opts)?;
        let open_cold_s = t.elapsed().as_secs_f64();
        let (cold, _) = run_queries(&view, &queries[..first * args.dims], args.dims)?;
        let resident_after_cold_pct = resident_pct(&path).ok();
        let (warm, _) = run_queries(&view, &queries[..first * args.dims], args.dims)?;
        let t = Instant::now();
        drop(VectorIndex::view(&path, meta.clone(), opts)?);
        let open_warm_s = t.elapsed().as_secs_f64();
        let (times, hits) = run_queries(&view, queries, args.dims)?;
        let rss_growth_mb = rss_before.zip(status_mb("VmRSS")).map(|(a, b)| b - a);
        drop(view);
        let total: f64 = times.iter().sum();
        let s = sorted(times);
        modes.push(ModeResult {
            mode,
            eviction,
            open_cold_s,
            open_warm_s,
            cold_first_query_s: cold.first().copied().unwrap_or(0.0),
            cold_first_100_s: cold.iter().sum(),
            warm_first_query_s: warm.first().copied().unwrap_or(0.0),
            warm_first_100_s: warm.iter().sum(),
            resident_after_cold_pct,
            queries: s.len(),
            qps: s.len() as f64 / total.max(f64::MIN_POSITIVE),
            p50_ms: 1e3 * percentile(&s, 50.0),
            p99_ms: 1e3 * percentile(&s, 99.0),
            mean_ms: 1e3 * total / s.len().max(1) as f64,
            recall_at_10: f64::NAN, // filled in against the f32 truth
            rss_growth_mb,
        });
        hits_of.push(hits);
    }
    let hnsw = hits_of.pop().unwrap_or_default();
    let exact = hits_of.pop().unwrap_or_default();
    let run = RunResult {
        n,
        quantization: quantization_name(q),
        build_s,
        build_vectors_per_s: n as f64 / build_s.max(f64::MIN_POSITIVE),
        save_s,
        file_bytes: meta.file_bytes,
        rss_growth_build_mb,
        modes,
    };
    Ok((run, [exact, hnsw]))
}

pub fn run(g: &GlobalArgs, args: VectorsArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.dims > 0 && args.queries > 0 && args.topics > 0, "--dims, --queries and --topics must be positive");
    anyhow::ensure!(args.n.iter().all(|&n| n > 0), "every --n must be positive");
    let defaults = VectorOptions::default();
    let base = VectorOptions {
        connectivity: args.connectivity.unwrap_or(defaults.connectivity),
        expansion_add: args.expansion_add.unwrap_or(defaults.expansion_add),
        expansion_search: args.expansion_search.unwrap_or(defaults.expansion_search),
        ..defaults
    };
    // The f32 run comes first in each size: its exact search is the ground truth of them all.
    let mut quants = vec![Quantization::F32];
    if !args.quantization.contains(&Quantization::F32) {
        eprintln!("note: f32 is measured too; its exact search is the ground truth for recall");
    }
    for q in &args.quantization {
        if !quants.contains(q) {
            quants.push(*q);
        }
    }
    let scratch = Scratch::new(args.dir.clone())?;
    let mix = Mixture::new(args.dims, args.topics, args.seed);
    let queries = mix.points(QUERIES, 0, args.queries);

    let mut runs = Vec::new();
    let mut truth_cosine = Vec::new();
    for &n in &args.n {
        let mut truth: Vec<Vec<u64>> = Vec::new();
        for &q in &quants {
            let options = VectorOptions { quantization: q, ..base };
            let (mut run, [exact, hnsw]) = measure(&args, &mix, &queries, options, n, &scratch)?;
            if q == Quantization::F32 {
                truth = ids(&exact);
                let mean = |rank: usize| {
                    let v: Vec<f64> = exact.iter().filter_map(|h| h.get(rank)).map(|(_, s)| f64::from(*s)).collect();
                    v.iter().sum::<f64>() / v.len().max(1) as f64
                };
                truth_cosine.push(TruthCosine { n, nearest: mean(0), tenth: mean(K.min(n) - 1) });
            }
            run.modes[0].recall_at_10 = recall(&truth, &ids(&exact));
            run.modes[1].recall_at_10 = recall(&truth, &ids(&hnsw));
            runs.push(run);
        }
    }
    drop(scratch);

    let report = Report {
        bench: "vectors",
        data: format!(
            "synthetic: {}-topic mixture on the unit sphere, each topic spread along {TOPIC_RANK} directions of its own, plus isotropic noise",
            args.topics
        ),
        dims: args.dims,
        topics: args.topics,
        seed: args.seed,
        queries: args.queries,
        first_queries: FIRST.min(args.queries),
        k: K,
        build_threads: rayon::current_num_threads(),
        search_threads: 1,
        connectivity: base.connectivity,
        expansion_add: base.expansion_add,
        expansion_search: base.expansion_search,
        ground_truth: "exact search on the f32 index",
        truth_cosine,
        runs,
        peak_rss_mb: status_mb("VmHWM"),
    };
    if g.json {
        return print_json(&report);
    }
    print_table(&report);
    Ok(())
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

fn opt(v: Option<f64>, precision: usize) -> String {
    v.map_or_else(|| "?".into(), |x| format!("{x:.precision$}"))
}

fn print_table(r: &Report) {
    println!(
        "vector search: {} queries (not in the index), {}-d, k = {}; {}",
        r.queries, r.dims, r.k, r.data
    );
    println!(
        "HNSW connectivity {}, expansion_add {}, expansion_search {}; build on {} threads, search on 1; recall@10 against {}",
        r.connectivity, r.expansion_add, r.expansion_search, r.build_threads, r.ground_truth
    );
    for t in &r.truth_cosine {
        println!("n = {}: mean cosine of the nearest point {:.3}, of the 10th {:.3}", t.n, t.nearest, t.tenth);
    }
    println!();
    println!("{:>9} {:>5} {:>9} {:>11} {:>8} {:>10} {:>11}", "n", "quant", "build s", "vectors/s", "save s", "file MiB", "build RSS+");
    for run in &r.runs {
        println!(
            "{:>9} {:>5} {:>9.2} {:>11.0} {:>8.3} {:>10.1} {:>11}",
            run.n,
            run.quantization,
            run.build_s,
            run.build_vectors_per_s,
            run.save_s,
            mib(run.file_bytes),
            opt(run.rss_growth_build_mb, 1)
        );
    }
    println!();
    println!(
        "{:>9} {:>5} {:>6} {:>9} {:>8} {:>8} {:>9} | {:>21} {:>22} {:>21} {:>9}",
        "n",
        "quant",
        "search",
        "qps",
        "p50 ms",
        "p99 ms",
        "recall@10",
        "open ms cold / warm",
        "1st query ms cold/warm",
        format!("{} queries ms c/w", r.first_queries),
        "cached %"
    );
    let mut notes = Vec::new();
    for run in &r.runs {
        for m in &run.modes {
            let flag = if m.eviction.evicted { "" } else { "*" };
            println!(
                "{:>9} {:>5} {:>6} {:>9.1} {:>8.3} {:>8.3} {:>9.4} | {:>10.2} / {:>8.2} {:>11.3} / {:>8.3} {:>10.1} / {:>8.1} {:>9}{flag}",
                run.n,
                run.quantization,
                m.mode,
                m.qps,
                m.p50_ms,
                m.p99_ms,
                m.recall_at_10,
                1e3 * m.open_cold_s,
                1e3 * m.open_warm_s,
                1e3 * m.cold_first_query_s,
                1e3 * m.warm_first_query_s,
                1e3 * m.cold_first_100_s,
                1e3 * m.warm_first_100_s,
                opt(m.resident_after_cold_pct, 0),
            );
            if !m.eviction.evicted {
                notes.push(format!("* n = {}, {} {}: {}", run.n, run.quantization, m.mode, m.eviction.note));
            }
        }
    }
    println!("(cached %: share of the file in the page cache after the cold open and first {} queries)", r.first_queries);
    if notes.is_empty() {
        println!("cold: every file was evicted from the page cache before its cold open (checked with mincore)");
    }
    for n in notes {
        println!("{n}");
    }
    println!("peak RSS {} MiB", opt(r.peak_rss_mb, 0));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recall_counts_shared_neighbours() {
        let truth = vec![vec![1, 2, 3, 4], vec![5, 6]];
        assert_eq!(recall(&truth, &truth), 1.0);
        let found = vec![vec![4, 3, 9, 8], vec![6, 7]];
        assert!((recall(&truth, &found) - 0.5).abs() < 1e-12, "order does not matter");
        assert_eq!(recall(&truth, &[vec![], vec![]]), 0.0);
        assert_eq!(recall(&[], &[]), 0.0);
    }

    #[test]
    fn mixture_points_are_unit_deterministic_and_clustered() {
        let mix = Mixture::new(64, 4, 1);
        let a = mix.points(CORPUS, 10, 3);
        let mut one = vec![0f32; 64];
        mix.point(CORPUS, 11, &mut one);
        assert_eq!(&a[64..128], &one[..], "a point does not depend on its chunk");
        assert_ne!(mix.points(QUERIES, 10, 1), mix.points(CORPUS, 10, 1), "queries are another stream");
        for v in a.chunks(64) {
            assert!((v.iter().map(|x| x * x).sum::<f32>() - 1.0).abs() < 1e-5);
        }
        // Points lie near their topic's centre: cosine to the best centre well above chance.
        let best = |v: &[f32]| {
            mix.centres.chunks(64).map(|c| c.iter().zip(v).map(|(x, y)| x * y).sum::<f32>()).fold(f32::MIN, f32::max)
        };
        assert!(a.chunks(64).all(|v| best(v) > 0.4));
    }

    #[test]
    fn quantization_names_round_trip() {
        for q in [Quantization::F32, Quantization::F16, Quantization::I8] {
            assert_eq!(parse_quantization(quantization_name(q)), Ok(q));
        }
        assert!(parse_quantization("f64").is_err());
    }
}
