//! Attention's masked softmax as an in-place candle op on `ragbox_kernels::softmax_in_place`.
//!
//! Takes the padding mask as `(batch, keys)` and adds it inside the softmax, instead of candle's
//! path (broadcast the mask to `(batch, heads, queries, keys)`, add, then a softmax with scalar
//! `expf`). Used by the int8 body; the f32 body keeps candle's ops as the reference.

use candle_core::{CpuStorage, InplaceOp1, InplaceOp2, Layout, Tensor};

/// `scores`: `(batch, heads, queries, keys)`, contiguous, replaced by its softmax over keys.
/// `mask`: additive `(batch, keys)` (0 attended, very negative for padding), or `None`.
pub fn masked_softmax_in_place(scores: &Tensor, mask: Option<&Tensor>) -> candle_core::Result<()> {
    let (_, heads, queries, keys) = scores.dims4()?;
    if !scores.is_contiguous() {
        candle_core::bail!("masked softmax: scores must be contiguous");
    }
    let op = Softmax { keys, rows_per_item: heads * queries };
    match mask {
        Some(mask) => scores.inplace_op2(&mask.contiguous()?, &op),
        None => scores.inplace_op1(&op),
    }
}

struct Softmax {
    keys: usize,
    rows_per_item: usize,
}

/// The values of a contiguous f32 tensor on the CPU, as a custom op receives it.
pub(crate) fn f32_slice<'a>(storage: &'a CpuStorage, layout: &Layout) -> candle_core::Result<&'a [f32]> {
    match (storage, layout.contiguous_offsets()) {
        (CpuStorage::F32(data), Some((start, end))) => Ok(&data[start..end]),
        _ => candle_core::bail!("needs a contiguous f32 tensor on the CPU"),
    }
}

fn f32_slice_mut<'a>(storage: &'a mut CpuStorage, layout: &Layout) -> candle_core::Result<&'a mut [f32]> {
    match (storage, layout.contiguous_offsets()) {
        (CpuStorage::F32(data), Some((start, end))) => Ok(&mut data[start..end]),
        _ => candle_core::bail!("needs a contiguous f32 tensor on the CPU"),
    }
}

impl InplaceOp1 for Softmax {
    fn name(&self) -> &'static str {
        "softmax"
    }

    fn cpu_fwd(&self, storage: &mut CpuStorage, layout: &Layout) -> candle_core::Result<()> {
        ragbox_kernels::softmax_in_place(f32_slice_mut(storage, layout)?, self.keys, self.rows_per_item, None);
        Ok(())
    }
}

impl InplaceOp2 for Softmax {
    fn name(&self) -> &'static str {
        "masked-softmax"
    }

    fn cpu_fwd(&self, s1: &mut CpuStorage, l1: &Layout, s2: &CpuStorage, l2: &Layout) -> candle_core::Result<()> {
        let mask = f32_slice(s2, l2)?;
        ragbox_kernels::softmax_in_place(f32_slice_mut(s1, l1)?, self.keys, self.rows_per_item, Some(mask));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, D};

    #[test]
    fn equals_candles_broadcast_add_then_softmax() {
        let dev = Device::Cpu;
        let scores = Tensor::randn(0f32, 2.0, (2, 3, 5, 7), &dev).unwrap();
        let mask = Tensor::new(&[[0f32, 0., 0., 0., 0., 0., 0.], [0., 0., 0., 0., f32::MIN, f32::MIN, f32::MIN]], &dev).unwrap();
        let want = candle_nn::ops::softmax_last_dim(&scores.broadcast_add(&mask.reshape((2, 1, 1, 7)).unwrap()).unwrap()).unwrap();
        let got = scores.copy().unwrap();
        masked_softmax_in_place(&got, Some(&mask)).unwrap();
        let diff = (want - &got).unwrap().abs().unwrap().max(D::Minus1).unwrap().max(D::Minus1).unwrap().flatten_all().unwrap();
        let worst = diff.to_vec1::<f32>().unwrap().into_iter().fold(0f32, f32::max);
        assert!(worst < 1e-6, "worst difference {worst}");
        let plain = scores.copy().unwrap();
        masked_softmax_in_place(&plain, None).unwrap();
        let sums = plain.sum(D::Minus1).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap();
        assert!(sums.iter().all(|s| (s - 1.0).abs() < 1e-5), "{sums:?}");
    }
}
