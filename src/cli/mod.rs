//! The command line: global options, then one file per subcommand. Builds an [`App`] and prints
//! results on stdout (`--json` for machines); logs and progress go to stderr.

mod ask;
mod audit;
mod backup;
mod chat;
mod doctor;
mod documents;
mod feedback;
mod ingest;
mod keys;
pub(crate) mod search;
pub mod serve;
mod tools;

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use ragbox::config::{Config, Overrides};
use ragbox::config::DeviceChoice;

/// Options every command honours.
#[derive(Debug, Clone, Args)]
pub struct GlobalArgs {
    /// Where catalogs and indexes live.
    #[arg(long, global = true, env = "RAGBOX_DATA_DIR", value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// A TOML configuration file (see config/default.toml).
    #[arg(long, global = true, env = "RAGBOX_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The models folder (hub cache layout).
    #[arg(long, global = true, env = "RAGBOX_MODELS_DIR", value_name = "DIR")]
    pub models_dir: Option<PathBuf>,
    /// Where models run.
    #[arg(long, global = true, value_enum)]
    pub device: Option<DeviceChoice>,
    /// Machine-readable output on stdout.
    #[arg(long, global = true)]
    pub json: bool,
    /// More log output on stderr (repeat for more).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// Only errors on stderr.
    #[arg(short, long, global = true)]
    pub quiet: bool,
}

/// ragbox: answers from your documents, offline.
#[derive(Debug, Parser)]
#[command(name = "ragbox", version, about, propagate_version = true)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(subcommand)]
    pub cmd: Command,
}

/// Exit code of a run that completed but skipped some files (each reported with its reason).
pub const EXIT_PARTIAL: u8 = 5;

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Ingest folders into a tenant, incrementally (exit code 5: completed, some files skipped).
    Ingest(ingest::IngestArgs),
    /// List a tenant's documents.
    Ls(documents::LsArgs),
    /// Remove documents from a tenant.
    Rm(documents::RmArgs),
    /// Rebuild a tenant's vectors with another embedding model and switch to it.
    Reembed(documents::ReembedArgs),
    /// Copy the data folder (catalog and indexes, consistent, while in use) into a new folder.
    Backup(backup::BackupArgs),
    /// Bring a backup back into an empty data folder (`--force` replaces a used one).
    Restore(backup::RestoreArgs),
    /// Ranked passages for a query (`--explain`: every stage's view of every candidate).
    Search(search::SearchArgs),
    /// A grounded answer with checked citations, or a plain "no good source".
    Ask(ask::AskArgs),
    /// A conversation: follow-ups that refer back are rewritten with the turns they need.
    Chat(chat::ChatArgs),
    /// Rate an answer (up or down) for the feedback loop.
    Feedback(feedback::FeedbackArgs),
    /// Diagnose a query: is the expected text in a chunk, and which stage lost it?
    Trace(tools::trace::TraceArgs),
    /// Retrieval quality and latency on a BEIR-format set, configurations side by side.
    Eval(tools::eval::EvalArgs),
    /// Print embedding vectors of texts.
    Embed(tools::embed::EmbedArgs),
    /// What the parser makes of files (blocks, pages, metadata), or why it skips them.
    Parse(tools::parse::ParseArgs),
    /// List, verify, import or pull models.
    #[command(subcommand)]
    Models(tools::models::ModelsCmd),
    /// Features, device, models and their checksums.
    Doctor,
    /// Measure throughput.
    #[command(subcommand)]
    Bench(tools::bench::BenchCmd),
    /// Serve the HTTP API (keys, streaming answers, audit, back-pressure) until SIGTERM/SIGINT.
    Serve(serve::ServeArgs),
    /// API keys for `serve`: create (shown once), list, revoke.
    #[command(subcommand)]
    Keys(keys::KeysCmd),
    /// The hash-chained audit log: list rows, or `audit verify` the chain (exit code 6: broken).
    Audit(audit::AuditArgs),
}

impl GlobalArgs {
    /// Loads the configuration with these options as the strongest layer.
    pub fn config(&self) -> anyhow::Result<Config> {
        Ok(Config::load(&Overrides {
            config_file: self.config.clone(),
            data_dir: self.data_dir.clone(),
            models_dir: self.models_dir.clone(),
            device: self.device,
        })?)
    }

    /// Builds the service (application and store) the request commands go through.
    pub fn service(&self) -> anyhow::Result<ragbox::service::Service> {
        Ok(ragbox::service::Service::open(self.config()?)?)
    }
}

/// Runs the parsed command line; returns the exit code of a completed run.
pub fn run(cli: Cli) -> anyhow::Result<u8> {
    let g = &cli.global;
    match cli.cmd {
        Command::Ingest(args) => ingest::run(g, args),
        Command::Ls(args) => documents::ls(g, args),
        Command::Rm(args) => documents::rm(g, args),
        Command::Reembed(args) => documents::reembed(g, args),
        Command::Backup(args) => backup::backup(g, args),
        Command::Restore(args) => backup::restore_cmd(g, args),
        Command::Search(args) => search::run(g, args),
        Command::Trace(args) => tools::trace::run(g, args),
        Command::Ask(args) => ask::run(g, args),
        Command::Chat(args) => chat::run(g, args),
        Command::Feedback(args) => feedback::run(g, args),
        Command::Eval(args) => tools::eval::run(g, args),
        Command::Embed(args) => tools::embed::run(g, args).map(|()| 0),
        Command::Parse(args) => tools::parse::run(g, args),
        Command::Models(cmd) => tools::models::run(g, cmd).map(|()| 0),
        Command::Doctor => doctor::run(g).map(|()| 0),
        Command::Bench(cmd) => tools::bench::run(g, cmd).map(|()| 0),
        Command::Serve(args) => serve::run(g, args),
        Command::Keys(cmd) => keys::run(g, cmd),
        Command::Audit(args) => audit::run(g, args),
    }
}

/// Prints a value as one line of JSON on stdout.
pub fn print_json(value: &impl serde::Serialize) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string(value)?);
    Ok(())
}
