//! `ragbox parse FILE…`: what ingest's parser makes of a file (kind, title, metadata, blocks with
//! their pages and text), or why it would skip it: the parse stage inspected on its own. Scanned
//! pages and images are read by the OCR model when it is installed.

use std::path::PathBuf;

use clap::Args;
use serde::Serialize;

use ragbox_core::source::guard::{parse_guarded_in, ParseLimits};
use ragbox_core::source::ParseContext;
use ragbox_core::types::ParsedDocument;

use super::app;
use ragbox_cli::{print_json, GlobalArgs};

/// Arguments of `parse`.
#[derive(Debug, Args)]
pub struct ParseArgs {
    /// Print only the normalised text (what citations point into).
    #[arg(long)]
    text: bool,
    /// Files to parse.
    #[arg(required = true)]
    files: Vec<PathBuf>,
}

#[derive(Serialize)]
struct Parsed<'a> {
    path: &'a std::path::Path,
    #[serde(skip_serializing_if = "Option::is_none")]
    document: Option<&'a ParsedDocument>,
    #[serde(skip_serializing_if = "Option::is_none")]
    skipped: Option<String>,
}

pub fn run(g: &GlobalArgs, args: ParseArgs) -> anyhow::Result<u8> {
    let app = app(g)?;
    let c = &app.config.ingest;
    let limits = ParseLimits {
        max_file_bytes: c.max_file_bytes,
        timeout: std::time::Duration::from_secs(c.parse_timeout_s.max(1)),
        ..ParseLimits::default()
    };
    let context = ParseContext { ocr: app.ocr()? };
    let mut status = 0;
    for path in &args.files {
        let bytes = std::fs::read(path).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        let result = parse_guarded_in(path, bytes, &limits, &context);
        if result.is_err() {
            status = 5;
        }
        if g.json {
            let (document, skipped) = match &result {
                Ok(doc) => (Some(doc), None),
                Err(reason) => (None, Some(reason.to_string())),
            };
            print_json(&Parsed { path, document, skipped })?;
            continue;
        }
        match result {
            Err(reason) => eprintln!("{}: skipped: {reason}", path.display()),
            Ok(doc) if args.text => println!("{}", doc.text),
            Ok(doc) => {
                println!("{} ({}): {}", path.display(), doc.parser, doc.title);
                for (k, v) in &doc.metadata {
                    println!("  {k}: {v}");
                }
                for b in &doc.blocks {
                    let page = b.page.map(|p| format!(" p{p}")).unwrap_or_default();
                    let text: String = doc.text[b.span.range()].chars().take(100).collect();
                    println!("  {}{page} L{}-{}: {}", kind(&b.kind), b.lines.first, b.lines.last, text.replace('\n', " ⏎ "));
                }
            }
        }
    }
    Ok(status)
}

fn kind(k: &ragbox_core::types::BlockKind) -> String {
    match k {
        ragbox_core::types::BlockKind::Heading { level, .. } => format!("h{level}"),
        other => format!("{other:?}").split([' ', '{']).next().unwrap_or("").to_lowercase(),
    }
}
