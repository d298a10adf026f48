//! What the appliance keeps about people, and for how long: retention runs (`[retention]`),
//! legal holds and exports of conversations. Runs and holds are an admin's; a person may
//! export their own conversations, an admin anyone's. Each is recorded in the audit log (a run
//! by the `retention` row the store appends with its deletions).

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use super::{Caller, Service};
use ragbox_core::error::{Error, Result};
use ragbox_core::store::export::{export, ExportCounts, ExportFilter};
use ragbox_core::store::now_ms;
use ragbox_core::store::retention::Tenant;
use ragbox_core::store::{Hold, KeyRole, Reclaimed, RetentionReport};

/// One tenant's retention, as `ragbox retention status` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct RetentionStatus {
    /// The tenant.
    pub tenant: String,
    /// Days its conversations are kept (`None`: until deleted by hand).
    pub keep_days: Option<u32>,
    /// Holds in place on it or on people in it.
    pub holds: Vec<Hold>,
    /// What a run now would delete (`None` without a retention period).
    pub due: Option<RetentionReport>,
}

/// What a retention run did.
#[derive(Debug, Clone, Serialize)]
pub struct RetentionRun {
    /// Each tenant with a retention period.
    pub tenants: Vec<RetentionReport>,
    /// The space given back (`None`: nothing was deleted, or a dry run).
    pub reclaimed: Option<Reclaimed>,
}

/// Whose conversations to export.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Whose {
    /// Everyone's in the tenant (an admin's export).
    #[default]
    Everyone,
    /// The caller's own: those asked under their identity (for the command line and the local
    /// sign-in link, which have none, those asked without one).
    Mine,
    /// One person's: their subject, their identity (`person:ISSUER|SUBJECT`), or a key as
    /// `key:ID` or by its name. Anyone but an admin may name only themselves.
    Person(String),
}

/// What to export.
#[derive(Debug, Clone, Default)]
pub struct ExportRequest {
    /// The tenant.
    pub tenant: String,
    /// Whose.
    pub whose: Whose,
    /// Only rows written at or after this time, ms since the epoch.
    pub since_ms: Option<i64>,
}

/// How often `serve` runs retention.
const EVERY: Duration = Duration::from_secs(24 * 60 * 60);

impl Service {
    /// The tenants `tenant` names (all the caller reaches when `None`).
    fn retention_tenants(&self, caller: &Caller, tenant: Option<&str>) -> Result<Vec<ragbox_core::store::TenantRow>> {
        match tenant {
            Some(name) => Ok(vec![self.tenant(caller, name)?]),
            None => self.tenants(caller),
        }
    }

    /// Each tenant's retention period, holds, and what a run now would delete (admin only).
    pub fn retention_status(&self, caller: &Caller, tenant: Option<&str>) -> Result<Vec<RetentionStatus>> {
        caller.require(KeyRole::Admin, "reading the retention status")?;
        let catalog = self.store.catalog();
        let mut out = Vec::new();
        for t in self.retention_tenants(caller, tenant)? {
            let keep_days = self.config().retention.days_for(&t.name);
            let holds = catalog.retention().holds(Some(&t.name))?.into_iter().filter(Hold::active).collect();
            let due = keep_days.map(|days| catalog.retention().run(Tenant { id: t.id, name: &t.name }, days, now_ms(), true, (caller.key_id, &caller.name))).transpose()?;
            out.push(RetentionStatus { tenant: t.name, keep_days, holds, due });
        }
        Ok(out)
    }

    /// Deletes each tenant's conversations past its retention period (admin only; `dry`: says
    /// what would go), then vacuums the catalog when anything went.
    pub fn retention_run(&self, caller: &Caller, tenant: Option<&str>, dry: bool) -> Result<RetentionRun> {
        caller.require(KeyRole::Admin, "running retention")?;
        let catalog = self.store.catalog();
        let mut tenants = Vec::new();
        for t in self.retention_tenants(caller, tenant)? {
            if let Some(days) = self.config().retention.days_for(&t.name) {
                tenants.push(catalog.retention().run(Tenant { id: t.id, name: &t.name }, days, now_ms(), dry, (caller.key_id, &caller.name))?);
            }
        }
        // A run stopped before its vacuum left the mark: this one finishes it.
        let reclaimed = if !dry && catalog.retention().reclaim_pending()? { Some(catalog.retention().reclaim()?) } else { None };
        Ok(RetentionRun { tenants, reclaimed })
    }

