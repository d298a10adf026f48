//! Composition root: builds the concrete backends a [`Config`] names. The only module that does.

use std::sync::Arc;

use candle_core::Device;
use serde::Serialize;

use crate::chunk::{ChunkOptions, ChunkerKind};
use crate::config::{Config, GenerateBackend, GenerateFallback};
use crate::ingest::IngestOptions;
use crate::store::{Store, TenantRow};
use crate::embed::{load_embedder, EmbedOptions, Embedder};
use crate::allowlist::HostAllowlist;
use crate::error::{Error, Result};
use crate::model::batch::BatchLimits;
use crate::model::Precision;
use crate::model::store::{Check, ModelStatus};
use crate::model::{device, ModelStore};
use crate::rerank::{load_reranker, RerankOptions, Reranker};
use crate::retrieve::{Retrieval, RetrieveOptions, Retriever};
use crate::answer::support::SupportMethod;
use crate::answer::{refuse, Answer, AnswerOptions, Answerer};
use crate::generate::rerank::LlmReranker;
use crate::generate::{ClaudeGenerator, ClaudeOptions, Fallback, GgufGenerator, Generator, LocalOptions, OpenAiGenerator, OpenAiOptions};

/// A question's way through one tenant, set up by [`App::asking`].
pub struct Asking<'s> {
    app: &'s Arc<App>,
    /// The tenant's retriever.
    pub retriever: Retriever<'s>,
    /// Why retrieval runs without a reranker, if it does.
    pub note: Option<String>,
    /// The answer settings.
    pub options: AnswerOptions,
    /// How answer sentences are checked against their passages.
    pub support: SupportMethod,
}

impl Asking<'_> {
    /// The refusal for a retrieval with no good source ([`Retrieval::no_good_source`]): no
    /// generator is asked.
    pub fn refusal(&self, question: &str, standalone: &str, retrieval: &Retrieval) -> Answer {
        refuse(question, standalone, retrieval, &self.options, self.support)
    }

    /// The answerer over this retriever with `generator`; the support check embeds with the
    /// retriever's embedder, or the configured one when the tenant's search has none.
    pub fn answerer(&self, generator: Arc<dyn Generator>) -> Result<Answerer> {
        Answerer::over(&self.retriever, generator, self.support, self.options.clone(), || self.app.embedder(None))
    }
}

/// The assembled application.
pub struct App {
    /// Validated configuration.
    pub config: Config,
    /// The models folder.
    pub models: ModelStore,
    device: Device,
    /// Generators loaded so far, by model: one load per process, shared by answers, rewrites,
    /// support checks and the LLM reranker.
    generators: std::sync::Mutex<std::collections::HashMap<String, Arc<dyn Generator>>>,
    /// Held while a local generator loads: a second caller (an answer arriving while
    /// [`App::preload_generator`]'s thread loads) waits for that load instead of starting another.
    generator_load: std::sync::Mutex<()>,
    /// Embedders and rerankers loaded so far, by model: a long-running process (the server)
    /// verifies and loads each once, not per request.
    embedders: std::sync::Mutex<std::collections::HashMap<String, Arc<dyn Embedder>>>,
    rerankers: std::sync::Mutex<std::collections::HashMap<String, Arc<dyn Reranker>>>,
    /// The OCR engine, once loaded.
    ocr: std::sync::OnceLock<Arc<crate::source::ocr::OcrEngine>>,
}

/// The quantised LLM's matmul kernels on this CPU, for prompts and for decoding's one row (each
/// chosen at run time).
fn llm_kernels() -> String {
    crate::generate::kernels::describe()
}

