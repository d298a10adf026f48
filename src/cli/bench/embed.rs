//! `ragbox bench embed --data DIR`: embedding throughput on a BEIR corpus (title + " " + text per
//! document), with peak memory. The figures go to docs/BENCHMARKS.md beside the Python baseline
//! (`scripts/bench-embed-baseline.sh` runs both in one go).

use std::io::BufRead;
use std::path::PathBuf;
use std::time::Instant;

use clap::Args;
use serde::Serialize;

use ragbox::types::TextKind;

use crate::cli::{print_json, GlobalArgs};

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
        .map_err(|e| ragbox::Error::Invalid(format!("{}: {e}; --data must be a BEIR folder with corpus.jsonl", path.display())))?;
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

pub fn run(g: &GlobalArgs, args: EmbedArgs) -> anyhow::Result<()> {
    let EmbedArgs { data, model, limit, batch_size, threads } = args;
    if let Some(n) = threads {
        // candle's matmuls read RAYON_NUM_THREADS on every call; rayon's pool reads it once.
        std::env::set_var("RAYON_NUM_THREADS", n.to_string());
        let _ = rayon::ThreadPoolBuilder::new().num_threads(n).build_global();
    }
    let mut config = g.config()?;
    if let Some(b) = batch_size {
        config.embed.batch_size = b;
    }
    let app = ragbox::app::App::new(config)?;
    let embedder = app.embedder(model.as_deref())?;
    let texts = read_beir_corpus(&data, limit)?;
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    // Warm-up: page the weights in and let the allocator settle.
    embedder.embed(&refs[..refs.len().min(16)], TextKind::Passage)?;
    let start = Instant::now();
    let out = embedder.embed(&refs, TextKind::Passage)?;
    let seconds = start.elapsed().as_secs_f64();
    let tokens: usize = out.iter().map(|e| e.tokens).sum();
    let result = EmbedBench {
        implementation: "ragbox",
        model: embedder.model_id().to_string(),
        device: ragbox::model::device::describe(app.device()),
        precision: ragbox::model::precision::describe(app.config.embed.precision, app.device()),
        texts: out.len(),
        tokens,
        truncated: out.iter().filter(|e| e.truncated_from.is_some()).count(),
        seconds,
        chunks_per_s: out.len() as f64 / seconds,
        tokens_per_s: tokens as f64 / seconds,
        peak_rss_mb: peak_rss_mb(),
        threads: threads.unwrap_or_else(rayon::current_num_threads),
        batch_size: app.config.embed.batch_size,
    };
    if g.json {
        return print_json(&result);
    }
    println!(
        "{} [{}]: {} texts, {} tokens in {:.2} s: {:.1} texts/s, {:.0} tokens/s, peak RSS {:.0} MiB ({} truncated)",
        result.model, result.precision, result.texts, result.tokens, result.seconds, result.chunks_per_s, result.tokens_per_s, result.peak_rss_mb, result.truncated
    );
    Ok(())
}
