//! The best class of each row of a score matrix, with its probability: the OCR recognizer's
//! greedy CTC step over ~18,700 classes per time step (a page reads ~40 lines of ~100 steps
//! each, 75 million scores). Here rather than beside the decoder because ragbox's own crate
//! is built unoptimised in dev, where this loop ran at a tenth of its speed.

/// For each row of `cols` scores, the index of the highest and its probability: the score itself
/// when the row is already a probability distribution (sums to 1, best ≤ 1), else the winner's
/// softmax probability over the row (the row holds logits). A probability that is not finite is 0.
///
/// ```
/// let (ids, p) = ragbox_kernels::best_per_row(&[0.1, 0.7, 0.2, 2.0, 0.0, 0.0], 3);
/// assert_eq!(ids, vec![1, 0]);
/// assert!((p[0] - 0.7).abs() < 1e-6 && p[1] > 0.7 && p[1] < 1.0);
/// ```
pub fn best_per_row(scores: &[f32], cols: usize) -> (Vec<usize>, Vec<f32>) {
    if cols == 0 {
        return (Vec::new(), Vec::new());
    }
    let rows = scores.len() / cols;
    let mut ids = Vec::with_capacity(rows);
    let mut probs = Vec::with_capacity(rows);
    for row in scores.chunks_exact(cols) {
        let (mut best, mut best_score, mut sum) = (0usize, f32::NEG_INFINITY, 0f32);
        for (i, &v) in row.iter().enumerate() {
            sum += v;
            if v > best_score {
                best_score = v;
                best = i;
            }
        }
        let is_prob = best_score <= 1.0001 && (sum - 1.0).abs() < 0.01;
        let p = if is_prob {
            best_score
        } else {
            let z: f32 = row.iter().map(|&v| (v - best_score).exp()).sum();
            1.0 / z
        };
        ids.push(best);
        probs.push(if p.is_finite() { p } else { 0.0 });
    }
    (ids, probs)
}

#[cfg(test)]
mod tests {
    use super::best_per_row;

    #[test]
    fn probabilities_are_taken_as_they_are() {
        let (ids, p) = best_per_row(&[0.1, 0.7, 0.2, 0.5, 0.25, 0.25], 3);
        assert_eq!(ids, vec![1, 0]);
        assert_eq!(p, vec![0.7, 0.5]);
    }

    #[test]
    fn logits_give_the_winners_softmax() {
        let (ids, p) = best_per_row(&[0.0, 3.0, 1.0], 3);
        assert_eq!(ids, vec![1]);
        let z = (-3f32).exp() + 1.0 + (-2f32).exp();
        assert!((p[0] - 1.0 / z).abs() < 1e-6);
    }

    #[test]
    fn first_of_equal_scores_wins_and_a_partial_row_is_ignored() {
        let (ids, _) = best_per_row(&[2.0, 2.0, 9.0], 2);
        assert_eq!(ids, vec![0]);
        assert_eq!(best_per_row(&[1.0], 0), (vec![], vec![]));
    }
}
