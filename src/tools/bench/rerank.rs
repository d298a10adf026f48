//! `ragbox bench rerank`: latency of the cross-encoder stage, one query against `--candidates`
//! passages, at the real ms-marco-MiniLM-L-6-v2 shape (6 layers, 384 wide, 12 heads, its
//! tokenizer) through the public [`CrossEncoder`] API.
//!
//! Its weights are not on every machine, and latency does not depend on their values, so the
//! bench writes seeded random weights of exactly that architecture to a temporary safetensors
//! file: the tensor names come from running ragbox's own loaders over a `VarMap`, so they are the
//! ones `CrossEncoder::from_files` reads. The scores are meaningless; the output says so.
//! Passages are deterministic English-like text cut to `--passage-tokens` word pieces.
//!
//! With `--inputs FILE` it times the configured reranker itself, from the models folder, on the
//! (query, passages) lists `scripts/bench/rerank-baseline.py --write-inputs` wrote, so the same
//! pairs can be timed with onnxruntime side by side.

use std::path::{Path, PathBuf};
use std::time::Instant;

use candle_core::{DType, Device, Tensor};
use candle_nn::{VarBuilder, VarMap};
use clap::Args;
use serde::Serialize;

use ragbox_core::model::batch::BatchLimits;
use ragbox_core::model::bert::BertBody;
use ragbox_core::model::TextTokenizer;
use ragbox_core::rerank::{CrossEncoder, RerankOptions, Reranker};

use ragbox_eval::metrics::percentile;

use super::{sorted, status_mb, SeededRng};
use ragbox_cli::{print_json, GlobalArgs};

/// The architecture measured; its config and tokenizer are checked in (no weights).
const ARCHITECTURE: &str = "ms-marco-MiniLM-L-6-v2";
const DEFAULT_CONFIG_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/ms-marco-MiniLM-L-6-v2-config");
/// Its `max_tokens` in models/manifest.toml.
const MAX_TOKENS: usize = 512;
/// Standard deviation of the random weight matrices (the config's `initializer_range`).
const WEIGHT_STD: f32 = 0.02;
/// Data stream of [`SeededRng::for_item`] for weights.
const WEIGHTS: u64 = 2;

const QUERY: &str = "how does an offline appliance keep its answers grounded in the source documents";

/// Cycled to make passages; plain English so word pieces are as in real text.
const PARAGRAPH: &str = "The appliance reads every document in the folder, splits it into \
passages that keep their byte offsets, and stores each passage twice: once as a vector for \
meaning and once in a full-text index for exact words. When a question arrives, both indexes are \
searched, the two rankings are fused by rank, and a cross-encoder reads the question beside each \
candidate passage to score how well the passage answers it. Only the best passages reach the \
language model, which must cite them; claims it cannot tie to a passage are flagged. Nothing \
leaves the machine, so the whole pipeline has to be fast on an ordinary processor, and the \
reranking step, which runs a full transformer over every pair, is usually the slowest part of a \
query after generation itself. Measuring it at the real model's shape tells us how many \
candidates we can afford.";

/// Options of `ragbox bench rerank`.
#[derive(Debug, Args)]
pub struct RerankArgs {
    /// Passages scored per query.
    #[arg(long, default_value_t = 50)]
    candidates: usize,
    /// Timed queries (after one warm-up).
    #[arg(long, default_value_t = 20)]
    runs: usize,
    /// Word pieces per passage.
    #[arg(long, default_value_t = 256)]
    passage_tokens: usize,
    /// Pairs per batch (default: the configured `[rerank] batch_size`).
    #[arg(long)]
    batch: Option<usize>,
    /// Worker threads (default: all cores).
    #[arg(long)]
    threads: Option<usize>,
    /// Folder with the architecture's config.json and tokenizer.json.
    #[arg(long, value_name = "DIR", default_value = DEFAULT_CONFIG_DIR)]
    model_config: PathBuf,
    /// Seed of the random weights.
    #[arg(long, default_value_t = 7)]
    seed: u64,
    /// Time the configured reranker (real weights) on these lists instead: a JSON array of
    /// `{"query", "passages": [...]}`, one timed call per query, after one warm-up.
    #[arg(long, value_name = "FILE")]
    inputs: Option<PathBuf>,
}

#[derive(Debug, serde::Deserialize)]
struct Input {
    query: String,
    passages: Vec<String>,
}

