//! Documents: list, upload into the tenant's managed folder, remove, re-ingest, and the ingest
//! jobs that run in the background with their progress.
//!
//! One writer per tenant: jobs of one tenant run one after another (a per-tenant mutex here,
//! the store's lock file across processes), while readers keep serving the last committed
//! generation and pick up the new one on their next request.
//!
//! Jobs run on their own rayon pool of half the cores (at least one thread). On the global
//! pool, an ingest's batch of embeddings (a `par_iter` over batches) would hold every worker
//! until the batch is done, and each search's query embedding would wait behind it (measured:
//! 22 s per search while 400 files ingested). On a pool apart, searches and the ingest share
//! the cores through the OS scheduler instead.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde::Serialize;

use super::{Caller, Service};
use ragbox_core::error::{Error, Result};
use ragbox_core::ingest::{ingest, IngestEvent, IngestOptions, IngestReport};
use ragbox_core::store::{ChunkRow, DocumentRow, EventRecord, KeyRole, ReembedReport, TenantRow};
use ragbox_core::types::TextKind;

/// A document's parsed text, for the web page's source view.
#[derive(Debug, Clone, Serialize)]
pub struct DocumentText {
    /// The document.
    pub document: DocumentRow,
    /// Its text; chunk spans are byte offsets into it.
    pub text: String,
    /// The file changed since it was ingested: spans may no longer point at the cited words.
    pub changed: bool,
}

/// Longest upload file name, in bytes.
const MAX_NAME_BYTES: usize = 200;

/// What a job does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum JobKind {
    /// Ingest an uploaded file.
    Upload,
    /// Ingest a stored document again from its file.
    Reingest,
    /// Ingest a folder on the server (admin, local tools such as `bench serve`).
    Folder,
    /// Ingest a tenant's uploads folder when the server starts: uploads acknowledged before a
    /// stop (a crash, a kill) whose ingest did not finish.
    Resume,
}

/// Where a job is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum JobState {
    /// Waiting for the tenant's writer.
    Queued,
    /// Ingesting.
    Running,
    /// Committed.
    Done,
    /// Failed; `error` says why.
    Failed,
}

/// An ingest job and its progress.
#[derive(Debug, Clone, Serialize)]
pub struct Job {
    /// Job id.
    pub id: u64,
    /// Tenant.
    pub tenant: String,
    /// What it does.
    pub kind: JobKind,
    /// The file ingested.
    pub path: PathBuf,
    /// Where it is.
    pub state: JobState,
    /// Files the walk found.
    pub files: usize,
    /// Files looked at so far.
    pub visited: usize,
    /// Child chunks produced so far.
    pub chunks: usize,
    /// The run's report, when done.
    pub report: Option<IngestReport>,
    /// Why it failed.
    pub error: Option<String>,
}

/// The jobs of this process.
#[derive(Default)]
pub(super) struct Jobs {
    next: AtomicU64,
    all: Mutex<Vec<Job>>,
    pool: std::sync::OnceLock<Option<rayon::ThreadPool>>,
}

impl Jobs {
    fn add(&self, tenant: &str, kind: JobKind, path: PathBuf) -> u64 {
        let id = self.next.fetch_add(1, Ordering::SeqCst) + 1;
        let job = Job { id, tenant: tenant.into(), kind, path, state: JobState::Queued, files: 0, visited: 0, chunks: 0, report: None, error: None };
        let mut all = self.all.lock().unwrap_or_else(|e| e.into_inner());
        all.push(job);
        // Keep the last thousand.
        let excess = all.len().saturating_sub(1000);
        all.drain(..excess);
        id
    }

    fn update(&self, id: u64, f: impl FnOnce(&mut Job)) {
        let mut all = self.all.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(j) = all.iter_mut().find(|j| j.id == id) {
            f(j);
        }
    }

    /// The jobs' own thread pool (`None` if it could not be made: the global pool then).
    fn pool(&self) -> Option<&rayon::ThreadPool> {
        self.pool
            .get_or_init(|| {
                let threads = std::thread::available_parallelism().map_or(1, |n| (n.get() / 2).max(1));
                rayon::ThreadPoolBuilder::new().num_threads(threads).thread_name(|i| format!("ingest-pool-{i}")).build().ok()
            })
            .as_ref()
    }

    fn get(&self, id: u64) -> Option<Job> {
        self.all.lock().unwrap_or_else(|e| e.into_inner()).iter().find(|j| j.id == id).cloned()
    }

