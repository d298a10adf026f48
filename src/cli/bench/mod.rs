//! `ragbox bench`: throughput and latency measurements, one file per subject. Each prints a
//! readable summary on stdout, or one line of JSON with `--json`; progress goes to stderr.
//!
//! Shared here: the subcommand enum, its dispatch, and the measuring helpers the benches have in
//! common (percentiles, resident memory).

mod embed;

use clap::Subcommand;

use super::GlobalArgs;

/// Benchmarks.
#[derive(Debug, Subcommand)]
pub enum BenchCmd {
    /// Embedding throughput over a BEIR corpus.
    Embed(embed::EmbedArgs),
}

/// Runs one benchmark.
pub fn run(g: &GlobalArgs, cmd: BenchCmd) -> anyhow::Result<()> {
    match cmd {
        BenchCmd::Embed(args) => embed::run(g, args),
    }
}
