//! `ragbox ls`, `ragbox rm` and `ragbox reembed`: list and remove a tenant's documents, and
//! rebuild its vectors with another model.

use std::path::PathBuf;

use clap::Args;

use ragbox_service::{Caller, DocumentStatus};

use super::{print_json, GlobalArgs};

/// Arguments of `ls`.
#[derive(Debug, Args)]
pub struct LsArgs {
    /// Tenant to list.
    #[arg(long, default_value = ragbox_service::DEFAULT_TENANT)]
    pub tenant: String,
}

/// Arguments of `rm`.
#[derive(Debug, Args)]
pub struct RmArgs {
    /// Documents to remove (a folder removes everything ingested under it).
    #[arg(required = true, value_name = "PATH")]
    pub paths: Vec<PathBuf>,
    /// Tenant to remove from.
    #[arg(long, default_value = ragbox_service::DEFAULT_TENANT)]
    pub tenant: String,
}

/// Arguments of `reembed`.
#[derive(Debug, Args)]
pub struct ReembedArgs {
    /// The embedding model to switch to.
    #[arg(long)]
    pub model: String,
    /// Tenant to re-embed.
    #[arg(long, default_value = ragbox_service::DEFAULT_TENANT)]
    pub tenant: String,
}

/// `ragbox ls`: a tenant's documents with their kind, status and chunk count.
pub fn ls(g: &GlobalArgs, args: LsArgs) -> anyhow::Result<u8> {
    let service = g.service()?;
    let (tenant, docs) = service.documents(&Caller::local(), &args.tenant)?;
    if g.json {
        // A document mirrored from a mailbox or share also names where it came from.
        let docs: Vec<serde_json::Value> = docs
            .iter()
            .map(|d| {
                let mut v = serde_json::to_value(d).unwrap_or_default();
                if let (Some(origin), Some(map)) = (service.origin(&d.path), v.as_object_mut()) {
                    map.insert("origin".into(), origin.into());
                }
                v
            })
            .collect();
        print_json(&serde_json::json!({ "tenant": tenant, "documents": docs }))?;
        return Ok(0);
    }
    println!("tenant {} ({}, {} dims, generation {}): {} documents", tenant.name, tenant.model, tenant.dims, tenant.generation, docs.len());
    for d in docs {
        match d.status {
            DocumentStatus::Indexed => println!(
                "  {:>5} chunks  {:<9} {}  ({}){}",
                d.chunks,
                d.parser.as_deref().unwrap_or("?"),
                d.path.display(),
                d.title.as_deref().unwrap_or(""),
                if d.readers.is_empty() { String::new() } else { format!("  readers: {}", d.readers.join(", ")) }
            ),
            DocumentStatus::Skipped => {
                println!("  skipped          {}: {}", d.path.display(), d.skip_reason.as_deref().unwrap_or(""))
            }
        }
        if let Some(origin) = service.origin(&d.path) {
            println!("                   from {origin}");
        }
    }
    Ok(0)
}

/// `ragbox rm`: documents removed from a tenant, through the service's write path.
pub fn rm(g: &GlobalArgs, args: RmArgs) -> anyhow::Result<u8> {
    let service = g.service()?;
    let (tenant, removed) = service.remove_paths(&Caller::local(), &args.tenant, &args.paths)?;
    if g.json {
        print_json(&serde_json::json!({ "tenant": tenant.name, "removed": removed }))?;
    } else {
        for p in &removed {
            println!("removed {}", p.display());
        }
    }
    Ok(0)
}

/// `ragbox reembed`: a tenant's vectors rebuilt with another embedding model, then switched to.
pub fn reembed(g: &GlobalArgs, args: ReembedArgs) -> anyhow::Result<u8> {
    let service = g.service()?;
    let started = std::time::Instant::now();
    let (tenant, model, report) = service.reembed(&Caller::local(), &args.tenant, &args.model)?;
    let secs = started.elapsed().as_secs_f64();
    if g.json {
        print_json(&serde_json::json!({ "tenant": tenant.name, "model": model, "report": report, "wall_s": secs }))?;
    } else {
        println!(
            "tenant {} now uses {}: {} chunks ({} embedded, {} from cache) in {secs:.1} s; the {} index stays on disk",
            tenant.name,
            model,
            report.chunks,
            report.embedded,
            report.cached,
            tenant.model
        );
    }
    Ok(0)
}
