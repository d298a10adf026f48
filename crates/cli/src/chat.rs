//! `ragbox chat`: a conversation kept in the catalog. Questions come one per line on stdin; a
//! follow-up that refers back ("what about the other one", bare pronouns) is rewritten into a
//! standalone question with the few prior turns it needs, and a self-contained one is asked as
//! it is, with no history. `--session N` continues a stored session; `--json` prints one object
//! per turn.

use std::io::{BufRead, IsTerminal, Write};

use clap::Args;

use ragbox_service::{AskOptions, Caller};

use super::ask::{print_after, print_notes, Stdout};
use super::{print_json, GlobalArgs};

/// Arguments of `chat`.
#[derive(Debug, Args)]
pub struct ChatArgs {
    /// Tenant to answer from.
    #[arg(long, default_value = ragbox_service::DEFAULT_TENANT)]
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

/// `ragbox chat`: a conversation on stdin, each follow-up rewritten with the turns it needs.
pub fn run(g: &GlobalArgs, args: ChatArgs) -> anyhow::Result<u8> {
    let service = g.service()?;
    let caller = Caller::local();
    let (tenant, session) = service.open_session(&caller, &args.tenant, args.session)?;
    let options = AskOptions { llm: args.llm.clone(), no_rerank: args.no_rerank };
    let interactive = std::io::stdin().is_terminal() && !g.json;
    if !g.json {
        eprintln!("session {session} · tenant {} · one question per line; an empty line or Ctrl-D ends", tenant.name);
    }
    let stdin = std::io::stdin();
    let mut lines = stdin.lock().lines();
    let mut noted = false;
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
        let json = g.json;
        let mut on_resolved = |resolved: &ragbox_service::Standalone| {
            if !json && resolved.question != question {
                println!("(asking: {})", resolved.question);
            }
        };
        let (turn, asked) = if g.json {
            service.chat_turn(&caller, &tenant, session, &question, &options, &mut ragbox_service::Discard, &mut on_resolved)?
        } else {
            service.chat_turn(&caller, &tenant, session, &question, &options, &mut Stdout, &mut on_resolved)?
        };
        if !noted {
            print_notes(asked.note.as_deref(), &asked.warnings);
            noted = true;
        }
        if g.json {
            print_json(&turn)?;
        } else {
            print_after(&turn.answer);
            println!();
        }
    }
    Ok(0)
}
