//! `ragbox eval --data DIR`: retrieval quality and latency on a BEIR-format set, each
//! configuration side by side, as a table on stdout (`--json`: the report), and with `--report
//! FILE` appended there with an SVG plot beside it; with `--ood FILE`, the refusal floor chosen
//! against out-of-domain questions. The answer evaluations (`--qa`, `--answers`, `--support`,
//! `--conversations`) run through `ragbox-eval` the same way.

use std::path::PathBuf;

use clap::Args;

use ragbox_eval::run::{markdown, run as run_eval, standard_configs, EvalPlan, EvalReport};
use ragbox_eval::plot;
use ragbox_core::types::ModelRole;

use super::app;
use ragbox_cli::{print_json, GlobalArgs};

/// Arguments of `eval`.
#[derive(Debug, Args)]
pub struct EvalArgs {
    /// A BEIR folder: corpus.jsonl, queries.jsonl, qrels/<split>.tsv.
    #[arg(long, value_name = "DIR", required_unless_present_any = ["qa", "conversations", "support", "reader_features"])]
    pub data: Option<PathBuf>,
    /// Evaluate answers against reference answers instead: JSON lines with `question`, `answer`,
    /// `file`, `evidence`, `answerable` and `split` (tests/data/eval/qa/), over the documents of
    /// --corpus. Repeat `--qa FILE --corpus DIR` for several collections: one row each, and one
    /// for all; `--split dev|test|all` picks the half.
    #[arg(long, value_name = "FILE", requires = "corpus", conflicts_with_all = ["data", "answers"])]
    pub qa: Vec<PathBuf>,
    /// Evaluate follow-ups instead: conversations (JSON lines: `id`, `split`, `kind`, `turns` of
    /// QA questions with a reference `rewrite` and `keep` phrases; tests/data/eval/conversations.jsonl)
    /// asked turn by turn over the documents of --corpus: rewrites judged, answers scored.
    #[arg(long, value_name = "FILE", requires = "corpus", conflicts_with_all = ["data", "answers", "qa"])]
    pub conversations: Option<PathBuf>,
    /// Evaluate the support flags instead: labelled sentences (JSON lines: `question`,
    /// `sentence`, `passages`, `supported`, `kind`; tests/data/eval/support-dev.jsonl) judged by
    /// every method against `answer.support_floor`; the LLM method on the first --limit (40).
    #[arg(long, value_name = "FILE", conflicts_with_all = ["data", "answers", "qa", "conversations"])]
    pub support: Option<PathBuf>,
    /// Write the reader's training material instead: examples (JSON lines: `id`, `question`,
    /// `context`, `text`, `evidence`; made by scripts/train/reader-data.py) cut into the answer
    /// step's units, each unit's cross-encoder last-layer states and logit written to --out
    /// (and, with --reader-layers, its token states where the reader's own layers begin).
    #[arg(long, value_name = "FILE", requires = "out", conflicts_with_all = ["data", "answers", "qa", "conversations", "support"])]
    pub reader_features: Option<PathBuf>,
    /// With --reader-features: the folder written (units.jsonl, states.f32, tapped.f16).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// With --reader-features: also write each unit's token states entering the cross-encoder's
    /// top K layers (the layers the reader trains its own copies of).
    #[arg(long, value_name = "K", default_value_t = 0, requires = "reader_features")]
    pub reader_layers: usize,
    /// With --qa: the folder of documents the questions are about (one per --qa, in order).
    #[arg(long, value_name = "DIR")]
    pub corpus: Vec<PathBuf>,
    /// With --qa: a label for this run's row in the report (e.g. the prompt variant tried).
    #[arg(long, default_value = "default")]
    pub label: String,
    /// With --qa: passages given to the model (default: `answer.passages`).
    #[arg(long)]
    pub passages: Option<usize>,
    /// With --qa: most characters per passage (default: `answer.passage_chars`).
    #[arg(long)]
    pub passage_chars: Option<usize>,
    /// With --qa: the token cap (default: `generate.max_tokens`).
    #[arg(long)]
    pub max_tokens: Option<usize>,
    /// With --qa: sentences of the passages the model reads, 0 for whole passages (default:
    /// `answer.focus`).
    #[arg(long)]
    pub focus: Option<usize>,
    /// With --qa: the answer prompt's layout (default: `answer.prompt`): labelled, tagged,
    /// system-context, direct.
    #[arg(long)]
    pub prompt: Option<String>,
    /// With --qa: build each question's prompt and ask no model; report where the evidence
    /// stopped (retrieval, the passages given, their budget, the focus) and how much passage text
    /// the model would read. Minutes instead of an hour; writes no report.
    #[arg(long, requires = "qa")]
    pub prompts_only: bool,
    /// The qrels split to evaluate.
    #[arg(long, default_value = "test")]
    pub split: String,
    /// Embedding models to compare (default: every embedder present in the models folder).
    #[arg(long, value_delimiter = ',')]
    pub models: Vec<String>,
    /// Run only these configurations: an exact name, or text that names contain (repeatable).
    #[arg(long, value_name = "TEXT")]
    pub only: Vec<String>,
    /// Add the default model's tuning variants (fusion weights, candidate counts, MMR, rerank depth).
    #[arg(long)]
    pub sweep: bool,
    /// Out-of-domain questions (JSON lines with `question`) to choose the refusal floor against.
    #[arg(long, value_name = "FILE")]
    pub ood: Option<PathBuf>,
    /// Most in-domain queries the chosen floor may refuse, as a share.
    #[arg(long, default_value_t = 0.05)]
    pub max_refused: f64,
    /// Candidates per list (default: `retrieve.dense_candidates` / `lexical_candidates`).
    #[arg(long)]
    pub depth: Option<usize>,
    /// Scratch folder for the corpus as documents and its store (default: the cache, keyed by
    /// the corpus's sha256, reused between runs).
    #[arg(long, value_name = "DIR")]
    pub scratch: Option<PathBuf>,
    /// Append the run's markdown report to FILE (a BEIR run also writes its plots beside it);
    /// without it the run writes nothing but its own output.
    #[arg(long, value_name = "FILE")]
    pub report: Option<PathBuf>,
    /// Rerank with this model instead of `rerank.model`: a cross-encoder, or a generate model
    /// scored by its yes/no logits (`qwen2.5-coder-0.5b-instruct`).
    #[arg(long, value_name = "MODEL")]
    pub reranker: Option<String>,
    /// Write each chunk's context with the local LLM at ingest (`ingest --context llm`) for the
    /// configurations that have context. Needs a --scratch of its own, so that its tenants never
    /// mix with the structural-context ones of the shared cache.
    #[arg(long, requires = "scratch")]
    pub llm_context: bool,
    /// Evaluate only the first N queries (an LLM stage makes the full set take hours on a CPU).
    #[arg(long, value_name = "N")]
    pub limit: Option<usize>,
    /// Evaluate answers instead of retrieval: claims asked as questions through the whole answer
    /// path, out-of-domain questions (`--ood`) that must be refused, and the support-check
    /// methods compared on known pairs.
    #[arg(long)]
    pub answers: bool,
    /// With --answers: out-of-domain questions asked.
    #[arg(long, default_value_t = 50, value_name = "N")]
    pub ood_limit: usize,
    /// With --answers: claims whose (relevant, hard-negative) pairs compare the support methods.
    #[arg(long, default_value_t = 60, value_name = "N")]
    pub support_pairs: usize,
    /// With --answers: generate with this local model (default: `generate.model`).
    #[arg(long, value_name = "MODEL")]
    pub llm: Option<String>,
}

