//! A dense layer `y = x · Wᵀ + b` at the precision an encoder body was loaded with, shared by the
//! BERT and nomic-bert bodies.
//!
//! f32: the weight stored transposed and contiguous, `(in, out)`. candle's [`Linear`] multiplies
//! by a transposed view of the `(out, in)` weight, and gemm then repacks that column-major operand
//! element by element on every call: for a short query (a few rows) the repacking cost more than
//! the arithmetic (perf: 43% of a MiniLM query's time, 47% of a nomic one's). int8: see
//! [`Int8Dense`].

use std::collections::HashMap;

use candle_core::Tensor;
use candle_nn::{Linear, VarBuilder};
use candle_transformers::models::bert::HiddenAct;
use ragbox_kernels::Activation;

use crate::model::int8::Int8Dense;
use crate::model::onnx::QuantisedWeight;
use crate::model::Precision;

/// A dense layer's weights as they were loaded: floats, or the int8 codes of an int8 model file.
pub(crate) enum DenseWeights {
    Float(Linear),
    Int8 { weight: QuantisedWeight, bias: Option<Vec<f32>> },
}

impl DenseWeights {
    /// The layer at `vb`'s prefix (`{prefix}.weight` and `.bias`): its codes when `quantised`
    /// holds them, else the float weight.
    pub(crate) fn load(
        vb: &VarBuilder,
        inputs: usize,
        outputs: usize,
        quantised: Option<&HashMap<String, QuantisedWeight>>,
    ) -> candle_core::Result<DenseWeights> {
        let Some(q) = quantised.and_then(|q| q.get(&format!("{}.weight", vb.prefix()))) else {
            return Ok(DenseWeights::Float(candle_nn::linear(inputs, outputs, vb.clone())?));
        };
        if (q.inputs, q.outputs) != (inputs, outputs) {
            candle_core::bail!("{}: the file's weight is {}x{}, the model wants {inputs}x{outputs}", vb.prefix(), q.inputs, q.outputs);
        }
        let bias = if vb.contains_tensor("bias") { Some(vb.get(outputs, "bias")?.to_vec1::<f32>()?) } else { None };
        Ok(DenseWeights::Int8 { weight: q.clone(), bias })
    }

    /// Output width.
    fn outputs(&self) -> candle_core::Result<usize> {
        match self {
            DenseWeights::Float(l) => Ok(l.weight().dims2()?.0),
            DenseWeights::Int8 { weight, .. } => Ok(weight.outputs),
        }
    }

    /// The layer times `factor` (weights and bias).
    pub(crate) fn scaled(self, factor: f64) -> candle_core::Result<DenseWeights> {
        Ok(match self {
            DenseWeights::Float(l) => DenseWeights::Float(Linear::new((l.weight() * factor)?, l.bias().map(|b| b * factor).transpose()?)),
            DenseWeights::Int8 { weight, bias } => DenseWeights::Int8 {
                weight: QuantisedWeight { scales: weight.scales.iter().map(|s| s * factor as f32).collect(), ..weight },
                bias: bias.map(|b| b.iter().map(|v| v * factor as f32).collect()),
            },
        })
    }

    /// Several layers over the same input as one, their outputs side by side (query, key and
    /// value in one matmul). All float or all int8.
    pub(crate) fn concat(parts: Vec<DenseWeights>) -> candle_core::Result<DenseWeights> {
        let widths = parts.iter().map(DenseWeights::outputs).collect::<candle_core::Result<Vec<_>>>()?;
        let total: usize = widths.iter().sum();
        let mut floats = Vec::new();
        let (mut codes, mut scales, mut bias, mut width_in) = (Vec::new(), Vec::new(), Vec::new(), None);
        for part in parts {
            match part {
                DenseWeights::Float(l) => floats.push(l),
                DenseWeights::Int8 { weight: w, bias: b } => {
                    if codes.is_empty() {
                        codes = vec![0i8; w.inputs * total];
                    }
                    let (offset, width) = (scales.len(), w.outputs);
                    for (i, row) in w.codes.chunks_exact(width).enumerate() {
                        codes[i * total + offset..i * total + offset + width].copy_from_slice(row);
                    }
                    bias.extend(b.unwrap_or_else(|| vec![0.0; width]));
                    scales.extend(w.scales);
                    width_in = Some(w.inputs);
                }
            }
        }
        match (floats.is_empty(), width_in) {
            (true, Some(inputs)) => Ok(DenseWeights::Int8 { weight: QuantisedWeight { inputs, outputs: total, codes, scales }, bias: Some(bias) }),
            (false, None) => {
                let weight = Tensor::cat(&floats.iter().map(|l| l.weight()).collect::<Vec<_>>(), 0)?;
                let biases: Option<Vec<&Tensor>> = floats.iter().map(|l| l.bias()).collect();
                Ok(DenseWeights::Float(Linear::new(weight, biases.map(|b| Tensor::cat(&b, 0)).transpose()?)))
            }
            _ => candle_core::bail!("cannot fuse float and int8 layers"),
        }
    }

