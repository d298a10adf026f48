//! `ragbox search "q"`: ranked passages of one tenant, with `--explain` showing every stage's view
//! of every candidate and why it was kept or dropped.

use clap::Args;

use ragbox_service::{Candidate, Evidence, Hit, Outcome, Retrieval, StageRank};
use ragbox_service::{Caller, ChunkRow, SearchOptions};

use super::{print_json, GlobalArgs};

/// Arguments of `search`.
#[derive(Debug, Args)]
pub struct SearchArgs {
    /// What to look for, in plain language.
    pub query: String,
    /// Tenant to search.
    #[arg(long, default_value = ragbox_service::DEFAULT_TENANT)]
    pub tenant: String,
    /// Passages to return (default: `retrieve.top_k`).
    #[arg(short, long)]
    pub k: Option<usize>,
    /// Show each candidate's dense, BM25, fused and rerank ranks and scores, and its fate.
    #[arg(long)]
    pub explain: bool,
    /// Embed the query with this model (default: the model that built the tenant's index; any
    /// other is refused).
    #[arg(long)]
    pub model: Option<String>,
    /// Skip the reranker even when its weights are present.
    #[arg(long)]
    pub no_rerank: bool,
    /// Search as a member of these groups would (comma-separated): the open documents and
    /// theirs only (docs/ACCESS.md).
    #[arg(long, value_delimiter = ',')]
    pub groups: Vec<String>,
}

/// `ragbox search`: the ranked passages for a query (`--explain`: every stage's view).
pub fn run(g: &GlobalArgs, args: SearchArgs) -> anyhow::Result<u8> {
    if let Some(k) = args.k {
        anyhow::ensure!(k > 0, "-k must be at least 1");
    }
    let service = g.service()?;
    let options = SearchOptions { k: args.k, model: args.model.clone(), no_rerank: args.no_rerank };
    let found = service.search(&Caller::local_as(&args.groups), &args.tenant, &args.query, &options)?;
    let (r, note) = (found.retrieval, found.note);
    if g.json {
        print_json(&serde_json::json!({ "retrieval": r, "note": note }))?;
        return Ok(0);
    }
    print_header(&r, note.as_deref());
    for hit in &r.hits {
        print_hit(hit);
    }
    if r.hits.is_empty() {
        println!("no passage matched.");
    }
    print_verdict(&r);
    if args.explain {
        print_explain(&r);
    }
    Ok(0)
}

/// One line on how the query was run.
pub fn print_header(r: &Retrieval, note: Option<&str>) {
    let rerank = r.reranker.as_deref().map_or("no reranker".to_string(), |m| match r.bm25_vote {
        None => format!("reranked by {m} (weight {})", r.rerank_weight),
        Some(share) => format!("reranked by {m} (weight {}; not a question: BM25 {share} of the rest)", r.rerank_weight),
    });
    println!("tenant {} · {} · {} · {:.0} ms", r.tenant, r.model, rerank, r.timings.total_ms);
    if let Some(n) = note {
        println!("note: {n}");
    }
}

/// Where a chunk is: path, section path, page and lines.
pub fn location(c: &ChunkRow) -> String {
    let mut s = c.path.display().to_string();
    if !c.section_path.is_empty() {
        s.push_str(&format!(" › {}", c.section_path.join(" > ")));
    }
    if let Some(p) = c.page {
        s.push_str(&format!(" (page {p})"));
    }
    s.push_str(&format!(" [lines {}-{}]", c.lines.first, c.lines.last));
    s
}

/// The first `chars` characters of `text`, whitespace collapsed.
pub fn excerpt(text: &str, chars: usize) -> String {
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    match flat.char_indices().nth(chars) {
        Some((i, _)) => format!("{}…", &flat[..i]),
        None => flat,
    }
}

fn print_hit(hit: &Hit) {
    let merged = match &hit.section {
        Some(sec) => format!(" · {} passages of the section at lines {}-{}", hit.children.len(), sec.lines.first, sec.lines.last),
        None => String::new(),
    };
    let evidence = hit.evidence.map_or(String::new(), |e| format!(" · evidence {e:.3}"));
    println!("{:>2}. {}", hit.rank, location(&hit.chunk));
    println!("    score {:.4}{evidence}{merged}", hit.score);
    println!("    {}", excerpt(&hit.chunk.text, 300));
}

pub(super) fn print_verdict(r: &Retrieval) {
    let what = match &r.evidence {
        Evidence::Rerank { model } => format!("{model} score"),
        Evidence::Similarity { model } => format!("{model} similarity"),
        Evidence::None => "no calibrated score (BM25 alone)".to_string(),
    };
    match (r.floor, r.best_evidence) {
        (Some(f), best) if r.refused => println!(
            "no good source: no candidate reaches the floor {f:.3} on {what} (best {}); the passages above are the closest material, not sources.",
            best.map_or("none".into(), |b| format!("{b:.3}"))
        ),
        (Some(f), Some(b)) => println!("good source: best {what} {b:.3} clears the floor {f:.3}."),
        _ => println!("no refusal floor is configured for {what}; `ragbox eval --ood` chooses one."),
    }
}

fn stage(s: Option<StageRank>, digits: usize) -> String {
    s.map_or("-".into(), |s| format!("#{} {:.*}", s.rank, digits, s.score))
}

fn outcome(c: &Candidate) -> String {
    match &c.outcome {
        Outcome::Kept { rank } => format!("kept as hit {rank}"),
        Outcome::MergedIntoParent { parent, rank } => format!("merged into section {} (hit {rank})", parent.0),
        Outcome::BeyondTopK => "dropped: top k already filled".into(),
        Outcome::Stale => "dropped: not in this tenant's catalog (stale index entry)".into(),
    }
}

/// Every candidate that was kept, merged or stale, plus the first few dropped, stage by stage.
fn print_explain(r: &Retrieval) {
    println!();
    println!("{:>7}  {:>14}  {:>14}  {:>14}  {:>6}  {:>14}  {:>8}  outcome", "chunk", "dense", "bm25", "fused", "cos", "rerank", "combined");
    let mut dropped = 0;
    for c in &r.candidates {
        if c.outcome == Outcome::BeyondTopK {
            dropped += 1;
            if dropped > 5 {
                continue;
            }
        }
        println!(
            "{:>7}  {:>14}  {:>14}  {:>14}  {:>6}  {:>14}  {:>8}  {}",
            c.chunk.0,
            stage(c.dense, 3),
            stage(c.lexical, 2),
            stage(Some(c.fused), 4),
            c.similarity.map_or("-".into(), |s| format!("{s:.3}")),
            stage(c.rerank, 3),
            c.combined.map_or("-".into(), |s| format!("{s:.3}")),
            outcome(c)
        );
    }
    if dropped > 5 {
        println!("… and {} more dropped (top k already filled)", dropped - 5);
    }
    let t = &r.timings;
    println!(
        "stages: embed {:.1} ms · dense {:.1} ms · bm25 {:.1} ms · fuse {:.1} ms · catalog {:.1} ms · rerank {:.1} ms · total {:.1} ms",
        t.embed_ms, t.dense_ms, t.lexical_ms, t.fuse_ms, t.resolve_ms, t.rerank_ms, t.total_ms
    );
}
