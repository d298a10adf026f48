//! `ragbox backup DEST` and `ragbox restore SRC [--force]`: a consistent online copy of the data
//! folder (catalog through SQLite's backup API, indexes at the same generation, a manifest of
//! sha256s), and bringing one back into an empty (or, with `--force`, a replaced) data folder.

use std::path::PathBuf;

use clap::Args;

use ragbox_service::{restore, BackupManifest};

use super::{print_json, GlobalArgs};

/// Arguments of `backup`.
#[derive(Debug, Args)]
pub struct BackupArgs {
    /// A new or empty folder to write the backup into.
    #[arg(value_name = "DEST")]
    pub dest: PathBuf,
}

/// Arguments of `restore`.
#[derive(Debug, Args)]
pub struct RestoreArgs {
    /// A folder written by `ragbox backup`.
    #[arg(value_name = "SRC")]
    pub src: PathBuf,
    /// Replace the catalog and indexes of a data folder that is not empty (stop every ragbox
    /// process using it first).
    #[arg(long)]
    pub force: bool,
}

fn summary(m: &BackupManifest) -> String {
    let tenants: Vec<String> =
        m.tenants.iter().map(|t| format!("{} (generation {}, {} documents, {} chunks)", t.name, t.generation, t.documents, t.chunks)).collect();
    format!("{} files, {} bytes; tenants: {}", m.files.len(), m.bytes(), if tenants.is_empty() { "none".into() } else { tenants.join(", ") })
}

/// `ragbox backup DEST`: a consistent copy of the data folder, taken while it may be in use.
pub fn backup(g: &GlobalArgs, args: BackupArgs) -> anyhow::Result<u8> {
    let service = ragbox_service::Service::open(g.config()?)?;
    let manifest = service.backup(&ragbox_service::Caller::local(), &args.dest)?;
    if g.json {
        print_json(&manifest)?;
    } else {
        println!("backed up {} to {}: {}", manifest.source.display(), args.dest.display(), summary(&manifest));
    }
    Ok(0)
}

/// `ragbox restore SRC`: a backup brought back into an empty data folder (`--force`: a used one).
pub fn restore_cmd(g: &GlobalArgs, args: RestoreArgs) -> anyhow::Result<u8> {
    // Not through an open service: opening would create a catalog in the folder before it is checked.
    let data_dir = g.config()?.data_dir;
    let report = restore(&args.src, &data_dir, args.force)?;
    if g.json {
        print_json(&report)?;
    } else {
        let how = if report.replaced { "replaced" } else { "restored into" };
        println!("{how} {} from {}: {}", data_dir.display(), args.src.display(), summary(&report.manifest));
    }
    Ok(0)
}
