//! `[[sources]]`: mailboxes and file shares kept in sync. One sync of a source brings its
//! mirror (`<data>/sources/<name>/`) in line with the server ([`ragbox_sources::sync`]), then
//! ingests the mirror into the source's tenant through the one write path
//! ([`Service::ingest_now`]'s), so a message or file gone from the server is pruned from the
//! catalog like a deleted local file. A source that cannot be reached changes nothing: its
//! mirror is left as it was and no ingest runs, so nothing is pruned because a server was down.
//!
//! The last result of every source is kept beside its mirror (`.ragbox-sync-last.json`, hidden
//! from the ingest walk), so `ragbox sync`, `ragbox doctor`, the server's admin view and
//! `/metrics` read the same history; what a running sync is doing is in memory, per process.
//! One sync of a source runs at a time across processes (a lock file in its mirror).
//!
//! A source's `groups` become an access rule for its mirror, ahead of the configured ones, and
//! every document keeps the path it was mirrored to, from which [`Service::origin`] names the
//! mailbox message or share file it came from.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use ragbox_core::access::AccessRule;
use ragbox_core::config::{Config, SourceConfig};
use ragbox_core::error::{Error, Result};
use ragbox_core::ingest::{IngestEvent, IngestReport};
use ragbox_core::store::{EventRecord, KeyRole, SOURCES_DIR};
pub use ragbox_sources::{SyncEvent, SyncReport};

use super::{Caller, Service};

/// The file of a mirror holding its source's last result.
const LAST_FILE: &str = ".ragbox-sync-last.json";
/// The lock file of a mirror: held while the source syncs.
const LOCK_FILE: &str = ".ragbox-sync.lock";

/// How a source's last sync ended, kept beside its mirror.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceRun {
    /// When it started (ms since the epoch).
    pub started_ms: i64,
    /// When it ended.
    pub finished_ms: i64,
    /// Whether it finished.
    pub ok: bool,
    /// Why it did not.
    pub error: Option<String>,
    /// What the mirror did.
    pub sync: SyncReport,
    /// What ingest did with the mirror: documents added, updated, removed, unchanged, skipped.
    pub added: usize,
    /// Documents updated.
    pub updated: usize,
    /// Documents removed (pruned).
    pub removed: usize,
    /// Documents unchanged.
    pub unchanged: usize,
    /// Files skipped (with reasons in the ingest report).
    pub skipped: usize,
    /// The last sync that finished (ms since the epoch), this one or an earlier one.
    pub last_success_ms: Option<i64>,
    /// Failed syncs in a row (0 after one that finished).
    pub failures_in_a_row: u32,
    /// Failed syncs since the mirror was made.
    pub failures_total: u64,
}

/// A source as the admin view, `doctor` and `/metrics` show it.
#[derive(Debug, Clone, Serialize)]
pub struct SourceStatus {
    /// Its configuration (the password's file or variable name, never the password).
    pub config: SourceConfig,
    /// Where it is.
    pub location: String,
    /// Its mirror.
    pub mirror: PathBuf,
    /// What it is doing now, in this process.
    pub running: Option<Running>,
    /// Its last sync, by any process.
    pub last: Option<SourceRun>,
}

/// A sync in progress.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Running {
    /// `listing`, `fetching` or `ingesting`.
    pub phase: &'static str,
    /// Items fetched or files ingested so far.
    pub done: usize,
    /// Of how many (0 until known).
    pub total: usize,
    /// When it started (ms since the epoch).
    pub started_ms: i64,
}

/// What one sync did, for the caller.
#[derive(Debug, Clone, Serialize)]
pub struct Synced {
    /// The source.
    pub source: String,
    /// Its tenant.
    pub tenant: String,
    /// What the mirror did.
    pub sync: SyncReport,
    /// What ingest did.
    pub ingest: IngestReport,
}

/// Progress of a sync.
#[derive(Debug)]
pub enum SourceProgress<'a> {
    /// The mirror moved.
    Sync(&'a SyncEvent),
    /// Ingest of the mirror moved.
    Ingest(&'a IngestEvent<'a>),
}