#[derive(Debug, Serialize)]
struct InputsReport {
    bench: &'static str,
    model: String,
    precision: String,
    threads: usize,
    queries: usize,
    passages_per_query_mean: f64,
    pair_tokens_mean: f64,
    load_s: f64,
    p50_ms: f64,
    p90_ms: f64,
    mean_ms: f64,
    peak_rss_mb: Option<f64>,
}

/// `--inputs`: the configured reranker on given lists.
fn run_inputs(g: &GlobalArgs, path: &Path) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(path).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    let inputs: Vec<Input> = serde_json::from_str(&text).map_err(|e| anyhow::anyhow!("{}: not a list of {{query, passages}}: {e}", path.display()))?;
    anyhow::ensure!(inputs.len() >= 2, "{}: at least two queries (one warms up)", path.display());
    let app = crate::tools::app(g)?;
    let start = Instant::now();
    let reranker = app.reranker()?.ok_or_else(|| anyhow::anyhow!("the configured reranker `{}` is not in the models folder", app.config.rerank.model))?;
    let load_s = start.elapsed().as_secs_f64();
    let (mut times, mut pairs, mut tokens) = (Vec::new(), 0usize, 0usize);
    let tokenizer = CrossEncoderTokens::new(&app)?;
    for (i, input) in inputs.iter().enumerate() {
        let refs: Vec<&str> = input.passages.iter().map(String::as_str).collect();
        let start = Instant::now();
        let scores = reranker.score(&input.query, &refs)?;
        anyhow::ensure!(scores.iter().all(|s| s.is_finite()), "the cross-encoder gave bad scores");
        if i > 0 {
            times.push(start.elapsed().as_secs_f64() * 1e3);
            pairs += refs.len();
            tokens += refs.iter().map(|p| tokenizer.count(&input.query, p)).sum::<usize>();
        }
    }
    let mean_ms = times.iter().sum::<f64>() / times.len() as f64;
    let s = sorted(times);
    let report = InputsReport {
        bench: "rerank",
        model: reranker.model_id().to_string(),
        precision: ragbox_core::model::precision::describe(app.config.embed.precision, &Device::Cpu),
        threads: rayon::current_num_threads(),
        queries: s.len(),
        passages_per_query_mean: pairs as f64 / s.len() as f64,
        pair_tokens_mean: tokens as f64 / pairs.max(1) as f64,
        load_s,
        p50_ms: percentile(&s, 50.0),
        p90_ms: percentile(&s, 90.0),
        mean_ms,
        peak_rss_mb: status_mb("VmHWM"),
    };
    if g.json {
        return print_json(&report);
    }
    let r = &report;
    println!(
        "rerank: {} ({}), {} threads: {} queries of {:.0} passages ({:.0} tokens per pair), after 1 warm-up",
        r.model, r.precision, r.threads, r.queries, r.passages_per_query_mean, r.pair_tokens_mean
    );
    println!("per query: p50 {:.1} ms, p90 {:.1} ms, mean {:.1} ms; model load {:.2} s, peak RSS {} MiB", r.p50_ms, r.p90_ms, r.mean_ms, r.load_s, r.peak_rss_mb.map_or_else(|| "?".into(), |m| format!("{m:.0}")));
    Ok(())
}

/// Token counts of pairs as the configured cross-encoder sees them (its tokenizer, truncated).
struct CrossEncoderTokens(TextTokenizer);

impl CrossEncoderTokens {
    fn new(app: &ragbox_core::app::App) -> anyhow::Result<CrossEncoderTokens> {
        let spec = app.models.manifest().get(&app.config.rerank.model)?;
        let path = app.models.verified_file(spec, "tokenizer.json")?;
        Ok(CrossEncoderTokens(TextTokenizer::load(&path, spec.max_tokens)?))
    }

    fn count(&self, query: &str, passage: &str) -> usize {
        self.0.encode_pairs(&[(query, passage)]).map_or(0, |t| t[0].ids.len())
    }
}

#[derive(Debug, Serialize)]
struct Report {
    bench: &'static str,
    architecture: &'static str,
    weights: &'static str,
    device: &'static str,
    threads: usize,
    batch: usize,
    candidates: usize,
    runs: usize,
    passage_tokens: usize,
    /// Tokens per (query, passage) pair as the model sees them, special tokens included.
    pair_tokens_mean: f64,
    load_s: f64,
    warmup_s: f64,
    p50_s: f64,
    p95_s: f64,
    mean_s: f64,
    min_s: f64,
    max_s: f64,
    pairs_per_s: f64,
    peak_rss_mb: Option<f64>,
}