/// Everything `doctor` reports.
#[derive(Debug, Serialize)]
pub struct DoctorReport {
    /// ragbox version.
    pub version: &'static str,
    /// candle version the build uses.
    pub candle: &'static str,
    /// Compiled features.
    pub features: Vec<&'static str>,
    /// The CPU baseline the build was compiled for, and what this CPU lacks of it.
    pub cpu: crate::model::cpu::Baseline,
    /// The LLM's CPU kernels this build runs on this CPU.
    pub llm_kernels: String,
    /// The encoders' precision and the kernel that runs it (`embed.precision`).
    pub encoder_kernels: String,
    /// Device in use.
    pub device: String,
    /// Config file read, if any.
    pub config_file: Option<std::path::PathBuf>,
    /// Data folder.
    pub data_dir: std::path::PathBuf,
    /// Models folder.
    pub models_dir: std::path::PathBuf,
    /// Configured embedder.
    pub embed_model: String,
    /// Configured reranker, and whether it can run.
    pub rerank_model: String,
    /// What ingest will do about scanned pages and images (the OCR model).
    pub ocr_status: String,
    /// Where prompts go (`generate.backend`), and whether an inference server answers.
    pub generator: String,
    /// Where the indexes live (`store.backend`), and whether shared servers answer.
    pub store: Vec<String>,
    /// What retrieval will do about reranking.
    pub rerank_status: String,
    /// Every model in the manifest.
    pub models: Vec<ModelStatus>,
    /// Every tenant's model, generations and whether its indexes agree with the catalog.
    pub tenants: Vec<TenantStatus>,
    /// `ragbox serve`'s settings.
    pub server: crate::config::ServerSection,
    /// Every `[[sources]]` entry: reached or not, and its last sync (filled by the service,
    /// which syncs them).
    pub sources: Vec<String>,
    /// Permissions files above the ingested documents that others than the service's user can
    /// change, with why (while `[access] files` is on).
    pub permission_files: Vec<String>,
}

/// One tenant as `doctor` sees it.
#[derive(Debug, Serialize)]
pub struct TenantStatus {
    /// The tenant.
    pub tenant: crate::store::TenantRow,
    /// Catalog and index generations and chunk counts, compared.
    pub consistency: Option<crate::store::Consistency>,
    /// Why the check could not run, if it could not.
    pub error: Option<String>,
}

impl App {
    /// Opens the device and the models folder.
    pub fn new(config: Config) -> Result<App> {
        let device = device(config.device)?;
        let models = ModelStore::new(&config.models_dir);
        Ok(App {
            config,
            models,
            device,
            generators: Default::default(),
            generator_load: Default::default(),
            embedders: Default::default(),
            rerankers: Default::default(),
            ocr: Default::default(),
        })
    }

    /// The device models run on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The embedder named (or the configured one), loaded and verified, at `embed.precision`;
    /// `name@int8` or `name@f32` names the precision itself.
    pub fn embedder(&self, name: Option<&str>) -> Result<Arc<dyn Embedder>> {
        let (model, precision) = Precision::split_identity(name.unwrap_or(&self.config.embed.model))?;
        let spec = self.models.manifest().get(model)?;
        // Keyed by what will run, so `auto` and the precision it resolves to share one load.
        let precision = precision.unwrap_or(self.config.embed.precision).resolve(&self.device, spec.auto_precision)?;
        let key = precision.vector_identity(&spec.name);
        if let Some(loaded) = self.embedders.lock().ok().and_then(|m| m.get(&key).cloned()) {
            return Ok(loaded);
        }
        let options = EmbedOptions {
            device: self.device.clone(),
            batch: BatchLimits { max_items: self.config.embed.batch_size, max_tokens: self.config.embed.max_batch_tokens },
            precision,
        };
        let embedder = load_embedder(&self.models, spec, &options)?;
        if let Ok(mut m) = self.embedders.lock() {
            m.insert(key, embedder.clone());
        }
        Ok(embedder)
    }

    /// The embedder that made a tenant's vectors, from the identity stamped on its index: the
    /// precision it names, and f32 for a bare name, whatever `embed.precision` says now (a query
    /// must be embedded as the index was).
    pub fn index_embedder(&self, identity: &str) -> Result<Arc<dyn Embedder>> {
        match Precision::split_identity(identity)? {
            (_, Some(_)) => self.embedder(Some(identity)),
            (model, None) => self.embedder(Some(&format!("{model}@f32"))),
        }
    }

    /// The embedder an ingest into an existing tenant uses, from the identity stamped on its
    /// index: under `embed.precision = "auto"` the index's own precision (a tenant built at f32
    /// stays at f32 when `auto` would pick int8 for a new one); under an explicit precision that
    /// one, so that an index at the other is refused with the `reembed` command that switches.
    pub fn tenant_embedder(&self, identity: &str) -> Result<Arc<dyn Embedder>> {
        match self.config.embed.precision {
            Precision::Auto => self.index_embedder(identity),
            _ => self.embedder(Some(Precision::split_identity(identity)?.0)),
        }
    }