fn cache_dir() -> PathBuf {
    std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir)
        .join("ragbox")
        .join("eval")
}

fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("model name")).and_then(|l| l.split(':').nth(1)).map(|s| s.trim().to_string()))
        .unwrap_or_else(|| std::env::consts::ARCH.to_string());
    format!("{cpu}, {} threads", rayon::current_num_threads())
}

pub fn run(g: &GlobalArgs, args: EvalArgs) -> anyhow::Result<u8> {
    let app = app(g)?;
    if let Some(file) = &args.support {
        return run_support(g, &app, &args, file);
    }
    if let (Some(file), Some(out)) = (&args.reader_features, &args.out) {
        let reranker = app.reranker()?.ok_or_else(|| anyhow::anyhow!("the cross-encoder `{}` is not in the models folder", app.config.rerank.model))?;
        let tap = match args.reader_layers {
            0 => None,
            k if k <= reranker.depth() => Some(reranker.depth() - k),
            k => anyhow::bail!("--reader-layers {k}: the cross-encoder `{}` has {} layers", reranker.model_id(), reranker.depth()),
        };
        let written = ragbox_eval::reader_features::write(reranker.as_ref(), file, out, tap)?;
        if g.json {
            print_json(&written)?;
        } else {
            eprintln!("{} examples, {} units ({} evidence, width {}); {} examples whose evidence matched no unit left out", written.examples, written.units, written.positives, written.width, written.unmatched);
        }
        return Ok(0);
    }
    if let Some(file) = &args.conversations {
        return run_conversations(g, &app, &args, file);
    }
    if !args.qa.is_empty() {
        return run_qa(g, &app, &args);
    }
    let data = args.data.clone().ok_or_else(|| anyhow::anyhow!("--data DIR is required"))?;
    let sha = ragbox_eval::beir::load(&data, &args.split)?.corpus_sha256;
    let scratch = args.scratch.clone().unwrap_or_else(|| cache_dir().join(&sha[..16]));
    if args.answers {
        return run_answers(g, &app, &args, scratch);
    }

    let mut models = args.models.clone();
    if models.is_empty() {
        let manifest = app.models.manifest();
        let mut present: Vec<(Option<usize>, String)> = manifest
            .by_role(ModelRole::Embed)
            .filter(|m| app.models.status(m, ragbox_core::model::store::Check::Stamped).ready)
            .map(|m| (m.dims, m.name.clone()))
            .collect();
        present.sort();
        models = present.into_iter().map(|(_, n)| n).collect();
    }
    anyhow::ensure!(!models.is_empty(), "no embedding model is present in the models folder; run `ragbox models pull` or scripts/setup/fetch-models.sh");
    let default_model = app.config.embed.model.clone();
    if !models.contains(&default_model) {
        models.push(default_model.clone());
    }

    let mut options = app.retrieve_options();
    if let Some(d) = args.depth {
        options.dense_candidates = d;
        options.lexical_candidates = d;
    }
    let chunker = app.config.ingest.chunker;
    let reranker = match &args.reranker {
        Some(name) => Some(app.reranker_named(name)?.ok_or_else(|| anyhow::anyhow!("the files of reranker `{name}` are not in the models folder"))?),
        None => app.reranker()?,
    };
    let mut configs = standard_configs(&models, &default_model, chunker, &options, reranker.is_some(), args.sweep);
    if !args.only.is_empty() {
        // A name that is some configuration's exact name selects just that one; other text
        // selects every configuration whose name contains it.
        let names: Vec<String> = configs.iter().map(|c| c.name.clone()).collect();
        configs.retain(|c| args.only.iter().any(|o| c.name == *o || (!names.contains(o) && c.name.contains(o.as_str()))));
    }
    anyhow::ensure!(!configs.is_empty(), "no configuration matches --only {:?}", args.only);

    let plan = EvalPlan {
        limit: args.limit,
        data: data.clone(),
        split: args.split.clone(),
        scratch,
        ingest: ragbox_core::ingest::IngestOptions {
            annotator: if args.llm_context { Some(app.annotator()?) } else { None },
            ..app.ingest_options("eval", None)?
        },
        configs,
        reranker,
        ood: args.ood.clone(),
        max_in_domain_refused: args.max_refused,
        shipped_floors: app.config.retrieve.floors.clone(),
        shared: match (app.config.store.backend, &app.config.store.shared) {
            (ragbox_service::config::StoreBackend::Shared, Some(shared)) => Some(shared.options()?),
            _ => None,
        },
    };
    let quiet = g.quiet;
    let report = run_eval(&plan, &|name| app.embedder(Some(name)), &mut |msg| {
        if !quiet {
            eprintln!("{msg}");
        }
    })?;

    let command = std::iter::once("ragbox".to_string()).chain(std::env::args().skip(1)).collect::<Vec<_>>().join(" ");
    let md = markdown(&report, &command, &machine());
    if let Some(path) = &args.report {
        write_report(&args, path, &report, &md)?;
    }
    if g.json {
        print_json(&report)?;
    } else {
        print!("{md}");
    }
    Ok(0)
}

