//! `ragbox bench access`: what a permission filter costs inside retrieval. One tenant of `--n`
//! chunks, each readable by one of `--groups` groups, is searched by an asker of one group (who
//! reads 1/groups of it): the vector index (usearch HNSW above `exact_below`, as a tenant of that
//! size is searched) and BM25 (tantivy), each unfiltered and with the asker's filter inside the
//! search, one thread, the same queries, side by side. Reported per search: p50 and p95, the
//! filtered/unfiltered ratio of p50, the shortest list returned (a full top k is `k`), and for
//! the vectors the recall@k of the filtered HNSW list against an exact scan of what the asker may
//! read. `--open-share` makes a share of the chunks open to everyone (as most of a tenant's
//! documents usually are).
//!
//! Vectors come from the synthetic embedding-like mixture of `bench vectors`; texts are drawn
//! from a skewed vocabulary (a few words common, most rare), queries from the same vocabulary.

use std::sync::Arc;
use std::time::Instant;

use clap::Args;
use serde::Serialize;

use ragbox_core::access::{AccessMap, Audience};
use ragbox_core::store::{LexicalIndex, VectorIndex, VectorOptions};
use ragbox_core::types::{ChunkId, DocId};
use ragbox_eval::metrics::percentile;

use super::vectors::Mixture;
use super::{sorted, SeededRng};
use ragbox_cli::{print_json, GlobalArgs};

/// Options of `ragbox bench access`.
#[derive(Debug, Args)]
pub struct AccessArgs {
    /// Chunks in the tenant.
    #[arg(long, default_value_t = 100_000)]
    n: usize,
    /// Groups the chunks are spread over (round robin); the asker is in one.
    #[arg(long, default_value_t = 10)]
    groups: usize,
    /// Share of the chunks that are open to everyone (0: every chunk belongs to a group, the
    /// asker reads 1/groups of the tenant, the hardest case for a filter).
    #[arg(long, default_value_t = 0.0)]
    open_share: f64,
    /// Vector width.
    #[arg(long, default_value_t = 384)]
    dims: usize,
    /// Queries timed per search.
    #[arg(long, default_value_t = 300)]
    queries: usize,
    /// Hits asked for (retrieval's candidate lists are 100 deep by default).
    #[arg(long, default_value_t = 100)]
    k: usize,
    /// Seed of the synthetic data.
    #[arg(long, default_value_t = 7)]
    seed: u64,
}

/// One search, unfiltered and filtered.
#[derive(Debug, Serialize)]
struct Pair {
    unfiltered_p50_ms: f64,
    unfiltered_p95_ms: f64,
    filtered_p50_ms: f64,
    filtered_p95_ms: f64,
    /// filtered p50 / unfiltered p50.
    ratio_p50: f64,
    /// The shortest filtered list returned (`k`: every list full).
    shortest_filtered: usize,
    /// Filtered hits the asker may not read (must be 0).
    refused_served: usize,
    /// Recall@k of the filtered list against an exact scan of the readable chunks (vectors).
    recall: Option<f64>,
}

#[derive(Debug, Serialize)]
struct Report {
    n: usize,
    groups: usize,
    open_share: f64,
    readable_share: f64,
    dims: usize,
    k: usize,
    queries: usize,
    build_s: f64,
    threads: usize,
    vector: Pair,
    bm25: Pair,
}

fn ms(times: Vec<f64>) -> (f64, f64) {
    let s = sorted(times);
    (percentile(&s, 50.0) * 1e3, percentile(&s, 95.0) * 1e3)
}

/// A text of 12 to 40 words from a vocabulary of `VOCAB` words, word `w` drawn with density
/// ∝ 1/(w+1) (a Zipf-like skew).
fn text(rng: &mut SeededRng, vocab: usize) -> String {
    let words = 12 + (rng.uniform() * 28.0) as usize;
    (0..words).map(|_| format!("w{}", ((vocab as f64).powf(rng.uniform()) as usize).saturating_sub(1))).collect::<Vec<_>>().join(" ")
}

const VOCAB: usize = 20_000;

fn pair(unfiltered: Vec<f64>, filtered: Vec<f64>, shortest: usize, refused: usize, recall: Option<f64>) -> Pair {
    let (u50, u95) = ms(unfiltered);
    let (f50, f95) = ms(filtered);
    Pair {
        unfiltered_p50_ms: u50,
        unfiltered_p95_ms: u95,
        filtered_p50_ms: f50,
        filtered_p95_ms: f95,
        ratio_p50: f50 / u50.max(1e-9),
        shortest_filtered: shortest,
        refused_served: refused,
        recall,
    }
}

