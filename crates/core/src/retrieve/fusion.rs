//! Candidate fusion and diversification: weighted reciprocal rank fusion of ranked lists, the
//! reranker's score combined with the first stage's, and maximal marginal relevance over a fused
//! list. Pure functions over ids, scores, ranks and vectors.

use std::collections::HashMap;

use crate::types::{cosine, ChunkId};

/// One ranked input list and its weight in the fusion.
#[derive(Debug, Clone, Copy)]
pub struct RankedList<'a> {
    /// Weight of this list's contributions.
    pub weight: f32,
    /// Chunk ids, best first.
    pub ids: &'a [ChunkId],
}

/// Weighted reciprocal rank fusion: each list adds `weight / (k + rank)` (rank from 1) for every
/// id it holds. Returns ids with fused scores, best first; ties keep the order in which ids were
/// first seen (earlier lists, better ranks), so the result is deterministic.
pub fn reciprocal_rank_fusion(lists: &[RankedList<'_>], k: f32) -> Vec<(ChunkId, f32)> {
    let mut scores: Vec<(ChunkId, f32)> = Vec::new();
    let mut at: HashMap<ChunkId, usize> = HashMap::new();
    for list in lists {
        for (i, id) in list.ids.iter().enumerate() {
            let add = list.weight / (k + (i + 1) as f32);
            match at.get(id) {
                Some(&j) => scores[j].1 += add,
                None => {
                    at.insert(*id, scores.len());
                    scores.push((*id, add));
                }
            }
        }
    }
    // Stable sort: equal scores keep first-seen order.
    scores.sort_by(|a, b| b.1.total_cmp(&a.1));
    scores
}

/// `weight · z(a) + (1 − weight) · z(b)` per candidate, where `z` standardises a score list to
/// mean 0 and standard deviation 1 over the candidates (a list with no spread counts 0 for all).
/// The reranker's logits and the first stage's scores live on unrelated scales; standardised,
/// each says how far above the pool a candidate stands, so the mix keeps the first stage's vote
/// where the reranker is unsure (keyword and claim queries) and lets the reranker decide where it
/// is sure.
/// `weight` 1 is the reranker alone.
pub fn combine_standardised(a: &[f32], b: &[f32], weight: f32) -> Vec<f32> {
    assert_eq!(a.len(), b.len(), "one score per candidate in each list");
    let (za, zb) = (standardise(a), standardise(b));
    za.iter().zip(&zb).map(|(x, y)| weight * x + (1.0 - weight) * y).collect()
}

fn standardise(x: &[f32]) -> Vec<f32> {
    let n = x.len().max(1) as f64;
    let mean = x.iter().map(|&v| f64::from(v)).sum::<f64>() / n;
    let sd = (x.iter().map(|&v| (f64::from(v) - mean).powi(2)).sum::<f64>() / n).sqrt();
    x.iter().map(|&v| if sd > 0.0 { ((f64::from(v) - mean) / sd) as f32 } else { 0.0 }).collect()
}

/// Maximal marginal relevance: picks `take` of the candidates, each time the one maximising
/// `lambda * relevance - (1 - lambda) * (highest similarity to one already picked)`. `relevance`
/// and `vectors` are per candidate, in candidate order; a candidate without a vector is never
/// penalised. Returns candidate indices in pick order. `lambda = 1` keeps the relevance order.
pub fn maximal_marginal_relevance(relevance: &[f32], vectors: &[Option<&[f32]>], lambda: f32, take: usize) -> Vec<usize> {
    let n = relevance.len().min(vectors.len());
    let mut picked: Vec<usize> = Vec::with_capacity(take.min(n));
    let mut redundancy = vec![f32::NEG_INFINITY; n];
    let mut free = vec![true; n];
    while picked.len() < take.min(n) {
        let mut best: Option<(usize, f32)> = None;
        for i in (0..n).filter(|&i| free[i]) {
            let penalty = if redundancy[i].is_finite() { redundancy[i] } else { 0.0 };
            let value = lambda * relevance[i] - (1.0 - lambda) * penalty;
            if best.is_none_or(|(_, b)| value > b) {
                best = Some((i, value));
            }
        }
        let Some((chosen, _)) = best else { break };
        free[chosen] = false;
        picked.push(chosen);
        if let Some(v) = vectors[chosen] {
            for i in (0..n).filter(|&i| free[i]) {
                if let Some(w) = vectors[i] {
                    redundancy[i] = redundancy[i].max(cosine(v, w));
                }
            }
        }
    }
    picked
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn combined_scores_mix_standardised_lists() {
        let rerank = [4.0, 2.0, 0.0];
        let fused = [0.01, 0.03, 0.02];
        // The reranker alone keeps its order; the first stage alone keeps its own.
        let alone = combine_standardised(&rerank, &fused, 1.0);
        assert!(alone[0] > alone[1] && alone[1] > alone[2]);
        let first = combine_standardised(&rerank, &fused, 0.0);
        assert!(first[1] > first[2] && first[2] > first[0]);
        // Half and half: z(rerank) = (1.22, 0, -1.22), z(fused) = (-1.22, 1.22, 0).
        let half = combine_standardised(&rerank, &fused, 0.5);
        assert!((half[0] - 0.0).abs() < 1e-5 && (half[1] - 0.6124).abs() < 1e-3 && (half[2] + 0.6124).abs() < 1e-3, "{half:?}");
        // No spread, no vote; empty lists stay empty.
        assert_eq!(combine_standardised(&[1.0, 1.0], &[0.5, 0.25], 0.5)[0], 0.5);
        assert!(combine_standardised(&[], &[], 0.5).is_empty());
    }

    fn ids(v: &[u64]) -> Vec<ChunkId> {
        v.iter().map(|&i| ChunkId(i)).collect()
    }

    #[test]
    fn rrf_matches_hand_computed_scores() {
        let dense = ids(&[1, 2, 3]);
        let bm25 = ids(&[3, 1, 4]);
        let fused = reciprocal_rank_fusion(
            &[RankedList { weight: 1.0, ids: &dense }, RankedList { weight: 1.0, ids: &bm25 }],
            60.0,
        );
        // 1: 1/61 + 1/62; 3: 1/63 + 1/61; 2: 1/62; 4: 1/63.
        let expect = [(1, 1.0 / 61.0 + 1.0 / 62.0), (3, 1.0 / 63.0 + 1.0 / 61.0), (2, 1.0 / 62.0), (4, 1.0 / 63.0)];
        assert_eq!(fused.len(), 4);
        for ((id, score), (eid, escore)) in fused.iter().zip(expect) {
            assert_eq!(id.0, eid);
            assert!((score - escore as f32).abs() < 1e-7);
        }
    }

    #[test]
    fn rrf_weights_shift_the_order_and_ties_are_stable() {
        let dense = ids(&[1, 2]);
        let bm25 = ids(&[2, 1]);
        let equal = reciprocal_rank_fusion(&[RankedList { weight: 1.0, ids: &dense }, RankedList { weight: 1.0, ids: &bm25 }], 60.0);
        assert_eq!(equal.iter().map(|h| h.0 .0).collect::<Vec<_>>(), vec![1, 2], "a tie keeps first-seen order");
        let lexical = reciprocal_rank_fusion(&[RankedList { weight: 0.5, ids: &dense }, RankedList { weight: 1.0, ids: &bm25 }], 60.0);
        assert_eq!(lexical[0].0, ChunkId(2));
        let empty = reciprocal_rank_fusion(&[RankedList { weight: 1.0, ids: &[] }], 60.0);
        assert!(empty.is_empty());
    }

    #[test]
    fn mmr_trades_relevance_for_novelty() {
        let a = [1.0f32, 0.0];
        let a2 = [0.995f32, 0.0998];
        let b = [0.0f32, 1.0];
        let rel = [0.9, 0.89, 0.5];
        let vecs: Vec<Option<&[f32]>> = vec![Some(&a), Some(&a2), Some(&b)];
        assert_eq!(maximal_marginal_relevance(&rel, &vecs, 1.0, 3), vec![0, 1, 2], "lambda 1 keeps relevance order");
        // lambda 0.5: after 0, a2 scores 0.5*0.89 - 0.5*0.995 < 0, b scores 0.5*0.5 - 0 = 0.25.
        assert_eq!(maximal_marginal_relevance(&rel, &vecs, 0.5, 2), vec![0, 2]);
        let no_vectors: Vec<Option<&[f32]>> = vec![None, None, None];
        assert_eq!(maximal_marginal_relevance(&rel, &no_vectors, 0.5, 5), vec![0, 1, 2]);
    }
}