/// What the answer evaluations run: the configured embedder, the generator (`--llm`), the reranker
/// (`--reranker`), and retrieval with the floor of whichever model scores the hits.
struct AnswerStack {
    models: ragbox_eval::AnswerModels,
    retrieve: ragbox_core::retrieve::RetrieveOptions,
}

fn answer_stack(app: &ragbox_core::app::App, args: &EvalArgs) -> anyhow::Result<AnswerStack> {
    let RetrievalStack { embedder, reranker, retrieve } = retrieval_stack(app, args)?;
    let generator = app.generator(args.llm.as_deref())?;
    Ok(AnswerStack { models: ragbox_eval::AnswerModels { embedder, generator, reranker }, retrieve })
}

/// [`AnswerStack`] without the generator: what `eval --qa --prompts-only` loads.
struct RetrievalStack {
    embedder: std::sync::Arc<dyn ragbox_core::embed::Embedder>,
    reranker: Option<std::sync::Arc<dyn ragbox_core::rerank::Reranker>>,
    retrieve: ragbox_core::retrieve::RetrieveOptions,
}

fn retrieval_stack(app: &ragbox_core::app::App, args: &EvalArgs) -> anyhow::Result<RetrievalStack> {
    let model = app.config.embed.model.clone();
    let embedder = app.embedder(Some(&model))?;
    let reranker = match &args.reranker {
        Some(name) => app.reranker_named(name)?,
        None => app.reranker()?,
    };
    let mut retrieve = app.retrieve_options();
    retrieve.floor = app.config.retrieve.floor_for(reranker.as_ref().map(|r| r.model_id()), &model)?;
    Ok(RetrievalStack { embedder, reranker, retrieve })
}

