//! ragbox-service: what a request does, once, for both faces (the CLI and the HTTP server).
//!
//! A [`Service`] owns the application (configuration, loaded models) and the open store; every
//! operation takes a [`Caller`] (who asks, in which role, for which tenants) and writes its
//! hash-chained audit row. Operations are synchronous, like the stages below them; the server
//! runs them on blocking threads. The faces parse arguments or HTTP and print or serialise;
//! they depend on this crate alone, not on `ragbox-core`, so what they can reach of the pipeline
//! is what this crate re-exports (cargo refuses anything else).
//!
//! A tenant outside the caller's scope reads exactly like one that does not exist
//! ([`Error::UnknownTenant`] with no names listed), and so do sessions, answers, documents and
//! jobs of another tenant ([`Error::NotFound`]).
//!
//! May import `ragbox-core`'s `types`, `error`, `config`, `access`, `allowlist`, `chunk`, `store`,
//! `ingest`, `retrieve`, `generate`, `answer` and `app`.
//!
//! A caller who reads only some groups' documents ([`Caller::audience`]) is served through the
//! retriever's in-index filter and the catalog's readers everywhere: searches, answers, chat
//! memory, the documents list and text, the answer log. A document it may not read answers
//! exactly like one that does not exist.
//!
//! ```
//! use ragbox_service::{Caller, KeyRole};
//! let me = Caller::local();
//! assert_eq!(me.role, KeyRole::Admin);
//! assert!(me.reaches("any-tenant"));
//! let alice = Caller { tenant: Some("acme".into()), role: KeyRole::Reader, ..Caller::local() };
//! assert!(alice.reaches("acme") && !alice.reaches("globex"));
//! ```

#![warn(missing_docs)]

mod answering;
mod documents;
mod embeddings;
mod retention;
mod sources;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use serde::Serialize;

use ragbox_core::app::App;
use ragbox_core::config::Config;
use ragbox_core::store::{EventRecord, Store};

pub use ragbox_core::answer::{evidence::{AnswerOutcome, DecidedBy}, Answer, Refusal, Source};
pub use ragbox_core::conversation::Standalone;
pub use ragbox_core::generate::{Discard, Message, TokenSink};
pub use ragbox_core::chunk::ChunkerKind;
pub use ragbox_core::ingest::{Change, IngestEvent, IngestOptions, IngestReport};
pub use ragbox_core::store::backup::{restore, BackupManifest};
pub use ragbox_core::store::migrate::{CatalogCopy, Migrated, Migration};
pub use ragbox_core::retrieve::{Candidate, Evidence, Hit, Outcome, Retrieval, StageRank};
pub use ragbox_core::store::{
    ChainReport, ChunkRow, DocumentRow, DocumentStatus, EventFilter, EventRow, KeyRole, KeyRow, Rating, TenantRow, TurnRow, KEY_PREFIX,
    DEFAULT_TENANT,
};
pub use answering::{AskOptions, Asked, ChatTurn, SearchOptions, SearchResult};
pub use retention::{ExportRequest, RetentionRun, RetentionStatus, Whose};
pub use ragbox_core::store::{ExportCounts, Hold, Reclaimed, RetentionReport};
pub use ragbox_core::app::DoctorReport;
pub use documents::{check_upload_name, DocumentText, Job, JobKind, JobState};
pub use embeddings::{EmbedWith, Embedded, MAX_EMBED_INPUTS};
pub use sources::{Running, SourceProgress, SourceRun, SourceStatus, Synced, SyncEvent, SyncReport};
pub use ragbox_core::types::TextKind;
/// The settings, as the faces read and override them.
pub use ragbox_core::config;
/// Which hosts a network client may contact (the OIDC provider's, besides the generator's).
pub use ragbox_core::allowlist;
/// Who reads what: audiences and document readers.
pub use ragbox_core::access::{Audience, ACCESS_FILE};
/// What an operation fails with, and the kind of fault (which exit code, which HTTP status).
pub use ragbox_core::error::{Error, Fault, Result};

