//! `ragbox ask "q"`: one grounded answer. Retrieves (the LLM loading beside it), refuses without
//! waiting for the LLM when nothing clears the floor, else streams the answer, then its sources,
//! removed citations and the sentences its sources do not support (amber on a terminal).
//! `--json`: one object. Every ask writes an answer log row; its id is what `ragbox feedback`
//! takes.

use std::io::{IsTerminal, Write};

use clap::Args;

use ragbox_service::{Answer, AnswerOutcome, AskOptions, Caller, DecidedBy, Refusal, Source};

use super::search::excerpt;
use super::{print_json, GlobalArgs};

/// Arguments of `ask`.
#[derive(Debug, Args)]
pub struct AskArgs {
    /// The question, in plain language.
    pub question: String,
    /// Tenant to answer from.
    #[arg(long, default_value = ragbox_service::DEFAULT_TENANT)]
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
    /// Answer as a member of these groups would be answered (comma-separated): from the open
    /// documents and theirs only (docs/ACCESS.md).
    #[arg(long, value_delimiter = ',')]
    pub groups: Vec<String>,
}

/// Streams tokens to stdout as they come (human output only).
pub(super) struct Stdout;

impl ragbox_service::TokenSink for Stdout {
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
        let what = if answer.cut_mid_sentence {
            "; its unfinished last sentence is left out of the answer kept"
        } else {
            ""
        };
        println!(
            "{}",
            amber(&format!(
                "(cut short: the answer reached the token cap of {} tokens{what}; raise generate.max_tokens for longer answers)",
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
    let withheld = answer.refusal == Some(Refusal::Unsupported);
    if !flagged.is_empty() && (!answer.refused || withheld) {
        println!("{}", amber(if withheld { "withheld, not supported by the passages it cites:" } else { "not supported by the passages it cites:" }));
        for s in flagged {
            let why = match (&s.reason, s.citations.is_empty()) {
                (Some(reason), _) => reason.clone(),
                (None, true) => "cites nothing".to_string(),
                (None, false) => format!("support {:.2}", s.support.unwrap_or(0.0)),
            };
            println!("  {} ({why})", amber(&s.text));
        }
    }
    if let Some(d) = &answer.decision {
        let how = match answer.outcome {
            AnswerOutcome::Answered if answer.verdict.is_some() => "answered: the evidence verbatim, the model's yes/no before it",
            AnswerOutcome::Answered => "answered: the evidence verbatim",
            AnswerOutcome::DoesNotSay => "the documents do not say",
            AnswerOutcome::NoGoodSource => "no good source",
        };
        println!("({how} · states the answer: {:.2}, floor {:.2})", d.score, d.floor);
    }
    if answer.refused {
        if !answer.closest.is_empty() {
            println!("{}", if answer.outcome == AnswerOutcome::DoesNotSay { "closest passages (they do not give what was asked):" } else { "closest material (not a source):" });
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
            "answer {} · {m}{} · {}first token {:.1} s{} · {:.1} tokens/s · total {:.1} s",
            answer.answer_id.unwrap_or_default(),
            match answer.written_by.as_deref() {
                Some(w) if w != "local" => format!(" ({w})"),
                _ => String::new(),
            },
            // A fresh process loads the model beside retrieval; what was left of that load is
            // part of the wait, so it is shown rather than hidden in "total".
            if t.model_wait_ms >= 100.0 { format!("model loading {:.1} s · ", t.model_wait_ms / 1e3) } else { String::new() },
            t.first_token_ms / 1e3,
            if answer.second_try { " (asked again: the first reply had no words outside brackets)" } else { "" },
            t.tokens_per_second,
            t.total_ms / 1e3
        ),
        None => println!("answer {} · no model called · {:.0} ms", answer.answer_id.unwrap_or_default(), t.total_ms),
    }
}

/// `ragbox ask`: one grounded answer, streamed to stdout, or the refusal with the closest material.
pub fn run(g: &GlobalArgs, args: AskArgs) -> anyhow::Result<u8> {
    anyhow::ensure!(!args.question.trim().is_empty(), "the question is empty; type what you want to know");
    let service = g.service()?;
    let options = AskOptions { llm: args.llm.clone(), no_rerank: args.no_rerank };
    let caller = Caller::local_as(&args.groups);
    let asked = if g.json {
        service.ask(&caller, &args.tenant, &args.question, &options, &mut ragbox_service::Discard)?
    } else {
        service.ask(&caller, &args.tenant, &args.question, &options, &mut Stdout)?
    };
    let (retrieval, answer) = (asked.retrieval, asked.answer);
    if g.json {
        print_notes(asked.note.as_deref(), &asked.warnings);
        print_json(&answer)?;
        return Ok(0);
    }
    // After the streamed answer and its sources, so a note never lands inside the answer's line.
    print_after(&answer);
    print_notes(asked.note.as_deref(), &asked.warnings);
    if args.explain {
        super::search::print_verdict(&retrieval);
        print_decision(&answer);
        for (n, messages) in answer.prompts.iter().enumerate() {
            match (n, answer.prompts.len()) {
                (0, 1) => println!("prompt:"),
                (0, _) => println!("prompt (request 1 of {}):", answer.prompts.len()),
                (n, all) => println!("prompt (request {} of {all}: the reply before held no words):", n + 1),
            }
            for m in messages {
                println!("--- {:?}\n{}", m.role, m.content);
            }
        }
    }
    Ok(0)
}

/// The answerability decision's signals (`--explain`).
pub(super) fn print_decision(answer: &Answer) {
    let Some(d) = &answer.decision else { return };
    let s = &d.signals;
    let by = match d.by {
        DecidedBy::Reader => "the reader",
        DecidedBy::Logit => "the cross-encoder's logit (no reader for this model)",
    };
    println!("decision: {} (states the answer: {:.3} by {by}, floor {:.2}; {:.0} ms)", d.outcome.describe(), d.score, d.floor, d.ms);
    println!("  best unit's relevance logit {:.2}; the question asks for: {:?}", s.best_logit, s.asks);
    for e in &d.evidence {
        println!("  evidence [{}] (states it {:.3}, logit {:.2}): {}", e.passage, e.score, e.logit, e.text);
    }
    for e in d.ranked.iter().filter(|r| !d.evidence.iter().any(|e| e.passage == r.passage && e.index == r.index)).take(3) {
        println!("  next best [{}] (states it {:.3}, logit {:.2}): {}", e.passage, e.score, e.logit, e.text);
    }
}

/// The reranker note and generator warnings, on stderr.
pub(super) fn print_notes(note: Option<&str>, warnings: &[String]) {
    if let Some(n) = note {
        eprintln!("note: {n}");
    }
    for w in warnings {
        eprintln!("warning: {w}");
    }
}