/// `eval --answers`: the default configuration's retrieval, the configured generator.
fn run_answers(g: &GlobalArgs, app: &ragbox_core::app::App, args: &EvalArgs, scratch: PathBuf) -> anyhow::Result<u8> {
    use ragbox_eval::answers::{markdown as answers_markdown, run as answers_run, AnswerPlan};
    let AnswerStack { models, retrieve } = answer_stack(app, args)?;
    let chunker = app.config.ingest.chunker;
    let mut ingest = app.ingest_options("eval", None)?;
    ingest.tenant = ragbox_eval::run::tenant_name(models.embedder.model_id(), chunker, ingest.chunk.child_tokens, true);
    let plan = AnswerPlan {
        data: args.data.clone().ok_or_else(|| anyhow::anyhow!("--data DIR is required"))?,
        split: args.split.clone(),
        scratch,
        ingest,
        retrieve,
        answer: app.answer_options(),
        support: app.config.answer.support,
        limit: args.limit.unwrap_or(30),
        ood: args.ood.clone(),
        ood_limit: args.ood_limit,
        support_pairs: args.support_pairs,
    };
    let quiet = g.quiet;
    let report = answers_run(&plan, &models, &mut |msg| {
        if !quiet {
            eprintln!("{msg}");
        }
    })?;
    let command = std::iter::once("ragbox".to_string()).chain(std::env::args().skip(1)).collect::<Vec<_>>().join(" ");
    let md = answers_markdown(&report, &command, &machine());
    append_report(&args, &md)?;
    if g.json {
        print_json(&report)?;
    } else {
        print!("{md}");
    }
    Ok(0)
}

