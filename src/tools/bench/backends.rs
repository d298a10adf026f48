//! `ragbox bench backends`: the index backends side by side in one run, the local files
//! (usearch, tantivy) against the shared servers (Milvus, PostgreSQL BM25) of `[store.shared]`,
//! on the same synthetic tenant: what opening a reader at the catalog's generation and the two
//! first-stage searches of every `search` and `ask` (dense and BM25, 100 candidates each) cost,
//! p50 and p99 over the same queries, plus the time to build each index and how far Milvus's
//! HNSW top 10 strays from the local index's.
//!
//! The tenant is synthetic and deterministic: `--chunks` texts of 40-80 words drawn (Zipf-like)
//! from a 20,000-word vocabulary, each with a random unit vector of `--dims` near one of 200
//! topic centres; queries are five words of a chunk and that chunk's vector plus noise. Embedding
//! and reranking cost the same on either backend and are left out. The bench tenant
//! (`bench-backends`) is dropped from both backends at the end.

use std::time::Instant;

use clap::Args;
use serde::Serialize;

use ragbox_core::store::{Backends, Committed, Layout, TenantRow, VectorOptions};
use ragbox_core::types::{ChunkId, DocId};
use ragbox_eval::metrics::percentile;
use ragbox_service::config::StoreBackend;

use super::{sorted, SeededRng};
use ragbox_cli::{print_json, GlobalArgs};

/// Candidates each first-stage search asks for, as `retrieve.dense_candidates` does.
const K: usize = 100;
/// Chunks handed to a writer at a time.
const BATCH: usize = 5_000;
const VOCABULARY: usize = 20_000;
const TOPICS: usize = 200;

/// Options of `ragbox bench backends`.
#[derive(Debug, Args)]
pub struct BackendsArgs {
    /// Chunks in the synthetic tenant.
    #[arg(long, default_value_t = 100_000)]
    chunks: usize,
    /// Vector width.
    #[arg(long, default_value_t = 384)]
    dims: usize,
    /// Queries timed on each backend.
    #[arg(long, default_value_t = 200)]
    queries: usize,
    /// Seed of the synthetic data.
    #[arg(long, default_value_t = 7)]
    seed: u64,
}

#[derive(Debug, Serialize)]
struct Side {
    backend: String,
    build_s: f64,
    open_p50_ms: f64,
    open_p99_ms: f64,
    dense_p50_ms: f64,
    dense_p99_ms: f64,
    lexical_p50_ms: f64,
    lexical_p99_ms: f64,
    total_p50_ms: f64,
    total_p99_ms: f64,
}

#[derive(Debug, Serialize)]
struct Report {
    chunks: usize,
    dims: usize,
    queries: usize,
    sides: Vec<Side>,
    /// Mean share of the local dense top 10 that the shared dense top 10 also holds.
    dense_top10_agreement: f64,
    /// Mean share of the local BM25 top 10 that the shared BM25 top 10 also holds.
    lexical_top10_agreement: f64,
    /// The shared p50 over the local p50, for the open and both searches together.
    total_p50_ratio: f64,
}

fn word(i: usize) -> String {
    // Pronounceable, distinct, stemmer-stable words: consonant-vowel pairs in base 100.
    const SYLLABLES: [&str; 10] = ["ka", "lo", "mi", "nu", "pe", "ra", "so", "ti", "vu", "ze"];
    let mut n = i + 1;
    let mut w = String::new();
    while n > 0 {
        w.push_str(SYLLABLES[n % 10]);
        n /= 10;
    }
    w.push('x');
    w
}

fn text(rng: &mut SeededRng) -> String {
    let len = 40 + (rng.uniform() * 40.0) as usize;
    (0..len).map(|_| word(((VOCABULARY as f64).powf(rng.uniform()) as usize).min(VOCABULARY - 1))).collect::<Vec<_>>().join(" ")
}

fn unit(v: &mut [f32]) {
    let n = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-12);
    v.iter_mut().for_each(|x| *x /= n);
}

