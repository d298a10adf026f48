//! The read path: a query becomes ranked passages of one tenant.
//!
//! May import `types`, `error`, `embed`, `rerank`, `store` and `access`.
//!
//! Stages, each visible in a [`Retrieval`]: the query is embedded by the model that built the
//! tenant's index (any other model or dimension count is refused); dense (usearch) and BM25
//! (tantivy) candidate lists; weighted reciprocal rank fusion; optional maximal marginal
//! relevance; a [`Reranker`] over the top of the fused list when one is present, its score
//! combined with the query's cosine to each candidate (standardised, `rerank_weight`); every
//! candidate resolved through the catalog with the tenant checked again (an id the catalog does not give
//! back for this tenant is dropped as stale); sibling children merged into their parent; and a
//! floor on the evidence score (the reranker's score, else the query's cosine similarity to the
//! best candidate) that decides whether there is a good source at all.
//!
//! An asker who reads only some groups' documents ([`Retriever::restrict`]) is filtered inside
//! both searches (usearch's and tantivy's filters, by the tenant's [`AccessMap`]), so the
//! candidate lists, the rerank and the top k hold only what they may read; and every resolved
//! chunk, parents included, is checked again against the catalog's readers before it is kept.

pub mod fusion;
pub mod order;
pub mod query;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::access::{AccessMap, Audience, ChunkFilter};
use crate::embed::Embedder;
use crate::error::{Error, Result};
use crate::rerank::Reranker;
use crate::store::{Catalog, ChunkRow, Store, TenantReader, TenantRow};
use crate::types::{cosine, indexed_text, ChunkId, TextKind};

use fusion::{maximal_marginal_relevance, reciprocal_rank_fusion, RankedList};

/// Settings of the read path, as `[retrieve]` in the configuration spells them (each key the
/// field's name; `floor` is chosen per query's scorer, from `[retrieve.floors]`). The defaults
/// here are the library's; the shipped ones are `config/default.toml`'s (docs/RETRIEVAL.md).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RetrieveOptions {
    /// Dense candidates (0: no dense retrieval, no query embedding).
    pub dense_candidates: usize,
    /// BM25 candidates (0: no lexical retrieval).
    pub lexical_candidates: usize,
    /// Weight of the dense list in the fusion.
    pub dense_weight: f32,
    /// Weight of the BM25 list in the fusion.
    pub lexical_weight: f32,
    /// The `k` of reciprocal rank fusion.
    pub rrf_k: f32,
    /// Maximal marginal relevance trade-off; `None` (written 1.0 in the configuration: relevance
    /// only): off.
    #[serde(deserialize_with = "mmr_lambda")]
    pub mmr_lambda: Option<f32>,
    /// Fused candidates the reranker scores.
    pub rerank_depth: usize,
    /// How the reranked candidates are ordered: `w · z(reranker score) + (1 − w) · z(the query's
    /// cosine)`, each standardised over the reranked candidates (1: the reranker alone; without
    /// vectors the fused score stands in for the cosine).
    pub rerank_weight: f32,
    /// For a query that is not a question ([`query::is_question`]: a claim, keywords), BM25's
    /// share of the first stage's vote in that mix: `(1 − s) · z(cosine) + s · z(BM25)` stands
    /// for the cosine (0: the cosine alone, as for questions).
    pub statement_bm25_share: f32,
    /// Passages returned.
    pub top_k: usize,
    /// Evidence below this on every candidate means "no good source"; `None`: never refuse.
    #[serde(skip_deserializing)]
    pub floor: Option<f32>,
    /// Merge sibling children into their parent section.
    pub expand_parents: bool,
}

/// `mmr_lambda` as the configuration writes it: 1.0 (relevance only) is off.
fn mmr_lambda<'de, D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Option<f32>, D::Error> {
    let lambda = f32::deserialize(d)?;
    if !(0.0..=1.0).contains(&lambda) {
        return Err(serde::de::Error::custom(format!("mmr_lambda = {lambda}: it must be between 0 and 1 (1: off)")));
    }
    Ok((lambda < 1.0).then_some(lambda))
}

impl Default for RetrieveOptions {
    fn default() -> Self {
        RetrieveOptions {
            dense_candidates: 100,
            lexical_candidates: 100,
            dense_weight: 1.0,
            lexical_weight: 1.0,
            rrf_k: 60.0,
            mmr_lambda: None,
            rerank_depth: 50,
            rerank_weight: 1.0,
            statement_bm25_share: 0.0,
            top_k: 8,
            floor: None,
            expand_parents: true,
        }
    }
}

