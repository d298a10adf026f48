//! `ragbox bench llm`: the local LLM's two speeds, measured as llama.cpp's `llama-bench` does:
//! prompt processing (tokens/s over a prompt of about `--prompt-tokens`) and generation
//! (tokens/s over `--gen-tokens` decoded tokens), for the configured model or `--model`, on the
//! threads rayon is given (`RAYON_NUM_THREADS`, default: every core).
//!
//! Both are timed through the public [`Generator`] API, so they include what an answer pays:
//! the chat template, tokenisation and sampling. Each timed run opens with a run number, so the
//! prefix cache never serves a timed prompt. The prompt text is the sample corpus (plain English
//! policy text), cut to length after one calibration request; `--json` prints the prompts used,
//! so `scripts/bench/llm-baseline.sh` can give llama.cpp the very same messages.

use std::time::Instant;

use clap::Args;
use serde::Serialize;

use ragbox_core::generate::{block_on, Discard, GenerateRequest, Generation, Message};

use ragbox_eval::metrics::percentile;

use super::{sorted, status_mb};
use ragbox_cli::{print_json, GlobalArgs};

/// The text prompts are cut from: the sample corpus's policies, checked in.
const CORPUS: &[&str] = &[
    include_str!("../../../tests/data/corpus/policies/travel-and-expenses.md"),
    include_str!("../../../tests/data/corpus/policies/information-security-acceptable-use.md"),
    include_str!("../../../tests/data/corpus/policies/remote-work-and-equipment.md"),
];

/// The generation prompt: an answer that runs past any `--gen-tokens` a bench asks for.
const GENERATE_PROMPT: &str = "Write the numbers from 1 to 400 in words, separated by commas.";

/// Options of `ragbox bench llm`.
#[derive(Debug, Args)]
pub struct LlmArgs {
    /// A `generate` model of the manifest (default: the configured one).
    #[arg(long)]
    model: Option<String>,
    /// Prompt length for the prompt-processing figure, in the model's tokens (about).
    #[arg(long, default_value_t = 512)]
    prompt_tokens: usize,
    /// Tokens decoded for the generation figure.
    #[arg(long, default_value_t = 128)]
    gen_tokens: usize,
    /// Timed runs of each (after one warm-up).
    #[arg(long, default_value_t = 3)]
    runs: usize,
}

#[derive(Debug, Serialize)]
struct Report {
    model: String,
    threads: usize,
    load_s: f64,
    prompt_tokens: usize,
    /// Prompt processing, tokens/s, median of the runs.
    prompt_tokens_per_s: f64,
    prompt_runs_s: Vec<f64>,
    gen_tokens: usize,
    /// Generation (decoding after the first token), tokens/s, median of the runs.
    gen_tokens_per_s: f64,
    gen_runs_tokens_per_s: Vec<f64>,
    peak_rss_mb: Option<f64>,
    /// The messages timed, for a baseline to replay (run numbers are prefixed per run).
    prompt_system: String,
    prompt_user: String,
    gen_user: String,
}

fn messages(system: &str, user: String) -> Vec<Message> {
    vec![Message::system(system), Message::user(user)]
}

/// The prompt-processing prompt: `chars` characters of the corpus, whole words.
fn corpus_text(chars: usize) -> String {
    let all = CORPUS.join("\n\n");
    let mut text = String::new();
    for word in all.split_inclusive(char::is_whitespace).cycle() {
        if text.len() + word.len() > chars {
            break;
        }
        text.push_str(word);
    }
    text
}

const SYSTEM: &str = "You summarise documents.";

fn prompt_user(run: usize, text: &str) -> String {
    format!("Run {run}. Summarise this document in one sentence.\n\n{text}")
}

/// Runs the bench.
pub fn run(g: &GlobalArgs, args: LlmArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.runs > 0 && args.prompt_tokens > 0 && args.gen_tokens > 1, "--runs, --prompt-tokens and --gen-tokens must be positive (--gen-tokens at least 2)");
    let app = crate::tools::app(g)?;
    let started = Instant::now();
    let generator = app.generator(args.model.as_deref().or(Some(&app.config.generate.model)))?;
    let load_s = started.elapsed().as_secs_f64();
    let model = generator.model_id().to_string();
    eprintln!("[bench llm] {model} loaded in {load_s:.1} s");
    let generate = |messages: Vec<Message>, max_tokens: usize| -> anyhow::Result<Generation> {
        Ok(block_on(generator.generate(&GenerateRequest::greedy(messages, max_tokens), &mut Discard))?)
    };

    // Calibrate characters per token on this text with one request (also the warm-up).
    let probe = corpus_text(args.prompt_tokens * 4);
    let first = generate(messages(SYSTEM, prompt_user(0, &probe)), 1)?;
    let per_token = probe.len() as f64 / first.prompt_tokens.max(1) as f64;
    let text = corpus_text((args.prompt_tokens as f64 * per_token) as usize);

    let mut prompt_runs = Vec::new();
    let mut prompt_tokens = 0;
    for run in 1..=args.runs {
        let out = generate(messages(SYSTEM, prompt_user(run, &text)), 1)?;
        prompt_tokens = out.prompt_tokens;
        eprintln!("[bench llm] prompt run {run}: {} tokens in {:.0} ms", out.prompt_tokens, out.first_token_ms);
        prompt_runs.push(out.first_token_ms / 1e3);
    }
    let prompt_s = percentile(&sorted(prompt_runs.clone()), 50.0);

    generate(messages(SYSTEM, GENERATE_PROMPT.to_string()), 8)?;
    let mut gen_runs = Vec::new();
    let mut gen_tokens = 0;
    for run in 1..=args.runs {
        let out = generate(messages(SYSTEM, format!("Run {run}. {GENERATE_PROMPT}")), args.gen_tokens)?;
        gen_tokens = out.completion_tokens;
        let decode_s = (out.total_ms - out.first_token_ms) / 1e3;
        let rate = out.completion_tokens.saturating_sub(1) as f64 / decode_s.max(1e-9);
        eprintln!("[bench llm] generation run {run}: {} tokens, {rate:.1} tokens/s after the first", out.completion_tokens);
        gen_runs.push(rate);
    }
    let report = Report {
        model,
        threads: rayon::current_num_threads(),
        load_s,
        prompt_tokens,
        prompt_tokens_per_s: prompt_tokens as f64 / prompt_s.max(1e-9),
        prompt_runs_s: prompt_runs,
        gen_tokens,
        gen_tokens_per_s: percentile(&sorted(gen_runs.clone()), 50.0),
        gen_runs_tokens_per_s: gen_runs,
        peak_rss_mb: status_mb("VmHWM"),
        prompt_system: SYSTEM.to_string(),
        prompt_user: prompt_user(0, &text),
        gen_user: GENERATE_PROMPT.to_string(),
    };
    if g.json {
        return print_json(&report);
    }
    println!("model                {}", report.model);
    println!("threads              {}", report.threads);
    println!("load                 {:.1} s", report.load_s);
    println!("prompt processing    {:.1} tokens/s ({} tokens)", report.prompt_tokens_per_s, report.prompt_tokens);
    println!("generation           {:.1} tokens/s ({} tokens)", report.gen_tokens_per_s, report.gen_tokens);
    if let Some(mb) = report.peak_rss_mb {
        println!("peak RSS             {mb:.0} MB");
    }
    Ok(())
}