/// Who is asking: a key of the HTTP API, a person signed in with the organisation's identity, or
/// the local command line.
#[derive(Debug, Clone, Serialize)]
pub struct Caller {
    /// The key's id (`None`: the command line).
    pub key_id: Option<i64>,
    /// The key's name (`cli` for the command line).
    pub name: String,
    /// What it may do.
    pub role: KeyRole,
    /// The tenant it reaches; `None` reaches every tenant (admin keys, the command line).
    pub tenant: Option<String>,
    /// The client's address, when it came over the network.
    pub address: Option<String>,
    /// Whose documents it reads: everyone's (the command line, admin keys, keys made without
    /// groups) or the open ones and its groups'.
    pub audience: Audience,
    /// The person, when one signed in.
    pub person: Option<Person>,
}

/// A signed-in person, as the audit names them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Person {
    /// The directory entry's DN, or the token's `sub`.
    pub subject: String,
    /// The directory's URL, or the token's `iss`.
    pub issuer: String,
}

impl Caller {
    /// The local command line: whoever can read the data folder already has every tenant.
    pub fn local() -> Caller {
        Caller {
            key_id: None,
            name: "cli".into(),
            role: KeyRole::Admin,
            tenant: None,
            address: None,
            audience: Audience::Everyone,
            person: None,
        }
    }

    /// The command line reading as a member of `groups` would (`--groups`: what would they be
    /// told?); no groups is the command line itself.
    pub fn local_as(groups: &[String]) -> Caller {
        match groups.is_empty() {
            true => Caller::local(),
            false => Caller { name: format!("cli as {}", groups.join(",")), audience: Audience::groups(groups.iter().cloned()), ..Caller::local() },
        }
    }

    /// The caller a key describes.
    pub fn from_key(key: &KeyRow, address: Option<String>) -> Caller {
        let admin = key.role == KeyRole::Admin;
        Caller {
            key_id: Some(key.id),
            name: key.name.clone(),
            role: key.role,
            tenant: if admin { None } else { key.tenant.clone() },
            address,
            audience: if admin || key.groups.is_empty() { Audience::Everyone } else { Audience::groups(key.groups.iter().cloned()) },
            person: None,
        }
    }

    /// A person the directory or the identity provider vouched for, reaching `tenant` as
    /// `role` (what `[[sso.groups]]` granted): they read the open documents and their groups'.
    /// An admin reaches every tenant, as an admin key does (keys and the audit log are not a
    /// tenant's).
    pub fn person(person: Person, name: &str, groups: &[String], tenant: &str, role: KeyRole, address: Option<String>) -> Caller {
        Caller {
            key_id: None,
            name: name.to_string(),
            role,
            tenant: (role != KeyRole::Admin).then(|| tenant.to_string()),
            address,
            audience: Audience::groups(groups.iter().cloned()),
            person: Some(person),
        }
    }

    /// The one name of a person (issuer and subject) or key that its sessions are owned by and
    /// its quotas counted under; `None` for the command line.
    pub fn identity(&self) -> Option<String> {
        match (&self.person, self.key_id) {
            (Some(p), _) => Some(format!("person:{}|{}", p.issuer, p.subject)),
            (None, Some(id)) => Some(format!("key:{id}")),
            (None, None) => None,
        }
    }

    /// Who this is, for the audit: the person (subject, issuer) or the key, and its groups.
    fn who(&self) -> serde_json::Value {
        let groups = match &self.audience {
            Audience::Everyone => serde_json::Value::Null,
            Audience::Groups(g) => serde_json::json!(g),
        };
        match &self.person {
            Some(p) => serde_json::json!({ "person": self.name, "subject": p.subject, "issuer": p.issuer, "groups": groups }),
            None => serde_json::json!({ "key": self.name, "groups": groups }),
        }
    }

    /// Whether `tenant` is in scope.
    pub fn reaches(&self, tenant: &str) -> bool {
        self.tenant.as_deref().is_none_or(|t| t == tenant)
    }

    /// Refuses a tenant out of scope exactly like one that does not exist. Checked before the
    /// role, so that what a key may do says nothing about a tenant it cannot see.
    pub fn scope(&self, tenant: &str) -> Result<()> {
        if self.reaches(tenant) {
            Ok(())
        } else {
            Err(Error::UnknownTenant { name: tenant.to_string(), known: Vec::new() })
        }
    }

    fn is_local(&self) -> bool {
        self.key_id.is_none() && self.person.is_none()
    }

    /// Refuses a caller whose role is below `role`.
    pub fn require(&self, role: KeyRole, what: &str) -> Result<()> {
        if self.role >= role {
            Ok(())
        } else {
            Err(Error::Denied(format!("{what} needs a {role} key; this key is a {}", self.role)))
        }
    }
}