/// Runs the benchmark.
pub fn run(g: &GlobalArgs, a: AccessArgs) -> anyhow::Result<()> {
    anyhow::ensure!(a.n > 0 && a.groups > 0 && a.k > 0 && a.queries > 0, "--n, --groups, --k and --queries must be at least 1");
    anyhow::ensure!((0.0..1.0).contains(&a.open_share), "--open-share is a share: at least 0, below 1");
    // Chunk `id` is open when its seeded draw falls below the open share, else it belongs to
    // group `id % groups`.
    let open = |id: u64| SeededRng::for_item(a.seed, 4, id).uniform() < a.open_share;
    let group_of = |id: u64| format!("g{}", id % a.groups as u64);
    let started = Instant::now();
    eprintln!("building {} vectors ({} dims) and {} BM25 documents ...", a.n, a.dims, a.n);
    let mixture = Mixture::new(a.dims, 64, a.seed);
    let mut index = VectorIndex::create("bench", a.dims, VectorOptions { exact_below: 0, ..VectorOptions::default() })?;
    let lexical = LexicalIndex::in_memory();
    let mut writer = lexical.writer()?;
    let step = 20_000;
    for start in (0..a.n).step_by(step) {
        let count = step.min(a.n - start);
        let points = mixture.points(0, start, count);
        let items: Vec<(ChunkId, &[f32])> = points.chunks(a.dims).enumerate().map(|(j, v)| (ChunkId((start + j) as u64 + 1), v)).collect();
        index.add(&items)?;
        for j in 0..count {
            let id = (start + j) as u64 + 1;
            writer.add(ChunkId(id), DocId(id), &text(&mut SeededRng::for_item(a.seed, 2, id), VOCAB))?;
        }
        eprintln!("  {} / {}", start + count, a.n);
    }
    writer.commit(1)?;
    let searcher = lexical.searcher()?;
    let build_s = started.elapsed().as_secs_f64();

    let map = Arc::new(AccessMap::new(1, (1..=a.n as u64).filter(|id| !open(*id)).map(|id| (ChunkId(id), vec![group_of(id)]))));
    let asker = Audience::groups(["g0"]);
    let filter = map.filter(&asker).expect("a filter: some chunks are restricted");
    let readable = |id: u64| open(id) || id % a.groups as u64 == 0;

    let queries = mixture.points(1, 0, a.queries);
    let (mut unfiltered, mut filtered, mut shortest, mut refused, mut recall) = (Vec::new(), Vec::new(), usize::MAX, 0, 0.0);
    // The readable vectors, for the true filtered neighbours of each query.
    let readable_ids: Vec<u64> = (1..=a.n as u64).filter(|id| readable(*id)).collect();
    let readable_vectors = index.vectors(&readable_ids.iter().map(|id| ChunkId(*id)).collect::<Vec<_>>())?;
    for q in queries.chunks(a.dims) {
        let t = Instant::now();
        std::hint::black_box(index.search(q, a.k)?);
        unfiltered.push(t.elapsed().as_secs_f64());
        let t = Instant::now();
        let hits = index.search_filtered(q, a.k, Some(&filter))?;
        filtered.push(t.elapsed().as_secs_f64());
        shortest = shortest.min(hits.len());
        refused += hits.iter().filter(|h| !readable(h.0 .0)).count();
        // The true filtered neighbours: every readable vector scored.
        let mut truth: Vec<(u64, f32)> = readable_ids
            .iter()
            .zip(&readable_vectors)
            .filter_map(|(id, v)| v.as_ref().map(|v| (*id, v.iter().zip(q).map(|(x, y)| x * y).sum::<f32>())))
            .collect();
        truth.sort_by(|x, y| y.1.total_cmp(&x.1));
        let want: std::collections::HashSet<u64> = truth.iter().take(a.k).map(|(id, _)| *id).collect();
        recall += hits.iter().filter(|h| want.contains(&h.0 .0)).count() as f64 / want.len().max(1) as f64;
    }
    let vector = pair(unfiltered, filtered, shortest, refused, Some(recall / a.queries as f64));

    let (mut unfiltered, mut filtered, mut shortest, mut refused) = (Vec::new(), Vec::new(), usize::MAX, 0);
    for i in 0..a.queries {
        let q = text(&mut SeededRng::for_item(a.seed, 3, i as u64), VOCAB / 4).split(' ').take(6).collect::<Vec<_>>().join(" ");
        let t = Instant::now();
        std::hint::black_box(searcher.search(&q, a.k)?);
        unfiltered.push(t.elapsed().as_secs_f64());
        let t = Instant::now();
        let hits = searcher.search_filtered(&q, a.k, Some(&filter))?;
        filtered.push(t.elapsed().as_secs_f64());
        shortest = shortest.min(hits.len());
        refused += hits.iter().filter(|h| !readable(h.0 .0)).count();
    }
    let bm25 = pair(unfiltered, filtered, shortest, refused, None);

    let report = Report {
        n: a.n,
        groups: a.groups,
        open_share: a.open_share,
        readable_share: readable_ids.len() as f64 / a.n as f64,
        dims: a.dims,
        k: a.k,
        queries: a.queries,
        build_s,
        threads: 1,
        vector,
        bm25,
    };
    if g.json {
        return print_json(&report);
    }
    println!(
        "{} chunks, {:.0}% open and the rest in {} groups; the asker (one group) reads {:.0}%; k = {}, {} queries, one thread (built in {:.0} s)",
        report.n,
        report.open_share * 100.0,
        report.groups,
        report.readable_share * 100.0,
        report.k,
        report.queries,
        report.build_s
    );
    println!("{:<8} {:>14} {:>14} {:>14} {:>14} {:>7} {:>9} {:>8} {:>7}", "search", "unfiltered p50", "unfiltered p95", "filtered p50", "filtered p95", "ratio", "shortest", "refused", "recall");
    for (name, p) in [("vector", &report.vector), ("bm25", &report.bm25)] {
        println!(
            "{:<8} {:>11.3} ms {:>11.3} ms {:>11.3} ms {:>11.3} ms {:>6.2}x {:>9} {:>8} {:>7}",
            name,
            p.unfiltered_p50_ms,
            p.unfiltered_p95_ms,
            p.filtered_p50_ms,
            p.filtered_p95_ms,
            p.ratio_p50,
            p.shortest_filtered,
            p.refused_served,
            p.recall.map_or("-".into(), |r| format!("{r:.3}"))
        );
    }
    Ok(())
}