/// A file deleted when dropped.
struct TempFile(PathBuf);

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Writes seeded random weights of the BERT sequence-classification model `config_path`
/// describes to `out`: layer norms 1, biases 0, everything else N(0, 0.02²).
fn write_random_weights(config_path: &Path, out: &Path, seed: u64) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(config_path)
        .map_err(|e| anyhow::anyhow!("{}: {e}; --model-config must hold config.json", config_path.display()))?;
    let cfg: candle_transformers::models::bert::Config = serde_json::from_str(&text)?;
    let varmap = VarMap::new();
    let vb = VarBuilder::from_varmap(&varmap, DType::F32, &Device::Cpu);
    // The loaders create every variable they ask for, under the names they will read.
    BertBody::load(vb.pp("bert"), &cfg, ragbox_core::model::Precision::F32, None)?;
    candle_nn::linear(cfg.hidden_size, cfg.hidden_size, vb.pp("bert").pp("pooler").pp("dense"))?;
    candle_nn::linear(cfg.hidden_size, 1, vb.pp("classifier"))?;
    {
        let vars = varmap.data().lock().map_err(|_| anyhow::anyhow!("weight map lock poisoned"))?;
        let mut names: Vec<&String> = vars.keys().collect();
        names.sort();
        for (i, name) in names.into_iter().enumerate() {
            let var = &vars[name];
            let count = var.elem_count();
            let values = if name.ends_with("LayerNorm.weight") {
                vec![1f32; count]
            } else if name.ends_with(".bias") {
                vec![0f32; count]
            } else {
                let mut v = vec![0f32; count];
                SeededRng::for_item(seed, WEIGHTS, i as u64).fill_normal(&mut v);
                v.iter_mut().for_each(|x| *x *= WEIGHT_STD);
                v
            };
            var.set(&Tensor::from_vec(values, var.shape(), &Device::Cpu)?)?;
        }
    }
    varmap.save(out)?;
    Ok(())
}

/// `count` passages of about `tokens` word pieces each, cycling [`PARAGRAPH`] from a different
/// word for each. BERT's pre-tokenizer splits words apart, so a text's length is the sum of its
/// words' lengths.
fn passages(tokenizer: &TextTokenizer, count: usize, tokens: usize) -> Vec<String> {
    let words: Vec<&str> = PARAGRAPH.split_whitespace().collect();
    let lengths: Vec<usize> = words.iter().map(|w| tokenizer.count(w).max(1)).collect();
    (0..count)
        .map(|i| {
            let mut text = String::new();
            let mut used = 0;
            let mut w = (i * 17) % words.len();
            while used < tokens {
                if !text.is_empty() {
                    text.push(' ');
                }
                text.push_str(words[w]);
                used += lengths[w];
                w = (w + 1) % words.len();
            }
            text
        })
        .collect()
}