    /// The embedder an ingest into `tenant` uses (the one rule for the CLI and the service): the
    /// model `requested` when one is, else the tenant's own ([`App::tenant_embedder`]: an existing
    /// tenant keeps the model it was built with; `reembed` switches), else, for a new tenant, the
    /// configured one.
    pub fn ingest_embedder(&self, tenant: Option<&crate::store::TenantRow>, requested: Option<&str>) -> Result<Arc<dyn Embedder>> {
        match (requested, tenant) {
            (Some(model), _) => self.embedder(Some(model)),
            (None, Some(t)) => self.tenant_embedder(&t.model),
            (None, None) => self.embedder(None),
        }
    }

    /// What runs the configured embedder's dense layers, as `doctor` says it: the precision
    /// `embed.precision` resolves to for that model on this device, and its kernel.
    fn encoder_kernels(&self) -> String {
        let (model, named) = match Precision::split_identity(&self.config.embed.model) {
            Ok(split) => split,
            Err(e) => return format!("error: {e}"),
        };
        let gated = self.models.manifest().get(model).ok().and_then(|spec| spec.auto_precision);
        match named.unwrap_or(self.config.embed.precision).resolve(&self.device, gated) {
            Ok(p) => format!(
                "{model}: {} (embed.precision = \"{}\")",
                crate::model::precision::describe(p, &self.device),
                self.config.embed.precision.as_str()
            ),
            Err(e) => format!("error: {e}"),
        }
    }

    /// The configured reranker, or `None` when its files are not in the models folder.
    /// Files present but corrupt are an error, not a silent fallback. A `generate` model as
    /// `rerank.model` reranks by its yes/no logits ([`LlmReranker`]).
    pub fn reranker(&self) -> Result<Option<Arc<dyn Reranker>>> {
        self.reranker_named(&self.config.rerank.model)
    }

    /// The reranker `name` (a cross-encoder or a generate model), or `None` when its files are
    /// not in the models folder.
    pub fn reranker_named(&self, name: &str) -> Result<Option<Arc<dyn Reranker>>> {
        let spec = self.models.manifest().get(name)?;
        if let Some(loaded) = self.rerankers.lock().ok().and_then(|m| m.get(&spec.name).cloned()) {
            return Ok(Some(loaded));
        }
        // Absent (some file missing, none corrupt): run without the stage. Corrupt: an error.
        let status = self.models.status(spec, Check::Stamped);
        let missing = status.files.iter().any(|f| f.state == "missing");
        let corrupt = status.files.iter().any(|f| f.state == "corrupt");
        if missing && !corrupt {
            return Ok(None);
        }
        if spec.role == crate::types::ModelRole::Generate {
            return Ok(Some(Arc::new(LlmReranker::new(self.generator(Some(&spec.name))?))));
        }
        let options = RerankOptions {
            device: self.device.clone(),
            batch: BatchLimits { max_items: self.config.rerank.batch_size, ..BatchLimits::default() },
            precision: self.config.embed.precision,
        };
        let reranker = load_reranker(&self.models, spec, &options)?;
        if let Ok(mut m) = self.rerankers.lock() {
            m.insert(spec.name.clone(), reranker.clone());
        }
        Ok(Some(reranker))
    }

    /// How to reach the configured inference server, its key read from the environment
    /// variable or the file the configuration names.
    fn openai_options(&self) -> Result<OpenAiOptions> {
        let g = &self.config.generate;
        let from_env = (!g.openai_api_key_env.is_empty()).then(|| std::env::var(&g.openai_api_key_env).ok()).flatten();
        let from_file = if g.openai_api_key_file.is_empty() {
            None
        } else {
            let text = std::fs::read_to_string(&g.openai_api_key_file)
                .map_err(|e| Error::Config(format!("generate.openai_api_key_file {:?}: {e}", g.openai_api_key_file)))?;
            text.lines().next().map(|l| l.trim().to_string()).filter(|k| !k.is_empty())
        };
        Ok(OpenAiOptions {
            base_url: g.openai_base_url.clone(),
            model: g.openai_model.clone(),
            api_key: from_env.or(from_file),
            connect_timeout_ms: g.openai_connect_timeout_ms,
            timeout_ms: g.openai_timeout_ms,
            allow: HostAllowlist::parse(&g.allow_hosts)?,
        })
    }

