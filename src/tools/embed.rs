//! `ragbox embed [--model M] [--query] TEXT…`: print vectors.

use std::io::BufRead;

use clap::Args;
use serde::Serialize;

use ragbox_core::types::TextKind;

use super::app;
use ragbox_cli::{print_json, GlobalArgs};

/// Arguments of `embed`.
#[derive(Debug, Args)]
pub struct EmbedArgs {
    /// Embedding model (default: the configured one).
    #[arg(long)]
    model: Option<String>,
    /// Embed as queries (with the model's query prefix) rather than passages.
    #[arg(long)]
    query: bool,
    /// Texts to embed; with none, one text per line of standard input.
    texts: Vec<String>,
}

#[derive(Serialize)]
struct Row<'a> {
    index: usize,
    model: &'a str,
    dims: usize,
    tokens: usize,
    truncated_from: Option<usize>,
    vector: &'a [f32],
}

pub fn run(g: &GlobalArgs, args: EmbedArgs) -> anyhow::Result<()> {
    let texts: Vec<String> = if args.texts.is_empty() {
        std::io::stdin().lock().lines().collect::<Result<_, _>>()?
    } else {
        args.texts
    };
    if texts.is_empty() {
        anyhow::bail!(ragbox_core::Error::Invalid("no text given: pass texts as arguments or lines on standard input".into()));
    }
    let app = app(g)?;
    let embedder = app.embedder(args.model.as_deref())?;
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let kind = if args.query { TextKind::Query } else { TextKind::Passage };
    let embeddings = embedder.embed(&refs, kind)?;
    for (index, e) in embeddings.iter().enumerate() {
        if let Some(full) = e.truncated_from {
            if !g.quiet {
                eprintln!(
                    "note: text {} has {full} tokens; {} embedded {} of them (its limit)",
                    index + 1,
                    embedder.model_id(),
                    e.tokens
                );
            }
        }
        let row = Row {
            index,
            model: embedder.model_id(),
            dims: embedder.dims(),
            tokens: e.tokens,
            truncated_from: e.truncated_from,
            vector: &e.vector,
        };
        if g.json {
            print_json(&row)?;
        } else {
            let values: Vec<String> = e.vector.iter().map(|x| format!("{x:.6}")).collect();
            println!("{}", values.join(" "));
        }
    }
    Ok(())
}
