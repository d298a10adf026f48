//! Multi-head scaled dot-product attention over one batch, shared by the BERT and nomic-bert
//! bodies: scores, the padding mask, softmax, and the weighted sum of the values.
//!
//! The padding mask is built once per batch (not per layer) and added only to batches that have
//! padding. The f32 bodies keep candle's matmuls, add and softmax as the reference, with the mask
//! broadcast into a contiguous tensor once per batch rather than per layer through candle's
//! strided (element-by-element) broadcast path; there long inputs take the query rows in steps,
//! so that the scores tensor `(batch, heads, rows, keys)` stays within [`SCORES_BUDGET`]: one
//! 8,192-token input would otherwise need 3.2 GB of scores per layer (12 heads × 8,192² f32).
//! The int8 bodies run `ragbox_kernels::attention` instead: scores, the `(batch, keys)` mask,
//! softmax and values in one pass per block of query rows, the scores never larger than a block.

use candle_core::{DType, Tensor};

use crate::model::cpu_tensor::with_f32_values;

/// Most attention scores (f32 elements) held at once per batch: 128 MiB.
pub(crate) const SCORES_BUDGET: usize = 1 << 25;

/// A fused QKV projection's output `(batch, seq, 3 · heads · head_dim)` split into heads with
/// one copy: `(3, batch, heads, seq, head_dim)`, contiguous, so `.get(0..3)` are q, k and v.
pub(crate) fn split_heads(qkv: &Tensor, heads: usize, head_dim: usize) -> candle_core::Result<Tensor> {
    let (b, t, _) = qkv.dims3()?;
    qkv.reshape((b, t, 3, heads, head_dim))?.permute((2, 0, 3, 1, 4))?.contiguous()
}

/// Attention for one batch of inputs, with its additive padding mask (0 where attended,
/// `f32::MIN` where padding, as HF's extended attention mask) if the batch has padding.
pub(crate) enum Attention {
    /// candle's matmuls, add and softmax (the f32 reference), `rows` query rows per step (the
    /// whole sequence unless the scores would exceed the budget): the mask broadcast to
    /// `(batch, heads, rows, keys)` once per batch.
    Candle { mask: Option<Tensor>, rows: usize },
    /// `ragbox_kernels::attention` (int8): the mask `(batch, keys)`, added inside.
    Fused { mask: Option<Vec<f32>> },
}

impl Attention {
    /// `mask`: the batch's `(batch, seq)` 0/1 mask; `fused`: `ragbox_kernels::attention`.
    pub(crate) fn for_batch(mask: &Tensor, heads: usize, fused: bool) -> candle_core::Result<Attention> {
        let (b, t) = mask.dims2()?;
        Attention::stepped(mask, heads, fused, (SCORES_BUDGET / (b * heads * t).max(1)).clamp(1, t.max(1)))
    }

    /// [`Attention::for_batch`] taking `rows` query rows per step on candle's path.
    fn stepped(mask: &Tensor, heads: usize, fused: bool, rows: usize) -> candle_core::Result<Attention> {
        let (b, t) = mask.dims2()?;
        let m = mask.to_dtype(DType::F32)?;
        let padded = m.sum_all()?.to_scalar::<f32>()? < (b * t) as f32;
        let additive = if padded { Some(((m.ones_like()? - m)? * f64::from(f32::MIN))?) } else { None };
        Ok(if fused {
            Attention::Fused { mask: additive.map(|m| m.flatten_all()?.to_vec1::<f32>()).transpose()? }
        } else {
            let mask = additive.map(|m| m.reshape((b, 1, 1, t))?.broadcast_as((b, heads, rows, t))?.contiguous()).transpose()?;
            Attention::Candle { mask, rows }
        })
    }

