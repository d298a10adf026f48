//! A dense layer `y = x · Wᵀ + b` at the precision an encoder body was loaded with, shared by the
//! BERT and nomic-bert bodies.
//!
//! f32: the weight stored transposed and contiguous, `(in, out)`. candle's [`Linear`] multiplies
//! by a transposed view of the `(out, in)` weight, and gemm then repacks that column-major operand
//! element by element on every call: for a short query (a few rows) the repacking cost more than
//! the arithmetic (perf: 43% of a MiniLM query's time, 47% of a nomic one's). int8: see
//! [`Int8Dense`].

use candle_core::Tensor;
use candle_nn::Linear;
use candle_transformers::models::bert::HiddenAct;
use ragbox_kernels::Activation;

use crate::model::int8::Int8Dense;
use crate::model::Precision;

pub(crate) enum Dense {
    F32 { weight_t: Tensor, bias: Option<Tensor> },
    Int8(Int8Dense),
}

impl Dense {
    /// From a loaded `(out, in)` [`Linear`], at a resolved precision (`auto` is f32).
    pub(crate) fn new(linear: Linear, precision: Precision) -> candle_core::Result<Dense> {
        Dense::load(linear, precision, false)
    }

    /// [`Dense::new`], but at int8 the weights keep their rounding residual in a second int8
    /// matrix (about 15 bits, twice the layer's GEMM work): for the layers whose 8-bit weights
    /// cost the most accuracy.
    pub(crate) fn with_weight_residual(linear: Linear, precision: Precision) -> candle_core::Result<Dense> {
        Dense::load(linear, precision, true)
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
