//! A BERT encoder body for CPU throughput, shared by the embedder and the cross-encoder.
//!
//! Numerically the same network as candle-transformers' `BertModel` (the golden tests check it
//! against the Python references), laid out for less work between the matmuls, as the profile of
//! `ragbox bench embed` showed: query, key and value in one fused matmul and one copy instead of
//! three; the query's 1/√d folded into its weights at load; dense layers with transposed weights
//! (`model::dense`, f32 or int8) and attention's mask built once per batch (`model::attention`).
//! The weights come from safetensors, or from an int8 ONNX file whose dense layers' codes run
//! as they are (`model::onnx`). [`BertBody::forward_tapped`] also gives the states entering one
//! layer, where a reader's own trained copies of the top layers ([`BertLayers`]) take over.

use candle_core::{Module, Tensor};
use candle_nn::{embedding, layer_norm, Embedding, LayerNorm, VarBuilder};
use candle_transformers::models::bert::{Config, HiddenAct};

use crate::model::attention::{split_heads, Attention};
use crate::model::dense::{Dense, DenseWeights};
use crate::model::onnx::QuantisedWeight;
use crate::model::Precision;

/// Dense layers' int8 codes by weight name, from an int8 model file (`model::onnx`).
pub type Quantised = std::collections::HashMap<String, QuantisedWeight>;

/// Token, position and segment embeddings, then layer norm.
struct Embeddings {
    word: Embedding,
    position: Embedding,
    token_type: Embedding,
    norm: LayerNorm,
    span: tracing::Span,
}

impl Embeddings {
    fn load(vb: VarBuilder, cfg: &Config) -> candle_core::Result<Self> {
        Ok(Embeddings {
            word: embedding(cfg.vocab_size, cfg.hidden_size, vb.pp("word_embeddings"))?,
            position: embedding(cfg.max_position_embeddings, cfg.hidden_size, vb.pp("position_embeddings"))?,
            token_type: embedding(cfg.type_vocab_size, cfg.hidden_size, vb.pp("token_type_embeddings"))?,
            norm: layer_norm(cfg.hidden_size, cfg.layer_norm_eps, vb.pp("LayerNorm"))?,
            span: tracing::trace_span!("embeddings"),
        })
    }

    fn forward(&self, ids: &Tensor, type_ids: &Tensor) -> candle_core::Result<Tensor> {
        let _e = self.span.enter();
        let seq_len = ids.dim(1)?;
        let positions = Tensor::arange(0u32, seq_len as u32, ids.device())?;
        let x = (self.word.forward(ids)? + self.token_type.forward(type_ids)?)?
            .broadcast_add(&self.position.forward(&positions)?)?;
        self.norm.forward(&x)
    }
}

/// One transformer layer: self-attention and feed-forward, each with residual and post-norm.
struct Layer {
    qkv: Dense,
    attn_out: Dense,
    attn_norm: LayerNorm,
    intermediate: Dense,
    output: Dense,
    out_norm: LayerNorm,
    act: HiddenAct,
    heads: usize,
    head_dim: usize,
    span: tracing::Span,
}

impl Layer {
    fn load(vb: VarBuilder, cfg: &Config, precision: Precision, quantised: Option<&Quantised>) -> candle_core::Result<Self> {
        let h = cfg.hidden_size;
        let att = vb.pp("attention");
        let dense = |vb: VarBuilder, inputs, outputs| DenseWeights::load(&vb, inputs, outputs, quantised);
        let part = |name: &str| dense(att.pp("self").pp(name), h, h);
        // Scores are (q/√d)·k: the query's weights and bias take the 1/√d once, here.
        let scale = 1.0 / ((h / cfg.num_attention_heads) as f64).sqrt();
        let qkv = DenseWeights::concat(vec![part("query")?.scaled(scale)?, part("key")?, part("value")?])?;
        let device = vb.device();
        Ok(Layer {
            qkv: Dense::from_weights(qkv, precision, false, device)?,
            attn_out: Dense::from_weights(dense(att.pp("output").pp("dense"), h, h)?, precision, false, device)?,
            attn_norm: layer_norm(h, cfg.layer_norm_eps, att.pp("output").pp("LayerNorm"))?,
            intermediate: Dense::from_weights(dense(vb.pp("intermediate").pp("dense"), h, cfg.intermediate_size)?, precision, false, device)?,
            // 8-bit weights cost MiniLM's embeddings most here (golden worst cosine 0.9987 with
            // them, 0.99958 with this layer exact, tests/integration/golden.rs); 15 bits keep the gate.
            // (A model stored as int8 codes runs its own codes.)
            output: Dense::from_weights(dense(vb.pp("output").pp("dense"), cfg.intermediate_size, h)?, precision, true, device)?,
            out_norm: layer_norm(h, cfg.layer_norm_eps, vb.pp("output").pp("LayerNorm"))?,
            act: cfg.hidden_act,
            heads: cfg.num_attention_heads,
            head_dim: h / cfg.num_attention_heads,
            span: tracing::trace_span!("layer"),
        })
    }

