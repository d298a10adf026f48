//! `ragbox ask "q"`: one grounded answer. Retrieves, refuses without loading the LLM when nothing
//! clears the floor, else streams the answer, then its sources, removed citations and the
//! sentences its sources do not support (amber on a terminal). `--json`: one object. Every ask
//! writes an audit row; its id is what `ragbox feedback` takes.

use std::io::{IsTerminal, Write};
use std::sync::Arc;

use clap::Args;

use ragbox::answer::{refuse, Answer, Answerer, Source};
use ragbox::app::App;
use ragbox::generate::{block_on, Generator};
use ragbox::retrieve::Retrieval;
use ragbox::store::{AuditRecord, Store, TenantRow};

use super::search::excerpt;
use super::{print_json, GlobalArgs};

/// Arguments of `ask`.
#[derive(Debug, Args)]
pub struct AskArgs {
    /// The question, in plain language.
    pub question: String,
    /// Tenant to answer from.
    #[arg(long, default_value = ragbox::store::DEFAULT_TENANT)]
    pub tenant: String,
    /// Generate with this local model instead of the configured one (a `generate` model).
    #[arg(long)]
    pub llm: Option<String>,
    /// Skip the reranker even when its weights are present.
    #[arg(long)]
    pub no_rerank: bool,
    /// Also print retrieval's verdict and the prompt the generator was given.
    #[arg(long)]
    pub explain: bool,
}

/// What answering needs, loaded once (per `ask`, or per `chat` session).
pub(super) struct Answering<'s> {
    pub app: &'s App,
    pub store: &'s Store,
    pub tenant: TenantRow,
    pub retriever: ragbox::retrieve::Retriever<'s>,
    pub note: Option<String>,
    pub llm: Option<String>,
    generator: Option<Arc<dyn Generator>>,
}

impl<'s> Answering<'s> {
    pub fn open(app: &'s App, store: &'s Store, tenant: &str, rerank: bool, llm: Option<String>) -> anyhow::Result<Answering<'s>> {
        let tenant = store.catalog().require_tenant(tenant)?;
        let mut options = app.retrieve_options();
        options.top_k = options.top_k.max(app.config.answer.passages);
        let (retriever, note) = app.retriever(store, &tenant.name, None, rerank, options)?;
        Ok(Answering { app, store, tenant, retriever, note, llm, generator: None })
    }

    /// The generator, loaded on first use (a refused question never loads it).
    pub fn generator(&mut self) -> anyhow::Result<Arc<dyn Generator>> {
        if let Some(g) = &self.generator {
            return Ok(g.clone());
        }
        let g = self.app.generator(self.llm.as_deref())?;
        if g.is_remote() {
            eprintln!(
                "warning: generate.backend = \"claude\": the question and the retrieved passages are sent to Anthropic; \
                 this text leaves the machine"
            );
        }
        self.generator = Some(g.clone());
        Ok(g)
    }

    /// Retrieves for `standalone` (which took `rewrite_ms` to make) and answers `question`,
    /// streaming tokens to `sink`; records the audit row.
    pub fn answer(
        &mut self,
        question: &str,
        standalone: &str,
        rewrite_ms: f64,
        session: Option<i64>,
        sink: &mut (dyn ragbox::generate::TokenSink + Send),
    ) -> anyhow::Result<(Retrieval, Answer)> {
        let retrieval = self.retriever.retrieve(standalone)?;
        let options = self.app.answer_options();
        let mut answer = if retrieval.refused || retrieval.hits.is_empty() {
            let method = self.app.config.answer.support.parse()?;
            let a = refuse(question, standalone, &retrieval, &options, method);
            sink.token(&a.answer);
            a
        } else {
            let generator = self.generator()?;
            let support = self.app.support_checker(self.retriever.embedder().cloned(), &generator)?;
            let answerer = Answerer::new(generator, support, options);
            block_on(answerer.answer(question, standalone, &retrieval, sink))?
        };
        answer.timings.rewrite_ms = rewrite_ms;
        answer.timings.total_ms += rewrite_ms;
        let chunks = answer.served_chunks();
        let timings = serde_json::to_value(&answer.timings)?;
        answer.answer_id = Some(self.store.catalog().record_audit(&AuditRecord {
            tenant: self.tenant.id,
            session,
            question,
            standalone,
            chunk_ids: &chunks,
            model: answer.model.as_deref().unwrap_or(""),
            refused: answer.refused,
            answer: &answer.answer,
            timings: &timings,
        })?);
        Ok((retrieval, answer))
    }
}