/// Whether the service is ready to answer, for `/readyz` and `doctor`.
#[derive(Debug, Clone, Serialize)]
pub struct Health {
    /// The store opened and its catalog answers.
    pub store: bool,
    /// The configured embedder is loaded.
    pub embedder: bool,
    /// The reranker is loaded (`None`: its weights are absent; retrieval runs without it).
    pub reranker: Option<bool>,
    /// Tenants in the catalog.
    pub tenants: usize,
    /// Everything a request needs is loaded.
    pub ready: bool,
    /// Why not, when not.
    pub problems: Vec<String>,
}

/// Moves the configured data folder from its backend to `to` (`ragbox migrate`): the catalog
/// copied when it changes place, then every tenant's indexes built from it and its embedding
/// cache.
pub fn migrate(config: &config::Config, to: config::StoreBackend) -> Result<Migration> {
    let source = config.store.backends(config.store.backend, &config.data_dir)?;
    ragbox_core::store::migrate::migrate(&config.data_dir, source, config.store.backends(to, &config.data_dir)?)
}

/// The shared service: one per process, behind an [`Arc`] in the server.
pub struct Service {
    app: Arc<App>,
    store: Store,
    jobs: documents::Jobs,
    /// One writer per tenant inside this process (the store's lock file covers other processes).
    writers: Mutex<HashMap<String, Arc<Mutex<()>>>>,
    /// What each `[[sources]]` entry is doing now.
    sources: sources::Board,
}

impl Service {
    /// Builds the application and opens the data folder.
    pub fn open(config: Config) -> Result<Service> {
        let app = App::new(config)?;
        let store = app.store()?;
        Ok(Service { app: Arc::new(app), store, jobs: documents::Jobs::default(), writers: Mutex::default(), sources: sources::Board::default() })
    }

    /// The configuration in force.
    pub fn config(&self) -> &Config {
        &self.app.config
    }

    /// The tenant `name` if the caller reaches it. Out of scope reads exactly like unknown;
    /// the command line also lists the tenants there are.
    pub fn tenant(&self, caller: &Caller, name: &str) -> Result<TenantRow> {
        if caller.is_local() {
            return self.store.catalog().require_tenant(name);
        }
        match self.store.catalog().tenant(name)? {
            Some(t) if caller.reaches(&t.name) => Ok(t),
            _ => Err(Error::UnknownTenant { name: name.to_string(), known: Vec::new() }),
        }
    }

    /// The tenants the caller reaches.
    pub fn tenants(&self, caller: &Caller) -> Result<Vec<TenantRow>> {
        Ok(self.store.catalog().tenants()?.into_iter().filter(|t| caller.reaches(&t.name)).collect())
    }

    /// Loads the configured embedder and reranker now, so the first request does not pay for it.
    pub fn warm_up(&self) -> Result<()> {
        self.app.embedder(None)?;
        for t in self.store.catalog().tenants()? {
            self.app.index_embedder(&t.model)?;
        }
        self.app.reranker()?;
        Ok(())
    }

    /// Loads the generator now (the server does this at start unless told not to).
    pub fn warm_up_generator(&self) -> Result<String> {
        Ok(self.app.generator(None)?.model_id().to_string())
    }

    /// What is loaded and open.
    pub fn health(&self) -> Health {
        let mut problems = Vec::new();
        let (store, tenants) = match self.store.catalog().tenants() {
            Ok(t) => (true, t.len()),
            Err(e) => {
                problems.push(format!("catalog: {e}"));
                (false, 0)
            }
        };
        let embedder = match self.app.embedder(None) {
            Ok(_) => true,
            Err(e) => {
                problems.push(format!("embedder: {e}"));
                false
            }
        };
        let reranker = match self.app.reranker() {
            Ok(r) => r.map(|_| true),
            Err(e) => {
                problems.push(format!("reranker: {e}"));
                Some(false)
            }
        };
        Health { store, embedder, reranker, tenants, ready: problems.is_empty(), problems }
    }

