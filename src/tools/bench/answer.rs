//! `ragbox bench answer`: how long an answer takes (retrieval and the reader, as a person waits
//! for it), the two readers side by side in one run: evidence first (the learned reader scores every unit and decides;
//! the LLM only for a yes/no verdict) and generate (the LLM writes from the focused sentences, as
//! most RAG tools do). Per reader: the answer from the question to its end, the decision step
//! (every unit read and the answerability decision; for generate, the focusing before the
//! prompt), the first streamed text after retrieval, and how the questions ended.
//!
//! Questions come from a QA set over its folder (default: the sample corpus's 23 questions),
//! ingested into a
//! scratch store under the cache as `eval --qa` does; each is asked `--repeat` times per reader
//! after one warm-up pass, the readers taking turns question by question so that neither runs on
//! a warmer machine.

use std::path::PathBuf;
use std::time::Instant;

use clap::Args;
use serde::Serialize;

use ragbox_core::answer::evidence::Reader;
use ragbox_core::answer::Answerer;
use ragbox_core::generate::{block_on, Discard};
use ragbox_core::store::{Store, VectorOptions};
use ragbox_eval::metrics::percentile;
use ragbox_eval::qa::{load, QaSetup};

use super::sorted;
use ragbox_cli::{print_json, GlobalArgs};

/// Options of `ragbox bench answer`.
#[derive(Debug, Args)]
pub struct AnswerArgs {
    /// The questions (JSON lines, as `eval --qa` reads them).
    #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/corpus-questions.jsonl"))]
    pub qa: PathBuf,
    /// The folder they are about.
    #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/corpus"))]
    pub corpus: PathBuf,
    /// Times each question is asked per reader, after one warm-up pass.
    #[arg(long, default_value_t = 2)]
    pub repeat: usize,
    /// Scratch folder for the store (default: under ~/.cache/ragbox, reused).
    #[arg(long)]
    pub scratch: Option<PathBuf>,
}

/// One reader's figures.
#[derive(Debug, Serialize)]
struct ReaderFigures {
    reader: &'static str,
    asked: usize,
    answer_p50_ms: f64,
    answer_p90_ms: f64,
    decision_p50_ms: f64,
    decision_p90_ms: f64,
    first_text_p50_ms: f64,
    answered: usize,
    declined: usize,
}

#[derive(Debug, Serialize)]
struct AnswerBench {
    questions: usize,
    repeat: usize,
    retrieve_p50_ms: f64,
    readers: Vec<ReaderFigures>,
    machine: String,
}