    /// The configured generator, or the local model `name` (a `generate` model of the
    /// manifest), loaded and verified. A remote backend is only built when the configuration
    /// selects it and the `claude` feature is compiled in; callers warn when
    /// [`Generator::is_remote`].
    pub fn generator(&self, name: Option<&str>) -> Result<Arc<dyn Generator>> {
        let g = &self.config.generate;
        if g.backend == GenerateBackend::OpenAi && name.is_none() {
            // Made once (its HTTP client, its key read) and kept with the loaded models.
            let key = format!("openai {}", g.openai_base_url);
            if let Some(made) = self.generators.lock().ok().and_then(|m| m.get(&key).cloned()) {
                return Ok(made);
            }
            let server: Arc<dyn Generator> = Arc::new(OpenAiGenerator::new(self.openai_options()?)?);
            let generator = match g.fallback {
                GenerateFallback::Local => Arc::new(Fallback::new(server, self.generator(Some(&g.model))?)),
                GenerateFallback::None => server,
            };
            if let Ok(mut m) = self.generators.lock() {
                m.insert(key, generator.clone());
            }
            return Ok(generator);
        }
        if g.backend == GenerateBackend::Claude && name.is_none() {
            let api_key = std::env::var(&g.claude_api_key_env).unwrap_or_default();
            let options = ClaudeOptions {
                model: g.claude_model.clone(),
                api_key,
                base_url: g.claude_base_url.clone(),
                timeout_ms: 120_000,
            };
            return Ok(Arc::new(ClaudeGenerator::new(options)?));
        }
        let spec = self.models.manifest().get(name.unwrap_or(&g.model))?;
        let loaded = || self.generators.lock().ok().and_then(|m| m.get(&spec.name).cloned());
        if let Some(loaded) = loaded() {
            return Ok(loaded);
        }
        let _one_load_at_a_time = self.generator_load.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(loaded) = loaded() {
            return Ok(loaded);
        }
        if spec.role != crate::types::ModelRole::Generate {
            return Err(crate::error::Error::Invalid(format!("model `{}` is a {} model, not a generator", spec.name, spec.role)));
        }
        let file = spec
            .file_ending(".gguf")
            .ok_or_else(|| crate::error::Error::Bug(format!("generator {} has no .gguf file in the manifest", spec.name)))?;
        let path = self.models.verified_file(spec, &file.name)?;
        let options = LocalOptions {
            name: spec.name.clone(),
            file: path,
            force_cpu: matches!(self.device, Device::Cpu),
            max_num_seqs: g.max_num_seqs,
            prefix_cache: g.prefix_cache,
            dequantize: g.dequantize,
        };
        let generator: Arc<dyn Generator> = Arc::new(crate::generate::block_on(GgufGenerator::load(&options))?);
        if let Ok(mut m) = self.generators.lock() {
            m.insert(spec.name.clone(), generator.clone());
        }
        Ok(generator)
    }

    /// Starts loading the local generator `name` (or the configured one) on a thread of its own,
    /// so that its load (2-5 s for the 0.5B model on 2 cores) overlaps what comes before its
    /// first use, retrieval; the answer's own [`App::generator`] call then waits for this load
    /// rather than starting another. Nothing happens when it is loaded or the backend is remote.
    /// A load that fails is reported by that later call, which tries again.
    pub fn preload_generator(self: &Arc<Self>, name: Option<&str>) {
        let remote = name.is_none() && self.config.generate.backend != GenerateBackend::Local;
        let Ok(spec) = self.models.manifest().get(name.unwrap_or(&self.config.generate.model)) else { return };
        let loaded = self.generators.lock().map(|m| m.contains_key(&spec.name)).unwrap_or(true);
        if remote || loaded {
            return;
        }
        let (app, name) = (self.clone(), spec.name.clone());
        let started = std::thread::Builder::new().name("llm-preload".into()).spawn(move || {
            if let Err(e) = app.generator(Some(&name)) {
                tracing::debug!("preloading {name}: {e}");
            }
        });
        if let Err(e) = started {
            tracing::debug!("preloading the generator: no thread ({e})");
        }
    }