    /// Jobs queued or running, and files visited by running jobs (for metrics).
    pub(super) fn progress(&self) -> (usize, usize, usize) {
        let all = self.all.lock().unwrap_or_else(|e| e.into_inner());
        let active: Vec<&Job> = all.iter().filter(|j| matches!(j.state, JobState::Queued | JobState::Running)).collect();
        (active.len(), active.iter().map(|j| j.visited).sum(), active.iter().map(|j| j.files).sum())
    }
}

/// Checks an upload's file name: one plain path component, UTF-8, no NUL or control
/// characters, not `.`/`..`, no separators, not hidden, at most 200 bytes. The file is stored
/// under this name in the tenant's managed folder; the client never names a path.
pub fn check_upload_name(name: &str) -> Result<&str> {
    let bad = |why: &str| Err(Error::Invalid(format!("file name {name:?} refused: {why}; send a plain file name such as policy.md")));
    if name.is_empty() || name.trim().is_empty() {
        return bad("it is empty");
    }
    if name.len() > MAX_NAME_BYTES {
        return bad("it is longer than 200 bytes");
    }
    if name.chars().any(|c| c == '\0' || c.is_control()) {
        return bad("it contains NUL or control characters");
    }
    if name.contains('/') || name.contains('\\') {
        return bad("it contains a path separator (a path, not a file name)");
    }
    if name == "." || name == ".." || name.starts_with('.') {
        return bad("it is `.`/`..` or a hidden name");
    }
    if name.contains(':') {
        return bad("it contains `:`");
    }
    Ok(name)
}

impl Service {
    /// The tenant's documents with their status.
    pub fn documents(&self, caller: &Caller, tenant: &str) -> Result<(TenantRow, Vec<DocumentRow>)> {
        let tenant = self.tenant(caller, tenant)?;
        let mut docs = self.store.catalog().documents(tenant.id)?;
        docs.retain(|d| caller.audience.may_read(&d.readers));
        Ok((tenant, docs))
    }

    /// Document `id` of `tenant`, if `caller` may read it: one it may not reads as absent.
    fn document(&self, caller: &Caller, tenant: &TenantRow, id: u64) -> Result<DocumentRow> {
        self.store
            .catalog()
            .documents(tenant.id)?
            .into_iter()
            .find(|d| d.id.0 == id && caller.audience.may_read(&d.readers))
            .ok_or_else(|| Error::NotFound(format!("no document {id} in this tenant")))
    }

    /// Document `id`'s text as ingest parsed it, for showing a cited span in its place (the
    /// chunks' spans are byte offsets into this text). The file is parsed again within the
    /// ingest limits; `changed` says it no longer matches what was ingested. Audited
    /// (`read_document`): reading a whole document is an access like a search.
    pub fn document_text(&self, caller: &Caller, tenant: &str, id: u64) -> Result<DocumentText> {
        let t = self.tenant(caller, tenant)?;
        let doc = self.document(caller, &t, id)?;
        let opts = self.app.ingest_options(&t.name, None)?;
        let (parsed, sha256) = ragbox_core::ingest::reparse(&doc.path, &opts).map_err(|reason| {
            Error::NotFound(format!("the file of document {id} cannot be shown now ({reason}); re-ingest or remove it"))
        })?;
        let detail = serde_json::json!({ "document": id, "path": doc.path.to_string_lossy() });
        self.audit(caller, EventRecord { tenant: &t.name, action: "read_document", detail: &detail, ..EventRecord::default() })?;
        Ok(DocumentText { changed: sha256 != doc.sha256, text: parsed.text, document: doc })
    }

    /// Passage (chunk) `id` of `tenant`, if `caller` may read its document: one of another
    /// tenant, or of a document it may not read, is not found. Audited (`read_passage`).
    pub fn passage(&self, caller: &Caller, tenant: &str, id: u64) -> Result<ChunkRow> {
        let t = self.tenant(caller, tenant)?;
        let row = self
            .store
            .catalog()
            .chunks(t.id, &[ragbox_core::types::ChunkId(id)])?
            .into_iter()
            .find(|c| caller.audience.may_read(&c.readers))
            .ok_or_else(|| Error::NotFound(format!("no passage {id} in this tenant")))?;
        let detail = serde_json::json!({ "passage": id, "document": row.doc.0 });
        let ids = [row.id];
        self.audit(caller, EventRecord { tenant: &t.name, action: "read_passage", chunk_ids: &ids, detail: &detail, ..EventRecord::default() })?;
        Ok(row)
    }