/// `ragbox bench answer`.
pub fn run(g: &GlobalArgs, args: AnswerArgs) -> anyhow::Result<()> {
    let app = crate::tools::app(g)?;
    let questions = load(&args.qa, None)?;
    anyhow::ensure!(!questions.is_empty(), "{}: no questions", args.qa.display());
    let embedder = app.embedder(Some(&app.config.embed.model))?;
    let reranker = app.reranker()?;
    let mut retrieve = app.retrieve_options();
    retrieve.floor = app.config.retrieve.floor_for(reranker.as_ref().map(|r| r.model_id()), &app.config.embed.model)?;
    let generator = app.generator(None)?;
    let scratch = args.scratch.clone().unwrap_or_else(|| {
        let home = std::env::var_os("HOME").map(PathBuf::from).unwrap_or_else(std::env::temp_dir);
        home.join(".cache/ragbox/bench-answer").join(embedder.model_id())
    });
    let setup = QaSetup {
        corpus: args.corpus.clone(),
        scratch: scratch.clone(),
        ingest: app.ingest_options("bench", None)?,
        retrieve,
        answer: app.answer_options(),
        support: app.config.answer.support,
    };
    let store = Store::open(&scratch, VectorOptions::default())?;
    let quiet = g.quiet;
    let retriever = setup.retriever(&store, &embedder, reranker, &mut |m| {
        if !quiet {
            eprintln!("{m}");
        }
    })?;
    let readers: Vec<(&'static str, Answerer)> = [("evidence first", Reader::Evidence), ("generate", Reader::Generate)]
        .into_iter()
        .map(|(name, reader)| {
            let mut answer = setup.answer.clone();
            answer.reader = reader;
            let answerer = Answerer::over(&retriever, generator.clone(), setup.support, answer, || Ok(embedder.clone()))?;
            Ok((name, answerer))
        })
        .collect::<anyhow::Result<_>>()?;
    let mut retrieve_ms = Vec::new();
    // (answer, decision, first text) per reader; the outcomes of the last pass.
    let mut times: Vec<(Vec<f64>, Vec<f64>, Vec<f64>)> = readers.iter().map(|_| Default::default()).collect();
    let mut outcomes = vec![(0usize, 0usize); readers.len()];
    for pass in 0..=args.repeat {
        for (i, q) in questions.iter().enumerate() {
            for (r, (name, answerer)) in readers.iter().enumerate() {
                // The whole answer as a person waits for it: retrieval, then the reader.
                let t = Instant::now();
                let retrieval = retriever.retrieve(&q.question)?;
                let retrieved = t.elapsed().as_secs_f64() * 1e3;
                let a = block_on(answerer.answer(&q.question, &q.question, &retrieval, &mut Discard))?;
                let ms = t.elapsed().as_secs_f64() * 1e3;
                if pass == 0 {
                    if !quiet {
                        eprintln!("warm-up {}/{} {name}: {ms:.0} ms", i + 1, questions.len());
                    }
                    continue;
                }
                retrieve_ms.push(retrieved);
                times[r].0.push(ms);
                times[r].1.push(a.timings.focus_ms);
                times[r].2.push(a.timings.first_token_ms);
                if pass == args.repeat {
                    if a.refused {
                        outcomes[r].1 += 1;
                    } else {
                        outcomes[r].0 += 1;
                    }
                }
            }
        }
    }
    let figures: Vec<ReaderFigures> = readers
        .iter()
        .zip(times)
        .zip(outcomes)
        .map(|(((name, _), (answer, decision, first)), (answered, declined))| {
            let (answer, decision, first) = (sorted(answer), sorted(decision), sorted(first));
            ReaderFigures {
                reader: name,
                asked: answer.len(),
                answer_p50_ms: percentile(&answer, 50.0),
                answer_p90_ms: percentile(&answer, 90.0),
                decision_p50_ms: percentile(&decision, 50.0),
                decision_p90_ms: percentile(&decision, 90.0),
                first_text_p50_ms: percentile(&first, 50.0),
                answered,
                declined,
            }
        })
        .collect();
    let report = AnswerBench {
        questions: questions.len(),
        repeat: args.repeat,
        retrieve_p50_ms: percentile(&sorted(retrieve_ms), 50.0),
        readers: figures,
        machine: format!("{} threads, generator {}", rayon::current_num_threads(), generator.model_id()),
    };
    if g.json {
        print_json(&report)?;
        return Ok(());
    }
    println!("{} questions of {}, each asked {} times per reader ({}); retrieval p50 {:.0} ms (in the answer figures)", report.questions, args.qa.display(), report.repeat, report.machine, report.retrieve_p50_ms);
    println!("| reader | answer p50 | answer p90 | decision p50 | decision p90 | first text p50 | answered / declined |");
    println!("|---|---|---|---|---|---|---|");
    for f in &report.readers {
        println!(
            "| {} | {:.0} ms | {:.0} ms | {:.0} ms | {:.0} ms | {:.0} ms | {} / {} |",
            f.reader, f.answer_p50_ms, f.answer_p90_ms, f.decision_p50_ms, f.decision_p90_ms, f.first_text_p50_ms, f.answered, f.declined
        );
    }
    Ok(())
}
