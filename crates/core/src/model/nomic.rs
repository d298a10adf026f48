//! A nomic-bert encoder body (nomic-embed-text-v1.5) for CPU throughput.
//!
//! Numerically the network of candle-transformers' `NomicBertModel` (the golden test checks it
//! against a float64 reference and llama.cpp), laid out as the BERT body is (`model::bert`): the
//! fused query-key-value matmul split into heads with one copy, the query's 1/√d folded into its
//! weights at load (rotary embedding is linear, so scaling before it is the same), dense layers
//! with transposed contiguous weights (`model::dense`: candle's `Linear` repacked every weight on
//! every call, 47% of a query's time), and attention's mask built once per batch and long inputs
//! taken in steps (`model::attention`); the feed-forward's value and gate projections fused into
//! one matmul and the gate applied in one vectorised pass (`ragbox_kernels::swiglu`: candle's
//! `silu` was libm's scalar `expf` and a separate multiply). Rotary position embedding
//! (non-interleaved, base 1000) instead of learned positions, post-norm.

use candle_core::{CpuStorage, CustomOp1, DType, Device, Layout, Module, Shape, Tensor};
use candle_nn::{embedding, layer_norm, Embedding, LayerNorm, Linear, VarBuilder};
use candle_transformers::models::nomic_bert::Config;

use crate::model::attention::{split_heads, Attention};
use crate::model::dense::Dense;
use crate::model::cpu_tensor::f32_slice;
use crate::model::Precision;

/// Rotary embedding's cos and sin tables, `(positions, head_dim / 2)`, shared by every layer.
struct Rotary {
    cos: Tensor,
    sin: Tensor,
}

impl Rotary {
    /// The tables exactly as candle-transformers computes them (f32 powers and products).
    fn new(dim: usize, positions: usize, base: f64, device: &Device) -> candle_core::Result<Rotary> {
        let inv_freq: Vec<f32> = (0..dim / 2).map(|i| 1f32 / (base as f32).powf(2.0 * i as f32 / dim as f32)).collect();
        let inv_freq = Tensor::new(inv_freq.as_slice(), device)?;
        let positions = Tensor::arange(0u32, positions as u32, device)?.to_dtype(DType::F32)?.reshape((positions, 1))?;
        let freqs = positions.matmul(&inv_freq.unsqueeze(0)?)?;
        Ok(Rotary { cos: freqs.cos()?, sin: freqs.sin()? })
    }

    /// `x`: `(batch, heads, seq, head_dim)`, contiguous.
    fn apply(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        candle_nn::rotary_emb::rope(x, &self.cos, &self.sin)
    }
}

/// One block: self-attention, then the SwiGLU feed-forward, each with residual and post-norm.
struct Block {
    qkv: Dense,
    out: Dense,
    norm1: LayerNorm,
    /// SwiGLU's value (`fc11`) and gate (`fc12`) projections side by side, `(hidden → 2·inner)`,
    /// and `fc2` back to the hidden size.
    up: Dense,
    down: Dense,
    norm2: LayerNorm,
    heads: usize,
    head_dim: usize,
    span: tracing::Span,
}

impl Block {
    fn load(vb: VarBuilder, cfg: &Config, precision: Precision) -> candle_core::Result<Block> {
        let (h, inner) = (cfg.n_embd, cfg.n_inner);
        let linear = |rows: usize, cols: usize, name: &str, bias: bool| {
            let vb = vb.pp(name);
            let weight = vb.get((rows, cols), "weight")?;
            let bias = if bias { Some(vb.get(rows, "bias")?) } else { None };
            candle_core::Result::Ok(Linear::new(weight, bias))
        };
        let head_dim = h / cfg.n_head;
        let qkv = linear(3 * h, h, "attn.Wqkv", cfg.qkv_proj_bias)?;
        // Scores are (q/√d)·k: the query's rows of the fused weight (and bias) take the 1/√d here.
        let scale = Tensor::cat(
            &[Tensor::full((1.0 / (head_dim as f64).sqrt()) as f32, h, vb.device())?, Tensor::ones(2 * h, DType::F32, vb.device())?],
            0,
        )?;
        let weight = qkv.weight().broadcast_mul(&scale.unsqueeze(1)?)?;
        let bias = qkv.bias().map(|b| b * &scale).transpose()?;
        Ok(Block {
            qkv: Dense::new(Linear::new(weight, bias), precision)?,
            out: Dense::new(linear(h, h, "attn.out_proj", cfg.qkv_proj_bias)?, precision)?,
            norm1: layer_norm(h, cfg.layer_norm_epsilon, vb.pp("norm1"))?,
            up: Dense::new(side_by_side(&linear(inner, h, "mlp.fc11", cfg.mlp_fc1_bias)?, &linear(inner, h, "mlp.fc12", cfg.mlp_fc1_bias)?)?, precision)?,
            down: Dense::new(linear(h, inner, "mlp.fc2", cfg.mlp_fc2_bias)?, precision)?,
            norm2: layer_norm(h, cfg.layer_norm_epsilon, vb.pp("norm2"))?,
            heads: cfg.n_head,
            head_dim,
            span: tracing::trace_span!("nomic-block"),
        })
    }