    /// Float weights, the codes dequantised if need be (a GPU, or f32 asked for).
    fn into_linear(self, device: &candle_core::Device) -> candle_core::Result<Linear> {
        match self {
            DenseWeights::Float(l) => Ok(l),
            DenseWeights::Int8 { weight, bias } => {
                let w = Tensor::from_vec(weight.dequantised(), (weight.outputs, weight.inputs), device)?;
                Ok(Linear::new(w, bias.map(|b| Tensor::new(b, device)).transpose()?))
            }
        }
    }
}

pub(crate) enum Dense {
    F32 { weight_t: Tensor, bias: Option<Tensor> },
    Int8(Int8Dense),
}

impl Dense {
    /// From a loaded `(out, in)` [`Linear`], at a resolved precision (`auto` is f32).
    pub(crate) fn new(linear: Linear, precision: Precision) -> candle_core::Result<Dense> {
        Dense::load(linear, precision, false)
    }

    /// From loaded weights: int8 codes run as they are at int8, dequantised at f32 (on `device`).
    /// `weight_residual`: float weights quantised at int8 keep their rounding residual in a
    /// second int8 matrix (about 15 bits, twice the layer's GEMM work), for the layers whose
    /// 8-bit weights cost the most accuracy.
    pub(crate) fn from_weights(weights: DenseWeights, precision: Precision, weight_residual: bool, device: &candle_core::Device) -> candle_core::Result<Dense> {
        match (weights, precision) {
            (DenseWeights::Int8 { weight, bias }, Precision::Int8) => {
                Ok(Dense::Int8(Int8Dense::from_codes(&weight.codes, weight.inputs, &weight.scales, bias.as_deref())))
            }
            (weights, _) => Dense::load(weights.into_linear(device)?, precision, weight_residual),
        }
    }

    fn load(linear: Linear, precision: Precision, weight_residual: bool) -> candle_core::Result<Dense> {
        Ok(match precision {
            Precision::Int8 => Dense::Int8(Int8Dense::new(&linear, weight_residual)?),
            Precision::F32 | Precision::Auto => Dense::F32 { weight_t: linear.weight().t()?.contiguous()?, bias: linear.bias().cloned() },
        })
    }

    /// `x`: `(batch, seq, in)` → `(batch, seq, out)`.
    pub(crate) fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        match self {
            Dense::F32 { weight_t, bias } => {
                let (b, t, i) = x.dims3()?;
                let y = x.reshape((b * t, i))?.matmul(weight_t)?;
                let y = match bias {
                    Some(bias) => y.broadcast_add(bias)?,
                    None => y,
                };
                y.reshape((b, t, ()))
            }
            Dense::Int8(dense) => dense.forward(x, Activation::None),
        }
    }

    /// [`Dense::forward`] then BERT's activation; int8 fuses the exact GELU into its output pass.
    pub(crate) fn forward_activated(&self, x: &Tensor, act: HiddenAct) -> candle_core::Result<Tensor> {
        if let (Dense::Int8(dense), HiddenAct::Gelu) = (self, act) {
            return dense.forward(x, Activation::GeluErf);
        }
        let y = self.forward(x)?;
        match act {
            HiddenAct::Gelu => y.gelu_erf(),
            HiddenAct::GeluApproximate => y.gelu(),
            HiddenAct::Relu => y.relu(),
        }
    }
}
