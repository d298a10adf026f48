//! The evaluation runner: ingests a BEIR corpus into a scratch store (once per corpus, chunking
//! and model: later runs find it unchanged), runs the test queries through the real read path in
//! each configuration, scores them, and calibrates the refusal floor against out-of-domain
//! questions.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;

use ragbox_core::chunk::ChunkerKind;
use ragbox_core::embed::Embedder;
use ragbox_core::error::{Error, Result};
use crate::beir::{self, BeirSet};
use crate::metrics::{self, percentile, QueryMetrics};
use ragbox_core::ingest::{ingest, IngestOptions};
use ragbox_core::rerank::Reranker;
use ragbox_core::retrieve::{RetrieveOptions, Retriever};
use ragbox_core::store::{Store, TenantRow, VectorOptions};

/// One way of running retrieval.
#[derive(Debug, Clone, Serialize)]
pub struct ConfigSpec {
    /// Short name (`hybrid-nomic-embed-text-v1.5`).
    pub name: String,
    /// Whether this is the shipped default.
    pub default: bool,
    /// Embedding model of the index (BM25 configurations use its chunking).
    pub model: String,
    /// Chunker.
    pub chunker: ChunkerKind,
    /// Structural context in front of each chunk.
    pub context: bool,
    /// Retrieval settings.
    pub options: RetrieveOptions,
    /// Whether the reranker runs.
    pub rerank: bool,
}

/// What to evaluate.
pub struct EvalPlan {
    /// BEIR folder.
    pub data: PathBuf,
    /// Qrels split.
    pub split: String,
    /// Scratch folder (documents and store), reused between runs.
    pub scratch: PathBuf,
    /// Ingest settings (chunk sizes, limits) every variant starts from.
    pub ingest: IngestOptions,
    /// Configurations, in report order.
    pub configs: Vec<ConfigSpec>,
    /// The reranker, for configurations that rerank.
    pub reranker: Option<Arc<dyn Reranker>>,
    /// Out-of-domain questions (JSON lines with `question`), for the refusal curve.
    pub ood: Option<PathBuf>,
    /// In-domain share refused that the chosen floor may not exceed.
    pub max_in_domain_refused: f64,
    /// The floors the configuration ships, by scorer: each curve also says what its scorer's
    /// shipped floor refuses here (a floor chosen on one set, checked on another).
    pub shipped_floors: std::collections::BTreeMap<String, f32>,
    /// Evaluate only the first N queries.
    pub limit: Option<usize>,
    /// The shared servers to keep the indexes on (`store.backend = "shared"`); `None`: the
    /// scratch folder's files.
    pub shared: Option<ragbox_core::store::shared::SharedOptions>,
}

/// One configuration's scores.
#[derive(Debug, Clone, Serialize)]
pub struct ConfigResult {
    /// Name.
    pub name: String,
    /// Whether it is the default.
    pub default: bool,
    /// The metrics' means over the queries.
    #[serde(flatten)]
    pub metrics: QueryMetrics,
    /// Median query latency, ms.
    pub p50_ms: f64,
    /// 95th percentile query latency, ms.
    pub p95_ms: f64,
    /// How it ran.
    pub spec: ConfigSpec,
}

/// The refusal floor for one scorer, chosen on data.
#[derive(Debug, Clone, Serialize)]
pub struct RefusalCurve {
    /// Configuration whose evidence was measured.
    pub config: String,
    /// The model whose score the floor applies to.
    pub scorer: String,
    /// In-domain queries and out-of-domain questions measured.
    pub in_domain: usize,
    /// Out-of-domain questions measured.
    pub out_of_domain: usize,
    /// Floors on the curve.
    pub floors: Vec<f64>,
    /// Share of in-domain queries refused at each floor.
    pub in_domain_refused: Vec<f64>,
    /// Share of out-of-domain questions refused at each floor.
    pub out_of_domain_refused: Vec<f64>,
    /// The highest floor that refuses at most the allowed in-domain share.
    pub chosen_floor: f64,
    /// In-domain share refused at the chosen floor.
    pub chosen_in_domain_refused: f64,
    /// Out-of-domain share refused at the chosen floor.
    pub chosen_out_of_domain_refused: f64,
    /// The floor the configuration ships for this scorer, if any, and the in-domain and
    /// out-of-domain shares it refuses here.
    pub shipped: Option<(f64, f64, f64)>,
    /// Every in-domain query's best evidence, ascending.
    pub in_domain_evidence: Vec<f32>,
    /// Every out-of-domain question's best evidence, ascending.
    pub out_of_domain_evidence: Vec<f32>,
}

