//! `ragbox retention status|run|hold|release`: how long each tenant keeps its conversations
//! (`[retention]`), what a run deletes, and legal holds that keep a tenant's or a person's rows.

use clap::Subcommand;

use ragbox_service::{Caller, RetentionReport};

use super::audit::utc;
use super::{print_json, GlobalArgs};

/// `retention` subcommands.
#[derive(Debug, Subcommand)]
pub enum RetentionCmd {
    /// Each tenant's retention period, its holds, and what a run now would delete.
    Status {
        /// Only this tenant.
        #[arg(long)]
        tenant: Option<String>,
    },
    /// Delete conversations older than each tenant's period (except what a hold keeps), blank
    /// them in the audit log, and vacuum the catalog.
    Run {
        /// Only this tenant.
        #[arg(long)]
        tenant: Option<String>,
        /// Say what would be deleted; change nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Keep a tenant's conversations (or one person's in it) out of every run until released.
    Hold {
        /// The tenant.
        #[arg(long)]
        tenant: String,
        /// Only this person's (their subject, or a key's name): else the whole tenant.
        #[arg(long)]
        person: Option<String>,
        /// Why: the matter or request (kept with the hold and in the audit log).
        #[arg(long)]
        reason: String,
    },
    /// Release a hold (its id, from `retention status`).
    Release {
        /// The hold's id.
        id: i64,
    },
}

fn summary(r: &RetentionReport) -> String {
    if r.tenant_held {
        return "the tenant is on hold: nothing is deleted".into();
    }
    let held = if r.held_people.is_empty() { String::new() } else { format!("; {} rows kept for holds on {}", r.kept_for_holds, r.held_people.join(", ")) };
    format!(
        "{} answers, {} turns, {} sessions, {} feedback, {} audit rows blanked{held}",
        r.answers, r.turns, r.sessions, r.feedback, r.events_blanked
    )
}

/// `ragbox retention ...`.
pub fn run(g: &GlobalArgs, cmd: RetentionCmd) -> anyhow::Result<u8> {
    let service = g.service()?;
    let caller = Caller::local();
    match cmd {
        RetentionCmd::Status { tenant } => {
            let status = service.retention_status(&caller, tenant.as_deref())?;
            if g.json {
                print_json(&status)?;
                return Ok(0);
            }
            for s in &status {
                match (&s.keep_days, &s.due) {
                    (Some(days), Some(due)) => println!("{}: keeps {days} days (before {}); a run now deletes {}", s.tenant, utc(due.cutoff_ms), summary(due)),
                    _ => println!("{}: keeps conversations until deleted (no [retention] days)", s.tenant),
                }
                for h in &s.holds {
                    let whom = if h.person.is_empty() { "the whole tenant".to_string() } else { h.person.clone() };
                    println!("  hold {}: {whom}, since {}: {}", h.id, utc(h.placed_ms), h.reason);
                }
            }
        }
        RetentionCmd::Run { tenant, dry_run } => {
            let run = service.retention_run(&caller, tenant.as_deref(), dry_run)?;
            if g.json {
                print_json(&run)?;
                return Ok(0);
            }
            if run.tenants.is_empty() {
                println!("no tenant has a retention period: set [retention] days (config/default.toml)");
            }
            for r in &run.tenants {
                let verb = if dry_run { "would delete" } else { "deleted" };
                println!("{}: {verb} conversations before {} ({} days): {}", r.tenant, utc(r.cutoff_ms), r.keep_days, summary(r));
            }
            if let Some(v) = &run.reclaimed {
                let sizes = match (v.bytes_before, v.bytes_after) {
                    (Some(b), Some(a)) => format!(": catalog {b} → {a} bytes"),
                    _ => String::new(),
                };
                println!("{}{sizes}", v.how);
                if v.wal_kept {
                    println!("note: another process was reading the catalog, so its write-ahead log still holds the deleted rows until the next checkpoint; run again when it is idle");
                }
            }
        }
        RetentionCmd::Hold { tenant, person, reason } => {
            let hold = service.place_hold(&caller, &tenant, person.as_deref(), &reason)?;
            if g.json {
                print_json(&hold)?;
            } else {
                let whom = if hold.person.is_empty() { format!("tenant {}", hold.tenant) } else { format!("{} in {}", hold.person, hold.tenant) };
                println!("hold {} placed on {whom}: retention deletes none of their conversations until `ragbox retention release {}`", hold.id, hold.id);
            }
        }
        RetentionCmd::Release { id } => {
            let hold = service.release_hold(&caller, id)?;
            if g.json {
                print_json(&hold)?;
            } else {
                println!("hold {} released: the next retention run deletes what it kept", hold.id);
            }
        }
    }
    Ok(0)
}
