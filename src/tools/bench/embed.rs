//! `ragbox bench embed --data DIR`: embedding throughput on a BEIR corpus (title + " " + text per
//! document), with peak memory, then the latency of embedding its queries one at a time (what a
//! search waits for). The figures go to docs/BENCHMARKS.md beside the Python baseline
//! (`scripts/bench/embed-baseline.sh` runs both in one go).

use std::io::BufRead;
use std::path::PathBuf;
use std::time::Instant;

use clap::Args;
use serde::Serialize;

use ragbox_eval::metrics::percentile;
use ragbox_core::types::TextKind;

use ragbox_cli::{print_json, GlobalArgs};

/// Options of `ragbox bench embed`.
#[derive(Debug, Args)]
pub struct EmbedArgs {
    /// BEIR folder holding corpus.jsonl.
    #[arg(long)]
    data: PathBuf,
    /// Embedding model (default: the configured one).
    #[arg(long)]
    model: Option<String>,
    /// Only the first N documents.
    #[arg(long)]
    limit: Option<usize>,
    /// Texts per batch (default: the configured one).
    #[arg(long)]
    batch_size: Option<usize>,
    /// Worker threads (default: all cores).
    #[arg(long)]
    threads: Option<usize>,
    /// Then embed the first N queries of queries.jsonl one at a time, for query latency (0: skip).
    #[arg(long, default_value_t = 100)]
    queries: usize,
}

#[derive(Serialize)]
struct EmbedBench {
    #[serde(rename = "impl")]
    implementation: &'static str,
    model: String,
    device: String,
    /// What ran: the precision and its kernel (`model::precision::describe`).
    precision: String,
    texts: usize,
    tokens: usize,
    truncated: usize,
    seconds: f64,
    chunks_per_s: f64,
    tokens_per_s: f64,
    peak_rss_mb: f64,
    threads: usize,
    batch_size: usize,
    /// Queries embedded one at a time, and their latency percentiles in milliseconds.
    queries: usize,
    query_p50_ms: f64,
    query_p95_ms: f64,
}

/// Peak resident set size of this process in MiB (Linux `VmHWM`).
pub fn peak_rss_mb() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("VmHWM:")).map(str::to_owned))
        .and_then(|l| l.split_whitespace().nth(1).and_then(|kb| kb.parse::<f64>().ok()))
        .map_or(0.0, |kb| kb / 1024.0)
}

fn read_beir_corpus(dir: &std::path::Path, limit: Option<usize>) -> anyhow::Result<Vec<String>> {
    let path = dir.join("corpus.jsonl");
    let file = std::fs::File::open(&path)
        .map_err(|e| ragbox_core::Error::Invalid(format!("{}: {e}; --data must be a BEIR folder with corpus.jsonl", path.display())))?;
    let mut texts = Vec::new();
    for line in std::io::BufReader::new(file).lines() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        let doc: serde_json::Value = serde_json::from_str(&line)?;
        let title = doc["title"].as_str().unwrap_or("");
        let text = doc["text"].as_str().unwrap_or("");
        texts.push(format!("{title} {text}").trim().to_string());
        if limit.is_some_and(|n| texts.len() >= n) {
            break;
        }
    }
    texts.retain(|t| !t.is_empty());
    Ok(texts)
}

fn read_beir_queries(dir: &std::path::Path, limit: usize) -> anyhow::Result<Vec<String>> {
    let path = dir.join("queries.jsonl");
    let file = std::fs::File::open(&path)
        .map_err(|e| ragbox_core::Error::Invalid(format!("{}: {e}; pass --queries 0 to time passages only", path.display())))?;
    let mut queries = Vec::new();
    for line in std::io::BufReader::new(file).lines().take(limit) {
        let line = line?;
        let query: serde_json::Value = serde_json::from_str(&line)?;
        queries.extend(query["text"].as_str().map(str::trim).filter(|t| !t.is_empty()).map(str::to_owned));
    }
    Ok(queries)
}

pub fn run(g: &GlobalArgs, args: EmbedArgs) -> anyhow::Result<()> {
    let EmbedArgs { data, model, limit, batch_size, threads, queries } = args;
    if let Some(n) = threads {
        // candle's matmuls read RAYON_NUM_THREADS on every call; rayon's pool reads it once.
        std::env::set_var("RAYON_NUM_THREADS", n.to_string());
        let _ = rayon::ThreadPoolBuilder::new().num_threads(n).build_global();
    }
    let mut config = g.config()?;
    if let Some(b) = batch_size {
        config.embed.batch_size = b;
    }
    let app = ragbox_core::app::App::new(config)?;
    let embedder = app.embedder(model.as_deref())?;
    let texts = read_beir_corpus(&data, limit)?;
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    // Warm-up: page the weights in and let the allocator settle.
    embedder.embed(&refs[..refs.len().min(16)], TextKind::Passage)?;
    let start = Instant::now();
    let out = embedder.embed(&refs, TextKind::Passage)?;
    let seconds = start.elapsed().as_secs_f64();
    let tokens: usize = out.iter().map(|e| e.tokens).sum();
    let queries = read_beir_queries(&data, queries)?;
    let mut latencies = Vec::with_capacity(queries.len());
    for q in &queries {
        let t = Instant::now();
        embedder.embed_one(q, TextKind::Query)?;
        latencies.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    latencies.sort_by(f64::total_cmp);
    // What ran, from the vectors' identity (`auto` resolves per model).
    let ran_at = ragbox_core::model::Precision::split_identity(embedder.model_id())?.1.unwrap_or(ragbox_core::model::Precision::F32);
    let result = EmbedBench {
        implementation: "ragbox",
        model: embedder.model_id().to_string(),
        device: ragbox_core::model::device::describe(app.device()),
        precision: ragbox_core::model::precision::describe(ran_at, app.device()),
        texts: out.len(),
        tokens,
        truncated: out.iter().filter(|e| e.truncated_from.is_some()).count(),
        seconds,
        chunks_per_s: out.len() as f64 / seconds,
        tokens_per_s: tokens as f64 / seconds,
        peak_rss_mb: peak_rss_mb(),
        threads: threads.unwrap_or_else(rayon::current_num_threads),
        batch_size: app.config.embed.batch_size,
        queries: latencies.len(),
        query_p50_ms: percentile(&latencies, 50.0),
        query_p95_ms: percentile(&latencies, 95.0),
    };
    if g.json {
        return print_json(&result);
    }
    println!(
        "{} [{}]: {} texts, {} tokens in {:.2} s: {:.1} texts/s, {:.0} tokens/s, peak RSS {:.0} MiB ({} truncated)",
        result.model, result.precision, result.texts, result.tokens, result.seconds, result.chunks_per_s, result.tokens_per_s, result.peak_rss_mb, result.truncated
    );
    if result.queries > 0 {
        println!("{} queries one at a time: p50 {:.1} ms, p95 {:.1} ms", result.queries, result.query_p50_ms, result.query_p95_ms);
    }
    Ok(())
}