/// A configuration that could not run, and why.
#[derive(Debug, Clone, Serialize)]
pub struct SkippedConfig {
    /// Name.
    pub name: String,
    /// Why.
    pub reason: String,
}

/// Everything `ragbox eval` reports.
#[derive(Debug, Clone, Serialize)]
pub struct EvalReport {
    /// Data folder.
    pub data: PathBuf,
    /// Split.
    pub split: String,
    /// sha256 of corpus.jsonl.
    pub corpus_sha256: String,
    /// Documents in the corpus.
    pub documents: usize,
    /// Queries evaluated.
    pub queries: usize,
    /// Results, in plan order.
    pub configs: Vec<ConfigResult>,
    /// Configurations not run.
    pub skipped: Vec<SkippedConfig>,
    /// Refusal curves.
    pub refusal: Vec<RefusalCurve>,
    /// Seconds spent ingesting (0 when the scratch store was current).
    pub ingest_s: f64,
}

/// Progress messages for stderr.
pub type Progress<'a> = &'a mut dyn FnMut(&str);

/// The standard configurations: BM25, dense and hybrid per model, hybrid + rerank, each of the
/// default model's without structural context, whole-document baselines per model, and with
/// `sweep` the default model's fusion variants (weights, candidate counts, MMR, rerank depth).
/// The one matching the shipped defaults (`default_model`, `chunker`, `options`, reranking when a
/// reranker is present) is marked default.
pub fn standard_configs(
    models: &[String],
    default_model: &str,
    chunker: ChunkerKind,
    options: &RetrieveOptions,
    reranker_present: bool,
    sweep: bool,
) -> Vec<ConfigSpec> {
    let spec = |name: String, model: &str, chunker: ChunkerKind, context: bool, options: RetrieveOptions, rerank: bool| ConfigSpec {
        name,
        default: false,
        model: model.to_string(),
        chunker,
        context,
        options,
        rerank,
    };
    let bm25 = RetrieveOptions { dense_candidates: 0, ..options.clone() };
    let dense = RetrieveOptions { lexical_candidates: 0, ..options.clone() };
    let d = default_model;
    let mut out = vec![spec("bm25".into(), d, chunker, true, bm25.clone(), false)];
    for m in models {
        out.push(spec(format!("dense-{m}"), m, chunker, true, dense.clone(), false));
        out.push(spec(format!("hybrid-{m}"), m, chunker, true, options.clone(), false));
    }
    out.push(spec(format!("hybrid-{d}-rerank"), d, chunker, true, options.clone(), true));
    out.push(spec("bm25-noctx".into(), d, chunker, false, bm25.clone(), false));
    out.push(spec(format!("dense-{d}-noctx"), d, chunker, false, dense.clone(), false));
    out.push(spec(format!("hybrid-{d}-noctx"), d, chunker, false, options.clone(), false));
    for m in models {
        out.push(spec(format!("dense-{m}-whole"), m, ChunkerKind::Whole, true, dense.clone(), false));
        out.push(spec(format!("hybrid-{m}-whole"), m, ChunkerKind::Whole, true, options.clone(), false));
    }
    out.push(spec("bm25-whole".into(), models.first().map_or(d, String::as_str), ChunkerKind::Whole, true, bm25, false));
    if sweep {
        for (dw, lw) in [(1.0, 0.5), (1.0, 0.75), (0.75, 1.0), (0.5, 1.0)] {
            let o = RetrieveOptions { dense_weight: dw, lexical_weight: lw, ..options.clone() };
            out.push(spec(format!("hybrid-{d}-w{dw}-{lw}"), d, chunker, true, o, false));
        }
        for n in [50, 200] {
            let o = RetrieveOptions { dense_candidates: n, lexical_candidates: n, ..options.clone() };
            out.push(spec(format!("hybrid-{d}-n{n}"), d, chunker, true, o, false));
        }
        let o = RetrieveOptions { mmr_lambda: Some(0.7), ..options.clone() };
        out.push(spec(format!("hybrid-{d}-mmr0.7"), d, chunker, true, o, false));
        for depth in [20, 30, 100] {
            let o = RetrieveOptions { rerank_depth: depth, ..options.clone() };
            out.push(spec(format!("hybrid-{d}-rerank-depth{depth}"), d, chunker, true, o, true));
        }
        for weight in [0.3, 0.5, 0.7, 1.0] {
            let o = RetrieveOptions { rerank_weight: weight, ..options.clone() };
            out.push(spec(format!("hybrid-{d}-rerank-w{weight}"), d, chunker, true, o, true));
        }
    }
    let default_name = if reranker_present { format!("hybrid-{d}-rerank") } else { format!("hybrid-{d}") };
    for c in &mut out {
        c.default = c.name == default_name;
    }
    out
}