    /// Removes documents by path (a folder removes everything ingested under it).
    pub fn remove_paths(&self, caller: &Caller, tenant: &str, paths: &[PathBuf]) -> Result<(TenantRow, Vec<PathBuf>)> {
        let tenant = self.tenant(caller, tenant)?;
        caller.require(KeyRole::Writer, "removing documents")?;
        // A caller who reads only some documents removes only those: the others under the same
        // folder are neither removed nor named.
        let readable: Vec<PathBuf>;
        let paths = if caller.audience.is_everyone() {
            paths
        } else {
            let docs = self.store.catalog().documents(tenant.id)?;
            readable = docs
                .iter()
                .filter(|d| caller.audience.may_read(&d.readers) && paths.iter().any(|p| d.path.starts_with(p)))
                .map(|d| d.path.clone())
                .collect();
            if readable.is_empty() {
                return Err(Error::NotFound(format!("nothing ingested under {paths:?} in this tenant")));
            }
            &readable[..]
        };
        let lock = self.writer_lock(&tenant.name);
        let _guard = lock.lock().unwrap_or_else(|e| e.into_inner());
        let result = ragbox_core::ingest::remove(&self.store, &tenant, paths);
        let outcome = match &result {
            Ok(_) => "ok".to_string(),
            Err(e) => format!("error: {e}"),
        };
        let removed: Vec<String> = result.as_ref().map(|r| r.iter().map(|p| p.to_string_lossy().into_owned()).collect()).unwrap_or_default();
        let detail = serde_json::json!({ "removed": removed });
        self.audit(caller, EventRecord { tenant: &tenant.name, action: "remove", outcome: &outcome, detail: &detail, ..EventRecord::default() })?;
        Ok((tenant, result?))
    }

    /// Removes document `id`; a file in the tenant's uploads folder is deleted too, so it does
    /// not come back.
    pub fn remove_document(&self, caller: &Caller, tenant: &str, id: u64) -> Result<PathBuf> {
        let t = self.tenant(caller, tenant)?;
        caller.require(KeyRole::Writer, "removing documents")?;
        let doc = self.document(caller, &t, id)?;
        let (_, removed) = self.remove_paths(caller, tenant, std::slice::from_ref(&doc.path))?;
        let uploads = self.uploads(&t.name);
        let uploads = std::fs::canonicalize(&uploads).unwrap_or(uploads);
        if doc.path.starts_with(&uploads) {
            let _ = std::fs::remove_file(&doc.path);
        }
        Ok(removed.into_iter().next().unwrap_or(doc.path))
    }

    /// Stores `bytes` as `name` in the tenant's uploads folder (the tenant is created with the
    /// configured embedder if it does not exist) and starts an ingest job for it.
    pub fn upload(self: &Arc<Self>, caller: &Caller, tenant: &str, name: &str, bytes: &[u8]) -> Result<Job> {
        caller.scope(tenant)?;
        caller.require(KeyRole::Writer, "uploading documents")?;
        let name = check_upload_name(name)?;
        ragbox_core::store::check_tenant_name(tenant)?;
        let dir = self.uploads(tenant);
        std::fs::create_dir_all(&dir).map_err(Error::path(&dir))?;
        let path = dir.join(name);
        // Written beside, then renamed: a reader (or a crash) never sees half a file.
        let tmp = dir.join(format!(".{name}.part"));
        std::fs::write(&tmp, bytes).map_err(Error::path(&tmp))?;
        std::fs::rename(&tmp, &path).map_err(Error::path(&path))?;
        let detail = serde_json::json!({ "file": name, "bytes": bytes.len() });
        self.audit(caller, EventRecord { tenant, action: "upload", detail: &detail, ..EventRecord::default() })?;
        self.start_job(caller, tenant, JobKind::Upload, path)
    }

    /// Ingests document `id` again from its file.
    pub fn reingest(self: &Arc<Self>, caller: &Caller, tenant: &str, id: u64) -> Result<Job> {
        let t = self.tenant(caller, tenant)?;
        caller.require(KeyRole::Writer, "re-ingesting documents")?;
        let doc = self.document(caller, &t, id)?;
        let detail = serde_json::json!({ "document": id, "path": doc.path.to_string_lossy() });
        self.audit(caller, EventRecord { tenant: &t.name, action: "reingest", detail: &detail, ..EventRecord::default() })?;
        self.start_job(caller, &t.name, JobKind::Reingest, doc.path)
    }