/// A candidate's place in one stage's list.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct StageRank {
    /// 1-based rank.
    pub rank: usize,
    /// The stage's score (cosine, BM25, fused, or reranker score).
    pub score: f32,
}

/// What became of a candidate.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Outcome {
    /// Returned as hit `rank`.
    Kept {
        /// 1-based hit rank.
        rank: usize,
    },
    /// Returned inside hit `rank`, as part of its parent section (the hit's first child keeps
    /// [`Outcome::Kept`]).
    MergedIntoParent {
        /// The parent chunk.
        parent: ChunkId,
        /// 1-based hit rank.
        rank: usize,
    },
    /// Not returned: `top_k` hits were found before it.
    BeyondTopK,
    /// Not returned: the catalog holds no such chunk for this tenant (removed since the index
    /// was committed, or not this tenant's).
    Stale,
}

/// One fused candidate and how every stage saw it.
#[derive(Debug, Clone, Serialize)]
pub struct Candidate {
    /// The chunk.
    pub chunk: ChunkId,
    /// Dense rank and cosine similarity, when the dense list held it.
    pub dense: Option<StageRank>,
    /// BM25 rank and score, when the lexical list held it.
    pub lexical: Option<StageRank>,
    /// Rank and score after fusion.
    pub fused: StageRank,
    /// Cosine similarity of its stored vector to the query (also for BM25-only candidates).
    pub similarity: Option<f32>,
    /// The reranker's score, and the candidate's rank after it was combined with the fused
    /// score (`RetrieveOptions::rerank_weight`), when it was scored.
    pub rerank: Option<StageRank>,
    /// The combined score that ordered the reranked candidates.
    pub combined: Option<f32>,
    /// What became of it.
    pub outcome: Outcome,
}

/// A passage returned.
#[derive(Debug, Clone, Serialize)]
pub struct Hit {
    /// 1-based rank, strongest first.
    pub rank: usize,
    /// The best retrieved child: the passage that matched.
    pub chunk: ChunkRow,
    /// Its parent section, when two or more of the section's children were retrieved: the
    /// passage to read (and to give the LLM) in their place.
    pub section: Option<ChunkRow>,
    /// The retrieved children it stands for, best first.
    pub children: Vec<ChunkId>,
    /// Final score: the reranker's when reranked, else the fused score.
    pub score: f32,
    /// The evidence score compared with the floor.
    pub evidence: Option<f32>,
}

/// Which score the refusal floor applies to.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Evidence {
    /// The reranker's score.
    Rerank {
        /// Reranker model.
        model: String,
    },
    /// Cosine similarity of the query to the candidate's vector.
    Similarity {
        /// Embedding model.
        model: String,
    },
    /// No calibrated score (BM25 alone).
    None,
}

/// Milliseconds spent per stage.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Timings {
    /// Query embedding.
    pub embed_ms: f64,
    /// Dense search.
    pub dense_ms: f64,
    /// BM25 search.
    pub lexical_ms: f64,
    /// Fusion, similarity and MMR.
    pub fuse_ms: f64,
    /// Catalog resolution.
    pub resolve_ms: f64,
    /// Reranking.
    pub rerank_ms: f64,
    /// All of it.
    pub total_ms: f64,
}

/// Everything one query produced.
#[derive(Debug, Clone, Serialize)]
pub struct Retrieval {
    /// The query.
    pub query: String,
    /// The tenant searched.
    pub tenant: String,
    /// The embedding model of the tenant's index.
    pub model: String,
    /// The reranker used, if any.
    pub reranker: Option<String>,
    /// The reranker's share of the combined order (`RetrieveOptions::rerank_weight`).
    pub rerank_weight: f32,
    /// BM25's share of the first stage's vote in that order when the query is not a question
    /// (`RetrieveOptions::statement_bm25_share`); `None`: the cosine alone voted.
    pub bm25_vote: Option<f32>,
    /// What the floor applies to.
    pub evidence: Evidence,
    /// The floor, if one applies.
    pub floor: Option<f32>,
    /// The best evidence score among the candidates.
    pub best_evidence: Option<f32>,
    /// True when no candidate clears the floor: the hits are the closest material, not sources.
    pub refused: bool,
    /// Passages, strongest first (see [`order::lost_in_the_middle`] for prompt order).
    pub hits: Vec<Hit>,
    /// Every fused candidate in final order (reranked ones first), with each stage's view.
    pub candidates: Vec<Candidate>,
    /// Time per stage.
    pub timings: Timings,
    /// Chunks the index filter let through that the catalog's readers refused (a stale or
    /// damaged filter): dropped, never shown, and not in `candidates`. For the server's log and
    /// the audit only: a count the asker saw would tell them such documents exist.
    #[serde(skip)]
    pub withheld: Vec<ChunkId>,
}