/// Folder-safe tenant name of a variant (the answer evaluation reuses the default's).
pub fn tenant_name(model: &str, chunker: ChunkerKind, child_tokens: usize, context: bool) -> String {
    let slug: String = model.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '-' }).collect();
    let size = if chunker == ChunkerKind::Whole { String::new() } else { format!("-{child_tokens}") };
    format!("{slug}-{chunker}{size}-{}", if context { "ctx" } else { "noctx" })
}

/// Chunk id → BEIR document id, for every child of a tenant.
fn chunk_documents(store: &Store, tenant: &TenantRow) -> Result<HashMap<u64, String>> {
    let paths: HashMap<u64, String> = store
        .catalog()
        .documents(tenant.id)?
        .into_iter()
        .filter_map(|d| beir::doc_id_for_path(&d.path).map(|id| (d.id.0, id)))
        .collect();
    Ok(store
        .catalog()
        .index_entries(tenant.id)?
        .into_iter()
        .filter_map(|e| paths.get(&e.doc.0).map(|id| (e.id.0, id.clone())))
        .collect())
}

/// Runs the plan. `embedder(name)` loads an embedding model.
pub fn run(plan: &EvalPlan, embedder: &dyn Fn(&str) -> Result<Arc<dyn Embedder>>, progress: Progress<'_>) -> Result<EvalReport> {
    let mut set: BeirSet = beir::load(&plan.data, &plan.split)?;
    if let Some(n) = plan.limit {
        set.queries.truncate(n);
    }
    let docs_dir = plan.scratch.join("docs");
    progress(&format!("writing {} as documents under {}", set.corpus.display(), docs_dir.display()));
    let documents = beir::write_documents(&set.corpus, &docs_dir)?;
    let store = match &plan.shared {
        Some(shared) => Store::open_with(&plan.scratch.join("store"), ragbox_core::store::Backends::shared(shared)?)?,
        None => Store::open(&plan.scratch.join("store"), VectorOptions::default())?,
    };

    // Ingest each variant (model, chunker, context) once; unchanged files cost a hash each.
    let mut tenants: HashMap<String, TenantRow> = HashMap::new();
    let mut models: HashMap<String, Arc<dyn Embedder>> = HashMap::new();
    let started = Instant::now();
    let mut ingested_any = false;
    for c in &plan.configs {
        let name = tenant_name(&c.model, c.chunker, plan.ingest.chunk.child_tokens, c.context);
        if tenants.contains_key(&name) {
            continue;
        }
        let e = match models.get(&c.model) {
            Some(e) => Arc::clone(e),
            None => {
                let e = embedder(&c.model)?;
                models.insert(c.model.clone(), Arc::clone(&e));
                e
            }
        };
        // The store's tenant is named by the vectors' identity (`model@int8` apart from `model`),
        // so a run at another precision never reuses or mixes in the other's vectors.
        let stored = tenant_name(e.model_id(), c.chunker, plan.ingest.chunk.child_tokens, c.context);
        // An LLM annotator (`eval --llm-context`) writes the context of the configurations that
        // have one; the others stay without.
        let annotator = plan.ingest.annotator.clone().filter(|_| c.context);
        let opts = IngestOptions { tenant: stored, chunker: c.chunker, structural_context: c.context, annotator, ..plan.ingest.clone() };
        progress(&format!("ingest: tenant {}", opts.tenant));
        let mut done = 0usize;
        let report = ingest(&store, &e, &docs_dir, &opts, &mut |ev| {
            if let ragbox_core::ingest::IngestEvent::Visited { .. } = ev {
                done += 1;
                if done.is_multiple_of(500) {
                    progress(&format!("  {done}/{documents} documents"));
                }
            }
        })?;
        if report.added + report.updated + report.removed > 0 {
            ingested_any = true;
            progress(&format!(
                "  {} chunks, {} embedded, {} from cache, {:.0} s",
                report.chunks, report.embedded, report.cached, report.wall_s
            ));
            if report.annotated > 0 {
                let s = report.stages.annotate_s;
                progress(&format!("  llm context: {} chunks in {s:.0} s ({:.1} chunks/min)", report.annotated, report.annotated as f64 * 60.0 / s.max(1e-9)));
            }
        }
        if !report.skipped.is_empty() {
            return Err(Error::Invalid(format!(
                "{} corpus documents were skipped (first: {:?}: {})",
                report.skipped.len(),
                report.skipped[0].path,
                report.skipped[0].reason
            )));
        }
        tenants.insert(name, store.catalog().require_tenant(&opts.tenant)?);
    }
    let ingest_s = if ingested_any { started.elapsed().as_secs_f64() } else { 0.0 };

    let mut results = Vec::new();
    let mut skipped = Vec::new();
    let mut evidence: HashMap<String, Vec<f32>> = HashMap::new();
    for c in &plan.configs {
        if c.rerank && plan.reranker.is_none() {
            skipped.push(SkippedConfig { name: c.name.clone(), reason: "no reranker weights in the models folder".into() });
            continue;
        }
        let tenant = &tenants[&tenant_name(&c.model, c.chunker, plan.ingest.chunk.child_tokens, c.context)];
        let docs_of = chunk_documents(&store, tenant)?;
        let e = (c.options.dense_candidates > 0).then(|| Arc::clone(&models[&c.model]));
        let reranker = if c.rerank { plan.reranker.clone() } else { None };
        let retriever = Retriever::new(&store, tenant, e, reranker, c.options.clone())?;
        retriever.retrieve(&set.queries[0].1)?; // warm-up, not timed
        let mut per_query: Vec<QueryMetrics> = Vec::with_capacity(set.queries.len());
        let mut latencies: Vec<f64> = Vec::with_capacity(set.queries.len());
        let mut best: Vec<f32> = Vec::new();
        for (qid, text) in &set.queries {
            let t = Instant::now();
            let r = retriever.retrieve(text)?;
            latencies.push(t.elapsed().as_secs_f64() * 1e3);
            let hits = r
                .candidates
                .iter()
                .enumerate()
                .filter_map(|(i, cand)| docs_of.get(&cand.chunk.0).map(|d| (d.clone(), 1.0 / (1.0 + i as f64))));
            let ranked = metrics::rank_documents(hits);
            per_query.push(metrics::evaluate(&ranked, &set.qrels[qid]));
            if let Some(b) = r.best_evidence {
                best.push(b);
            }
        }
        latencies.sort_by(f64::total_cmp);
        let m = metrics::mean(&per_query);
        progress(&format!(
            "{:<40} nDCG@10 {:.4}  R@10 {:.4}  R@100 {:.4}  MRR@10 {:.4}  p50 {:.1} ms",
            c.name,
            m.ndcg_at_10,
            m.recall_at_10,
            m.recall_at_100,
            m.mrr_at_10,
            percentile(&latencies, 50.0)
        ));
        if best.len() == set.queries.len() {
            evidence.insert(c.name.clone(), best);
        }
        results.push(ConfigResult {
            name: c.name.clone(),
            default: c.default,
            metrics: m,
            p50_ms: percentile(&latencies, 50.0),
            p95_ms: percentile(&latencies, 95.0),
            spec: c.clone(),
        });
    }

    let mut refusal = Vec::new();
    if let Some(ood) = &plan.ood {
        let questions = load_questions(ood)?;
        for c in plan.configs.iter().filter(|c| c.options.dense_candidates > 0 && c.options.lexical_candidates > 0 && c.context) {
            let Some(in_domain) = evidence.get(&c.name) else { continue };
            let tenant = &tenants[&tenant_name(&c.model, c.chunker, plan.ingest.chunk.child_tokens, c.context)];
            let reranker = if c.rerank { plan.reranker.clone() } else { None };
            let scorer = reranker.as_ref().map_or(c.model.clone(), |r| r.model_id().to_string());
            if refusal.iter().any(|r: &RefusalCurve| r.scorer == scorer) {
                continue;
            }
            progress(&format!("refusal: {} out-of-domain questions through {}", questions.len(), c.name));
            let retriever = Retriever::new(&store, tenant, Some(Arc::clone(&models[&c.model])), reranker, c.options.clone())?;
            let mut out = Vec::with_capacity(questions.len());
            for q in &questions {
                if let Some(b) = retriever.retrieve(q)?.best_evidence {
                    out.push(b);
                }
            }
            let mut curve = refusal_curve(&c.name, &scorer, in_domain, &out, plan.max_in_domain_refused);
            // Floors are keyed by model, whatever the precision of its vectors.
            let key = scorer.split('@').next().unwrap_or(&scorer);
            if let Some(&f) = plan.shipped_floors.get(key) {
                curve.shipped = Some((f64::from(f), refused_share(in_domain, f64::from(f)), refused_share(&out, f64::from(f))));
            }
            refusal.push(curve);
        }
    }

    Ok(EvalReport {
        data: plan.data.clone(),
        split: plan.split.clone(),
        corpus_sha256: set.corpus_sha256.clone(),
        documents,
        queries: set.queries.len(),
        configs: results,
        skipped,
        refusal,
        ingest_s,
    })
}