pub fn run(g: &GlobalArgs, args: RerankArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.candidates > 0 && args.runs > 0, "--candidates and --runs must be positive");
    if let Some(n) = args.threads {
        // As in `bench embed`: candle's matmuls read RAYON_NUM_THREADS; rayon's pool reads it once.
        std::env::set_var("RAYON_NUM_THREADS", n.to_string());
        let _ = rayon::ThreadPoolBuilder::new().num_threads(n).build_global();
    }
    if let Some(path) = &args.inputs {
        return run_inputs(g, path);
    }
    let config = g.config()?;
    let batch = args.batch.unwrap_or(config.rerank.batch_size);
    anyhow::ensure!(batch > 0, "--batch must be positive");
    let config_path = args.model_config.join("config.json");
    let tokenizer = args.model_config.join("tokenizer.json");
    let weights = TempFile(std::env::temp_dir().join(format!("ragbox-bench-rerank-{}.safetensors", std::process::id())));
    eprintln!("writing random weights of the {ARCHITECTURE} architecture (seed {})", args.seed);
    write_random_weights(&config_path, &weights.0, args.seed)?;

    // `auto` resolves as for the configured cross-encoder (its manifest's gated precision).
    let gated = ragbox_core::model::Manifest::builtin().get(&config.rerank.model).ok().and_then(|spec| spec.auto_precision);
    let precision = config.embed.precision.resolve(&Device::Cpu, gated)?;
    eprintln!("precision: {}", ragbox_core::model::precision::describe(precision, &Device::Cpu));
    let options = RerankOptions { device: Device::Cpu, batch: BatchLimits { max_items: batch, ..BatchLimits::default() }, precision };
    let start = Instant::now();
    let encoder = CrossEncoder::from_files(
        &format!("{ARCHITECTURE} (random weights)"),
        MAX_TOKENS,
        &config_path,
        &tokenizer,
        &weights.0,
        &options,
    )?;
    let load_s = start.elapsed().as_secs_f64();
    let texts = passages(&TextTokenizer::load(&tokenizer, MAX_TOKENS)?, args.candidates, args.passage_tokens);
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let mut pair_tokens = 0;
    for p in &refs {
        pair_tokens += encoder.encode_pair(QUERY, p)?.ids.len();
    }

    let start = Instant::now();
    let scores = encoder.score(QUERY, &refs)?;
    let warmup_s = start.elapsed().as_secs_f64();
    anyhow::ensure!(scores.len() == refs.len() && scores.iter().all(|s| s.is_finite()), "the cross-encoder gave bad scores");
    let mut times = Vec::with_capacity(args.runs);
    for _ in 0..args.runs {
        let start = Instant::now();
        encoder.score(QUERY, &refs)?;
        times.push(start.elapsed().as_secs_f64());
    }
    let mean_s = times.iter().sum::<f64>() / times.len() as f64;
    let s = sorted(times);
    let report = Report {
        bench: "rerank",
        architecture: ARCHITECTURE,
        weights: "random (seeded): latency only, the scores mean nothing",
        device: "cpu",
        threads: rayon::current_num_threads(),
        batch,
        candidates: args.candidates,
        runs: args.runs,
        passage_tokens: args.passage_tokens,
        pair_tokens_mean: pair_tokens as f64 / refs.len() as f64,
        load_s,
        warmup_s,
        p50_s: percentile(&s, 50.0),
        p95_s: percentile(&s, 95.0),
        mean_s,
        min_s: s.first().copied().unwrap_or(0.0),
        max_s: s.last().copied().unwrap_or(0.0),
        pairs_per_s: args.candidates as f64 / mean_s,
        peak_rss_mb: status_mb("VmHWM"),
    };
    if g.json {
        return print_json(&report);
    }
    let r = &report;
    println!("rerank: {} architecture with RANDOM weights (seeded): latency only, the scores mean nothing", r.architecture);
    println!(
        "{} candidates of ~{} word pieces ({:.0} tokens per pair with the query), batch {}, {} threads, cpu",
        r.candidates, r.passage_tokens, r.pair_tokens_mean, r.batch, r.threads
    );
    println!(
        "per query over {} runs (after 1 warm-up of {:.3} s): p50 {:.3} s, p95 {:.3} s, mean {:.3} s (min {:.3}, max {:.3}); {:.1} pairs/s",
        r.runs, r.warmup_s, r.p50_s, r.p95_s, r.mean_s, r.min_s, r.max_s, r.pairs_per_s
    );
    println!(
        "model load {:.2} s, peak RSS {} MiB",
        r.load_s,
        r.peak_rss_mb.map_or_else(|| "?".into(), |m| format!("{m:.0}"))
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny_fixture() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny-random-bert-crossencoder")
    }

    #[test]
    fn random_weights_load_as_a_cross_encoder_and_are_seeded() {
        let dir = tiny_fixture();
        let tmp = std::env::temp_dir().join(format!("ragbox-rerank-weights-test-{}", std::process::id()));
        std::fs::create_dir_all(&tmp).unwrap();
        let (a, b) = (tmp.join("a.safetensors"), tmp.join("b.safetensors"));
        write_random_weights(&dir.join("config.json"), &a, 3).unwrap();
        write_random_weights(&dir.join("config.json"), &b, 3).unwrap();
        assert_eq!(std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap(), "same seed, same weights");
        let enc = CrossEncoder::from_files(
            "tiny",
            64,
            &dir.join("config.json"),
            &dir.join("tokenizer.json"),
            &a,
            &RerankOptions::default(),
        )
        .unwrap();
        let scores = enc.score("a query", &["one passage", "another passage"]).unwrap();
        assert!(scores.len() == 2 && scores.iter().all(|s| s.is_finite()));
        std::fs::remove_dir_all(&tmp).unwrap();
    }

    #[test]
    fn passages_have_the_asked_length_and_differ() {
        let tok = TextTokenizer::load(&tiny_fixture().join("tokenizer.json"), 512).unwrap();
        let ps = passages(&tok, 3, 40);
        for p in &ps {
            let n = tok.count(p);
            assert!((40..50).contains(&n), "{n} word pieces");
        }
        assert_ne!(ps[0], ps[1]);
    }
}