/// The half of a question set `--split` names: `None` for all.
fn question_half(split: &str) -> anyhow::Result<Option<String>> {
    match split {
        "all" => Ok(None),
        "dev" | "test" => Ok(Some(split.to_string())),
        other => anyhow::bail!("--split {other}: a question set has the halves dev and test (or all)"),
    }
}

/// The answer settings of `eval --qa` and `--conversations`: the config's, with the flags' changes.
fn eval_answer_options(app: &ragbox_core::app::App, args: &EvalArgs) -> anyhow::Result<ragbox_core::answer::AnswerOptions> {
    let mut answer = app.answer_options();
    answer.passages = args.passages.unwrap_or(answer.passages);
    answer.passage_chars = args.passage_chars.unwrap_or(answer.passage_chars);
    answer.max_tokens = args.max_tokens.unwrap_or(answer.max_tokens);
    answer.focus = args.focus.unwrap_or(answer.focus);
    if let Some(p) = &args.prompt {
        answer.prompt = p.parse()?;
    }
    Ok(answer)
}

/// The scratch store of a question set over `corpus` (keyed by its path and the embedder).
fn qa_scratch(args: &EvalArgs, corpus: &std::path::Path, collection: &str, embedder: &str) -> anyhow::Result<PathBuf> {
    let key = {
        use sha2::Digest;
        hex::encode(sha2::Sha256::digest(std::fs::canonicalize(corpus)?.to_string_lossy().as_bytes()))
    };
    Ok(match &args.scratch {
        Some(dir) if args.qa.len() > 1 => dir.join(collection),
        Some(dir) => dir.clone(),
        None => cache_dir().join(format!("qa-{}-{embedder}", &key[..12])),
    })
}

/// `eval --support`: every support method on labelled sentences.
fn run_support(g: &GlobalArgs, app: &ragbox_core::app::App, args: &EvalArgs, file: &std::path::Path) -> anyhow::Result<u8> {
    use ragbox_core::answer::support::{SupportChecker, SupportMethod};
    use ragbox_eval::support::{load, markdown, run};
    let set = load(file)?;
    let embedder = app.embedder(Some(&app.config.embed.model))?;
    let floor = app.config.answer.support_floor;
    let generator = app.generator(args.llm.as_deref())?;
    let mut reports = Vec::new();
    for method in [SupportMethod::Grounded, SupportMethod::Similarity] {
        reports.push(run(&set, &SupportChecker::new(method, embedder.clone(), &generator), floor)?);
    }
    let llm_set = &set[..set.len().min(args.limit.unwrap_or(40))];
    if !llm_set.is_empty() {
        // Its score is log-odds of yes over no: 0 is even.
        reports.push(run(llm_set, &SupportChecker::Llm(generator), 0.0)?);
    }
    let command = std::iter::once("ragbox".to_string()).chain(std::env::args().skip(1)).collect::<Vec<_>>().join(" ");
    let md = markdown(&reports, floor);
    if g.json {
        print_json(&reports)?;
    } else {
        for r in &reports {
            for (sentence, reason) in &r.false_alarms {
                println!("- {} flags a correct sentence: \"{sentence}\" ({reason})", r.method);
            }
        }
        print!("{md}");
    }
    append_report(&args, &format!("\n<!-- eval --support on {}: `{command}` (llm: its floor is 0 log-odds) -->\n{md}\n", machine()))?;
    Ok(0)
}