/// Questions from a JSON-lines file whose records have a `question` (or `text`) field.
pub fn load_questions(path: &Path) -> Result<Vec<String>> {
    let text = std::fs::read_to_string(path).map_err(Error::path(path))?;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let v: serde_json::Value = serde_json::from_str(line)
            .map_err(|e| Error::Invalid(format!("{}:{}: not a JSON line: {e}", path.display(), i + 1)))?;
        let q = v.get("question").or_else(|| v.get("text")).and_then(|q| q.as_str()).ok_or_else(|| {
            Error::Invalid(format!("{}:{}: no `question` or `text` field", path.display(), i + 1))
        })?;
        out.push(q.to_string());
    }
    if out.is_empty() {
        return Err(Error::Invalid(format!("{} holds no questions", path.display())));
    }
    Ok(out)
}

/// The refusal trade-off: for floors across the observed range, the share of each set whose best
/// evidence falls below; the chosen floor is the highest that refuses at most `max_in_domain` of
/// the in-domain queries.
pub fn refusal_curve(config: &str, scorer: &str, in_domain: &[f32], ood: &[f32], max_in_domain: f64) -> RefusalCurve {
    let share = refused_share;
    let mut sorted: Vec<f64> = in_domain.iter().map(|&b| f64::from(b)).collect();
    sorted.sort_by(f64::total_cmp);
    // Refusing at most k in-domain queries: the floor may rise to the (k+1)-th smallest score.
    let k = (max_in_domain * sorted.len() as f64).floor() as usize;
    let chosen = sorted.get(k).copied().unwrap_or(f64::NEG_INFINITY);
    let all = in_domain.iter().chain(ood).map(|&b| f64::from(b));
    let (lo, hi) = all.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), b| (lo.min(b), hi.max(b)));
    let floors: Vec<f64> = if lo.is_finite() && hi > lo { (0..=100).map(|i| lo + (hi - lo) * i as f64 / 100.0).collect() } else { vec![] };
    RefusalCurve {
        config: config.to_string(),
        scorer: scorer.to_string(),
        in_domain: in_domain.len(),
        out_of_domain: ood.len(),
        in_domain_refused: floors.iter().map(|&f| share(in_domain, f)).collect(),
        out_of_domain_refused: floors.iter().map(|&f| share(ood, f)).collect(),
        floors,
        chosen_floor: chosen,
        chosen_in_domain_refused: share(in_domain, chosen),
        chosen_out_of_domain_refused: share(ood, chosen),
        shipped: None,
        in_domain_evidence: sorted_f32(in_domain),
        out_of_domain_evidence: sorted_f32(ood),
    }
}

