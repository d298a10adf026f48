//! `ragbox trace "q" --expect TEXT`: where did the expected passage go? Is the text in any chunk;
//! at what rank did the dense, BM25, fused and reranked lists place that chunk; how similar is it
//! to the query; and which stage lost it.

use clap::Args;
use serde::Serialize;

use ragbox_core::retrieve::{Outcome, Retrieval};
use ragbox_core::types::{cosine, ChunkId};

use ragbox_cli::search::{excerpt, location, print_header};
use super::app;
use ragbox_cli::{print_json, GlobalArgs};

/// Arguments of `trace`.
#[derive(Debug, Args)]
pub struct TraceArgs {
    /// The question.
    pub query: String,
    /// Text the answer should come from (matched ignoring case and runs of whitespace).
    #[arg(long, value_name = "TEXT")]
    pub expect: String,
    /// Tenant to search.
    #[arg(long, default_value = ragbox_core::store::DEFAULT_TENANT)]
    pub tenant: String,
    /// Skip the reranker even when its weights are present.
    #[arg(long)]
    pub no_rerank: bool,
}

/// One chunk holding the expected text, and each stage's view of it.
#[derive(Debug, Serialize)]
struct Trace {
    chunk: ChunkId,
    location: String,
    /// Rank among all the tenant's vectors (exact, not limited to the candidate list).
    dense_rank: Option<usize>,
    /// Rank among every BM25 match.
    bm25_rank: Option<usize>,
    fused_rank: Option<usize>,
    rerank_rank: Option<usize>,
    similarity: Option<f32>,
    outcome: Option<Outcome>,
    verdict: String,
}

fn normalise(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ").to_lowercase()
}

pub fn run(g: &GlobalArgs, args: TraceArgs) -> anyhow::Result<u8> {
    let expect = normalise(&args.expect);
    anyhow::ensure!(!expect.is_empty(), "--expect is empty: give a phrase the answer should come from");
    let app = app(g)?;
    let store = app.store()?;
    let tenant = store.catalog().require_tenant(&args.tenant)?;
    let (retriever, note) = app.retriever(&store, &tenant, None, !args.no_rerank, app.retrieve_options())?;
    let tenant = &retriever.reader().tenant;

    // 1. Which chunks hold the text (children only: they are what is retrieved).
    let holders: Vec<ChunkId> = store
        .catalog()
        .index_entries(tenant.id)?
        .into_iter()
        .filter(|e| normalise(&e.text).contains(&expect))
        .map(|e| e.id)
        .collect();
    let rows: Vec<_> =
        store.catalog().chunks(tenant.id, &holders)?.into_iter().filter(|r| normalise(&r.text).contains(&expect)).collect();

    // 2. The product path, and the full dense and BM25 rankings for exact ranks.
    let r = retriever.retrieve(&args.query)?;
    let query_vector = retriever.embed_query(&args.query)?;
    let reader = retriever.reader();
    let dense_all = match &query_vector {
        Some(q) => reader.vector.search(q, reader.vector.len())?,
        None => Vec::new(),
    };
    let bm25_all = reader.lexical.search(&args.query, reader.lexical.len().max(1))?;
    let stored = reader.vector.vectors(&rows.iter().map(|r| r.id).collect::<Vec<_>>())?;

    let o = retriever.options();
    let traces: Vec<Trace> = rows
        .iter()
        .zip(&stored)
        .map(|(row, v)| {
            let c = r.candidates.iter().find(|c| c.chunk == row.id);
            let mut t = Trace {
                chunk: row.id,
                location: location(row),
                dense_rank: dense_all.iter().position(|h| h.0 == row.id).map(|i| i + 1),
                bm25_rank: bm25_all.iter().position(|h| h.0 == row.id).map(|i| i + 1),
                fused_rank: c.map(|c| c.fused.rank),
                rerank_rank: c.and_then(|c| c.rerank.map(|s| s.rank)),
                similarity: match (&query_vector, v) {
                    (Some(q), Some(v)) => Some(cosine(q, v)),
                    _ => None,
                },
                outcome: c.map(|c| c.outcome.clone()),
                verdict: String::new(),
            };
            t.verdict = verdict(&t, &r, o.dense_candidates, o.lexical_candidates, o.rerank_depth, o.top_k);
            t
        })
        .collect();

    let summary = match traces.first() {
        None => format!(
            "the expected text is in no chunk of tenant `{}`: it was not ingested, or it spans two chunks (try a shorter --expect)",
            tenant.name
        ),
        Some(_) => match traces.iter().find(|t| matches!(t.outcome, Some(Outcome::Kept { .. } | Outcome::MergedIntoParent { .. }))) {
            Some(t) => t.verdict.clone(),
            None => traces[0].verdict.clone(),
        },
    };
    if g.json {
        print_json(&serde_json::json!({ "query": r.query, "expect": args.expect, "chunks": traces, "verdict": summary, "retrieval": r, "note": note }))?;
        return Ok(0);
    }
    print_header(&r, note.as_deref());
    println!("expected text found in {} chunk(s)", traces.len());
    for (t, row) in traces.iter().zip(&rows) {
        let rank = |x: Option<usize>| x.map_or("-".to_string(), |n| format!("#{n}"));
        println!("  chunk {} · {}", t.chunk.0, t.location);
        println!("    {}", excerpt(&row.text, 160));
        println!(
            "    dense {} of {} · bm25 {} of {} matches · fused {} · rerank {} · similarity {}",
            rank(t.dense_rank),
            dense_all.len(),
            rank(t.bm25_rank),
            bm25_all.len(),
            rank(t.fused_rank),
            rank(t.rerank_rank),
            t.similarity.map_or("-".into(), |s| format!("{s:.3}"))
        );
        println!("    → {}", t.verdict);
    }
    println!("verdict: {summary}");
    Ok(0)
}

/// Which stage lost the chunk, or that it was found.
fn verdict(t: &Trace, r: &Retrieval, dense_n: usize, bm25_n: usize, depth: usize, top_k: usize) -> String {
    match &t.outcome {
        Some(Outcome::Kept { rank }) | Some(Outcome::MergedIntoParent { rank, .. }) => {
            if r.refused {
                format!("retrieved as hit {rank}, but no candidate cleared the refusal floor: the floor (or the scorer) lost it")
            } else {
                format!("found: returned as hit {rank}")
            }
        }
        Some(Outcome::Stale) => "the index holds it but the catalog no longer does for this tenant (stale): re-run ingest".into(),
        Some(Outcome::BeyondTopK) => match (r.reranker.is_some(), t.rerank_rank, t.fused_rank) {
            (true, Some(rr), _) => format!("the reranker lost it: reranked #{rr}, below the top {top_k}"),
            (true, None, Some(f)) => format!("fusion lost it: fused #{f}, beyond the rerank depth {depth}"),
            (_, _, Some(f)) => format!("fusion lost it: fused #{f}, below the top {top_k}"),
            _ => "dropped after fusion".into(),
        },
        None => format!(
            "candidate retrieval lost it: dense rank {} (list of {dense_n}), BM25 rank {} (list of {bm25_n})",
            t.dense_rank.map_or("none".into(), |n| n.to_string()),
            t.bm25_rank.map_or("no match".into(), |n| n.to_string())
        ),
    }
}
