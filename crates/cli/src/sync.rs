//! `ragbox sync [NAME…]`: every `[[sources]]` entry (or those named) synced once, one after the
//! other: its mirror brought in line with the mailbox or share, then ingested into its tenant.
//! A source that cannot be reached is reported by name and changes nothing; the others still
//! run, and the exit code is that of the first failure.

use std::io::IsTerminal;

use clap::Args;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use ragbox_service::{Caller, IngestEvent, Service, SourceProgress, SyncEvent, Synced};

use super::{print_json, GlobalArgs, EXIT_PARTIAL};

/// Arguments of `sync`.
#[derive(Debug, Args)]
pub struct SyncArgs {
    /// The sources to sync (names in the configuration's `[[sources]]`); all when none given.
    #[arg(value_name = "NAME")]
    pub names: Vec<String>,
}

/// `ragbox sync`: the sources synced once each.
pub fn run(g: &GlobalArgs, args: SyncArgs) -> anyhow::Result<u8> {
    let service = g.service()?;
    let names: Vec<String> = if args.names.is_empty() {
        service.config().sources.iter().map(|s| s.name.clone()).collect()
    } else {
        args.names.clone()
    };
    if names.is_empty() {
        anyhow::bail!("no sources are configured: add a [[sources]] entry (an imap mailbox or an smb share) to the config file; docs/SOURCES.md shows both");
    }
    let mut results = Vec::new();
    let mut first_error = None;
    let mut code = 0;
    for name in &names {
        match sync_one(g, &service, name) {
            Ok(done) => {
                if !done.ingest.skipped.is_empty() || !done.sync.problems.is_empty() {
                    code = EXIT_PARTIAL;
                }
                results.push(serde_json::json!({ "source": name, "ok": true, "result": done }));
                if !g.json {
                    print_synced(g, &done)?;
                }
            }
            Err(e) => {
                results.push(serde_json::json!({ "source": name, "ok": false, "error": e.to_string() }));
                // One source's error is the command's own, printed once as it exits.
                if !g.json && names.len() > 1 {
                    eprintln!("source {name}: {e}");
                }
                first_error.get_or_insert(e);
            }
        }
    }
    if g.json {
        print_json(&results)?;
    }
    match first_error {
        Some(e) => Err(e.into()),
        None => Ok(code),
    }
}

fn sync_one(g: &GlobalArgs, service: &Service, name: &str) -> ragbox_service::Result<Synced> {
    let bar = ProgressBar::new(0);
    if g.quiet || g.json || !std::io::stderr().is_terminal() {
        bar.set_draw_target(ProgressDrawTarget::hidden());
    }
    bar.set_style(ProgressStyle::with_template("{spinner} {prefix} {pos}/{len} {msg}").expect("static progress template"));
    bar.set_prefix(name.to_string());
    let verbose = g.verbose > 0;
    let result = service.sync_source(&Caller::local(), name, &mut |event| match event {
        SourceProgress::Sync(SyncEvent::Listed { items, to_fetch }) => {
            bar.set_message(format!("{items} listed, fetching"));
            bar.set_length(*to_fetch as u64);
        }
        SourceProgress::Sync(SyncEvent::Fetched { path, .. }) => {
            bar.inc(1);
            if verbose {
                bar.suspend(|| eprintln!("fetched {}", path.display()));
            }
        }
        SourceProgress::Sync(SyncEvent::Removed { path }) => {
            if verbose {
                bar.suspend(|| eprintln!("gone from the server: {}", path.display()));
            }
        }
        SourceProgress::Ingest(IngestEvent::Found { files }) => {
            bar.set_message("ingesting");
            bar.set_position(0);
            bar.set_length(*files as u64);
        }
        SourceProgress::Ingest(IngestEvent::Visited { .. }) => bar.inc(1),
        SourceProgress::Ingest(IngestEvent::Skipped { path, reason }) => {
            if verbose {
                bar.suspend(|| eprintln!("skipped {}: {reason}", path.display()));
            }
        }
        SourceProgress::Ingest(_) => {}
    });
    bar.finish_and_clear();
    result
}

fn print_synced(g: &GlobalArgs, d: &Synced) -> anyhow::Result<()> {
    let s = &d.sync;
    let r = &d.ingest;
    println!(
        "source {} → tenant {}: {} listed, {} fetched ({} B), {} unchanged, {} gone from the server",
        d.source, d.tenant, s.listed, s.fetched, s.bytes, s.unchanged, s.removed
    );
    for p in &s.problems {
        println!("  not fetched (tried again next time): {p}");
    }
    super::ingest::print_report(g, r)?;
    Ok(())
}