    /// Ingests a folder the server can read into `tenant` (admin only: a client never names a
    /// path; this is for local tools).
    pub fn ingest_folder(self: &Arc<Self>, caller: &Caller, tenant: &str, path: &Path) -> Result<Job> {
        caller.require(KeyRole::Admin, "ingesting a server folder")?;
        ragbox_core::store::check_tenant_name(tenant)?;
        let detail = serde_json::json!({ "path": path.to_string_lossy() });
        self.audit(caller, EventRecord { tenant, action: "ingest_folder", detail: &detail, ..EventRecord::default() })?;
        self.start_job(caller, tenant, JobKind::Folder, path.to_path_buf())
    }

    /// The ingest settings of `tenant` (the configuration's, with `chunker` if given), with the
    /// local LLM as annotator when `llm_context` (it writes each chunk a context from its
    /// whole document) and without the structural context when `structural` is false.
    pub fn ingest_options(&self, tenant: &str, chunker: Option<super::ChunkerKind>, structural: bool, llm_context: bool) -> Result<IngestOptions> {
        let mut opts = self.app.ingest_options(tenant, chunker)?;
        opts.structural_context = structural;
        if llm_context {
            opts.annotator = Some(self.app.annotator()?);
        }
        Ok(opts)
    }

    /// Ingests `path` (a file or folder this process can read) into `tenant` now, on this thread:
    /// the one write path of `ragbox ingest`, `--watch` and the server's jobs. It holds the
    /// tenant's writer lock, embeds with the model `model` names (else the tenant's own, else the
    /// configured one: [`App::ingest_embedder`](ragbox_core::app::App::ingest_embedder)), reports
    /// progress to `on_event`, and writes an `ingest` audit event with the path, the counts and
    /// the outcome (admin only: a client never names a path).
    pub fn ingest_now(
        &self,
        caller: &Caller,
        path: &Path,
        model: Option<&str>,
        opts: &IngestOptions,
        on_event: &mut dyn FnMut(IngestEvent<'_>),
    ) -> Result<IngestReport> {
        caller.require(KeyRole::Admin, "ingesting a path")?;
        self.ingest_locked(caller, path, model, opts, None, on_event)
    }

    /// [`Service::ingest_now`] for a caller already allowed to (a job's starter); `job` goes into
    /// the audit event.
    fn ingest_locked(
        &self,
        caller: &Caller,
        path: &Path,
        model: Option<&str>,
        opts: &IngestOptions,
        job: Option<u64>,
        on_event: &mut dyn FnMut(IngestEvent<'_>),
    ) -> Result<IngestReport> {
        let tenant = opts.tenant.as_str();
        ragbox_core::store::check_tenant_name(tenant)?;
        let lock = self.writer_lock(tenant);
        let _guard = lock.lock().unwrap_or_else(|e| e.into_inner());
        let result = self
            .app
            .ingest_embedder(self.store.catalog().tenant(tenant)?.as_ref(), model)
            .and_then(|embedder| ingest(&self.store, &embedder, path, opts, on_event));
        let path_text = path.to_string_lossy();
        self.audit_outcome(
            caller,
            tenant,
            "ingest",
            result,
            |r| {
                serde_json::json!({ "job": job, "path": path_text, "model": r.model, "added": r.added, "updated": r.updated,
                                    "removed": r.removed, "unchanged": r.unchanged, "skipped": r.skipped.len() })
            },
            serde_json::json!({ "job": job, "path": path_text }),
        )
    }

    /// Moves `tenant` to the embedding model `model`: every chunk embedded again from the catalog
    /// (vectors already cached for that model are reused), then the tenant switched to the new
    /// index; readers keep the old one until the switch. Holds the tenant's writer lock and writes
    /// a `reembed` audit event (admin only). Returns the tenant as it was, the model's identity and
    /// what was done.
    pub fn reembed(&self, caller: &Caller, tenant: &str, model: &str) -> Result<(TenantRow, String, ReembedReport)> {
        caller.require(KeyRole::Admin, "re-embedding a tenant")?;
        let before = self.tenant(caller, tenant)?;
        let lock = self.writer_lock(tenant);
        let _guard = lock.lock().unwrap_or_else(|e| e.into_inner());
        let result = self.app.embedder(Some(model)).and_then(|embedder| {
            let report = self.store.reembed(
                &before,
                embedder.model_id(),
                embedder.dims(),
                &mut |texts| Ok(embedder.embed(texts, TextKind::Passage)?.into_iter().map(|e| e.vector).collect()),
                256,
            )?;
            Ok((embedder.model_id().to_string(), report))
        });
        let (id, report) = self.audit_outcome(
            caller,
            tenant,
            "reembed",
            result,
            |(id, r)| serde_json::json!({ "from": before.model, "to": id, "chunks": r.chunks, "embedded": r.embedded }),
            serde_json::json!({ "from": before.model, "to": model }),
        )?;
        Ok((before, id, report))
    }

    /// Starts an ingest job for every tenant's uploads folder, so that an upload the server
    /// acknowledged (202) but did not finish ingesting before it stopped is ingested now (files
    /// already ingested and unchanged cost a hash). Half-written uploads (`.NAME.part`, never
    /// acknowledged) are deleted first. Run by `ragbox serve` at start.
    pub fn resume_uploads(self: &Arc<Self>) -> Result<Vec<Job>> {
        let root = self.store.layout().root().join(ragbox_core::store::TENANTS_DIR);
        let Ok(entries) = std::fs::read_dir(&root) else {
            return Ok(Vec::new());
        };
        let mut jobs = Vec::new();
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let uploads = self.uploads(&name);
            if ragbox_core::store::check_tenant_name(&name).is_err() || !uploads.is_dir() {
                continue;
            }
            for file in std::fs::read_dir(&uploads).map_err(Error::path(&uploads))?.flatten() {
                let file_name = file.file_name().to_string_lossy().into_owned();
                if file_name.starts_with('.') && file_name.ends_with(".part") {
                    std::fs::remove_file(file.path()).map_err(Error::path(&file.path()))?;
                }
            }
            let caller = Caller { name: "server start".into(), ..Caller::local() };
            jobs.push(self.start_job(&caller, &name, JobKind::Resume, uploads)?);
        }
        Ok(jobs)
    }

    /// A job of `tenant`.
    /// An upload's job is found before its first commit creates the tenant in the catalog.
    pub fn job(&self, caller: &Caller, tenant: &str, id: u64) -> Result<Job> {
        caller.scope(tenant)?;
        if let Some(job) = self.jobs.get(id).filter(|j| j.tenant == tenant) {
            return Ok(job);
        }
        self.tenant(caller, tenant)?;
        Err(Error::NotFound(format!("no job {id} in this tenant")))
    }

    /// (jobs queued or running, files visited by them, files found by them).
    pub fn ingest_progress(&self) -> (usize, usize, usize) {
        self.jobs.progress()
    }

    fn start_job(self: &Arc<Self>, caller: &Caller, tenant: &str, kind: JobKind, path: PathBuf) -> Result<Job> {
        let id = self.jobs.add(tenant, kind, path.clone());
        let service = self.clone();
        let (caller, tenant_name) = (caller.clone(), tenant.to_string());
        std::thread::Builder::new()
            .name(format!("ingest-{id}"))
            .spawn(move || service.run_job(&caller, &tenant_name, id, &path))
            .map_err(Error::Io)?;
        self.jobs.get(id).ok_or_else(|| Error::Bug("job vanished".into()))
    }

    /// A job's run: [`Service::ingest_now`]'s write path on the jobs' pool, for the caller who
    /// started the job (checked then).
    fn run_job(&self, caller: &Caller, tenant: &str, id: u64, path: &Path) {
        self.jobs.update(id, |j| j.state = JobState::Running);
        let result = (|| -> Result<IngestReport> {
            let opts = self.app.ingest_options(tenant, None)?;
            let run = || {
                self.ingest_locked(caller, path, None, &opts, Some(id), &mut |event| match event {
                    IngestEvent::Found { files } => self.jobs.update(id, |j| j.files = files),
                    IngestEvent::Visited { chunks, .. } => self.jobs.update(id, |j| {
                        j.visited += 1;
                        j.chunks += chunks;
                    }),
                    _ => {}
                })
            };
            match self.jobs.pool() {
                Some(pool) => pool.install(run),
                None => run(),
            }
        })();
        if let Err(e) = &result {
            tracing::warn!("job {id}: {e}");
        }
        match result {
            Ok(report) => self.jobs.update(id, |j| {
                j.state = JobState::Done;
                j.report = Some(report);
            }),
            Err(e) => self.jobs.update(id, |j| {
                j.state = JobState::Failed;
                j.error = Some(e.to_string());
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upload_names_are_plain_file_names() {
        assert_eq!(check_upload_name("policy.md").unwrap(), "policy.md");
        assert_eq!(check_upload_name("Reisekosten 2024 (final).pdf").unwrap(), "Reisekosten 2024 (final).pdf");
        for bad in ["", " ", "../etc/passwd", "/etc/passwd", "a/b.md", "..", ".", ".hidden", "a\0b", "a\\b", "C:x", "line\nbreak"] {
            assert!(check_upload_name(bad).is_err(), "{bad:?} is refused");
        }
        assert!(check_upload_name(&"x".repeat(201)).is_err());
    }
}