    /// `x`: `(batch, seq, hidden)`.
    fn forward(&self, x: &Tensor, attention: &Attention, rotary: &Rotary) -> candle_core::Result<Tensor> {
        let _e = self.span.enter();
        let qkv = split_heads(&self.qkv.forward(x)?, self.heads, self.head_dim)?;
        let (q, k) = (rotary.apply(&qkv.get(0)?)?, rotary.apply(&qkv.get(1)?)?);
        let context = attention.forward(&q, &k, &qkv.get(2)?)?;
        let x = self.norm1.forward(&(self.out.forward(&context)? + x)?)?;
        let up = self.up.forward(&x)?;
        let inner = if up.device().is_cpu() {
            up.apply_op1_no_bwd(&SwiGlu)?
        } else {
            let n = up.dim(candle_core::D::Minus1)? / 2;
            (up.narrow(candle_core::D::Minus1, 0, n)? * up.narrow(candle_core::D::Minus1, n, n)?.silu()?)?
        };
        self.norm2.forward(&(self.down.forward(&inner)? + x)?)
    }
}

/// Two layers on the same input as one, their outputs side by side.
fn side_by_side(a: &Linear, b: &Linear) -> candle_core::Result<Linear> {
    let bias = match (a.bias(), b.bias()) {
        (Some(x), Some(y)) => Some(Tensor::cat(&[x, y], 0)?),
        _ => None,
    };
    Ok(Linear::new(Tensor::cat(&[a.weight(), b.weight()], 0)?, bias))
}

/// `(…, 2·inner)` `[value | gate]` → `(…, inner)` `value · silu(gate)`, on the CPU.
struct SwiGlu;

impl CustomOp1 for SwiGlu {
    fn name(&self) -> &'static str {
        "swiglu"
    }

    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let mut dims = layout.shape().dims().to_vec();
        let inner = dims.last().copied().unwrap_or(0) / 2;
        if inner == 0 {
            candle_core::bail!("swiglu: input shape {dims:?} has no [value | gate] last dimension");
        }
        let y = ragbox_kernels::swiglu(f32_slice(storage, layout)?, inner);
        *dims.last_mut().expect("checked above") = inner;
        Ok((CpuStorage::F32(y), Shape::from(dims)))
    }
}

/// The nomic-bert body: embeddings, their norm and the block stack, returning the final token
/// states.
pub struct NomicBody {
    word: Embedding,
    token_type: Option<Embedding>,
    emb_norm: LayerNorm,
    blocks: Vec<Block>,
    rotary: Rotary,
    heads: usize,
    /// ragbox_kernels' softmax instead of candle's (the int8 body).
    fused_softmax: bool,
    span: tracing::Span,
}

impl NomicBody {
    /// Loads from `vb` under candle-transformers' names (`embeddings.*`, `emb_ln`,
    /// `encoder.layers.N.*`), the dense layers at `precision` (checked against the device by the
    /// caller). Only post-norm models with full-width, non-interleaved rotary embeddings exist as
    /// nomic-embed releases; anything else is refused rather than computed wrongly.
    pub fn load(vb: VarBuilder, cfg: &Config, precision: Precision) -> candle_core::Result<NomicBody> {
        if cfg.prenorm || cfg.rotary_emb_interleaved || cfg.rotary_emb_fraction != 1.0 || cfg.activation_function != "swiglu" {
            candle_core::bail!("unsupported nomic-bert variant (pre-norm, interleaved or partial rotary, or not SwiGLU)");
        }
        let token_type = (cfg.type_vocab_size > 0)
            .then(|| embedding(cfg.type_vocab_size, cfg.n_embd, vb.pp("embeddings").pp("token_type_embeddings")))
            .transpose()?;
        let blocks = (0..cfg.n_layer)
            .map(|i| Block::load(vb.pp("encoder").pp("layers").pp(i.to_string()), cfg, precision))
            .collect::<candle_core::Result<_>>()?;
        Ok(NomicBody {
            word: embedding(cfg.vocab_size, cfg.n_embd, vb.pp("embeddings").pp("word_embeddings"))?,
            token_type,
            emb_norm: layer_norm(cfg.n_embd, cfg.layer_norm_epsilon, vb.pp("emb_ln"))?,
            blocks,
            rotary: Rotary::new(cfg.n_embd / cfg.n_head, cfg.n_positions, cfg.rotary_emb_base, vb.device())?,
            heads: cfg.n_head,
            fused_softmax: precision == Precision::Int8,
            span: tracing::trace_span!("nomic-bert"),
        })
    }

    /// `(batch, seq)` ids, segment ids and 0/1 mask in; `(batch, seq, hidden)` states out.
    pub fn forward(&self, ids: &Tensor, type_ids: &Tensor, mask: &Tensor) -> candle_core::Result<Tensor> {
        let _e = self.span.enter();
        let mut x = self.word.forward(ids)?;
        if let Some(token_type) = &self.token_type {
            x = (x + token_type.forward(type_ids)?)?;
        }
        let mut x = self.emb_norm.forward(&x)?;
        let attention = Attention::for_batch(mask, self.heads, self.fused_softmax)?;
        for block in &self.blocks {
            x = block.forward(&x, &attention, &self.rotary)?;
        }
        Ok(x)
    }
}
