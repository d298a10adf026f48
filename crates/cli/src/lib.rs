//! ragbox-cli: the command line's faces, one module per command that changes or reveals data
//! (ingest, sync, ls/rm/reembed, backup/restore, migrate, search, ask, chat, feedback, doctor, serve, keys,
//! audit, retention, export), and the global options every command honours. Each goes through `ragbox-service`,
//! the only part of the pipeline this crate depends on; results go to stdout (`--json` for
//! machines), logs and progress to stderr. The `ragbox` binary parses the command line and
//! dispatches here or to its measuring tools.

#![warn(missing_docs)]

pub mod ask;
pub mod audit;
pub mod backup;
pub mod chat;
pub mod doctor;
pub mod documents;
pub mod export;
pub mod feedback;
pub mod ingest;
pub mod keys;
pub mod mcp;
pub mod migrate;
pub mod retention;
pub mod search;
pub mod serve;
pub mod sync;

use std::path::PathBuf;

use clap::Args;

use ragbox_service::config::{Config, Overrides};
use ragbox_service::config::DeviceChoice;

/// Options every command honours.
#[derive(Debug, Clone, Args)]
pub struct GlobalArgs {
    /// Where catalogs and indexes live (else $RAGBOX_DATA_DIR, else the configuration's
    /// `data_dir`, else ~/.local/share/ragbox).
    #[arg(long, global = true, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// A TOML configuration file (see config/default.toml).
    #[arg(long, global = true, env = "RAGBOX_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The models folder, hub cache layout (else $RAGBOX_MODELS_DIR, else the configuration's
    /// `models_dir`, else ./models or the one beside the binary).
    #[arg(long, global = true, value_name = "DIR")]
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

/// Exit code of a run that completed but skipped some files (each reported with its reason).
pub const EXIT_PARTIAL: u8 = 5;

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
    pub fn service(&self) -> anyhow::Result<ragbox_service::Service> {
        Ok(ragbox_service::Service::open(self.config()?)?)
    }
}

/// Prints a value as one line of JSON on stdout.
pub fn print_json(value: &impl serde::Serialize) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string(value)?);
    Ok(())
}
