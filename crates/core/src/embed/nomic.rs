//! nomic-embed-text-v1.5 from its F16 GGUF, on ragbox's nomic-bert body (`model::nomic`).
//!
//! GGUF tensor names are mapped to candle-transformers' `nomic_bert` names (shared/MODELS.md) and
//! dequantised to f32; the configuration is the model's published one.

use candle_core::{DType, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::nomic_bert::Config;

use crate::embed::transformer::{EmbedOptions, TokenEncoder, TransformerEmbedder};
use crate::error::{Error, Result};
use crate::model::batch::BatchTensors;
use crate::model::gguf::load_gguf;
use crate::model::nomic::NomicBody;
use crate::model::{ModelSpec, ModelStore, Pooling, TextTokenizer};

struct NomicEncoder(NomicBody);

impl TokenEncoder for NomicEncoder {
    fn forward(&self, batch: &BatchTensors) -> candle_core::Result<Tensor> {
        self.0.forward(&batch.ids, &batch.type_ids, &batch.mask)
    }
}

/// Maps a GGUF tensor name of a nomic-bert model to candle's name.
pub(crate) fn candle_name(gguf: &str) -> Option<String> {
    let fixed = match gguf {
        "token_embd.weight" => Some("embeddings.word_embeddings.weight"),
        "token_types.weight" => Some("embeddings.token_type_embeddings.weight"),
        "token_embd_norm.weight" => Some("emb_ln.weight"),
        "token_embd_norm.bias" => Some("emb_ln.bias"),
        _ => None,
    };
    if let Some(name) = fixed {
        return Some(name.to_string());
    }
    let rest = gguf.strip_prefix("blk.")?;
    let (layer, tail) = rest.split_once('.')?;
    let layer: usize = layer.parse().ok()?;
    let mapped = match tail {
        "attn_qkv.weight" => "attn.Wqkv.weight",
        "attn_output.weight" => "attn.out_proj.weight",
        "attn_output_norm.weight" => "norm1.weight",
        "attn_output_norm.bias" => "norm1.bias",
        "layer_output_norm.weight" => "norm2.weight",
        "layer_output_norm.bias" => "norm2.bias",
        "ffn_up.weight" => "mlp.fc11.weight",
        "ffn_gate.weight" => "mlp.fc12.weight",
        "ffn_down.weight" => "mlp.fc2.weight",
        _ => return None,
    };
    Some(format!("encoder.layers.{layer}.{mapped}"))
}

/// The published nomic-embed-text-v1.5 configuration.
fn config(vocab_size: usize, n_layer: usize) -> Config {
    Config {
        vocab_size,
        n_embd: 768,
        n_head: 12,
        n_layer,
        n_inner: 3072,
        n_positions: 8192,
        type_vocab_size: 2,
        layer_norm_epsilon: 1e-12,
        rotary_emb_fraction: 1.0,
        rotary_emb_base: 1000.0,
        rotary_emb_interleaved: false,
        qkv_proj_bias: false,
        mlp_fc1_bias: false,
        mlp_fc2_bias: false,
        activation_function: "swiglu".to_string(),
        prenorm: false,
        model_type: None,
    }
}

pub(crate) fn load(store: &ModelStore, spec: &ModelSpec, options: &EmbedOptions) -> Result<TransformerEmbedder> {
    let gguf_file = spec
        .file_ending(".gguf")
        .ok_or_else(|| Error::Bug(format!("manifest: {} has no .gguf file", spec.name)))?;
    let weights = store.verified_file(spec, &gguf_file.name)?;
    let tokenizer_path = store.verified_file(spec, "tokenizer.json")?;
    let gguf = load_gguf(&weights, "nomic-bert", candle_name, DType::F32, &options.device)?;
    let vocab_size = gguf
        .tensors
        .get("embeddings.word_embeddings.weight")
        .map(|t| t.dims()[0])
        .ok_or_else(|| Error::ModelFormat { model: spec.name.clone(), reason: "no token_embd.weight".into() })?;
    let n_layer = (0..).take_while(|i| gguf.tensors.contains_key(&format!("encoder.layers.{i}.attn.Wqkv.weight"))).count();
    let cfg = config(vocab_size, n_layer);
    let vb = VarBuilder::from_tensors(gguf.tensors, DType::F32, &options.device);
    let precision = options.precision.resolve(&options.device, spec.auto_precision)?;
    let model = NomicBody::load(vb, &cfg, precision).map_err(|e| Error::ModelFormat {
        model: spec.name.clone(),
        reason: format!("GGUF does not hold a nomic-bert model: {e}"),
    })?;
    let tokenizer = TextTokenizer::load(&tokenizer_path, spec.max_tokens.min(cfg.n_positions))?;
    Ok(TransformerEmbedder {
        model_id: precision.vector_identity(&spec.name),
        dims: spec.dims.unwrap_or(cfg.n_embd),
        pooling: spec.pooling.unwrap_or(Pooling::Mean),
        query_prefix: spec.query_prefix.clone(),
        passage_prefix: spec.passage_prefix.clone(),
        pad_id: tokenizer.token_id("[PAD]").unwrap_or(0),
        tokenizer,
        encoder: Box::new(NomicEncoder(model)),
        device: options.device.clone(),
        limits: options.batch,
    })
}

#[cfg(test)]
mod tests {
    use super::candle_name;

    #[test]
    fn gguf_names_map_to_candle_names() {
        assert_eq!(candle_name("token_embd.weight").unwrap(), "embeddings.word_embeddings.weight");
        assert_eq!(candle_name("blk.11.ffn_gate.weight").unwrap(), "encoder.layers.11.mlp.fc12.weight");
        assert_eq!(candle_name("blk.0.attn_output_norm.bias").unwrap(), "encoder.layers.0.norm1.bias");
        assert_eq!(candle_name("output.weight"), None);
    }
}