    /// `q` (already scaled by 1/√d), `k`, `v`: `(batch, heads, seq, head_dim)`, contiguous →
    /// the context `(batch, seq, heads × head_dim)`.
    pub(crate) fn forward(&self, q: &Tensor, k: &Tensor, v: &Tensor) -> candle_core::Result<Tensor> {
        let (b, h, t, d) = q.dims4()?;
        match self {
            Attention::Fused { mask } => {
                let context = with_f32_values(q, |q| {
                    with_f32_values(k, |k| {
                        with_f32_values(v, |v| {
                            let mut context = vec![0f32; q.len()];
                            ragbox_kernels::attention(q, k, v, b, h, t, d, mask.as_deref(), &mut context);
                            context
                        })
                    })
                })???;
                Tensor::from_vec(context, (b, t, h * d), q.device())
            }
            Attention::Candle { mask, rows } => {
                let kt = k.t()?;
                let context = if *rows >= t {
                    attend(q, &kt, v, mask.as_ref())?
                } else {
                    let steps = (0..t)
                        .step_by(*rows)
                        .map(|start| {
                            let n = (*rows).min(t - start);
                            attend(&q.narrow(2, start, n)?.contiguous()?, &kt, v, mask.as_ref().map(|m| m.narrow(2, 0, n)).transpose()?.as_ref())
                        })
                        .collect::<candle_core::Result<Vec<_>>>()?;
                    Tensor::cat(&steps, 2)?
                };
                context.transpose(1, 2)?.reshape((b, t, h * d))
            }
        }
    }
}

/// One step of candle's path: `q` `(batch, heads, rows, d)` against all keys, with the mask's
/// first `rows` rows → `(batch, heads, rows, d)`.
fn attend(q: &Tensor, kt: &Tensor, v: &Tensor, mask: Option<&Tensor>) -> candle_core::Result<Tensor> {
    let scores = q.matmul(kt)?;
    let probs = match mask {
        Some(mask) => candle_nn::ops::softmax_last_dim(&(scores + mask)?)?,
        None => candle_nn::ops::softmax_last_dim(&scores)?,
    };
    probs.matmul(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    /// Attention in one step, written out plainly: the reference for the stepped path.
    fn plain(q: &Tensor, k: &Tensor, v: &Tensor, mask: &Tensor) -> Tensor {
        let (b, h, t, d) = q.dims4().unwrap();
        let m = mask.to_dtype(DType::F32).unwrap();
        let additive = ((m.ones_like().unwrap() - m).unwrap() * -1e9).unwrap().reshape((b, 1, 1, t)).unwrap();
        let scores = q.matmul(&k.t().unwrap()).unwrap().broadcast_add(&additive).unwrap();
        let probs = candle_nn::ops::softmax_last_dim(&scores).unwrap();
        probs.matmul(v).unwrap().transpose(1, 2).unwrap().reshape((b, t, h * d)).unwrap()
    }

    #[test]
    fn stepping_over_query_rows_changes_nothing_with_either_softmax_and_padding() {
        let dev = Device::Cpu;
        let (b, h, t, d) = (2, 3, 11, 4);
        let qkv: Vec<Tensor> = (0..3).map(|_| Tensor::randn(0f32, 1.0, (b, h, t, d), &dev).unwrap()).collect();
        let mask = Tensor::new(&[[1u32; 11], [1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0]], &dev).unwrap();
        let want = plain(&qkv[0], &qkv[1], &qkv[2], &mask).flatten_all().unwrap().to_vec1::<f32>().unwrap();
        for fused in [false, true] {
            for rows in [1, 4, 11] {
                let attention = Attention::stepped(&mask, h, fused, rows).unwrap();
                let got = attention.forward(&qkv[0], &qkv[1], &qkv[2]).unwrap();
                assert_eq!(got.dims(), &[b, t, h * d]);
                let got = got.flatten_all().unwrap().to_vec1::<f32>().unwrap();
                let worst = want.iter().zip(&got).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
                assert!(worst < 1e-5, "fused {fused}, {rows} rows per step: worst difference {worst}");
            }
        }
    }

    #[test]
    fn an_8192_token_input_is_taken_in_steps_within_the_budget() {
        let mask = Tensor::ones((1, 8192), DType::U32, &Device::Cpu).unwrap();
        let rows = |a: Attention| match a {
            Attention::Candle { rows, .. } => rows,
            Attention::Fused { .. } => unreachable!("candle's path was asked for"),
        };
        let steps = rows(Attention::for_batch(&mask, 12, false).unwrap());
        assert!(steps < 8192 && 12 * steps * 8192 <= SCORES_BUDGET, "{steps} rows");
        let short = Tensor::ones((32, 128), DType::U32, &Device::Cpu).unwrap();
        assert_eq!(rows(Attention::for_batch(&short, 12, false).unwrap()), 128, "short batches take one step");
    }
}