    /// The `llm` annotator: on the inference server when `generate.backend = "openai"`,
    /// else on the local model (whole documents never go to Claude).
    pub fn annotator(&self) -> Result<Arc<dyn crate::ingest::Annotator>> {
        let g = &self.config.generate;
        let generator = self.generator((g.backend != GenerateBackend::OpenAi).then_some(g.model.as_str()))?;
        Ok(Arc::new(crate::annotation::LlmAnnotator::new(generator)))
    }

    /// Answer settings from the configuration.
    pub fn answer_options(&self) -> AnswerOptions {
        let (a, g) = (&self.config.answer, &self.config.generate);
        AnswerOptions {
            passages: a.passages,
            passage_chars: a.passage_chars,
            max_tokens: g.max_tokens,
            temperature: g.temperature,
            support_floor: a.support_floor,
            prompt: a.prompt,
            focus: a.focus,
            focus_by: a.focus_by,
            reader: a.reader,
        }
    }

    /// Retrieval settings from the configuration (the floor is chosen per scorer, in
    /// [`App::retriever`]).
    pub fn retrieve_options(&self) -> RetrieveOptions {
        self.config.retrieve.options.clone()
    }

    /// A retriever over `tenant` with the model that built its index (an explicit `model` that
    /// differs is refused by the retriever), the configured reranker when its weights are present
    /// and `rerank` is asked for, and the configured floor for whichever score decides refusal.
    /// Also returns a note when reranking was wanted but cannot run.
    pub fn retriever<'s>(
        &self,
        store: &'s Store,
        row: &TenantRow,
        model: Option<&str>,
        rerank: bool,
        mut options: RetrieveOptions,
    ) -> Result<(Retriever<'s>, Option<String>)> {
        let embedder = match (options.dense_candidates > 0, model) {
            (false, _) => None,
            (true, Some(name)) => Some(self.embedder(Some(name))?),
            (true, None) => Some(self.index_embedder(&row.model)?),
        };
        let (reranker, note) = match rerank {
            false => (None, None),
            true => match self.reranker()? {
                Some(r) => (Some(r), None),
                None => (
                    None,
                    Some(format!(
                        "ran without a reranker: the weights of `{}` are not in the models folder; ranked by fusion alone \
                         (bring them with `ragbox models import DIR` or `ragbox models pull {}`)",
                        self.config.rerank.model, self.config.rerank.model
                    )),
                ),
            },
        };
        options.floor = self.config.retrieve.floor_for(reranker.as_ref().map(|r| r.model_id()), &row.model)?;
        Ok((Retriever::new(store, row, embedder, reranker, options)?, note))
    }

    /// Everything answering a question in `tenant` needs, from the configuration at once: the
    /// retriever (deep enough for the passages an answer reads; [`App::retriever`]), the answer
    /// settings and the support method. The local generator `llm` (or the configured one)
    /// starts loading beside retrieval ([`App::preload_generator`]).
    pub fn asking<'s>(self: &'s Arc<Self>, store: &'s Store, tenant: &TenantRow, rerank: bool, llm: Option<&str>) -> Result<Asking<'s>> {
        let mut options = self.retrieve_options();
        options.top_k = options.top_k.max(self.config.answer.passages);
        self.preload_generator(llm);
        let (retriever, note) = self.retriever(store, tenant, None, rerank, options)?;
        Ok(Asking { app: self, retriever, note, options: self.answer_options(), support: self.config.answer.support })
    }

    /// Opens the data folder's store.
    pub fn store(&self) -> Result<Store> {
        let store = &self.config.store;
        Store::open_with(&self.config.data_dir, store.backends(store.backend, &self.config.data_dir)?)
    }

    /// The OCR engine that reads scanned pages and images (the manifest's `ocr` model, verified
    /// and loaded once), or `None` when its files are not in the models folder (some missing,
    /// none corrupt): such files are then skipped with the fetch command.
    pub fn ocr(&self) -> Result<Option<Arc<crate::source::ocr::OcrEngine>>> {
        if let Some(engine) = self.ocr.get() {
            return Ok(Some(engine.clone()));
        }
        let Some(spec) = self.models.manifest().by_role(crate::types::ModelRole::Ocr).next() else { return Ok(None) };
        let status = self.models.status(spec, Check::Stamped);
        let missing = status.files.iter().any(|f| f.state == "missing");
        let corrupt = status.files.iter().any(|f| f.state == "corrupt");
        if missing && !corrupt {
            return Ok(None);
        }
        let file = |part: &str| -> Result<std::path::PathBuf> {
            let f = spec.files.iter().find(|f| f.name.contains(part)).ok_or_else(|| {
                crate::Error::Invalid(format!("model `{}` has no file matching `{part}` in the manifest", spec.name))
            })?;
            self.models.verified_file(spec, &f.name)
        };
        let (detector, recognizer, dictionary) = (file("_det")?, file("_rec")?, file(".txt")?);
        let engine = crate::source::ocr::OcrEngine::load(&detector, &recognizer, &dictionary)
            .map_err(|e| crate::Error::Invalid(format!("OCR model `{}`: {e}", spec.name)))?;
        Ok(Some(self.ocr.get_or_init(|| Arc::new(engine)).clone()))
    }

    /// Ingest settings from the configuration, for `tenant`, with an optional chunker override.
    pub fn ingest_options(&self, tenant: &str, chunker: Option<ChunkerKind>) -> Result<IngestOptions> {
        let c = &self.config.ingest;
        Ok(IngestOptions {
            tenant: tenant.to_string(),
            chunker: chunker.unwrap_or(c.chunker),
            chunk: ChunkOptions {
                child_tokens: c.child_tokens,
                max_child_tokens: c.max_child_tokens,
                parent_tokens: c.parent_tokens,
                overlap_tokens: c.overlap_tokens,
            },
            max_file_bytes: c.max_file_bytes,
            parse_timeout: std::time::Duration::from_secs(c.parse_timeout_s.max(1)),
            commit_chunks: c.commit_chunks,
            parse: crate::source::ParseContext { ocr: self.ocr()? },
            access_rules: self.config.access.rules.clone(),
            access_files: self.config.access.files,
            links: if c.follow_links { crate::source::walk::Links::FollowOut } else { crate::source::walk::Links::Inside },
            ..IngestOptions::default()
        })
    }

    /// What ingest does about scanned pages and images, for `doctor`.
    fn ocr_status(&self, models: &[ModelStatus]) -> String {
        match models.iter().find(|m| m.role == "ocr") {
            Some(m) if m.ready => format!("ready: scanned PDF pages and images are read by {} on the CPU", m.name),
            Some(m) => format!(
                "absent: scanned PDF pages and images are skipped until it arrives: `{}`",
                m.fix.clone().unwrap_or_default()
            ),
            None => "no OCR model in the manifest".to_string(),
        }
    }

    /// Where prompts go, for the start-up line and `doctor`; `probe`: also ask an inference
    /// server whether it answers (one `GET /models` to the configured, allowed host).
    pub fn generator_status(&self, probe: bool) -> String {
        let g = &self.config.generate;
        match g.backend {
            GenerateBackend::OpenAi => {
                let fallback = match g.fallback {
                    GenerateFallback::Local => format!("; while it is unreachable the local model {} answers", g.model),
                    GenerateFallback::None => "; no fallback".to_string(),
                };
                let head = format!("prompts go to the inference server {} (model {}; allow_hosts: {}){fallback}", g.openai_base_url, g.openai_model, g.allow_hosts.join(", "));
                if !probe {
                    return head;
                }
                let reached = self.openai_options().and_then(OpenAiGenerator::new).and_then(|s| crate::generate::block_on(s.probe()));
                match reached {
                    Ok(models) => format!("{head}: reachable, serving {}", if models.is_empty() { "no model it names".to_string() } else { models.join(", ") }),
                    Err(e) => format!("{head}: NOT reachable: {e}"),
                }
            }
            GenerateBackend::Claude => format!("prompts go to Anthropic ({}, model {}): they leave the machine", g.claude_base_url, g.claude_model),
            GenerateBackend::Local => format!("prompts stay in this process (local model {})", g.model),
        }
    }

    /// Where the indexes live; for the shared backend, whether each server answers.
    pub fn store_status(&self) -> Vec<String> {
        let s = &self.config.store;
        match (s.backend, &s.shared) {
            (crate::config::StoreBackend::Shared, Some(shared)) => match shared.options() {
                Ok(options) => options.probe(),
                Err(e) => vec![format!("shared: {e}")],
            },
            _ => vec![format!("local: the catalog (catalog.sqlite), usearch ({:?} vectors) and tantivy files in the data folder", s.quantization).to_lowercase()],
        }
    }

    /// Features, device, and every model's files verified.
    pub fn doctor(&self) -> DoctorReport {
        let models: Vec<ModelStatus> = self.models.manifest().models.iter().map(|m| self.models.status(m, Check::Full)).collect();
        let rerank = models.iter().find(|m| m.name == self.config.rerank.model);
        let rerank_status = match rerank {
            Some(m) if m.ready && m.role == "generate" => format!("ready: retrieval reranks with {} (LLM yes/no logits)", m.name),
            Some(m) if m.ready => {
                let r = &self.config.retrieve;
                let gated = self.models.manifest().get(&m.name).ok().and_then(|spec| spec.auto_precision);
                let precision = match self.config.embed.precision.resolve(&self.device, gated) {
                    Ok(p) => crate::model::precision::describe(p, &self.device),
                    Err(e) => format!("error: {e}"),
                };
                let floor = r.floors.get(&m.name).map_or("no refusal floor".to_string(), |f| format!("refusal floor {f} on its logit"));
                format!(
                    "ready: retrieval reranks the top {} with the cross-encoder, {precision}; order {} x its score + {} x the query's cosine (standardised; for a query that is not a question, {} of that vote is BM25's); {floor}",
                    r.options.rerank_depth,
                    r.options.rerank_weight,
                    1.0 - r.options.rerank_weight,
                    r.options.statement_bm25_share
                )
            }
            Some(m) => format!(
                "absent: retrieval runs without a reranker until it arrives: `{}`",
                m.fix.clone().unwrap_or_default()
            ),
            None => "not configured".to_string(),
        };
        let mut tenants = Vec::new();
        let mut folders = std::collections::BTreeSet::new();
        if crate::store::Layout::new(&self.config.data_dir).catalog().exists() {
            match self.store().and_then(|s| s.catalog().tenants().map(|t| (s, t))) {
                Ok((store, rows)) => {
                    for t in rows {
                        if self.config.access.files {
                            for d in store.catalog().documents(t.id).unwrap_or_default() {
                                folders.extend(d.path.parent().map(std::path::Path::to_path_buf));
                            }
                        }
                        let (consistency, error) = match store.check_consistency(&t) {
                            Ok(c) => (Some(c), None),
                            Err(e) => (None, Some(format!("{e:#}"))),
                        };
                        tenants.push(TenantStatus { tenant: t, consistency, error });
                    }
                }
                Err(e) => tracing::warn!("cannot open the store: {e:#}"),
            }
        }
        DoctorReport {
            tenants,
            server: self.config.server.clone(),
            sources: Vec::new(),
            permission_files: crate::access::loose_permission_files(folders.iter().map(std::path::PathBuf::as_path)),
            version: env!("CARGO_PKG_VERSION"),
            candle: "0.10.2 (patched: patches/README.md)",
            cpu: crate::model::cpu::baseline(),
            llm_kernels: llm_kernels(),
            encoder_kernels: self.encoder_kernels(),
            features: crate::model::device::compiled_features(),
            device: crate::model::device::describe(&self.device),
            config_file: self.config.config_file.clone(),
            data_dir: self.config.data_dir.clone(),
            models_dir: self.config.models_dir.clone(),
            embed_model: self.config.embed.model.clone(),
            rerank_model: self.config.rerank.model.clone(),
            rerank_status,
            ocr_status: self.ocr_status(&models),
            generator: self.generator_status(true),
            store: self.store_status(),
            models,
        }
    }
}