impl Retrieval {
    /// Whether there is nothing to answer from: no candidate cleared the floor, or nothing was
    /// found at all. The one refusal test of every answer path: no generator is asked then.
    pub fn no_good_source(&self) -> bool {
        self.refused || self.hits.is_empty()
    }
}

/// Searches one tenant.
pub struct Retriever<'s> {
    catalog: &'s Catalog,
    reader: TenantReader,
    embedder: Option<Arc<dyn Embedder>>,
    reranker: Option<Arc<dyn Reranker>>,
    options: RetrieveOptions,
    /// Who is asking (everyone: no filter, no check).
    audience: Audience,
    /// The index filter for `audience`, when it may not read everything in the tenant.
    filter: Option<ChunkFilter>,
    /// Chunks refused by the catalog check in this retrieval.
    withheld: std::sync::Mutex<Vec<ChunkId>>,
}

fn ms(since: Instant) -> f64 {
    since.elapsed().as_secs_f64() * 1e3
}

impl<'s> Retriever<'s> {
    /// Opens `tenant` for searching. The embedder must be the model that built the tenant's
    /// index (same name and dimensions); it may be `None` only when dense retrieval is off.
    pub fn new(
        store: &'s Store,
        tenant: &TenantRow,
        embedder: Option<Arc<dyn Embedder>>,
        reranker: Option<Arc<dyn Reranker>>,
        options: RetrieveOptions,
    ) -> Result<Retriever<'s>> {
        Retriever::over(store.catalog(), store.reader(tenant)?, embedder, reranker, options)
    }

    /// Searches a tenant already open for reading, its chunks resolved through `catalog` (what
    /// [`Retriever::new`] does with the store's; unit tests pass in-memory ones).
    pub fn over(
        catalog: &'s Catalog,
        reader: TenantReader,
        embedder: Option<Arc<dyn Embedder>>,
        reranker: Option<Arc<dyn Reranker>>,
        options: RetrieveOptions,
    ) -> Result<Retriever<'s>> {
        if options.dense_candidates == 0 && options.lexical_candidates == 0 {
            return Err(Error::Invalid("both candidate lists are switched off; set dense or lexical candidates above 0".into()));
        }
        match &embedder {
            Some(e) => {
                let meta = reader.vector.meta();
                if e.model_id() != meta.model || e.dims() != meta.dims {
                    return Err(Error::Invalid(format!(
                        "tenant `{}` is indexed with {} ({} dims), but the query embedder is {} ({} dims): \
                         search with the index's model (`--model {}`), or run `ragbox reembed --tenant {} --model {}` first",
                        reader.tenant.name,
                        meta.model,
                        meta.dims,
                        e.model_id(),
                        e.dims(),
                        meta.model,
                        reader.tenant.name,
                        e.model_id()
                    )));
                }
            }
            None if options.dense_candidates > 0 => {
                return Err(Error::Invalid("dense retrieval needs the index's embedding model".into()))
            }
            None => {}
        }
        Ok(Retriever { catalog, reader, embedder, reranker, options, audience: Audience::Everyone, filter: None, withheld: Default::default() })
    }

    /// Serves only what `audience` may read: both searches filter by `map` (the tenant's
    /// readers at its current generation, [`Store::access_map`]) and every resolved chunk is
    /// checked against the catalog.
    pub fn restrict(&mut self, audience: &Audience, map: &Arc<AccessMap>) {
        self.audience = audience.clone();
        self.filter = map.filter(audience);
    }

    /// Who this retriever serves.
    pub fn audience(&self) -> &Audience {
        &self.audience
    }

    /// The open tenant.
    pub fn reader(&self) -> &TenantReader {
        &self.reader
    }

    /// The settings in force.
    pub fn options(&self) -> &RetrieveOptions {
        &self.options
    }

    /// The query embedder (the model that built the tenant's index), if dense retrieval is on.
    pub fn embedder(&self) -> Option<&Arc<dyn Embedder>> {
        self.embedder.as_ref()
    }

    /// The reranker in use, if any.
    pub fn reranker(&self) -> Option<&Arc<dyn Reranker>> {
        self.reranker.as_ref()
    }

    /// Embeds a query with the index's model (for diagnosis: similarity of any text to it).
    pub fn embed_query(&self, query: &str) -> Result<Option<Vec<f32>>> {
        match &self.embedder {
            Some(e) => Ok(Some(e.embed_one(query, TextKind::Query)?.vector)),
            None => Ok(None),
        }
    }

    /// Runs every stage for `query`.
    pub fn retrieve(&self, query: &str) -> Result<Retrieval> {
        let started = Instant::now();
        let query = query.trim();
        if query.is_empty() {
            return Err(Error::Invalid("the query is empty; type what you are looking for".into()));
        }
        let o = &self.options;
        let mut timings = Timings::default();

        let t = Instant::now();
        let query_vector = if o.dense_candidates > 0 { self.embed_query(query)? } else { None };
        timings.embed_ms = ms(t);

        let t = Instant::now();
        let dense = match &query_vector {
            Some(v) => self.reader.vector.search_filtered(v, o.dense_candidates, self.filter.as_ref())?,
            None => Vec::new(),
        };
        timings.dense_ms = ms(t);
        let t = Instant::now();
        let lexical = if o.lexical_candidates > 0 {
            self.reader.lexical.search_filtered(query, o.lexical_candidates, self.filter.as_ref())?
        } else {
            Vec::new()
        };
        timings.lexical_ms = ms(t);

        let t = Instant::now();
        let dense_ids: Vec<ChunkId> = dense.iter().map(|h| h.0).collect();
        let lexical_ids: Vec<ChunkId> = lexical.iter().map(|h| h.0).collect();
        let fused = reciprocal_rank_fusion(
            &[
                RankedList { weight: o.dense_weight, ids: &dense_ids },
                RankedList { weight: o.lexical_weight, ids: &lexical_ids },
            ],
            o.rrf_k,
        );
        let stage = |list: &[(ChunkId, f32)]| -> HashMap<ChunkId, StageRank> {
            list.iter().enumerate().map(|(i, (id, s))| (*id, StageRank { rank: i + 1, score: *s })).collect()
        };
        let (dense_at, lexical_at) = (stage(&dense), stage(&lexical));
        let fused_ids: Vec<ChunkId> = fused.iter().map(|h| h.0).collect();
        let vectors = match &query_vector {
            Some(_) => self.reader.vector.vectors(&fused_ids)?,
            None => vec![None; fused_ids.len()],
        };
        let mut candidates: Vec<Candidate> = fused
            .iter()
            .enumerate()
            .map(|(i, (id, score))| Candidate {
                chunk: *id,
                dense: dense_at.get(id).copied(),
                lexical: lexical_at.get(id).copied(),
                fused: StageRank { rank: i + 1, score: *score },
                similarity: match (&query_vector, &vectors[i]) {
                    (Some(q), Some(v)) => Some(cosine(q, v)),
                    _ => None,
                },
                rerank: None,
                combined: None,
                outcome: Outcome::BeyondTopK,
            })
            .collect();
        timings.fuse_ms = ms(t);

        // Resolve the head of the list through the catalog (tenant checked again); the reranker
        // needs the texts of its whole depth, the hits a few more than `top_k` in case of stale ids.
        let t = Instant::now();
        let reranking = self.reranker.as_ref().filter(|_| o.rerank_depth > 0);
        let head = if reranking.is_some() { o.rerank_depth.max(o.top_k) } else { o.top_k * 2 };
        let mut rows = self.resolve(candidates.iter().take(head).map(|c| c.chunk))?;
        timings.resolve_ms = ms(t);

        let t = Instant::now();
        let bm25_vote = (reranking.is_some() && o.statement_bm25_share > 0.0 && !lexical.is_empty() && !query::is_question(query))
            .then_some(o.statement_bm25_share);
        if let Some(reranker) = reranking {
            let scored: Vec<usize> = (0..candidates.len().min(o.rerank_depth))
                .filter(|&i| rows.contains_key(&candidates[i].chunk))
                .collect();
            let texts: Vec<String> = scored
                .iter()
                .map(|&i| {
                    let row = &rows[&candidates[i].chunk];
                    indexed_text(&row.context, &row.text)
                })
                .collect();
            let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
            let scores = if refs.is_empty() { Vec::new() } else { reranker.score(query, &refs)? };
            // The first stage's vote is the query's cosine to each candidate: on the Python docs'
            // natural questions the fused (RRF) score dragged dense down with a much weaker BM25,
            // and mixed with the cosine the reranked list beats both first stages on SciFact too
            // (docs/EVAL.md, "the mix"). Without vectors, the fused score.
            let mut first: Vec<f32> = match scored.iter().map(|&i| candidates[i].similarity).collect::<Option<Vec<f32>>>() {
                Some(cosines) => cosines,
                None => scored.iter().map(|&i| candidates[i].fused.score).collect(),
            };
            // A claim or keywords lean on their exact terms: BM25 votes too (a candidate outside
            // its list scored below the list's last).
            if let Some(share) = bm25_vote {
                let floor = lexical.last().map_or(0.0, |h| h.1);
                let bm25: Vec<f32> = scored.iter().map(|&i| candidates[i].lexical.map_or(floor, |l| l.score)).collect();
                first = fusion::combine_standardised(&bm25, &first, share);
            }
            let combined = fusion::combine_standardised(&scores, &first, o.rerank_weight);
            let mut order: Vec<(usize, f32, f32)> = scored.into_iter().zip(scores).zip(combined).map(|((i, s), c)| (i, s, c)).collect();
            order.sort_by(|a, b| b.2.total_cmp(&a.2).then(b.1.total_cmp(&a.1)));
            for (rank, (i, score, combined)) in order.iter().enumerate() {
                candidates[*i].rerank = Some(StageRank { rank: rank + 1, score: *score });
                candidates[*i].combined = Some(*combined);
            }
            // Reranked candidates first, by their score; the rest keep the fused order.
            candidates.sort_by(|a, b| match (a.rerank, b.rerank) {
                (Some(x), Some(y)) => x.rank.cmp(&y.rank),
                (Some(_), None) => std::cmp::Ordering::Less,
                (None, Some(_)) => std::cmp::Ordering::Greater,
                (None, None) => a.fused.rank.cmp(&b.fused.rank),
            });
        }
        timings.rerank_ms = ms(t);

        if let Some(lambda) = o.mmr_lambda {
            self.diversify(&mut candidates, lambda)?;
        }

        let evidence = match (&self.reranker, &self.embedder) {
            (Some(r), _) if o.rerank_depth > 0 => Evidence::Rerank { model: r.model_id().to_string() },
            (_, Some(e)) if query_vector.is_some() => Evidence::Similarity { model: e.model_id().to_string() },
            _ => Evidence::None,
        };
        let evidence_of = |c: &Candidate| match evidence {
            Evidence::Rerank { .. } => c.rerank.map(|r| r.score),
            Evidence::Similarity { .. } => c.similarity,
            Evidence::None => None,
        };
        let best_evidence = candidates.iter().filter_map(evidence_of).reduce(f32::max);
        let floor = if evidence == Evidence::None { None } else { o.floor };
        let refused = match (floor, best_evidence) {
            (Some(f), Some(b)) => b < f,
            (Some(_), None) => true,
            (None, _) => false,
        };

        let t = Instant::now();
        let hits = self.select(&mut candidates, &mut rows, &evidence_of)?;
        timings.resolve_ms += ms(t);
        let withheld = std::mem::take(&mut *self.withheld.lock().unwrap_or_else(|e| e.into_inner()));
        if !withheld.is_empty() {
            candidates.retain(|c| !withheld.contains(&c.chunk));
            tracing::warn!(tenant = %self.reader.tenant.name, chunks = ?withheld, "the index filter passed chunks the catalog's readers refuse; withheld");
        }
        timings.total_ms = ms(started);
        Ok(Retrieval {
            query: query.to_string(),
            tenant: self.reader.tenant.name.clone(),
            model: self.reader.vector.meta().model.clone(),
            reranker: reranking.map(|r| r.model_id().to_string()),
            rerank_weight: o.rerank_weight,
            bm25_vote,
            evidence,
            floor,
            best_evidence,
            refused,
            hits,
            candidates,
            timings,
            withheld,
        })
    }

    /// Catalog rows of `ids` that belong to this tenant and that the audience may read (the
    /// catalog's readers decide; a refused one is recorded as withheld).
    fn resolve(&self, ids: impl Iterator<Item = ChunkId>) -> Result<HashMap<ChunkId, ChunkRow>> {
        let ids: Vec<ChunkId> = ids.collect();
        let mut rows = HashMap::with_capacity(ids.len());
        for row in self.catalog.chunks(self.reader.tenant.id, &ids)? {
            if self.audience.may_read(&row.readers) {
                rows.insert(row.id, row);
            } else {
                let mut withheld = self.withheld.lock().unwrap_or_else(|e| e.into_inner());
                if !withheld.contains(&row.id) {
                    withheld.push(row.id);
                }
            }
        }
        Ok(rows)
    }

    /// Reorders the head of the candidate list (the reranked part, or `rerank_depth` fused
    /// candidates) by maximal marginal relevance, relevance being the stage score rescaled to 0..1.
    fn diversify(&self, candidates: &mut Vec<Candidate>, lambda: f32) -> Result<()> {
        let depth = self.options.rerank_depth.max(self.options.top_k).min(candidates.len());
        let head: Vec<Candidate> = candidates.drain(..depth).collect();
        let scores: Vec<f32> = head.iter().map(|c| c.rerank.map_or(c.fused.score, |r| r.score)).collect();
        let (lo, hi) = scores.iter().fold((f32::INFINITY, f32::NEG_INFINITY), |(lo, hi), &s| (lo.min(s), hi.max(s)));
        let relevance: Vec<f32> = scores.iter().map(|s| if hi > lo { (s - lo) / (hi - lo) } else { 1.0 }).collect();
        let ids: Vec<ChunkId> = head.iter().map(|c| c.chunk).collect();
        let stored = self.reader.vector.vectors(&ids)?;
        let refs: Vec<Option<&[f32]>> = stored.iter().map(|v| v.as_deref()).collect();
        let picked = maximal_marginal_relevance(&relevance, &refs, lambda, head.len());
        let mut head: Vec<Option<Candidate>> = head.into_iter().map(Some).collect();
        let reordered: Vec<Candidate> = picked.into_iter().filter_map(|i| head[i].take()).collect();
        candidates.splice(0..0, reordered);
        Ok(())
    }

    /// Picks the hits in candidate order: stale ids dropped, siblings merged into their parent,
    /// until `top_k` passages are found.
    fn select(
        &self,
        candidates: &mut [Candidate],
        rows: &mut HashMap<ChunkId, ChunkRow>,
        evidence_of: &dyn Fn(&Candidate) -> Option<f32>,
    ) -> Result<Vec<Hit>> {
        let o = &self.options;
        let mut hits: Vec<Hit> = Vec::new();
        let mut by_parent: HashMap<ChunkId, usize> = HashMap::new();
        let mut next = 0;
        for i in 0..candidates.len() {
            if hits.len() >= o.top_k {
                break;
            }
            let id = candidates[i].chunk;
            if !rows.contains_key(&id) {
                // Past the resolved head: resolve the next stretch.
                if i >= next {
                    let more = self.resolve(candidates[i..].iter().take(o.top_k.max(8)).map(|c| c.chunk))?;
                    next = i + o.top_k.max(8);
                    rows.extend(more);
                }
                if !rows.contains_key(&id) {
                    candidates[i].outcome = Outcome::Stale;
                    continue;
                }
            }
            let row = rows[&id].clone();
            let score = candidates[i].rerank.map_or(candidates[i].fused.score, |r| r.score);
            let evidence = evidence_of(&candidates[i]);
            match row.parent.filter(|_| o.expand_parents).and_then(|p| by_parent.get(&p).map(|&h| (p, h))) {
                Some((parent, h)) => {
                    let hit = &mut hits[h];
                    if hit.section.is_none() {
                        hit.section = self.resolve(std::iter::once(parent))?.remove(&parent);
                    }
                    if hit.section.is_some() {
                        hit.children.push(id);
                        candidates[i].outcome = Outcome::MergedIntoParent { parent, rank: hit.rank };
                        continue;
                    }
                    // The parent is gone from the catalog: keep the child on its own.
                    self.push_hit(&mut hits, &mut candidates[i], row, score, evidence);
                }
                None => {
                    if let Some(p) = row.parent {
                        by_parent.insert(p, hits.len());
                    }
                    self.push_hit(&mut hits, &mut candidates[i], row, score, evidence);
                }
            }
        }
        Ok(hits)
    }

    fn push_hit(&self, hits: &mut Vec<Hit>, candidate: &mut Candidate, row: ChunkRow, score: f32, evidence: Option<f32>) {
        let rank = hits.len() + 1;
        candidate.outcome = Outcome::Kept { rank };
        hits.push(Hit { rank, children: vec![row.id], chunk: row, section: None, score, evidence });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::in_memory;
    use crate::testing::HashEmbedder;

    const TRAVEL: &[&str] = &["Employees book economy flights for trips under six hours.", "Hotel stays in London are capped at 210 pounds a night."];
    const SECURITY: &[&str] = &["Passwords have at least fourteen characters.", "Report a lost laptop to the service desk within one hour."];

    /// A tenant in memory (catalog, vectors, BM25: no files), embedded by the hash embedder.
    fn reader(catalog: &Catalog, model: &str) -> TenantReader {
        let embed = |t: &str| HashEmbedder::default().embed_one(t, TextKind::Passage).unwrap().vector;
        in_memory::tenant(catalog, "acme", (model, 16), &embed, &[("travel.txt", TRAVEL), ("security.txt", SECURITY)]).unwrap()
    }

    fn embedder() -> Option<Arc<dyn Embedder>> {
        Some(Arc::new(HashEmbedder::default()))
    }

    /// An asker outside `security.txt`'s readers gets none of it: not from the filtered
    /// searches, and not when the index's filter is wrong (a chunk planted as open in the map,
    /// not in the catalog): the catalog's readers withhold it, and it leaves no candidate behind.
    #[test]
    fn restricted_documents_stay_out_even_past_a_wrong_index_filter() {
        let catalog = Catalog::in_memory().unwrap();
        let reader = reader(&catalog, "hash-16");
        let tenant = reader.tenant.clone();
        let security = catalog.documents(tenant.id).unwrap().into_iter().find(|d| d.path.ends_with("security.txt")).unwrap();
        assert_eq!(catalog.set_readers(tenant.id, &[(security.id, vec!["it".into()])]).unwrap(), 1);
        let secret: Vec<ChunkId> = catalog.index_entries(tenant.id).unwrap().iter().filter(|e| e.doc == security.id).map(|e| e.id).collect();
        assert!(!secret.is_empty());
        let map = Arc::new(catalog.access_map(&tenant).unwrap());
        let question = "lost laptop service desk passwords";
        let hr = crate::access::Audience::groups(["hr"]);

        let mut r = Retriever::over(&catalog, reader, embedder(), None, RetrieveOptions::default()).unwrap();
        let everyone = r.retrieve(question).unwrap();
        assert!(everyone.hits.iter().any(|h| secret.contains(&h.chunk.id)), "unrestricted, the passage is found");

        r.restrict(&hr, &map);
        let filtered = r.retrieve(question).unwrap();
        assert!(filtered.hits.iter().all(|h| !secret.contains(&h.chunk.id)));
        assert!(filtered.candidates.iter().all(|c| !secret.contains(&c.chunk)), "the filter ran inside both searches");
        assert!(filtered.withheld.is_empty(), "nothing reached the catalog check");

        let mut planted = catalog.access_map(&tenant).unwrap();
        for id in &secret {
            planted.plant(*id, Vec::new());
        }
        r.restrict(&hr, &Arc::new(planted));
        let past = r.retrieve(question).unwrap();
        assert!(past.hits.iter().all(|h| !secret.contains(&h.chunk.id)), "the catalog check caught it");
        assert!(past.candidates.iter().all(|c| !secret.contains(&c.chunk)));
        assert!(!past.withheld.is_empty() && past.withheld.iter().all(|id| secret.contains(id)));

        r.restrict(&crate::access::Audience::groups(["it"]), &map);
        let it = r.retrieve(question).unwrap();
        assert!(it.hits.iter().any(|h| secret.contains(&h.chunk.id)), "its own group reads it");
    }

    #[test]
    fn both_lists_find_the_passage_and_resolve_it_through_the_catalog() {
        let catalog = Catalog::in_memory().unwrap();
        let r = Retriever::over(&catalog, reader(&catalog, "hash-16"), embedder(), None, RetrieveOptions::default()).unwrap();
        let got = r.retrieve("lost laptop").unwrap();
        assert!(!got.refused);
        let best = &got.hits[0];
        assert_eq!(best.chunk.path, std::path::Path::new("security.txt"));
        assert!(best.chunk.text.contains("lost laptop"), "{:?}", best.chunk.text);
        let candidate = got.candidates.iter().find(|c| c.chunk == best.chunk.id).expect("the hit is a candidate");
        assert!(candidate.dense.is_some() && candidate.lexical.is_some(), "both lists had it: {candidate:?}");
        assert_eq!(got.candidates.len(), 4, "the dense list holds every chunk of so small a tenant: {:?}", got.candidates);
    }

    #[test]
    fn with_the_dense_list_off_bm25_alone_answers() {
        let catalog = Catalog::in_memory().unwrap();
        let options = RetrieveOptions { dense_candidates: 0, ..RetrieveOptions::default() };
        let r = Retriever::over(&catalog, reader(&catalog, "hash-16"), None, None, options).unwrap();
        let got = r.retrieve("how many characters must a password have").unwrap();
        assert!(got.hits[0].chunk.text.starts_with("Passwords"), "{:?}", got.hits[0].chunk.text);
        assert!(got.candidates.iter().all(|c| c.dense.is_none()));
    }

    #[test]
    fn the_floor_refuses_when_no_candidate_reaches_it() {
        let open = |floor: Option<f32>| {
            let catalog = Catalog::in_memory().unwrap();
            let options = RetrieveOptions { floor, ..RetrieveOptions::default() };
            Retriever::over(&catalog, reader(&catalog, "hash-16"), embedder(), None, options).unwrap().retrieve("London hotel cap").unwrap()
        };
        let best = open(None).best_evidence.expect("a similarity");
        assert!(!open(Some(best - 0.01)).refused);
        let refused = open(Some(best + 0.01));
        assert!(refused.refused);
        assert!(!refused.hits.is_empty(), "a refusal still shows the closest material");
    }

    /// Scores every passage the same: the order is then the first stage's vote alone.
    struct Flat;

    impl Reranker for Flat {
        fn model_id(&self) -> &str {
            "flat"
        }
        fn score(&self, _query: &str, passages: &[&str]) -> Result<Vec<f32>> {
            Ok(vec![0.0; passages.len()])
        }
    }

    #[test]
    fn a_statement_lets_bm25_vote_in_the_rerank_order_and_a_question_does_not() {
        let order_of = |query: &str| {
            let catalog = Catalog::in_memory().unwrap();
            let options = RetrieveOptions { rerank_weight: 0.0, statement_bm25_share: 1.0, ..RetrieveOptions::default() };
            let r = Retriever::over(&catalog, reader(&catalog, "hash-16"), embedder(), Some(Arc::new(Flat)), options).unwrap();
            let got = r.retrieve(query).unwrap();
            let mut reranked: Vec<&Candidate> = got.candidates.iter().filter(|c| c.rerank.is_some()).collect();
            reranked.sort_by_key(|c| c.rerank.unwrap().rank);
            let last = got.candidates.iter().filter_map(|c| c.lexical.map(|l| l.score)).fold(f32::INFINITY, f32::min);
            assert_eq!(got.bm25_vote.is_some(), !query.ends_with('?'), "the retrieval says whether BM25 voted");
            reranked.iter().map(|c| (c.lexical.map_or(last, |l| l.score), c.similarity.unwrap())).collect::<Vec<_>>()
        };
        let descending = |xs: Vec<f32>| xs.windows(2).all(|w| w[0] >= w[1]);
        // Keywords: ordered by BM25 (each candidate outside its list below its last).
        let statement = order_of("lost laptop service desk hour");
        assert!(descending(statement.iter().map(|c| c.0).collect()), "{statement:?}");
        // ... which here is not the cosine's order (else the check above would prove nothing).
        assert!(!descending(statement.iter().map(|c| c.1).collect()), "{statement:?}");
        // The same words as a question: ordered by the cosine.
        let question = order_of("where do I report a lost laptop service desk hour?");
        assert!(descending(question.iter().map(|c| c.1).collect()), "{question:?}");
    }

    #[test]
    fn a_query_embedder_other_than_the_index_model_says_how_to_fix_it() {
        let catalog = Catalog::in_memory().unwrap();
        let e = Retriever::over(&catalog, reader(&catalog, "other-model"), embedder(), None, RetrieveOptions::default()).err().expect("refused");
        assert!(e.to_string().contains("ragbox reembed --tenant acme --model hash-16"), "{e}");
        let both_off = RetrieveOptions { dense_candidates: 0, lexical_candidates: 0, ..RetrieveOptions::default() };
        let catalog = Catalog::in_memory().unwrap();
        assert!(Retriever::over(&catalog, reader(&catalog, "hash-16"), None, None, both_off).is_err());
    }
}
