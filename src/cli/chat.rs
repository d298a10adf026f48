//! `ragbox chat`: a conversation kept in the catalog. Questions come one per line on stdin; a
//! follow-up that refers back ("what about the other one", bare pronouns) is rewritten into a
//! standalone question with the few prior turns it needs, and a self-contained one is asked as
//! it is, with no history. `--session N` continues a stored session; `--json` prints one object
//! per turn.

use std::io::{BufRead, IsTerminal, Write};

use clap::Args;
use serde::Serialize;

use ragbox::answer::memory::PriorTurn;
use ragbox::answer::{standalone, Answer, Standalone};
use ragbox::generate::block_on;

use super::ask::{print_after, Answering, Stdout};
use super::{print_json, GlobalArgs};

/// Arguments of `chat`.
#[derive(Debug, Args)]
pub struct ChatArgs {
    /// Tenant to answer from.
    #[arg(long, default_value = ragbox::store::DEFAULT_TENANT)]
    pub tenant: String,
    /// Continue this session (its id is printed when a chat starts).
    #[arg(long)]
    pub session: Option<i64>,
    /// Generate with this local model instead of the configured one.
    #[arg(long)]
    pub llm: Option<String>,
    /// Skip the reranker even when its weights are present.
    #[arg(long)]
    pub no_rerank: bool,
}

#[derive(Serialize)]
struct Turn<'a> {
    session: i64,
    turn: i64,
    follow_up: &'a Standalone,
    answer: &'a Answer,
}

pub fn run(g: &GlobalArgs, args: ChatArgs) -> anyhow::Result<u8> {
    let app = g.app()?;
    let store = app.store()?;
    let mut answering = Answering::open(&app, &store, &args.tenant, !args.no_rerank, args.llm.clone())?;
    let catalog = store.catalog();
    let session = match args.session {
        Some(id) => match catalog.session_tenant(id)? {
            Some(t) if t == answering.tenant.id => id,
            Some(_) => anyhow::bail!("session {id} belongs to another tenant; start a new chat without --session"),
            None => anyhow::bail!("no session {id}; start a new chat without --session"),
        },
        None => catalog.create_session(answering.tenant.id)?,
    };
    let interactive = std::io::stdin().is_terminal() && !g.json;
    if !g.json {
        eprintln!("session {session} · tenant {} · one question per line; an empty line or Ctrl-D ends", answering.tenant.name);
    }
    let max_turns = app.config.answer.memory_turns;
    let stdin = std::io::stdin();
    let mut lines = stdin.lock().lines();
    loop {
        if interactive {
            eprint!("> ");
            std::io::stderr().flush()?;
        }
        let Some(line) = lines.next() else { break };
        let question = line?.trim().to_string();
        if question.is_empty() {
            if interactive {
                break;
            }
            continue;
        }
        let rows = catalog.recent_turns(session, 8)?;
        let prior: Vec<PriorTurn> =
            rows.iter().map(|t| PriorTurn { question: &t.question, standalone: &t.standalone, answer: &t.answer }).collect();
        let resolved = if prior.is_empty() || ragbox::answer::memory::refers_back(&question).is_none() {
            block_on(standalone(&question, &prior, max_turns, None))?
        } else {
            let generator = answering.generator()?;
            block_on(standalone(&question, &prior, max_turns, Some(generator.as_ref())))?
        };
        if !g.json && resolved.question != question {
            println!("(asking: {})", resolved.question);
        }
        let (q, ms) = (resolved.question.as_str(), resolved.rewrite_ms);
        let (_, answer) = if g.json {
            answering.answer(&question, q, ms, Some(session), &mut ragbox::generate::Discard)?
        } else {
            answering.answer(&question, q, ms, Some(session), &mut Stdout)?
        };
        let turn = catalog.add_turn(session, &question, &resolved.question, &answer.answer, answer.answer_id)?;
        if g.json {
            print_json(&Turn { session, turn, follow_up: &resolved, answer: &answer })?;
        } else {
            print_after(&answer);
            println!();
        }
    }
    Ok(0)
}
