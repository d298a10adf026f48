//! Per-query retrieval metrics with trec_eval semantics, the figures that pytrec_eval (and so
//! BEIR) report: nDCG@10 (`ndcg_cut.10`), recall@10 and recall@100 (`recall.10`, `recall.100`),
//! and MRR@10.
//!
//! Imports nothing from the crate. Retrieval returns chunks; [`rank_documents`] collapses them to
//! documents (a document scores as its best chunk) and orders them the way trec_eval does before
//! it scores a run, so that ties rank here as they rank there. [`evaluate`] then scores one
//! query's ranking against its judgments, and [`mean`] averages over queries.
//!
//! A judgment of 0 or below is non-relevant, as is a retrieved document with no judgment. A query
//! with no relevant document scores 0 on every metric (never NaN).
//!
//! ```
//! use ragbox_eval::metrics::{evaluate, rank_documents, Judgments};
//!
//! let hits = vec![("d1".to_string(), 0.9), ("d2".to_string(), 0.8), ("d1".to_string(), 0.7)];
//! let ranked = rank_documents(hits);
//! assert_eq!(ranked, vec![("d1".to_string(), 0.9), ("d2".to_string(), 0.8)]);
//!
//! let judged: Judgments = [("d2".to_string(), 1)].into_iter().collect();
//! let m = evaluate(&ranked, &judged);
//! assert_eq!(m.mrr_at_10, 0.5);
//! assert_eq!(m.recall_at_10, 1.0);
//! ```

use std::cmp::Ordering;
use std::collections::HashMap;

use serde::Serialize;

/// Graded relevance of documents for one query: document id -> relevance (above 0: relevant).
pub type Judgments = HashMap<String, i32>;

/// Judgments of every query: query id -> its judgments.
pub type Qrels = HashMap<String, Judgments>;

/// Rank cutoff of nDCG and MRR.
const CUTOFF: usize = 10;

/// The metrics of one query, or their mean over queries.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct QueryMetrics {
    /// Normalised discounted cumulative gain of the top 10 (trec_eval `ndcg_cut.10`).
    #[serde(rename = "ndcg@10")]
    pub ndcg_at_10: f64,
    /// Share of the relevant documents found in the top 10.
    #[serde(rename = "recall@10")]
    pub recall_at_10: f64,
    /// Share of the relevant documents found in the top 100.
    #[serde(rename = "recall@100")]
    pub recall_at_100: f64,
    /// Reciprocal rank of the first relevant document in the top 10 (0 if none).
    #[serde(rename = "mrr@10")]
    pub mrr_at_10: f64,
}

