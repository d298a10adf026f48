//! `ragbox keys create|list|revoke`: API keys for `ragbox serve`. A key is shown once, when it
//! is made; the catalog keeps only its sha256.

use clap::{Args, Subcommand};

use ragbox_service::{Caller, KeyRole, KeyRow};

use super::{print_json, GlobalArgs};

/// `keys` subcommands.
#[derive(Debug, Subcommand)]
pub enum KeysCmd {
    /// Make a key and print it once.
    Create(CreateArgs),
    /// List keys (never their secrets).
    List,
    /// Revoke a key by id; requests with it are refused from then on.
    Revoke(RevokeArgs),
}

/// Arguments of `keys create`.
#[derive(Debug, Args)]
pub struct CreateArgs {
    /// The tenant the key reaches (an admin key without one reaches every tenant).
    #[arg(long)]
    pub tenant: Option<String>,
    /// reader (search, ask, chat, feedback, list), writer (also upload, remove, re-ingest) or
    /// admin (every tenant, keys and the audit log).
    #[arg(long, default_value = "reader")]
    pub role: KeyRole,
    /// Who or what the key is for (shown in the audit log).
    #[arg(long, default_value = "unnamed")]
    pub name: String,
    /// The groups whose documents it reads besides the open ones (comma-separated); without,
    /// it reads every document of its tenant.
    #[arg(long, value_delimiter = ',')]
    pub groups: Vec<String>,
}

/// Arguments of `keys revoke`.
#[derive(Debug, Args)]
pub struct RevokeArgs {
    /// The key's id (`ragbox keys list`).
    pub id: i64,
}

fn scope(k: &KeyRow) -> String {
    let tenant = k.tenant.clone().unwrap_or_else(|| "all tenants".into());
    match k.groups.is_empty() {
        true => tenant,
        false => format!("{tenant}, groups {}", k.groups.join(",")),
    }
}

/// `ragbox keys`: API keys created (shown once), listed or revoked.
pub fn run(g: &GlobalArgs, cmd: KeysCmd) -> anyhow::Result<u8> {
    let service = g.service()?;
    let caller = Caller::local();
    match cmd {
        KeysCmd::Create(a) => {
            let (row, secret) = service.create_key(&caller, &a.name, a.tenant.as_deref(), a.role, &a.groups)?;
            if g.json {
                print_json(&serde_json::json!({ "key": row, "secret": secret }))?;
            } else {
                println!("{secret}");
                eprintln!(
                    "key {} ({}, {} of {}): shown once; the catalog keeps only its hash. Send it as `Authorization: Bearer <key>`.",
                    row.id,
                    row.name,
                    row.role,
                    scope(&row)
                );
            }
        }
        KeysCmd::List => {
            let keys = service.keys(&caller)?;
            if g.json {
                print_json(&keys)?;
            } else {
                for k in &keys {
                    let state = if k.revoked_ms.is_some() { "revoked" } else { "active" };
                    println!("{:>4}  {:<8} {:<7} {:<20} {}", k.id, state, k.role.to_string(), scope(k), k.name);
                }
                if keys.is_empty() {
                    println!("no keys yet; `ragbox keys create --tenant T` makes one");
                }
            }
        }
        KeysCmd::Revoke(a) => {
            let row = service.revoke_key(&caller, a.id)?;
            if g.json {
                print_json(&row)?;
            } else {
                println!("revoked key {} ({})", row.id, row.name);
            }
        }
    }
    Ok(0)
}