    /// Places a legal hold on `tenant`, or on `person` in it (admin only).
    pub fn place_hold(&self, caller: &Caller, tenant: &str, person: Option<&str>, reason: &str) -> Result<Hold> {
        caller.scope(tenant)?;
        caller.require(KeyRole::Admin, "placing a legal hold")?;
        let result = self.store.catalog().retention().place_hold(tenant, person, reason);
        self.audit_outcome(
            caller,
            tenant,
            "hold_place",
            result,
            |h| serde_json::json!({ "hold": h.id, "person": h.person, "reason": h.reason }),
            serde_json::json!({ "person": person }),
        )
    }

    /// Releases legal hold `id` (admin only).
    pub fn release_hold(&self, caller: &Caller, id: i64) -> Result<Hold> {
        caller.require(KeyRole::Admin, "releasing a legal hold")?;
        let result = self.store.catalog().retention().release_hold(id);
        let tenant = result.as_ref().map(|h| h.tenant.clone()).unwrap_or_default();
        self.audit_outcome(caller, &tenant, "hold_release", result, |h| serde_json::json!({ "hold": h.id, "person": h.person }), serde_json::json!({ "hold": id }))
    }

    /// Writes conversations of `request.tenant` as JSON records to `out`: everyone's or
    /// another person's for an admin, anyone's own.
    pub fn export(&self, caller: &Caller, request: &ExportRequest, out: &mut dyn FnMut(&serde_json::Value) -> Result<()>) -> Result<ExportCounts> {
        let tenant = self.tenant(caller, &request.tenant)?;
        let me = caller.identity().unwrap_or_default();
        let names = match &request.whose {
            Whose::Everyone => {
                caller.require(KeyRole::Admin, "exporting everyone's conversations")?;
                Vec::new()
            }
            Whose::Mine => vec![me.clone()],
            Whose::Person(p) if *p == me => vec![me.clone()],
            Whose::Person(p) => {
                caller.require(KeyRole::Admin, "exporting another person's conversations")?;
                self.store.catalog().retention().person_names(p)?
            }
        };
        let person = names.first().cloned();
        let filter = ExportFilter { person: names, since_ms: request.since_ms };
        let result = export(self.store.catalog(), &tenant, &filter, out);
        self.audit_outcome(
            caller,
            &tenant.name,
            "export",
            result,
            |c| serde_json::json!({ "person": person, "since_ms": request.since_ms, "counts": c }),
            serde_json::json!({ "person": person }),
        )
    }

    /// Runs retention for as long as the process lives, on a thread of its own: once at start,
    /// then daily. Returns the thread's handle; `None` when no tenant has a retention period.
    pub fn start_retention_schedule(self: &Arc<Self>) -> Result<Option<std::thread::JoinHandle<()>>> {
        if !self.config().retention.any() {
            return Ok(None);
        }
        let service = self.clone();
        let caller = Caller { name: "retention schedule".into(), ..Caller::local() };
        let handle = std::thread::Builder::new()
            .name("ragbox-retention".into())
            .spawn(move || loop {
                match service.retention_run(&caller, None, false) {
                    Ok(run) => {
                        for r in run.tenants.iter().filter(|r| r.rows() > 0) {
                            tracing::info!(tenant = %r.tenant, answers = r.answers, turns = r.turns, events = r.events_blanked, "retention: deleted conversations older than {} days", r.keep_days);
                        }
                    }
                    Err(e) => tracing::warn!("retention: {e}"),
                }
                std::thread::sleep(EVERY);
            })
            .map_err(|e| Error::Bug(format!("the retention thread did not start: {e}")))?;
        Ok(Some(handle))
    }
}