fn vector(seed: u64, i: u64, dims: usize, centres: &[Vec<f32>]) -> Vec<f32> {
    let mut rng = SeededRng::for_item(seed, 1, i);
    let centre = &centres[(rng.uniform() * TOPICS as f64) as usize % TOPICS];
    let mut v = vec![0f32; dims];
    rng.fill_normal(&mut v);
    for (x, c) in v.iter_mut().zip(centre) {
        *x = c + 0.08 * *x;
    }
    unit(&mut v);
    v
}

/// `ragbox bench backends`.
pub fn run(g: &GlobalArgs, args: BackendsArgs) -> anyhow::Result<()> {
    let config = g.config()?;
    let dims = args.dims;
    let centres: Vec<Vec<f32>> = (0..TOPICS as u64)
        .map(|t| {
            let mut v = vec![0f32; dims];
            SeededRng::for_item(args.seed, 2, t).fill_normal(&mut v);
            unit(&mut v);
            v
        })
        .collect();
    let tenant = TenantRow { id: 1, name: "bench-backends".into(), model: "bench".into(), dims, generation: 1 };
    let scratch = std::env::temp_dir().join(format!("ragbox-bench-backends-{}", std::process::id()));
    let sides = [
        ("local", Backends::local(&Layout::new(&scratch), VectorOptions::default())),
        ("shared", config.store.backends(StoreBackend::Shared, &config.data_dir)?),
    ];
    // The queries: five words of a chunk, and its vector with noise.
    let queries: Vec<(String, Vec<f32>)> = (0..args.queries as u64)
        .map(|q| {
            let i = (SeededRng::for_item(args.seed, 3, q).uniform() * args.chunks as f64) as u64;
            let words: Vec<String> = text(&mut SeededRng::for_item(args.seed, 0, i)).split(' ').take(5).map(String::from).collect();
            let mut v = vector(args.seed, i, dims, &centres);
            let mut noise = vec![0f32; dims];
            SeededRng::for_item(args.seed, 4, q).fill_normal(&mut noise);
            v.iter_mut().zip(&noise).for_each(|(x, n)| *x += 0.02 * n);
            unit(&mut v);
            (words.join(" "), v)
        })
        .collect();

    let mut results = Vec::new();
    let mut tops: Vec<Vec<(Vec<ChunkId>, Vec<ChunkId>)>> = Vec::new();
    for (name, backends) in &sides {
        eprintln!("[bench backends] building {} chunks on {name}: {} / {}", args.chunks, backends.vectors.describe(), backends.lexical.describe());
        backends.vectors.drop_tenant(&tenant)?;
        backends.lexical.drop_tenant(&tenant)?;
        let started = Instant::now();
        let mut vw = backends.vectors.writer(&tenant, &tenant.model, dims, true)?;
        let mut lw = backends.lexical.writer(&tenant, true)?;
        for start in (0..args.chunks).step_by(BATCH) {
            let end = (start + BATCH).min(args.chunks);
            let vectors: Vec<(ChunkId, Vec<f32>)> = (start..end).map(|i| (ChunkId(i as u64 + 1), vector(args.seed, i as u64, dims, &centres))).collect();
            vw.upsert(&vectors.iter().map(|(id, v)| (*id, v.as_slice())).collect::<Vec<_>>())?;
            for i in start..end {
                lw.add(ChunkId(i as u64 + 1), DocId(i as u64 / 10 + 1), &text(&mut SeededRng::for_item(args.seed, 0, i as u64)))?;
            }
        }
        vw.commit(tenant.generation)?;
        lw.commit(tenant.generation)?;
        drop(vw);
        let build_s = started.elapsed().as_secs_f64();
        anyhow::ensure!(backends.vectors.committed(&tenant, &tenant.model, dims)? == Committed::At(1), "the {name} vector index did not commit");

        let (mut open, mut dense, mut lexical, mut total) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let mut top = Vec::new();
        for (i, (words, v)) in queries.iter().enumerate() {
            let t0 = Instant::now();
            let vr = backends.vectors.reader_at(&tenant, &tenant.model, dims, tenant.generation)?.ok_or_else(|| anyhow::anyhow!("no {name} vector reader at generation 1"))?;
            let lr = backends.lexical.reader_at(&tenant, tenant.generation)?.ok_or_else(|| anyhow::anyhow!("no {name} lexical reader at generation 1"))?;
            let t1 = Instant::now();
            let d = vr.search(v, K)?;
            let t2 = Instant::now();
            let l = lr.search(words, K)?;
            let t3 = Instant::now();
            // The first few queries warm caches and connections on both sides; they are not timed.
            if i >= 5 {
                open.push((t1 - t0).as_secs_f64() * 1e3);
                dense.push((t2 - t1).as_secs_f64() * 1e3);
                lexical.push((t3 - t2).as_secs_f64() * 1e3);
                total.push((t3 - t0).as_secs_f64() * 1e3);
            }
            top.push((d.iter().take(10).map(|h| h.0).collect(), l.iter().take(10).map(|h| h.0).collect()));
        }
        tops.push(top);
        let (open, dense, lexical, total) = (sorted(open), sorted(dense), sorted(lexical), sorted(total));
        results.push(Side {
            backend: format!("{name}: {} / {}", backends.vectors.describe(), backends.lexical.describe()),
            build_s,
            open_p50_ms: percentile(&open, 50.0),
            open_p99_ms: percentile(&open, 99.0),
            dense_p50_ms: percentile(&dense, 50.0),
            dense_p99_ms: percentile(&dense, 99.0),
            lexical_p50_ms: percentile(&lexical, 50.0),
            lexical_p99_ms: percentile(&lexical, 99.0),
            total_p50_ms: percentile(&total, 50.0),
            total_p99_ms: percentile(&total, 99.0),
        });
        backends.vectors.drop_tenant(&tenant)?;
        backends.lexical.drop_tenant(&tenant)?;
    }
    let _ = std::fs::remove_dir_all(&scratch);
    let agreement = |pick: fn(&(Vec<ChunkId>, Vec<ChunkId>)) -> &Vec<ChunkId>| {
        let shares: Vec<f64> = tops[0]
            .iter()
            .zip(&tops[1])
            .map(|(a, b)| {
                let (a, b) = (pick(a), pick(b));
                if a.is_empty() {
                    1.0
                } else {
                    a.iter().filter(|x| b.contains(x)).count() as f64 / a.len() as f64
                }
            })
            .collect();
        shares.iter().sum::<f64>() / shares.len().max(1) as f64
    };
    let report = Report {
        chunks: args.chunks,
        dims,
        queries: args.queries,
        dense_top10_agreement: agreement(|t| &t.0),
        lexical_top10_agreement: agreement(|t| &t.1),
        total_p50_ratio: results[1].total_p50_ms / results[0].total_p50_ms.max(1e-9),
        sides: results,
    };
    if g.json {
        print_json(&report)?;
        return Ok(());
    }
    println!("{} chunks, {} dims, {} queries (k = {K}), one run:", report.chunks, report.dims, report.queries);
    println!("{:<8} {:>9} {:>17} {:>17} {:>17} {:>17}", "", "build s", "open p50/p99 ms", "dense p50/p99", "bm25 p50/p99", "total p50/p99");
    for s in &report.sides {
        println!(
            "{:<8} {:>9.1} {:>8.2}/{:<8.2} {:>8.2}/{:<8.2} {:>8.2}/{:<8.2} {:>8.2}/{:<8.2}",
            s.backend.split(':').next().unwrap_or(""),
            s.build_s,
            s.open_p50_ms,
            s.open_p99_ms,
            s.dense_p50_ms,
            s.dense_p99_ms,
            s.lexical_p50_ms,
            s.lexical_p99_ms,
            s.total_p50_ms,
            s.total_p99_ms
        );
    }
    for s in &report.sides {
        println!("  {}", s.backend);
    }
    println!(
        "shared / local total p50: {:.2}x; top-10 agreement with local: dense {:.3}, BM25 {:.3}",
        report.total_p50_ratio, report.dense_top10_agreement, report.lexical_top10_agreement
    );
    Ok(())
}