/// Streams tokens to stdout as they come (human output only).
pub(super) struct Stdout;

impl ragbox::generate::TokenSink for Stdout {
    fn token(&mut self, text: &str) {
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(text.as_bytes());
        let _ = out.flush();
    }
}

fn colour() -> bool {
    std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none()
}

fn amber(text: &str) -> String {
    if colour() {
        format!("\x1b[38;5;214m{text}\x1b[0m")
    } else {
        text.to_string()
    }
}

fn source_line(s: &Source) -> String {
    let mut line = format!("[{}] {}", s.id, s.document.display());
    if !s.section_path.is_empty() {
        line.push_str(&format!(" › {}", s.section_path.join(" > ")));
    }
    if let Some(p) = s.page {
        line.push_str(&format!(" (page {p})"));
    }
    line.push_str(&format!(" [lines {}-{}, bytes {}..{}]", s.lines.first, s.lines.last, s.span.start, s.span.end));
    line
}

/// What follows the streamed answer: flags, removed citations, sources or closest material.
pub(super) fn print_after(answer: &Answer) {
    println!();
    if answer.hit_token_cap {
        println!(
            "{}",
            amber(&format!(
                "(cut short: the answer reached the token cap of {} tokens; raise generate.max_tokens for longer answers)",
                answer.timings.completion_tokens
            ))
        );
    }
    if !answer.invalid_citations.is_empty() {
        println!(
            "removed citations to passages the model was not given: {}",
            answer.invalid_citations.iter().map(|c| format!("[{c}]")).collect::<Vec<_>>().join(" ")
        );
    }
    let flagged: Vec<_> = answer.sentences.iter().filter(|s| !s.supported).collect();
    if !flagged.is_empty() && !answer.refused {
        println!("{}", amber("not supported by the passages it cites:"));
        for s in flagged {
            let why = if s.citations.is_empty() { "cites nothing".to_string() } else { format!("support {:.2}", s.support.unwrap_or(0.0)) };
            println!("  {} ({why})", amber(&s.text));
        }
    }
    if answer.refused {
        if !answer.closest.is_empty() {
            println!("closest material (not a source):");
            for s in &answer.closest {
                println!("  {}", source_line(s));
                println!("      {}", excerpt(&s.text, 160));
            }
        }
    } else {
        println!("sources:");
        for s in &answer.sources {
            let used = if answer.citations.iter().any(|c| c.id == s.id) { "cited" } else { "not cited" };
            println!("  {} · {used}", source_line(s));
        }
    }
    let t = &answer.timings;
    match &answer.model {
        Some(m) => println!(
            "answer {} · {m} · first token {:.1} s · {:.1} tokens/s · total {:.1} s",
            answer.answer_id.unwrap_or_default(),
            t.first_token_ms / 1e3,
            t.tokens_per_second,
            t.total_ms / 1e3
        ),
        None => println!("answer {} · no model called · {:.0} ms", answer.answer_id.unwrap_or_default(), t.total_ms),
    }
}

pub fn run(g: &GlobalArgs, args: AskArgs) -> anyhow::Result<u8> {
    anyhow::ensure!(!args.question.trim().is_empty(), "the question is empty; type what you want to know");
    let app = g.app()?;
    let store = app.store()?;
    let mut answering = Answering::open(&app, &store, &args.tenant, !args.no_rerank, args.llm.clone())?;
    if let Some(n) = &answering.note {
        eprintln!("note: {n}");
    }
    let (retrieval, answer) = if g.json {
        answering.answer(&args.question, &args.question, 0.0, None, &mut ragbox::generate::Discard)?
    } else {
        answering.answer(&args.question, &args.question, 0.0, None, &mut Stdout)?
    };
    if g.json {
        print_json(&answer)?;
        return Ok(0);
    }
    print_after(&answer);
    if args.explain {
        super::search::print_verdict(&retrieval);
        if !answer.refused || answer.refusal != Some(ragbox::answer::Refusal::NoGoodSource) {
            let (messages, _) = ragbox::answer::prompt_for(&answer.standalone, &retrieval, &app.answer_options());
            println!("prompt:");
            for m in messages {
                println!("--- {:?}\n{}", m.role, m.content);
            }
        }
    }
    Ok(0)
}