/// What each source of this process is doing now, and which were asked to sync now.
#[derive(Debug, Default)]
pub(crate) struct Board {
    running: Mutex<HashMap<String, Running>>,
    requested: Mutex<HashSet<String>>,
    wake: Condvar,
}

impl Board {
    fn set(&self, name: &str, update: impl FnOnce(&mut Running)) {
        let mut map = self.running.lock().unwrap_or_else(|e| e.into_inner());
        let entry = map.entry(name.to_string()).or_insert(Running { phase: "listing", done: 0, total: 0, started_ms: now_ms() });
        update(entry);
    }

    fn clear(&self, name: &str) {
        self.running.lock().unwrap_or_else(|e| e.into_inner()).remove(name);
    }

    fn get(&self, name: &str) -> Option<Running> {
        self.running.lock().unwrap_or_else(|e| e.into_inner()).get(name).cloned()
    }
}

/// The longest wait before a source that failed is tried again (its interval, if shorter).
const RETRY_CAP: Duration = Duration::from_secs(300);

impl Service {
    /// Runs the sources with an `interval` for as long as the process lives, on a thread of its
    /// own, one source at a time: each once at start, then every `interval`; one that failed is
    /// tried again sooner (30 s, doubling, at most 5 min or its interval); one asked for by
    /// [`Service::request_sync`] at once. Returns the thread's handle, `None` when no source
    /// has an interval.
    pub fn start_source_schedule(self: &Arc<Self>) -> Result<Option<std::thread::JoinHandle<()>>> {
        let mut due: Vec<(String, Duration, Instant)> = Vec::new();
        for s in &self.config().sources {
            if let Some(every) = s.every()? {
                due.push((s.name.clone(), every, Instant::now()));
            }
        }
        let names: Vec<String> = self.config().sources.iter().map(|s| s.name.clone()).collect();
        if names.is_empty() {
            return Ok(None);
        }
        let service = self.clone();
        let caller = Caller { name: "source schedule".into(), ..Caller::local() };
        let handle = std::thread::Builder::new()
            .name("ragbox-sources".into())
            .spawn(move || loop {
                let now = Instant::now();
                let asked: Vec<String> = service.sources.requested.lock().unwrap_or_else(|e| e.into_inner()).drain().collect();
                let mut run: Vec<String> = asked.into_iter().filter(|n| names.contains(n)).collect();
                for (name, _, at) in &due {
                    if *at <= now && !run.contains(name) {
                        run.push(name.clone());
                    }
                }
                for name in run {
                    let result = service.sync_source(&caller, &name, &mut |_| {});
                    if let Err(e) = &result {
                        tracing::warn!("source {name}: {e}");
                    }
                    if let Some((_, every, at)) = due.iter_mut().find(|(n, ..)| *n == name) {
                        let failures = read_last(&service.mirror_root(&name)).map_or(0, |r| r.failures_in_a_row);
                        let wait = if result.is_ok() {
                            *every
                        } else {
                            let backoff = Duration::from_secs(30).saturating_mul(1 << failures.saturating_sub(1).min(10));
                            backoff.min(RETRY_CAP).min(*every)
                        };
                        *at = Instant::now() + wait;
                    }
                }
                let next = due.iter().map(|(.., at)| *at).min();
                let wait = next.map_or(Duration::from_secs(3600), |at| at.saturating_duration_since(Instant::now()));
                let asked = service.sources.requested.lock().unwrap_or_else(|e| e.into_inner());
                if asked.is_empty() {
                    let _ = service.sources.wake.wait_timeout(asked, wait.max(Duration::from_millis(50)));
                }
            })
            .map_err(|e| Error::Bug(format!("the sources' thread did not start: {e}")))?;
        Ok(Some(handle))
    }

    /// Asks the schedule of `ragbox serve` to sync `name` now (admin only); the status shows
    /// when it runs and how it ended.
    pub fn request_sync(&self, caller: &Caller, name: &str) -> Result<SourceStatus> {
        caller.require(KeyRole::Admin, "syncing a source")?;
        let source = self
            .config()
            .sources
            .iter()
            .find(|s| s.name == name)
            .ok_or_else(|| Error::NotFound(format!("no source is named `{name}`")))?;
        self.sources.requested.lock().unwrap_or_else(|e| e.into_inner()).insert(name.to_string());
        self.sources.wake.notify_all();
        Ok(self.source_status(source))
    }