/// `eval --conversations`: follow-ups through the chat path, rewrites judged, answers scored.
fn run_conversations(g: &GlobalArgs, app: &ragbox_core::app::App, args: &EvalArgs, file: &std::path::Path) -> anyhow::Result<u8> {
    use ragbox_eval::conversations::{run as conversations_run, ConversationPlan};
    use ragbox_eval::qa::{markdown_header, markdown_row, QaSetup};
    let corpus = args.corpus.first().ok_or_else(|| anyhow::anyhow!("--conversations needs --corpus DIR"))?;
    let AnswerStack { models, retrieve } = answer_stack(app, args)?;
    let answer = eval_answer_options(app, args)?;
    let plan = ConversationPlan {
        conversations: file.to_path_buf(),
        split: question_half(&args.split)?,
        setup: QaSetup {
            corpus: corpus.clone(),
            scratch: qa_scratch(args, corpus, "conversations", models.embedder.model_id())?,
            ingest: app.ingest_options("qa", None)?,
            retrieve,
            answer,
            support: app.config.answer.support,
        },
        memory_turns: app.config.answer.memory_turns,
    };
    let quiet = g.quiet;
    let report = conversations_run(&plan, &models, &mut |msg| {
        if !quiet {
            eprintln!("{msg}");
        }
    })?;
    let command = std::iter::once("ragbox".to_string()).chain(std::env::args().skip(1)).collect::<Vec<_>>().join(" ");
    let kinds: Vec<String> = report.by_kind.iter().map(|(k, [kept, n])| format!("{k} {kept}/{n}")).collect();
    let summary = format!(
        "{} conversations ({} half): {}/{} follow-up rewrites kept the intent and resolved the references ({}).\n",
        report.conversations,
        args.split,
        report.rewrites_kept,
        report.follow_ups,
        kinds.join(", ")
    );
    let rows = format!("{}{}", markdown_row(&report.first_answers, &args.label), markdown_row(&report.follow_up_answers, &args.label));
    if g.json {
        print_json(&report)?;
    } else {
        for r in report.rewrites.iter().filter(|r| !r.kept()) {
            println!("- {} ({}): \"{}\" → \"{}\" lacks {} (reference: \"{}\")", r.conversation, r.kind, r.question, r.standalone, r.missing.join(", "), r.reference);
        }
        print!("{summary}{}{rows}", markdown_header());
    }
    append_report(&args, &format!("\n<!-- eval --conversations on {}: `{command}` -->\n{summary}\n{}{rows}\n", machine(), markdown_header()))?;
    Ok(0)
}

