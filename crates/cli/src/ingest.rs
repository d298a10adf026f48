//! `ragbox ingest PATH… [--tenant T] [--model M] [--chunker C] [--watch]`: bring a tenant's store
//! in line with folders, incrementally; `--watch` keeps following changes. Every pass goes
//! through `Service::ingest_now`, the server jobs' write path: the tenant's writer lock, the
//! embedder rule, and an `ingest` audit event.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Args;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use ragbox_service::{Caller, Change, ChunkerKind, IngestEvent, IngestOptions, IngestReport, Service};

use super::{print_json, GlobalArgs, EXIT_PARTIAL};

/// Arguments of `ingest`.
#[derive(Debug, Args)]
pub struct IngestArgs {
    /// Folders or files to ingest.
    #[arg(required = true, value_name = "PATH")]
    pub paths: Vec<PathBuf>,
    /// Tenant to write into (created on first use).
    #[arg(long, default_value = ragbox_service::DEFAULT_TENANT)]
    pub tenant: String,
    /// Embedding model for a new tenant (an existing tenant keeps its own; `reembed` switches).
    #[arg(long)]
    pub model: Option<String>,
    /// Chunking strategy: structural, fixed, semantic or code.
    #[arg(long)]
    pub chunker: Option<ChunkerKind>,
    /// Situating context in front of each child for embedding and BM25: structural (title and
    /// section path; free, the default), llm (plus a sentence the local LLM writes
    /// from the whole document; cached per chunk, so it runs once per chunk ever) or none.
    #[arg(long, value_enum, default_value_t = ContextKind::Structural)]
    pub context: ContextKind,
    /// After ingesting, keep following changes (Ctrl-C stops).
    #[arg(long)]
    pub watch: bool,
}

/// The annotators.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ContextKind {
    /// Title and section path.
    Structural,
    /// Structural, plus sentences from the local LLM.
    Llm,
    /// No context.
    None,
}

/// `ragbox ingest`: folders ingested incrementally (`--watch`: again on every change); exit code
/// [`EXIT_PARTIAL`](crate::EXIT_PARTIAL) when some files were skipped.
pub fn run(g: &GlobalArgs, args: IngestArgs) -> anyhow::Result<u8> {
    let service = g.service()?;
    let opts = service.ingest_options(&args.tenant, args.chunker, args.context != ContextKind::None, args.context == ContextKind::Llm)?;
    // With --watch, changes are watched from before the first pass, so nothing that changes
    // while it runs is missed (it triggers one more incremental pass).
    let watching = if args.watch { Some(Watch::start(&args.paths)?) } else { None };
    let mut code = 0;
    for path in &args.paths {
        let report = run_once(g, &service, path, args.model.as_deref(), &opts)?;
        code = code.max(print_report(g, &report)?);
    }
    if let Some(w) = watching {
        w.follow(g, &service, &args.paths, args.model.as_deref(), &opts)?;
    }
    Ok(code)
}

fn run_once(
    g: &GlobalArgs,
    service: &Service,
    path: &Path,
    model: Option<&str>,
    opts: &IngestOptions,
) -> anyhow::Result<IngestReport> {
    let bar = ProgressBar::new(0);
    if g.quiet || g.json || !std::io::stderr().is_terminal() {
        bar.set_draw_target(ProgressDrawTarget::hidden());
    }
    bar.set_style(
        ProgressStyle::with_template("{spinner} {pos}/{len} files [{elapsed_precise}] {per_sec} {msg}")
            .expect("static progress template"),
    );
    let started = std::time::Instant::now();
    let mut chunks = 0usize;
    let verbose = g.verbose > 0;
    let report = service.ingest_now(&Caller::local(), path, model, opts, &mut |event| match event {
        IngestEvent::Found { files } => bar.set_length(files as u64),
        IngestEvent::Visited { chunks: n, .. } => {
            chunks += n;
            bar.inc(1);
            let secs = started.elapsed().as_secs_f64().max(1e-3);
            bar.set_message(format!("{chunks} chunks, {:.1} chunks/s", chunks as f64 / secs));
        }
        IngestEvent::Skipped { path, reason } => {
            if verbose {
                bar.suspend(|| eprintln!("skipped {}: {reason}", path.display()));
            }
        }
        IngestEvent::Annotated { path, chunks } => {
            if verbose {
                bar.suspend(|| eprintln!("annotated {chunks} chunks of {}", path.display()));
            }
        }
        IngestEvent::Committed { path, change } => {
            if verbose {
                let what = match change {
                    Change::Added => "added",
                    Change::Updated => "updated",
                    Change::Removed => "removed",
                    Change::Skipped => "recorded-skip",
                };
                bar.suspend(|| eprintln!("committed {what} {}", path.display()));
            }
        }
    })?;
    bar.finish_and_clear();
    Ok(report)
}

