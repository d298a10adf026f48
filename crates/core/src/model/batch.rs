//! Batching tokenised inputs: sort by length so each batch pads only to its own longest member,
//! cap each batch by count and by padded tokens, and build the input tensors.

use candle_core::{Device, Tensor};

use crate::error::Result;
use crate::model::tokenizer::Tokens;

/// Limits on one batch.
#[derive(Debug, Clone, Copy)]
pub struct BatchLimits {
    /// Most inputs in one batch.
    pub max_items: usize,
    /// Most padded tokens (items × longest) in one batch; a single longer input still gets a batch.
    pub max_tokens: usize,
}

impl Default for BatchLimits {
    fn default() -> Self {
        BatchLimits { max_items: 32, max_tokens: 16_384 }
    }
}

/// Groups input indices into batches of similar length, longest first.
pub fn plan_batches(lengths: &[usize], limits: BatchLimits) -> Vec<Vec<usize>> {
    let mut order: Vec<usize> = (0..lengths.len()).collect();
    // Stable sort, so equal lengths keep input order and plans are deterministic.
    order.sort_by_key(|&i| std::cmp::Reverse(lengths[i]));
    let mut batches: Vec<Vec<usize>> = Vec::new();
    let mut current: Vec<usize> = Vec::new();
    for i in order {
        // Sorted longest first, so the batch's first item sets its padded length.
        let longest = current.first().map_or(lengths[i], |&j| lengths[j]);
        let fits = current.len() < limits.max_items.max(1)
            && (current.len() + 1) * longest <= limits.max_tokens.max(1);
        if !current.is_empty() && !fits {
            batches.push(std::mem::take(&mut current));
        }
        current.push(i);
    }
    if !current.is_empty() {
        batches.push(current);
    }
    batches
}

/// Input tensors of one batch, each `(batch, seq_len)` u32.
pub struct BatchTensors {
    /// Token ids, padded with `pad_id`.
    pub ids: Tensor,
    /// Segment ids, padded with 0.
    pub type_ids: Tensor,
    /// 1 for real tokens, 0 for padding.
    pub mask: Tensor,
}

/// Pads the inputs `indices` of `tokens` to their longest and builds the tensors.
pub fn batch_tensors(tokens: &[Tokens], indices: &[usize], pad_id: u32, device: &Device) -> Result<BatchTensors> {
    let seq_len = indices.iter().map(|&i| tokens[i].ids.len()).max().unwrap_or(0);
    let n = indices.len();
    let mut ids = vec![pad_id; n * seq_len];
    let mut type_ids = vec![0u32; n * seq_len];
    let mut mask = vec![0u32; n * seq_len];
    for (row, &i) in indices.iter().enumerate() {
        let t = &tokens[i];
        let at = row * seq_len;
        ids[at..at + t.ids.len()].copy_from_slice(&t.ids);
        type_ids[at..at + t.type_ids.len()].copy_from_slice(&t.type_ids);
        mask[at..at + t.ids.len()].fill(1);
    }
    Ok(BatchTensors {
        ids: Tensor::from_vec(ids, (n, seq_len), device)?,
        type_ids: Tensor::from_vec(type_ids, (n, seq_len), device)?,
        mask: Tensor::from_vec(mask, (n, seq_len), device)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn batches_group_similar_lengths_longest_first() {
        let lengths = [5, 100, 7, 98, 6, 99];
        let plan = plan_batches(&lengths, BatchLimits { max_items: 3, max_tokens: 10_000 });
        assert_eq!(plan, vec![vec![1, 5, 3], vec![2, 4, 0]]);
    }

    #[test]
    fn token_budget_splits_long_inputs() {
        let lengths = [512, 512, 512, 10];
        let plan = plan_batches(&lengths, BatchLimits { max_items: 32, max_tokens: 1024 });
        assert_eq!(plan, vec![vec![0, 1], vec![2, 3]]);
        // One input over the budget still gets a batch of its own.
        let plan = plan_batches(&[4000, 3], BatchLimits { max_items: 32, max_tokens: 1024 });
        assert_eq!(plan, vec![vec![0], vec![1]]);
    }

    #[test]
    fn padding_fills_mask_and_pad_ids() {
        let t = |ids: &[u32]| Tokens { ids: ids.to_vec(), type_ids: vec![0; ids.len()], truncated_from: None };
        let tokens = vec![t(&[101, 7, 102]), t(&[101, 102])];
        let b = batch_tensors(&tokens, &[0, 1], 0, &Device::Cpu).unwrap();
        assert_eq!(b.ids.to_vec2::<u32>().unwrap(), vec![vec![101, 7, 102], vec![101, 102, 0]]);
        assert_eq!(b.mask.to_vec2::<u32>().unwrap(), vec![vec![1, 1, 1], vec![1, 1, 0]]);
    }

    proptest! {
        #[test]
        fn every_input_lands_in_exactly_one_batch(lengths in proptest::collection::vec(1usize..600, 0..200),
                                                  max_items in 1usize..64, max_tokens in 1usize..5000) {
            let plan = plan_batches(&lengths, BatchLimits { max_items, max_tokens });
            let mut seen: Vec<usize> = plan.iter().flatten().copied().collect();
            seen.sort();
            prop_assert_eq!(seen, (0..lengths.len()).collect::<Vec<_>>());
            for b in &plan {
                prop_assert!(!b.is_empty() && b.len() <= max_items);
                let longest = b.iter().map(|&i| lengths[i]).max().unwrap();
                prop_assert!(b.len() == 1 || b.len() * longest <= max_tokens);
            }
        }
    }
}