/// `eval --qa`: reference answers over folders of documents (one row per collection, one for
/// all), the default retrieval, the configured generator.
fn run_qa(g: &GlobalArgs, app: &ragbox_core::app::App, args: &EvalArgs) -> anyhow::Result<u8> {
    use ragbox_eval::qa::{markdown_header, markdown_row, overall, run as qa_run, QaPlan, QaSetup};
    if args.qa.len() != args.corpus.len() {
        anyhow::bail!("give one --corpus DIR per --qa FILE, in the same order ({} --qa, {} --corpus)", args.qa.len(), args.corpus.len());
    }
    let split = question_half(&args.split)?;
    let RetrievalStack { embedder, reranker, retrieve } = retrieval_stack(app, args)?;
    // A prompts-only run asks no model, so none is loaded (its files need not be there).
    let generator = if args.prompts_only { None } else { Some(app.generator(args.llm.as_deref())?) };
    let answer = eval_answer_options(app, args)?;
    let support = app.config.answer.support;
    let quiet = g.quiet;
    let mut reports = Vec::new();
    for (questions, corpus) in args.qa.iter().zip(&args.corpus) {
        let collection = questions.file_stem().map_or("questions".into(), |s| s.to_string_lossy().into_owned());
        let scratch = qa_scratch(args, corpus, &collection, embedder.model_id())?;
        let plan = QaPlan {
            collection,
            questions: questions.clone(),
            split: split.clone(),
            setup: QaSetup {
                corpus: corpus.clone(),
                scratch,
                ingest: app.ingest_options("qa", None)?,
                retrieve: retrieve.clone(),
                answer: answer.clone(),
                support,
            },
        };
        reports.push(qa_run(&plan, embedder.clone(), generator.clone(), reranker.clone(), &mut |msg| {
            if !quiet {
                eprintln!("{msg}");
            }
        })?);
    }
    let all = if reports.len() > 1 { overall(&reports, &answer) } else { None };
    let command = std::iter::once("ragbox".to_string()).chain(std::env::args().skip(1)).collect::<Vec<_>>().join(" ");
    let rows: String = reports.iter().chain(&all).map(|r| markdown_row(r, &args.label)).collect();
    if g.json {
        print_json(&serde_json::json!({ "split": args.split, "collections": reports, "all": all }))?;
    } else {
        if !args.prompts_only {
            for r in reports.iter().flat_map(|r| &r.rows) {
                println!("- [{}] {} → {}", r.collection, r.question, r.answer.replace('\n', " "));
            }
            print!("{}{rows}", markdown_header());
        }
        for r in reports.iter().chain(&all) {
            let lost: Vec<String> = r.evidence_lost.iter().map(|(stage, n)| format!("{stage} {n}")).collect();
            println!(
                "{}: evidence of {} answerable questions: {}; read of retrieved {:.1}%, passage text read p50 {:.0} characters",
                r.collection,
                r.answerable,
                lost.join(", "),
                r.evidence_shown_of_retrieved * 100.0,
                r.read_chars_p50
            );
        }
    }
    if !args.prompts_only {
        append_report(&args, &format!("\n<!-- eval --qa ({} half) on {}: `{command}` -->\n{}{rows}\n", args.split, machine(), markdown_header()))?;
    }
    Ok(0)
}

/// Appends `text` to the `--report` file, when one is given.
fn append_report(args: &EvalArgs, text: &str) -> anyhow::Result<()> {
    use std::io::Write;
    let Some(path) = &args.report else { return Ok(()) };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::OpenOptions::new().create(true).append(true).open(path)?.write_all(text.as_bytes())?;
    eprintln!("report appended to {}", path.display());
    Ok(())
}

/// Appends the markdown to the report at `path` and writes the plots beside it.
fn write_report(args: &EvalArgs, path: &std::path::Path, report: &EvalReport, md: &str) -> anyhow::Result<()> {
    append_report(args, md)?;
    let name = args.data.as_deref().and_then(|d| d.file_name()).map_or("data".into(), |n| n.to_string_lossy().to_string());
    let dir = path.parent().unwrap_or(std::path::Path::new("."));
    let rows: Vec<(String, [f64; 4])> =
        report.configs.iter().map(|c| (c.name.clone(), c.metrics.to_array())).collect();
    if !rows.is_empty() {
        let path = dir.join(format!("eval-{name}.svg"));
        plot::metrics_chart(&path, &format!("{name} ({}, {} queries)", report.split, report.queries), &rows)?;
        eprintln!("plot: {}", path.display());
    }
    for r in &report.refusal {
        let slug: String = r.scorer.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '-' }).collect();
        let path = dir.join(format!("refusal-{name}-{slug}.svg"));
        plot::refusal_chart(
            &path,
            &format!("refusal floor on {} ({} in-domain, {} out-of-domain)", r.scorer, r.in_domain, r.out_of_domain),
            &r.floors,
            &r.in_domain_refused,
            &r.out_of_domain_refused,
            Some(r.chosen_floor),
        )?;
        eprintln!("plot: {}", path.display());
    }
    Ok(())
}
