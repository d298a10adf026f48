//! `ragbox export --tenant T [--person P] [--since WHEN] [--out FILE]`: a tenant's or a person's
//! conversations (sessions and their turns, answers with their sources and feedback) as JSON
//! lines, for a person's request to see what the appliance keeps about them.

use std::io::Write;
use std::path::PathBuf;

use clap::Args;

use ragbox_service::{Caller, ExportRequest, Whose};

use super::audit::parse_since;
use super::GlobalArgs;

/// Arguments of `export`.
#[derive(Debug, Args)]
pub struct ExportArgs {
    /// The tenant.
    #[arg(long)]
    pub tenant: String,
    /// Only this person's conversations (their subject, `person:ISSUER|SUBJECT`, or a key's name).
    #[arg(long)]
    pub person: Option<String>,
    /// Only rows from this time on: a date (2026-11-25), seconds since the epoch, or an age (7d).
    #[arg(long)]
    pub since: Option<String>,
    /// Write here instead of stdout.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
}

/// `ragbox export`.
pub fn run(g: &GlobalArgs, args: ExportArgs) -> anyhow::Result<u8> {
    let service = g.service()?;
    let since_ms = args.since.as_deref().map(parse_since).transpose()?;
    let whose = args.person.clone().map_or(Whose::Everyone, Whose::Person);
    let request = ExportRequest { tenant: args.tenant.clone(), whose, since_ms };
    let mut sink: Box<dyn Write> = match &args.out {
        Some(path) => Box::new(std::io::BufWriter::new(
            std::fs::File::create(path).map_err(|e| anyhow::anyhow!("{}: {e}; choose a folder you can write", path.display()))?,
        )),
        None => Box::new(std::io::BufWriter::new(std::io::stdout().lock())),
    };
    let target = args.out.clone().unwrap_or_else(|| PathBuf::from("(stdout)"));
    let counts = service.export(&Caller::local(), &request, &mut |record| {
        serde_json::to_writer(&mut sink, record).map_err(std::io::Error::from).and_then(|()| sink.write_all(b"\n")).map_err(ragbox_service::Error::path(&target))
    })?;
    sink.flush()?;
    drop(sink);
    eprintln!(
        "exported {} sessions ({} turns) and {} answers ({} feedback) of tenant {}{}",
        counts.sessions,
        counts.turns,
        counts.answers,
        counts.feedback,
        args.tenant,
        args.out.as_ref().map(|p| format!(" to {}", p.display())).unwrap_or_default()
    );
    Ok(0)
}