    /// `x`: `(batch, seq, hidden)`; `attention`: the batch's mask and softmax.
    fn forward(&self, x: &Tensor, attention: &Attention) -> candle_core::Result<Tensor> {
        let _e = self.span.enter();
        let qkv = split_heads(&self.qkv.forward(x)?, self.heads, self.head_dim)?;
        // The query is already scaled by 1/√d: its weights were at load.
        let context = attention.forward(&qkv.get(0)?, &qkv.get(1)?, &qkv.get(2)?)?;
        let x = self.attn_norm.forward(&(self.attn_out.forward(&context)? + x)?)?;
        let inner = self.intermediate.forward_activated(&x, self.act)?;
        self.out_norm.forward(&(self.output.forward(&inner)? + x)?)
    }
}

/// A run of transformer layers, as a body holds them or as a reader adapts the top of one.
pub struct BertLayers {
    layers: Vec<Layer>,
    heads: usize,
    /// ragbox_kernels' softmax instead of candle's (int8 layers).
    fused_softmax: bool,
}

impl BertLayers {
    /// Layers `indices` from `vb` (its prefix pointing at `encoder.layer`, each layer under its
    /// index), the dense layers at `precision`, from `quantised`'s codes where it holds one.
    pub fn load(
        vb: VarBuilder,
        cfg: &Config,
        indices: std::ops::Range<usize>,
        precision: Precision,
        quantised: Option<&Quantised>,
    ) -> candle_core::Result<BertLayers> {
        let layers = indices.map(|i| Layer::load(vb.pp(i.to_string()), cfg, precision, quantised)).collect::<candle_core::Result<_>>()?;
        Ok(BertLayers { layers, heads: cfg.num_attention_heads, fused_softmax: precision == Precision::Int8 })
    }

    /// How many layers.
    pub fn len(&self) -> usize {
        self.layers.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.layers.is_empty()
    }

    /// `x` `(batch, seq, hidden)` through every layer, with the batch's 0/1 `mask` `(batch, seq)`.
    pub fn forward(&self, x: &Tensor, mask: &Tensor) -> candle_core::Result<Tensor> {
        let attention = Attention::for_batch(mask, self.heads, self.fused_softmax)?;
        self.layers.iter().try_fold(x.clone(), |x, layer| layer.forward(&x, &attention))
    }
}

/// The BERT body: embeddings and the layer stack, returning the final token states.
pub struct BertBody {
    embeddings: Embeddings,
    layers: Vec<Layer>,
    heads: usize,
    /// ragbox_kernels' softmax instead of candle's (the int8 body).
    fused_softmax: bool,
    span: tracing::Span,
}

impl BertBody {
    /// Loads from `vb` (its prefix already pointing at the body: `""` or `"bert"`), the dense
    /// layers at `precision` (checked against the device by the caller), from `quantised`'s
    /// codes where it holds a layer's weight.
    pub fn load(vb: VarBuilder, cfg: &Config, precision: Precision, quantised: Option<&Quantised>) -> candle_core::Result<BertBody> {
        let stack = BertLayers::load(vb.pp("encoder").pp("layer"), cfg, 0..cfg.num_hidden_layers, precision, quantised)?;
        Ok(BertBody {
            embeddings: Embeddings::load(vb.pp("embeddings"), cfg)?,
            layers: stack.layers,
            heads: cfg.num_attention_heads,
            fused_softmax: stack.fused_softmax,
            span: tracing::trace_span!("bert"),
        })
    }

    /// How many layers.
    pub fn depth(&self) -> usize {
        self.layers.len()
    }

    /// `(batch, seq)` ids, segment ids and 0/1 mask in; `(batch, seq, hidden)` states out.
    pub fn forward(&self, ids: &Tensor, type_ids: &Tensor, mask: &Tensor) -> candle_core::Result<Tensor> {
        Ok(self.forward_tapped(ids, type_ids, mask, None)?.0)
    }

    /// [`BertBody::forward`], and the states entering layer `tap` (`tap` = depth: the last
    /// layer's output) when one is asked for: what a reader's own layers start from.
    pub fn forward_tapped(&self, ids: &Tensor, type_ids: &Tensor, mask: &Tensor, tap: Option<usize>) -> candle_core::Result<(Tensor, Option<Tensor>)> {
        let _e = self.span.enter();
        let mut x = self.embeddings.forward(ids, type_ids)?;
        let attention = Attention::for_batch(mask, self.heads, self.fused_softmax)?;
        let mut tapped = None;
        for (i, layer) in self.layers.iter().enumerate() {
            if tap == Some(i) {
                tapped = Some(x.clone());
            }
            x = layer.forward(&x, &attention)?;
        }
        if tap == Some(self.layers.len()) {
            tapped = Some(x.clone());
        }
        Ok((x, tapped))
    }
}
