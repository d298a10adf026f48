//! `ragbox migrate --to shared|local`: the catalog copied to the other backend's database, then
//! every tenant's indexes built there from it and its embedding cache (nothing re-embedded), the
//! current ones left as they are; then switch `store.backend` in the configuration.

use clap::{Args, ValueEnum};

use ragbox_service::config::StoreBackend;

use super::{print_json, GlobalArgs};

/// Where to move the indexes.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Target {
    /// Milvus and PostgreSQL, as `[store.shared]` names them.
    Shared,
    /// usearch and tantivy files in the data folder.
    Local,
}

/// Arguments of `migrate`.
#[derive(Debug, Args)]
pub struct MigrateArgs {
    /// The backend to build the indexes on.
    #[arg(long, value_enum)]
    pub to: Target,
}

/// `ragbox migrate`.
pub fn run(g: &GlobalArgs, args: MigrateArgs) -> anyhow::Result<u8> {
    let config = g.config()?;
    let (to, name) = match args.to {
        Target::Shared => (StoreBackend::Shared, "shared"),
        Target::Local => (StoreBackend::Local, "local"),
    };
    let report = ragbox_service::migrate(&config, to)?;
    if g.json {
        print_json(&serde_json::json!({ "to": name, "catalog": report.catalog, "tenants": report.tenants }))?;
        return Ok(0);
    }
    if let Some(copy) = &report.catalog {
        let rows: usize = copy.rows.iter().map(|(_, n)| n).sum();
        println!("catalog copied from {} to {}: {rows} rows in {} tables, audit chain verified", copy.from, copy.to, copy.rows.len());
        if let Some(old) = &copy.replaced {
            println!("  (an earlier copy was replaced: {old})");
        }
    }
    for m in &report.tenants {
        let built = match (&m.vector, &m.lexical) {
            (None, None) => "already current".to_string(),
            _ => "built from the catalog, 0 texts re-embedded".to_string(),
        };
        let check = if m.consistency.consistent { "consistent" } else { "NOT consistent (run `ragbox doctor`)" };
        println!(
            "tenant {} (generation {}): {} vectors, {} lexical entries, {built}; {check} ({:.1} s)",
            m.tenant, m.generation, m.consistency.vector_count, m.consistency.lexical_count, m.seconds
        );
    }
    let config_file = config.config_file.as_ref().map_or("your configuration".to_string(), |p| p.display().to_string());
    println!("now set store.backend = \"{name}\" in {config_file}; the previous indexes are left where they were");
    Ok(0)
}
