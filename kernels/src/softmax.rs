//! Attention's masked softmax of one row of scores, in place and vectorised.
//!
//! candle's `softmax_last_dim` calls libm's scalar `expf` per score (7% of MiniLM's int8 time in
//! perf), and BERT's padding mask was broadcast to a `(batch, heads, seq, seq)` tensor to be added
//! first (25 MB a batch of 8 × 256 tokens, fresh pages each time). Here the input's `seq` long
//! additive mask is added while the row's maximum is found (`attention.rs` calls it per row).

use crate::gelu::exp;

/// One row in place: `softmax(row + mask)`.
#[inline(always)]
pub(crate) fn softmax_row(row: &mut [f32], mask: Option<&[f32]>) {
    if let Some(mask) = mask {
        for (v, m) in row.iter_mut().zip(mask) {
            *v += m;
        }
    }
    let max = max_of(row);
    for v in row.iter_mut() {
        *v = exp(*v - max);
    }
    let inv = 1.0 / sum_of(row);
    for v in row.iter_mut() {
        *v *= inv;
    }
}

/// The largest value, in 16 lanes (a plain fold over `f32::max` stays scalar).
#[inline(always)]
fn max_of(x: &[f32]) -> f32 {
    let mut lanes = [f32::MIN; 16];
    let chunks = x.chunks_exact(16);
    let tail = chunks.remainder();
    for chunk in chunks {
        for j in 0..16 {
            lanes[j] = if chunk[j] > lanes[j] { chunk[j] } else { lanes[j] };
        }
    }
    lanes.iter().chain(tail).fold(f32::MIN, |m, &v| if v > m { v } else { m })
}

/// The sum, in 16 lanes (a plain sum is one chain of dependent adds: 11% of an int8 MiniLM
/// embedding in perf).
#[inline(always)]
fn sum_of(x: &[f32]) -> f32 {
    let mut lanes = [0f32; 16];
    let chunks = x.chunks_exact(16);
    let tail = chunks.remainder();
    for chunk in chunks {
        for j in 0..16 {
            lanes[j] += chunk[j];
        }
    }
    lanes.iter().chain(tail).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reference(row: &[f32], mask: &[f32]) -> Vec<f64> {
        let x: Vec<f64> = row.iter().zip(mask).map(|(v, m)| f64::from(*v) + f64::from(*m)).collect();
        let max = x.iter().cloned().fold(f64::MIN, f64::max);
        let e: Vec<f64> = x.iter().map(|v| (v - max).exp()).collect();
        let s: f64 = e.iter().sum();
        e.iter().map(|v| v / s).collect()
    }

    #[test]
    fn matches_a_float64_softmax_with_and_without_padding() {
        let (items, rows, keys) = (3, 4, 37);
        let scores: Vec<f32> = (0..items * rows * keys).map(|i| ((i * 7919 % 1000) as f32 / 100.0) - 5.0).collect();
        // Item 1 pads its last 10 keys, as BERT's extended mask does (f32::MIN).
        let mut mask = vec![0f32; items * keys];
        for k in keys - 10..keys {
            mask[keys + k] = f32::MIN;
        }
        let mut got = scores.clone();
        for (i, row) in got.chunks_exact_mut(keys).enumerate() {
            let item = i / rows;
            softmax_row(row, Some(&mask[item * keys..(item + 1) * keys]));
        }
        for item in 0..items {
            for r in 0..rows {
                let at = (item * rows + r) * keys;
                let want = reference(&scores[at..at + keys], &mask[item * keys..(item + 1) * keys]);
                for (k, (g, w)) in got[at..at + keys].iter().zip(&want).enumerate() {
                    assert!((f64::from(*g) - w).abs() < 1e-6, "item {item} row {r} key {k}: {g} vs {w}");
                    if item == 1 && k >= keys - 10 {
                        assert!(*g < 1e-30, "a padded key got weight {g}");
                    }
                }
            }
        }
        let mut plain = scores[..keys].to_vec();
        softmax_row(&mut plain, None);
        let want = reference(&scores[..keys], &vec![0.0; keys]);
        assert!(plain[..keys].iter().zip(&want).all(|(g, w)| (f64::from(*g) - w).abs() < 1e-6));
    }
}
