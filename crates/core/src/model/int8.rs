//! int8 dense layers inside candle graphs: `ragbox_kernels::Int8Linear` as a candle custom op.
//!
//! The op reads its `(…, in)` input straight from candle's CPU storage (no copy when contiguous)
//! and hands back the `(…, out)` output buffer it filled, with the bias and optionally BERT's
//! GELU fused into the same pass.

use std::sync::Arc;

use candle_core::{CpuStorage, CustomOp1, Layout, Shape, Tensor};
use candle_nn::Linear;
use ragbox_kernels::{Activation, Int8Linear};

use crate::model::cpu_tensor::f32_slice;

/// A dense layer `y = act(x · Wᵀ + b)` with int8 weights (per output channel).
#[derive(Clone)]
pub struct Int8Dense {
    layer: Arc<Int8Linear>,
}

impl Int8Dense {
    /// Quantises a loaded f32 [`Linear`] (`(out, in)` weight); `weight_residual`: keep the
    /// weights' rounding residual as a second int8 matrix (`Int8Linear::with_weight_residual`).
    pub fn new(linear: &Linear, weight_residual: bool) -> candle_core::Result<Int8Dense> {
        let (outputs, inputs) = linear.weight().dims2()?;
        let weight = linear.weight().flatten_all()?.to_vec1::<f32>()?;
        let bias = linear.bias().map(|b| b.to_vec1::<f32>()).transpose()?;
        let mut layer = Int8Linear::new(&weight, outputs, inputs, bias.as_deref());
        if weight_residual {
            layer = layer.with_weight_residual(&weight);
        }
        Ok(Int8Dense { layer: Arc::new(layer) })
    }

    /// A layer from int8 codes as an onnxruntime export stores them (`Int8Linear::from_codes`),
    /// its activations quantised as that export expects: one scale per sequence
    /// (`Int8Linear::with_sequence_scale`).
    pub fn from_codes(codes: &[i8], inputs: usize, scales: &[f32], bias: Option<&[f32]>) -> Int8Dense {
        Int8Dense { layer: Arc::new(Int8Linear::from_codes(codes, inputs, scales.len(), scales, bias).with_sequence_scale()) }
    }

    /// `x`: `(…, in)` f32 on the CPU → `(…, out)`; a sequence is the last dimension but one
    /// (`(batch, seq, in)`: each of the batch's sequences), or all rows of a matrix.
    pub fn forward(&self, x: &Tensor, activation: Activation) -> candle_core::Result<Tensor> {
        x.contiguous()?.apply_op1_no_bwd(&Op { layer: &self.layer, activation })
    }
}

struct Op<'a> {
    layer: &'a Int8Linear,
    activation: Activation,
}

impl CustomOp1 for Op<'_> {
    fn name(&self) -> &'static str {
        "int8-dense"
    }

    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let (inputs, outputs) = self.layer.shape();
        let dims = layout.shape().dims();
        if dims.last() != Some(&inputs) {
            candle_core::bail!("int8-dense: input shape {:?} does not end in {inputs}", dims);
        }
        let rows = layout.shape().elem_count() / inputs;
        let sequence_rows = if dims.len() >= 3 { dims[dims.len() - 2] } else { rows };
        let out = self.layer.forward_sequences(f32_slice(storage, layout)?, rows, sequence_rows, self.activation);
        let mut shape = dims.to_vec();
        *shape.last_mut().expect("checked above") = outputs;
        Ok((CpuStorage::F32(out), Shape::from(shape)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    #[test]
    fn agrees_with_candles_linear_on_contiguous_and_strided_input() {
        let dev = Device::Cpu;
        let w = Tensor::randn(0f32, 0.1, (48, 32), &dev).unwrap();
        let b = Tensor::randn(0f32, 0.1, 48, &dev).unwrap();
        let linear = Linear::new(w, Some(b));
        let dense = Int8Dense::new(&linear, false).unwrap();
        let x = Tensor::randn(0f32, 1.0, (3, 5, 32), &dev).unwrap();
        let strided = Tensor::randn(0f32, 1.0, (3, 32, 5), &dev).unwrap().transpose(1, 2).unwrap();
        for input in [x, strided] {
            // The reference multiplies a contiguous copy: candle 0.10's batched matmul of this
            // transposed view with the broadcast weight got every batch item but the first wrong
            // (cosine 0.25-0.37 to the right product).
            let want = candle_core::Module::forward(&linear, &input.contiguous().unwrap()).unwrap();
            let got = dense.forward(&input, Activation::None).unwrap();
            assert_eq!(got.dims(), &[3, 5, 48]);
            let (w, g) = (want.flatten_all().unwrap().to_vec1::<f32>().unwrap(), got.flatten_all().unwrap().to_vec1::<f32>().unwrap());
            let dot: f32 = w.iter().zip(&g).map(|(a, b)| a * b).sum();
            let cos = dot / (w.iter().map(|a| a * a).sum::<f32>().sqrt() * g.iter().map(|a| a * a).sum::<f32>().sqrt());
            assert!(cos > 0.999, "cosine {cos}");
        }
    }
}