    /// Appends an audit row for `caller`. Failing to write the audit trail fails the request:
    /// an action that cannot be recorded is not done silently.
    /// Every row names who acted (`detail.who`: the person's subject and issuer, or the key,
    /// with the groups it reads) besides the client's address.
    pub(crate) fn audit(&self, caller: &Caller, record: EventRecord<'_>) -> Result<i64> {
        let mut detail = match record.detail {
            serde_json::Value::Object(o) => o.clone(),
            serde_json::Value::Null => serde_json::Map::new(),
            other => serde_json::Map::from_iter([("value".to_string(), other.clone())]),
        };
        if let Some(addr) = &caller.address {
            detail.insert("address".into(), serde_json::Value::String(addr.clone()));
        }
        if !caller.is_local() {
            detail.insert("who".into(), caller.who());
        }
        let detail = if detail.is_empty() { serde_json::Value::Null } else { serde_json::Value::Object(detail) };
        self.store.catalog().audit().append(&EventRecord { key_id: caller.key_id, key_name: &caller.name, detail: &detail, ..record })
    }

    /// Writes the audit event of an operation that ended in `result`: outcome "ok" with
    /// `ok_detail` of its value, or "error: …" with `err_detail`; returns `result`. The
    /// operation's own error comes first: an audit row that cannot be written on a full disk must
    /// not hide why the operation failed (but a success that cannot be recorded fails).
    pub(crate) fn audit_outcome<T>(
        &self,
        caller: &Caller,
        tenant: &str,
        action: &str,
        result: Result<T>,
        ok_detail: impl FnOnce(&T) -> serde_json::Value,
        err_detail: serde_json::Value,
    ) -> Result<T> {
        let (outcome, detail) = match &result {
            Ok(value) => ("ok".to_string(), ok_detail(value)),
            Err(e) => (format!("error: {e}"), err_detail),
        };
        let audited = self.audit(caller, EventRecord { tenant, action, outcome: &outcome, detail: &detail, ..EventRecord::default() });
        let value = result?;
        audited?;
        Ok(value)
    }

    /// Where prompts go (the start-up line), without contacting anything.
    pub fn generator_status(&self) -> String {
        self.app.generator_status(false)
    }

    /// The doctor's report for the command line, without opening the data folder's store first:
    /// a damaged catalog is something the report shows, not a reason to give none.
    pub fn diagnose(config: Config) -> Result<DoctorReport> {
        let lines = sources::source_lines(&config);
        let mut report = App::new(config)?.doctor();
        report.sources = lines;
        Ok(report)
    }

    /// `doctor`'s report (build, device, models verified, every tenant's generations and
    /// consistency): admins only.
    pub fn doctor(&self, caller: &Caller) -> Result<DoctorReport> {
        caller.require(KeyRole::Admin, "the doctor's report")?;
        let mut report = self.app.doctor();
        report.sources = sources::source_lines(self.config());
        Ok(report)
    }

    /// Records a failed authentication (no key, an unknown or revoked key) from `address`.
    pub fn record_failed_auth(&self, address: &str, tenant: &str, reason: &str) -> Result<i64> {
        let detail = serde_json::json!({ "address": address, "reason": reason });
        self.store.catalog().audit().append(&EventRecord {
            tenant,
            action: "auth_failed",
            outcome: "denied",
            detail: &detail,
            ..EventRecord::default()
        })
    }

    /// Counts one request of kind `what` by `who` (a caller's identity) against `limit` per
    /// `window`, in the catalog, so that every process and node sharing it counts the request
    /// once: `Ok(())` within the limit, else the seconds until one is free again.
    pub fn take_quota(&self, who: &str, what: &str, limit: u32, window: std::time::Duration) -> Result<std::result::Result<(), u64>> {
        let window_ms = i64::try_from(window.as_millis()).unwrap_or(i64::MAX);
        self.store.catalog().quotas().take(who, what, limit, window_ms, ragbox_core::store::now_ms())
    }

    /// Records a request refused because `caller` is over its limit (`what`: which one).
    pub fn record_quota_exceeded(&self, caller: &Caller, tenant: &str, what: &str, limit: u32) -> Result<i64> {
        let detail = serde_json::json!({ "limit": what, "allowed": limit });
        self.audit(caller, EventRecord { tenant, action: "quota_exceeded", outcome: "denied", detail: &detail, ..EventRecord::default() })
    }

    /// The key a presented secret belongs to, if it is active.
    pub fn authenticate(&self, secret: &str) -> Result<Option<KeyRow>> {
        self.store.catalog().keys().authenticate(secret)
    }