    /// The configured sources with what they are doing and how their last sync ended (admin only).
    pub fn sources(&self, caller: &Caller) -> Result<Vec<SourceStatus>> {
        caller.require(KeyRole::Admin, "the sources' status")?;
        Ok(self.config().sources.iter().map(|s| self.source_status(s)).collect())
    }

    fn source_status(&self, source: &SourceConfig) -> SourceStatus {
        let mirror = self.mirror_root(&source.name);
        SourceStatus {
            config: source.clone(),
            location: source.location(),
            running: self.sources.get(&source.name),
            last: read_last(&mirror),
            mirror,
        }
    }

    /// The folder `name`'s mirror lives in.
    pub fn mirror_root(&self, name: &str) -> PathBuf {
        mirror_root(self.config(), name)
    }

    /// The mailbox message or share file a document's path was mirrored from, if it was.
    pub fn origin(&self, path: &Path) -> Option<String> {
        self.config().sources.iter().find_map(|s| ragbox_sources::origin(s, &self.mirror_root(&s.name), path))
    }

    /// Syncs the source `name` once (admin only): mirror, then ingest, then its last result
    /// written and an audited `sync` event. An unreachable source is an error and changes
    /// nothing; its failure is counted in its last result.
    pub fn sync_source(&self, caller: &Caller, name: &str, on_event: &mut (dyn FnMut(SourceProgress<'_>) + Send)) -> Result<Synced> {
        caller.require(KeyRole::Admin, "syncing a source")?;
        let source = self.config().sources.iter().find(|s| s.name == name).cloned().ok_or_else(|| {
            let known: Vec<&str> = self.config().sources.iter().map(|s| s.name.as_str()).collect();
            Error::Invalid(format!(
                "no source is named `{name}`; the configuration has {}",
                if known.is_empty() { "none ([[sources]] in the config file)".to_string() } else { known.join(", ") }
            ))
        })?;
        let root = self.mirror_root(&source.name);
        let mirror = ragbox_sources::Mirror::open(&root)?;
        let lock_path = root.join(LOCK_FILE);
        let lock = std::fs::File::create(&lock_path).map_err(Error::path(&lock_path))?;
        if lock.try_lock().is_err() {
            return Err(Error::Invalid(format!("source `{name}` is being synced by another process now; try again when it is done")));
        }
        let started_ms = now_ms();
        self.sources.set(name, |r| *r = Running { phase: "listing", done: 0, total: 0, started_ms });
        let result = self.sync_locked(caller, &source, &mirror, on_event);
        self.sources.clear(name);
        let previous = read_last(&root).unwrap_or_default();
        let mut run = SourceRun { started_ms, finished_ms: now_ms(), ..previous.clone() };
        match &result {
            Ok(s) => {
                run.ok = true;
                run.error = None;
                run.sync = s.sync.clone();
                (run.added, run.updated, run.removed, run.unchanged, run.skipped) =
                    (s.ingest.added, s.ingest.updated, s.ingest.removed, s.ingest.unchanged, s.ingest.skipped.len());
                run.last_success_ms = Some(run.finished_ms);
                run.failures_in_a_row = 0;
            }
            Err(e) => {
                run.ok = false;
                run.error = Some(e.to_string());
                run.sync = SyncReport::default();
                (run.added, run.updated, run.removed, run.unchanged, run.skipped) = (0, 0, 0, 0, 0);
                run.failures_in_a_row = previous.failures_in_a_row + 1;
                run.failures_total = previous.failures_total + 1;
            }
        }
        mirror.set_state(Path::new(LAST_FILE), &run)?;
        let detail = serde_json::json!({
            "source": source.name, "location": source.location(), "listed": run.sync.listed, "fetched": run.sync.fetched,
            "unchanged": run.sync.unchanged, "mirror_removed": run.sync.removed, "added": run.added, "updated": run.updated,
            "removed": run.removed, "problems": run.sync.problems,
        });
        let outcome = match &result {
            Ok(_) => "ok".to_string(),
            Err(e) => format!("error: {e}"),
        };
        self.audit(caller, EventRecord { tenant: &source.tenant, action: "sync", outcome: &outcome, detail: &detail, ..EventRecord::default() })?;
        drop(lock);
        result
    }

    fn sync_locked(
        &self,
        caller: &Caller,
        source: &SourceConfig,
        mirror: &ragbox_sources::Mirror,
        on_event: &mut (dyn FnMut(SourceProgress<'_>) + Send),
    ) -> Result<Synced> {
        let password = source.password(&|var| std::env::var(var).ok())?;
        let board = &self.sources;
        let name = source.name.as_str();
        // The board and the caller's sink follow the mirror live (the connectors run on a runtime
        // of their own, hence the sink is Send).
        let sync = ragbox_sources::sync(source, &password, mirror, &mut |event| {
            match &event {
                SyncEvent::Listed { to_fetch, .. } => board.set(name, |r| (r.phase, r.total) = ("fetching", *to_fetch)),
                SyncEvent::Fetched { .. } => board.set(name, |r| r.done += 1),
                SyncEvent::Removed { .. } => {}
            }
            on_event(SourceProgress::Sync(&event));
        });
        let sync = sync?;
        board.set(name, |r| (r.phase, r.done, r.total) = ("ingesting", 0, 0));
        let mut opts = self.ingest_options(&source.tenant, None, true, false)?;
        if !source.groups.is_empty() {
            let path = format!("{}/**", mirror.root().display());
            opts.access_rules.insert(0, AccessRule { tenant: Some(source.tenant.clone()), path, groups: source.groups.clone() });
        }
        let ingest = self.ingest_now(caller, mirror.root(), None, &opts, &mut |event| {
            match &event {
                IngestEvent::Found { files } => board.set(name, |r| r.total = *files),
                IngestEvent::Visited { .. } => board.set(name, |r| r.done += 1),
                _ => {}
            }
            on_event(SourceProgress::Ingest(&event));
        })?;
        Ok(Synced { source: source.name.clone(), tenant: source.tenant.clone(), sync, ingest })
    }

}

/// The folder source `name`'s mirror lives in.
fn mirror_root(config: &Config, name: &str) -> PathBuf {
    config.data_dir.join(SOURCES_DIR).join(name)
}

/// One line per source for `doctor`: reached (logged in and listed, nothing changed) or
/// why not, and how its last sync ended.
pub(crate) fn source_lines(config: &Config) -> Vec<String> {
    config
        .sources
        .iter()
        .map(|s| {
            let reach = s
                .password(&|var| std::env::var(var).ok())
                .and_then(|password| ragbox_sources::probe(s, &password))
                .map(|n| format!("reached, {n} items"))
                .unwrap_or_else(|e| format!("NOT REACHED: {e}"));
            let last = match read_last(&mirror_root(config, &s.name)) {
                None => "never synced".to_string(),
                Some(r) if r.ok => format!("last sync ok {} ago ({} fetched, {} pruned)", ago(r.finished_ms), r.sync.fetched, r.removed),
                Some(r) => format!(
                    "last sync FAILED {} ago ({} in a row): {}",
                    ago(r.finished_ms),
                    r.failures_in_a_row,
                    r.error.unwrap_or_default()
                ),
            };
            format!("{} ({}, tenant {}): {reach}; {last}", s.name, s.location(), s.tenant)
        })
        .collect()
}

fn read_last(root: &Path) -> Option<SourceRun> {
    let text = std::fs::read(root.join(LAST_FILE)).ok()?;
    serde_json::from_slice(&text).ok()
}

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

fn ago(ms: i64) -> String {
    let secs = ((now_ms() - ms) / 1000).max(0);
    match secs {
        s if s < 120 => format!("{s} s"),
        s if s < 7200 => format!("{} min", s / 60),
        s => format!("{} h", s / 3600),
    }
}