impl QueryMetrics {
    /// Display names of the metrics, in the order of [`QueryMetrics::to_array`].
    pub const NAMES: [&'static str; 4] = ["nDCG@10", "recall@10", "recall@100", "MRR@10"];

    /// The metrics as `[nDCG@10, recall@10, recall@100, MRR@10]`.
    pub fn to_array(&self) -> [f64; 4] {
        [self.ndcg_at_10, self.recall_at_10, self.recall_at_100, self.mrr_at_10]
    }
}

/// Collapses chunk hits `(document id, score)` to one entry per document, scored by its best
/// chunk, and sorts them as trec_eval does: score descending, ties by document id descending.
///
/// The tie rule is trec_eval's `comp_sim_docno` in `form_res_rels.c` (usnistgov/trec_eval),
/// which sorts on `sim` descending and then returns `strcmp(p2->docno, p1->docno)`, i.e. the
/// document ids compared byte-wise in reverse; pytrec_eval runs the same code. Rust's `str`
/// ordering is byte-wise too, so `"9"` ranks before `"10"` and `"b"` before `"a"` on equal
/// scores. A NaN score ranks last (as minus infinity) and -0.0 counts as 0.0.
pub fn rank_documents<I: IntoIterator<Item = (String, f64)>>(chunk_hits: I) -> Vec<(String, f64)> {
    let mut best: HashMap<String, f64> = HashMap::new();
    for (doc, score) in chunk_hits {
        let score = comparable(score);
        best.entry(doc).and_modify(|s| *s = s.max(score)).or_insert(score);
    }
    let mut ranked: Vec<(String, f64)> = best.into_iter().collect();
    ranked.sort_by(trec_order);
    ranked
}

/// A score that compares totally: NaN becomes minus infinity, -0.0 becomes 0.0.
fn comparable(score: f64) -> f64 {
    if score.is_nan() {
        f64::NEG_INFINITY
    } else {
        score + 0.0
    }
}

/// trec_eval's run order: score descending, then document id descending.
fn trec_order(a: &(String, f64), b: &(String, f64)) -> Ordering {
    b.1.total_cmp(&a.1).then_with(|| b.0.cmp(&a.0))
}

/// Scores one query: `ranked` is its ranking, best first, one entry per document (as
/// [`rank_documents`] returns it); `judged` its judgments.
pub fn evaluate(ranked: &[(String, f64)], judged: &Judgments) -> QueryMetrics {
    let relevant = judged.values().filter(|&&rel| rel > 0).count();
    if relevant == 0 {
        return QueryMetrics::default();
    }
    // Gain of each retrieved document: its relevance, 0 when non-relevant or unjudged.
    let gains: Vec<f64> = ranked.iter().map(|(doc, _)| gain(judged.get(doc).copied())).collect();
    QueryMetrics {
        ndcg_at_10: ndcg_at(&gains, judged, CUTOFF),
        recall_at_10: recall_at(&gains, relevant, 10),
        recall_at_100: recall_at(&gains, relevant, 100),
        mrr_at_10: reciprocal_rank_at(&gains, CUTOFF),
    }
}

/// The gain of a judgment: the relevance itself when above 0, else 0.
fn gain(rel: Option<i32>) -> f64 {
    f64::from(rel.unwrap_or(0).max(0))
}

/// Discounted cumulative gain of the first `k` gains: gain / log2(rank + 1), ranks from 1.
fn dcg_at(gains: impl IntoIterator<Item = f64>, k: usize) -> f64 {
    gains.into_iter().take(k).enumerate().map(|(i, g)| g / ((i + 2) as f64).log2()).sum()
}

/// nDCG at `k`: the ranking's DCG over the DCG of the ideal ranking of all relevant judged
/// documents (cut at `k` as well), as trec_eval's `ndcg_cut`. 0 when nothing is relevant.
fn ndcg_at(gains: &[f64], judged: &Judgments, k: usize) -> f64 {
    let mut ideal: Vec<f64> = judged.values().filter(|&&rel| rel > 0).map(|&rel| f64::from(rel)).collect();
    ideal.sort_by(|a, b| b.total_cmp(a));
    let ideal_dcg = dcg_at(ideal, k);
    if ideal_dcg > 0.0 {
        dcg_at(gains.iter().copied(), k) / ideal_dcg
    } else {
        0.0
    }
}

/// Relevant documents in the first `k` over all `relevant` ones (`relevant` > 0).
fn recall_at(gains: &[f64], relevant: usize, k: usize) -> f64 {
    let found = gains.iter().take(k).filter(|&&g| g > 0.0).count();
    found as f64 / relevant as f64
}

/// 1 / rank of the first relevant document in the first `k`, else 0.
fn reciprocal_rank_at(gains: &[f64], k: usize) -> f64 {
    gains.iter().take(k).position(|&g| g > 0.0).map_or(0.0, |i| 1.0 / (i + 1) as f64)
}

/// The mean of each metric over queries; all 0 for no queries.
pub fn mean(metrics: &[QueryMetrics]) -> QueryMetrics {
    if metrics.is_empty() {
        return QueryMetrics::default();
    }
    let n = metrics.len() as f64;
    let sum = |f: fn(&QueryMetrics) -> f64| metrics.iter().map(f).sum::<f64>() / n;
    QueryMetrics {
        ndcg_at_10: sum(|m| m.ndcg_at_10),
        recall_at_10: sum(|m| m.recall_at_10),
        recall_at_100: sum(|m| m.recall_at_100),
        mrr_at_10: sum(|m| m.mrr_at_10),
    }
}

/// The `p`-th percentile (0 to 100) of `sorted` (ascending) by nearest rank; 0 when empty.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = (p / 100.0 * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn judgments(pairs: &[(&str, i32)]) -> Judgments {
        pairs.iter().map(|&(d, r)| (d.to_string(), r)).collect()
    }

    fn ranking(ids: &[&str]) -> Vec<(String, f64)> {
        // Strictly decreasing scores keep the given order.
        ids.iter().enumerate().map(|(i, d)| (d.to_string(), 1.0 - i as f64 / 1000.0)).collect()
    }

    fn hits(pairs: &[(&str, f64)]) -> Vec<(String, f64)> {
        pairs.iter().map(|&(d, s)| (d.to_string(), s)).collect()
    }

    fn ids(ranked: &[(String, f64)]) -> Vec<&str> {
        ranked.iter().map(|(d, _)| d.as_str()).collect()
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-12
    }

    #[test]
    fn graded_relevance() {
        // Judged a=2, b=1, c=0; ranking x, b, a, c (x unjudged).
        // Gains by rank: 0, 1, 2, 0.
        // DCG  = 1/log2(3) + 2/log2(4) = 0.6309297535714575 + 1 = 1.6309297535714575
        // IDCG = 2/log2(2) + 1/log2(3) = 2 + 0.6309297535714575 = 2.6309297535714575
        // nDCG = 1.6309297535714575 / 2.6309297535714575 = 0.6199062332840657
        // Both relevant docs are in the top 10: recall@10 = recall@100 = 2/2 = 1.
        // First relevant doc (b) at rank 2: MRR@10 = 1/2.
        let m = evaluate(&ranking(&["x", "b", "a", "c"]), &judgments(&[("a", 2), ("b", 1), ("c", 0)]));
        assert!(close(m.ndcg_at_10, 0.6199062332840657), "{m:?}");
        assert_eq!(m.recall_at_10, 1.0);
        assert_eq!(m.recall_at_100, 1.0);
        assert_eq!(m.mrr_at_10, 0.5);
    }

    #[test]
    fn ideal_order_scores_one() {
        // a=2 then b=1 is the ideal order: DCG = IDCG = 2 + 1/log2(3), nDCG = 1.
        let m = evaluate(&ranking(&["a", "b", "z"]), &judgments(&[("a", 2), ("b", 1)]));
        assert!(close(m.ndcg_at_10, 1.0), "{m:?}");
        assert_eq!(m.mrr_at_10, 1.0);
    }

    #[test]
    fn ties_break_by_document_id_descending() {
        // c (0.9) first; a and b tie at 0.5 and trec_eval puts the greater id first: b, a.
        let ranked = rank_documents(hits(&[("a", 0.5), ("b", 0.5), ("c", 0.9)]));
        assert_eq!(ids(&ranked), ["c", "b", "a"]);
        // Judged a=1 at rank 3: DCG = 1/log2(4) = 0.5, IDCG = 1/log2(2) = 1, nDCG = 0.5;
        // MRR@10 = 1/3; recall = 1/1.
        let m = evaluate(&ranked, &judgments(&[("a", 1)]));
        assert!(close(m.ndcg_at_10, 0.5), "{m:?}");
        assert!(close(m.mrr_at_10, 1.0 / 3.0), "{m:?}");
        assert_eq!(m.recall_at_10, 1.0);
    }

    #[test]
    fn ties_compare_ids_as_bytes_not_numbers() {
        // strcmp order: "9" > "10" > "1", so descending gives 9, 10, 1.
        let ranked = rank_documents(hits(&[("1", 0.3), ("10", 0.3), ("9", 0.3)]));
        assert_eq!(ids(&ranked), ["9", "10", "1"]);
    }

    #[test]
    fn duplicate_chunks_count_once_with_the_best_score() {
        // a's chunks score 0.2, 0.8, 0.1: a scores 0.8 and ranks above b (0.5).
        let ranked = rank_documents(hits(&[("a", 0.2), ("b", 0.5), ("a", 0.8), ("a", 0.1)]));
        assert_eq!(ranked, hits(&[("a", 0.8), ("b", 0.5)]));
        // Judged b=1 at rank 2: nDCG = (1/log2(3)) / 1 = 0.6309297535714575, MRR = 1/2.
        let m = evaluate(&ranked, &judgments(&[("b", 1)]));
        assert!(close(m.ndcg_at_10, 0.6309297535714575), "{m:?}");
        assert_eq!(m.mrr_at_10, 0.5);
        assert_eq!(m.recall_at_100, 1.0);
    }

    #[test]
    fn nan_and_negative_zero_scores_order_totally() {
        let ranked = rank_documents(hits(&[("a", f64::NAN), ("b", -0.0), ("c", 0.0), ("d", -1.0)]));
        // b and c tie at 0 (c first by id), then d, then the NaN last.
        assert_eq!(ids(&ranked), ["c", "b", "d", "a"]);
    }

    #[test]
    fn relevant_at_rank_11_counts_for_recall_at_100_only() {
        // Ten non-relevant docs, then r at rank 11; s is relevant but never retrieved.
        let mut order: Vec<String> = (0..10).map(|i| format!("n{i}")).collect();
        order.push("r".into());
        let ranked = ranking(&order.iter().map(String::as_str).collect::<Vec<_>>());
        let m = evaluate(&ranked, &judgments(&[("r", 1), ("s", 1)]));
        // Nothing relevant in the top 10: nDCG@10 = recall@10 = MRR@10 = 0.
        // recall@100 = 1 found (r) / 2 relevant = 0.5.
        assert_eq!(m, QueryMetrics { ndcg_at_10: 0.0, recall_at_10: 0.0, recall_at_100: 0.5, mrr_at_10: 0.0 });
    }

    #[test]
    fn ideal_dcg_is_cut_at_ten() {
        // Twelve relevant docs (rel 1), all retrieved first: DCG@10 = IDCG@10, so nDCG = 1,
        // though recall@10 = 10/12.
        let names: Vec<String> = (10..22).map(|i| format!("d{i}")).collect();
        let judged: Judgments = names.iter().map(|d| (d.clone(), 1)).collect();
        let m = evaluate(&ranking(&names.iter().map(String::as_str).collect::<Vec<_>>()), &judged);
        assert!(close(m.ndcg_at_10, 1.0), "{m:?}");
        assert!(close(m.recall_at_10, 10.0 / 12.0), "{m:?}");
        assert_eq!(m.recall_at_100, 1.0);
    }

    #[test]
    fn no_relevant_retrieved_scores_zero() {
        let m = evaluate(&ranking(&["b", "c"]), &judgments(&[("a", 1), ("b", 0)]));
        assert_eq!(m, QueryMetrics::default());
    }

    #[test]
    fn no_relevant_judged_scores_zero_not_nan() {
        // Judgments 0 and -1 are both non-relevant: 0 relevant docs, every metric 0.
        let m = evaluate(&ranking(&["a", "b"]), &judgments(&[("a", 0), ("b", -1)]));
        assert_eq!(m, QueryMetrics::default());
        let m = evaluate(&[], &Judgments::new());
        assert_eq!(m, QueryMetrics::default());
    }

    #[test]
    fn mean_averages_each_metric() {
        let a = QueryMetrics { ndcg_at_10: 1.0, recall_at_10: 0.5, recall_at_100: 1.0, mrr_at_10: 1.0 };
        let b = QueryMetrics { ndcg_at_10: 0.0, recall_at_10: 0.0, recall_at_100: 0.5, mrr_at_10: 0.5 };
        let m = mean(&[a, b]);
        assert_eq!(m, QueryMetrics { ndcg_at_10: 0.5, recall_at_10: 0.25, recall_at_100: 0.75, mrr_at_10: 0.75 });
        assert_eq!(mean(&[]), QueryMetrics::default());
        assert_eq!(m.to_array(), [0.5, 0.25, 0.75, 0.75]);
    }

    /// Judgments over docs d0..d29 (relevance -1..=3) and chunk hits over d0..d39.
    fn judged_and_hits() -> impl Strategy<Value = (Judgments, Vec<(String, f64)>)> {
        let judged = prop::collection::hash_map((0..30u32).prop_map(|i| format!("d{i}")), -1..=3i32, 0..20);
        let hits = prop::collection::vec(((0..40u32).prop_map(|i| format!("d{i}")), -2.0..2.0f64), 0..150);
        (judged, hits)
    }

    proptest! {
        #[test]
        fn metrics_stay_within_zero_and_one((judged, hits) in judged_and_hits()) {
            let m = evaluate(&rank_documents(hits), &judged);
            for v in m.to_array() {
                prop_assert!((0.0..=1.0 + 1e-12).contains(&v), "{m:?}");
            }
        }

        #[test]
        fn ideal_ranking_has_ndcg_one((judged, hits) in judged_and_hits()) {
            prop_assume!(judged.values().any(|&r| r > 0));
            // Relevant docs first, by relevance descending, then the other hits.
            let mut relevant: Vec<(&String, i32)> =
                judged.iter().filter(|(_, &r)| r > 0).map(|(d, &r)| (d, r)).collect();
            relevant.sort_by_key(|&(_, rel)| std::cmp::Reverse(rel));
            let others = rank_documents(hits.into_iter().filter(|(d, _)| judged.get(d).is_none_or(|&r| r <= 0)));
            let ranked: Vec<(String, f64)> = relevant
                .iter()
                .map(|(d, _)| ((*d).clone(), 0.0))
                .chain(others)
                .collect();
            let m = evaluate(&ranked, &judged);
            prop_assert!((m.ndcg_at_10 - 1.0).abs() < 1e-12, "{m:?}");
        }
    }
}