    /// Makes a key (admin); the secret is returned once and never stored. With `groups`, it
    /// reads only the open documents and those groups' (a machine acting for a team).
    pub fn create_key(&self, caller: &Caller, name: &str, tenant: Option<&str>, role: KeyRole, groups: &[String]) -> Result<(KeyRow, String)> {
        caller.require(KeyRole::Admin, "creating keys")?;
        if role == KeyRole::Admin && !groups.is_empty() {
            return Err(Error::Invalid("an admin key reads every document; give groups to a reader or writer key".into()));
        }
        let (row, secret) = self.store.catalog().keys().create_for_groups(name, tenant, role, groups)?;
        let detail = serde_json::json!({ "key": row.id, "name": row.name, "role": row.role, "groups": row.groups });
        self.audit(caller, EventRecord { tenant: tenant.unwrap_or(""), action: "key_create", detail: &detail, ..EventRecord::default() })?;
        Ok((row, secret))
    }

    /// Every key (admin).
    pub fn keys(&self, caller: &Caller) -> Result<Vec<KeyRow>> {
        caller.require(KeyRole::Admin, "listing keys")?;
        self.store.catalog().keys().list()
    }

    /// Revokes a key (admin).
    pub fn revoke_key(&self, caller: &Caller, id: i64) -> Result<KeyRow> {
        caller.require(KeyRole::Admin, "revoking keys")?;
        let row = self.store.catalog().keys().revoke(id).map_err(|e| match e {
            Error::Invalid(m) if !caller.is_local() => Error::NotFound(m),
            e => e,
        })?;
        let detail = serde_json::json!({ "key": row.id, "name": row.name });
        self.audit(
            caller,
            EventRecord { tenant: row.tenant.as_deref().unwrap_or(""), action: "key_revoke", detail: &detail, ..EventRecord::default() },
        )?;
        Ok(row)
    }

    /// Audit rows (admin keys and the command line only).
    pub fn audit_events(&self, caller: &Caller, filter: &EventFilter) -> Result<Vec<EventRow>> {
        caller.require(KeyRole::Admin, "reading the audit log")?;
        self.store.catalog().audit().list(filter)
    }

    /// Walks the audit chain (admin).
    pub fn verify_audit(&self, caller: &Caller) -> Result<ChainReport> {
        caller.require(KeyRole::Admin, "verifying the audit log")?;
        self.store.catalog().audit().verify()
    }

    /// A consistent online copy of the data folder into `dest` (admin), audited as `backup` with
    /// where it went and what it holds.
    pub fn backup(&self, caller: &Caller, dest: &std::path::Path) -> Result<ragbox_core::store::backup::BackupManifest> {
        caller.require(KeyRole::Admin, "backing up the data folder")?;
        let result = self.store.backup(dest);
        let ok = |m: &ragbox_core::store::backup::BackupManifest| serde_json::json!({ "dest": dest, "files": m.files.len(), "bytes": m.bytes() });
        self.audit_outcome(caller, "", "backup", result, ok, serde_json::json!({ "dest": dest }))
    }

    /// Rates an answer. `tenant`, when given, must be the answer's tenant (else: not found).
    pub fn feedback(&self, caller: &Caller, tenant: Option<&str>, answer_id: i64, rating: Rating, comment: Option<&str>) -> Result<i64> {
        let not_found = || Error::NotFound(format!("no answer {answer_id} in this tenant"));
        if !caller.is_local() || tenant.is_some() {
            let entry = self.store.catalog().answers().get(answer_id)?.ok_or_else(not_found)?;
            if !caller.reaches(&entry.tenant) || tenant.is_some_and(|t| t != entry.tenant) {
                return Err(not_found());
            }
        }
        let id = self.store.catalog().answers().add_feedback(answer_id, rating, comment)?;
        let answer_tenant = self.store.catalog().answers().get(answer_id)?.map(|e| e.tenant).unwrap_or_default();
        let detail = serde_json::json!({ "answer_id": answer_id, "rating": rating, "feedback_id": id });
        self.audit(caller, EventRecord { tenant: &answer_tenant, action: "feedback", question: comment.unwrap_or(""), detail: &detail, ..EventRecord::default() })?;
        Ok(id)
    }

    fn writer_lock(&self, tenant: &str) -> Arc<Mutex<()>> {
        let mut m = self.writers.lock().unwrap_or_else(|e| e.into_inner());
        m.entry(tenant.to_string()).or_default().clone()
    }

    fn uploads(&self, tenant: &str) -> PathBuf {
        self.store.layout().uploads(tenant)
    }
}
