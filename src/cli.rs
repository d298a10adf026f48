//! The command line: the parser of every subcommand, and the dispatch to the faces
//! (`ragbox-cli`, through the service) or to the measuring tools (`crate::tools`).

use clap::{Parser, Subcommand};

use ragbox_cli::{ask, audit, backup, chat, doctor, documents, export, feedback, ingest, keys, mcp, migrate, retention, search, serve, sync, GlobalArgs};

use crate::tools;

/// ragbox: answers from your documents, offline.
#[derive(Debug, Parser)]
#[command(name = "ragbox", version, about, propagate_version = true)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(subcommand)]
    pub cmd: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Ingest folders into a tenant, incrementally (exit code 5: completed, some files skipped).
    Ingest(ingest::IngestArgs),
    /// Sync the configured mailboxes and file shares (`[[sources]]`) once each, then ingest what changed.
    Sync(sync::SyncArgs),
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
    /// Build every tenant's indexes on the other backend (shared servers or local files) from the catalog.
    Migrate(migrate::MigrateArgs),
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
    /// The Model Context Protocol over stdio, for an assistant that starts ragbox (`RAGBOX_KEY`: act as that key).
    Mcp(mcp::McpArgs),
    /// API keys for `serve`: create (shown once), list, revoke.
    #[command(subcommand)]
    Keys(keys::KeysCmd),
    /// The hash-chained audit log: list rows, or `audit verify` the chain (exit code 6: broken).
    Audit(audit::AuditArgs),
    /// How long conversations are kept: status, run (delete what is past its period), legal holds.
    #[command(subcommand)]
    Retention(retention::RetentionCmd),
    /// A tenant's or a person's conversations, answers, sources and feedback, as JSON lines.
    Export(export::ExportArgs),
}

/// Runs the parsed command line; returns the exit code of a completed run.
pub fn run(cli: Cli) -> anyhow::Result<u8> {
    let g = &cli.global;
    match cli.cmd {
        Command::Ingest(args) => ingest::run(g, args),
        Command::Sync(args) => sync::run(g, args),
        Command::Ls(args) => documents::ls(g, args),
        Command::Mcp(args) => mcp::run(g, args),
        Command::Rm(args) => documents::rm(g, args),
        Command::Reembed(args) => documents::reembed(g, args),
        Command::Backup(args) => backup::backup(g, args),
        Command::Restore(args) => backup::restore_cmd(g, args),
        Command::Migrate(args) => migrate::run(g, args),
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
        Command::Retention(cmd) => retention::run(g, cmd),
        Command::Export(args) => export::run(g, args),
    }
}