/// Prints the summary; returns the exit code (EXIT_PARTIAL when files were skipped).
pub(crate) fn print_report(g: &GlobalArgs, r: &IngestReport) -> anyhow::Result<u8> {
    let code = if r.skipped.is_empty() { 0 } else { EXIT_PARTIAL };
    if g.json {
        print_json(r)?;
        return Ok(code);
    }
    for why in &r.repaired {
        println!("repaired: {why}");
    }
    for w in &r.widened {
        println!("warning: {w}");
    }
    println!(
        "tenant {} ({}): {} added, {} updated, {} unchanged, {} removed, {} skipped, {} ignored (unsupported type)",
        r.tenant,
        r.model,
        r.added,
        r.updated,
        r.unchanged,
        r.removed,
        r.skipped.len(),
        r.ignored.len()
    );
    if r.readers_changed > 0 {
        println!("readers: {} documents given new readers (rules or .ragbox-access files changed; nothing re-embedded)", r.readers_changed);
    }
    println!(
        "chunks: {} (+{} parents); embedded {}, from cache {}{}",
        r.chunks,
        r.parents,
        r.embedded,
        r.cached,
        if r.truncated > 0 { format!(", {} truncated to the model's window", r.truncated) } else { String::new() }
    );
    let s = &r.stages;
    println!(
        "time: {:.2} s (walk+hash {:.2}, parse {:.2}, chunk {:.2}, embed {:.2}, commit {:.2}); {:.1} files/s, {:.1} chunks/s",
        r.wall_s,
        s.walk_hash_s,
        s.parse_s,
        s.chunk_s,
        s.embed_s,
        s.commit_s,
        (r.added + r.updated) as f64 / r.wall_s.max(1e-9),
        r.chunks as f64 / r.wall_s.max(1e-9)
    );
    if s.annotate_s > 0.0 {
        println!(
            "llm context: {} chunks annotated in {:.1} s ({:.1} chunks/min); the rest from the annotation cache",
            r.annotated,
            s.annotate_s,
            r.annotated as f64 / (s.annotate_s / 60.0).max(1e-9)
        );
    }
    if !r.skipped.is_empty() {
        println!("skipped:");
        for s in &r.skipped {
            println!("  {}: {}", s.path.display(), s.reason);
        }
    }
    Ok(code)
}

/// A recursive, debounced watch on the ingested paths.
struct Watch {
    _debouncer: notify_debouncer_mini::Debouncer<notify_debouncer_mini::notify::RecommendedWatcher>,
    events: std::sync::mpsc::Receiver<notify_debouncer_mini::DebounceEventResult>,
}

impl Watch {
    fn start(paths: &[PathBuf]) -> anyhow::Result<Watch> {
        use notify_debouncer_mini::{new_debouncer, notify::RecursiveMode};
        let (tx, events) = std::sync::mpsc::channel();
        let mut debouncer = new_debouncer(Duration::from_millis(750), tx)?;
        for p in paths {
            debouncer.watcher().watch(p, RecursiveMode::Recursive)?;
        }
        Ok(Watch { _debouncer: debouncer, events })
    }

    /// After each burst of file events, runs an incremental ingest of each path the burst touched;
    /// unchanged files cost a hash each. Runs until interrupted.
    fn follow(
        self,
        g: &GlobalArgs,
        service: &Service,
        paths: &[PathBuf],
        model: Option<&str>,
        opts: &IngestOptions,
    ) -> anyhow::Result<()> {
        if !g.quiet {
            eprintln!("watching {} path(s) for changes; Ctrl-C stops", paths.len());
        }
        for events in self.events {
            let events = match events {
                Ok(e) => e,
                Err(err) => {
                    tracing::warn!("watch error: {err}");
                    continue;
                }
            };
            for root in paths {
                let root_abs = std::fs::canonicalize(root).unwrap_or_else(|_| root.clone());
                if !events.iter().any(|e| e.path.starts_with(&root_abs) || e.path.starts_with(root)) {
                    continue;
                }
                match run_once(g, service, root, model, opts) {
                    Ok(r) if r.added + r.updated + r.removed + r.readers_changed > 0 => {
                        print_report(g, &r)?;
                    }
                    Ok(_) => {}
                    Err(err) => eprintln!("error: {err:#}"),
                }
            }
        }
        Ok(())
    }
}