/// The share of `set` whose best evidence falls below `floor`.
fn refused_share(set: &[f32], floor: f64) -> f64 {
    set.iter().filter(|&&b| f64::from(b) < floor).count() as f64 / set.len().max(1) as f64
}

fn sorted_f32(x: &[f32]) -> Vec<f32> {
    let mut v = x.to_vec();
    v.sort_by(f32::total_cmp);
    v
}

/// The report as a markdown section: a table per run, the refusal floors, and how to reproduce.
pub fn markdown(report: &EvalReport, command: &str, machine: &str) -> String {
    let mut s = String::new();
    s.push_str(&format!(
        "\n## {} ({}, {} queries, {} documents)\n\n",
        report.data.file_name().map_or("data".into(), |n| n.to_string_lossy().to_string()),
        report.split,
        report.queries,
        report.documents
    ));
    s.push_str(&format!("`{command}` on {machine}; corpus sha256 `{}`.\n\n", &report.corpus_sha256[..16.min(report.corpus_sha256.len())]));
    s.push_str("| configuration | nDCG@10 | R@10 | R@100 | MRR@10 | p50 ms | p95 ms |\n|---|---|---|---|---|---|---|\n");
    for c in &report.configs {
        let name = if c.default { format!("**{}** (default)", c.name) } else { c.name.clone() };
        s.push_str(&format!(
            "| {name} | {:.4} | {:.4} | {:.4} | {:.4} | {:.1} | {:.1} |\n",
            c.metrics.ndcg_at_10, c.metrics.recall_at_10, c.metrics.recall_at_100, c.metrics.mrr_at_10, c.p50_ms, c.p95_ms
        ));
    }
    for k in &report.skipped {
        s.push_str(&format!("| {} | not run: {} | | | | | |\n", k.name, k.reason));
    }
    for r in &report.refusal {
        s.push_str(&format!(
            "\nRefusal floor for `{}` (measured through {}): **{:.4}** refuses {:.1}% of {} in-domain queries and {:.1}% of {} out-of-domain questions.\n",
            r.scorer,
            r.config,
            r.chosen_floor,
            r.chosen_in_domain_refused * 100.0,
            r.in_domain,
            r.chosen_out_of_domain_refused * 100.0,
            r.out_of_domain
        ));
        if let Some((floor, inside, outside)) = r.shipped {
            s.push_str(&format!(
                "The shipped floor for `{}`, **{floor:.4}**, refuses {:.1}% of these in-domain queries and {:.1}% of the out-of-domain questions.\n",
                r.scorer,
                inside * 100.0,
                outside * 100.0
            ));
        }
        s.push_str("\n| floor | in-domain refused | out-of-domain refused |\n|---|---|---|\n");
        for i in (0..r.floors.len()).step_by(10) {
            s.push_str(&format!("| {:.4} | {:.1}% | {:.1}% |\n", r.floors[i], r.in_domain_refused[i] * 100.0, r.out_of_domain_refused[i] * 100.0));
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_chosen_floor_refuses_at_most_the_allowed_share() {
        let in_domain: Vec<f32> = (0..100).map(|i| 0.5 + i as f32 / 200.0).collect(); // 0.500 .. 0.995
        let ood: Vec<f32> = (0..50).map(|i| 0.2 + i as f32 / 200.0).collect(); // 0.200 .. 0.445
        let c = refusal_curve("hybrid", "m", &in_domain, &ood, 0.05);
        // k = 5: the floor is the 6th smallest in-domain score, 0.525; five are below it.
        assert!((c.chosen_floor - 0.525).abs() < 1e-6, "{}", c.chosen_floor);
        assert!((c.chosen_in_domain_refused - 0.05).abs() < 1e-9);
        assert_eq!(c.chosen_out_of_domain_refused, 1.0);
        assert_eq!(c.floors.len(), 101);
        assert!(c.in_domain_refused.windows(2).all(|w| w[0] <= w[1]), "monotone");
    }

    #[test]
    fn tenant_names_are_valid_and_distinct() {
        let a = tenant_name("nomic-embed-text-v1.5", ChunkerKind::Structural, 256, true);
        assert_eq!(a, "nomic-embed-text-v1-5-structural-256-ctx");
        ragbox_core::store::check_tenant_name(&a).unwrap();
        assert_ne!(a, tenant_name("nomic-embed-text-v1.5", ChunkerKind::Structural, 256, false));
        assert_eq!(tenant_name("all-minilm-l6-v2", ChunkerKind::Whole, 256, true), "all-minilm-l6-v2-whole-ctx");
    }

}
