//! BERT cross-encoder: `[CLS] query [SEP] passage [SEP]` through a BERT body, the pooler
//! (dense + tanh over [CLS]) and a one-logit classifier head — `BertForSequenceClassification`,
//! which candle-transformers' `BertModel` does not include.

use std::path::Path;

use candle_core::{DType, Device, Module, Tensor};
use candle_nn::{linear, Linear, VarBuilder};
use candle_transformers::models::bert::Config;
use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::model::batch::{batch_tensors, plan_batches, BatchLimits};
use crate::model::bert::BertBody;
use crate::model::{ModelSpec, ModelStore, Precision, TextTokenizer, Tokens};
use crate::rerank::Reranker;

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
    dense: Linear,
}

impl Pooler {
    fn load(vb: VarBuilder, cfg: &Config) -> candle_core::Result<Pooler> {
        Ok(Pooler { dense: linear(cfg.hidden_size, cfg.hidden_size, vb.pp("dense"))? })
    }

    fn forward(&self, states: &Tensor) -> candle_core::Result<Tensor> {
        let _span = tracing::trace_span!("pooler").entered();
        self.dense.forward(&states.narrow(1, 0, 1)?.squeeze(1)?)?.tanh()
    }
}

/// A `BertForSequenceClassification` with one label, used as a reranker.
pub struct CrossEncoder {
    model_id: String,
    tokenizer: TextTokenizer,
    body: BertBody,
    pooler: Pooler,
    classifier: Linear,
    device: Device,
    limits: BatchLimits,
    pad_id: u32,
}

impl CrossEncoder {
    /// Loads the model of a manifest entry, verifying its files.
    pub fn load(store: &ModelStore, spec: &ModelSpec, options: &RerankOptions) -> Result<CrossEncoder> {
        let config = store.verified_file(spec, "config.json")?;
        let tokenizer = store.verified_file(spec, "tokenizer.json")?;
        let weights = store.verified_file(spec, "model.safetensors")?;
        let precision = options.precision.resolve(&options.device, spec.auto_precision)?;
        CrossEncoder::from_files(&spec.name, spec.max_tokens, &config, &tokenizer, &weights, &RerankOptions { precision, ..options.clone() })
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
        let format_err = |e: candle_core::Error| Error::ModelFormat {
            model: model_id.into(),
            reason: format!("not a BERT sequence-classification model: {e}"),
        };
        // SAFETY: verified just before; model files are replaced by rename, never edited in place.
        let vb = unsafe { VarBuilder::from_mmaped_safetensors(&[weights], DType::F32, &options.device)? };
        let body = BertBody::load(vb.pp("bert"), &cfg, options.precision.resolve(&options.device, None)?).map_err(format_err)?;
        let pooler = Pooler::load(vb.pp("bert").pp("pooler"), &cfg).map_err(format_err)?;
        let classifier = linear(cfg.hidden_size, 1, vb.pp("classifier")).map_err(format_err)?;
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
        })
    }

    /// Token ids and segment ids of one pair, as the model sees them.
    pub fn encode_pair(&self, query: &str, passage: &str) -> Result<Tokens> {
        Ok(self.tokenizer.encode_pairs(&[(query, passage)])?.remove(0))
    }

    fn score_batch(&self, tokens: &[Tokens], indices: &[usize]) -> Result<Vec<f32>> {
        let _span = tracing::trace_span!("rerank_batch", n = indices.len()).entered();
        let b = batch_tensors(tokens, indices, self.pad_id, &self.device)?;
        let states = self.body.forward(&b.ids, &b.type_ids, &b.mask)?;
        let logits = self.classifier.forward(&self.pooler.forward(&states)?)?;
        Ok(logits.squeeze(1)?.to_dtype(DType::F32)?.to_vec1::<f32>()?)
    }
}

impl Reranker for CrossEncoder {
    fn model_id(&self) -> &str {
        &self.model_id
    }

    #[tracing::instrument(skip_all, fields(model = %self.model_id, n = passages.len()))]
    fn score(&self, query: &str, passages: &[&str]) -> Result<Vec<f32>> {
        if query.trim().is_empty() {
            return Err(Error::Invalid("the query is empty; there is nothing to rerank against".into()));
        }
        let pairs: Vec<(&str, &str)> = passages.iter().map(|p| (query, *p)).collect();
        let tokens = self.tokenizer.encode_pairs(&pairs)?;
        let lengths: Vec<usize> = tokens.iter().map(|t| t.ids.len()).collect();
        let plan = plan_batches(&lengths, self.limits);
        let scores: Vec<Vec<f32>> = if self.device.is_cpu() {
            plan.par_iter().map(|b| self.score_batch(&tokens, b)).collect::<Result<_>>()?
        } else {
            plan.iter().map(|b| self.score_batch(&tokens, b)).collect::<Result<_>>()?
        };
        let mut out = vec![f32::NAN; passages.len()];
        for (batch, s) in plan.iter().zip(scores) {
            for (&i, v) in batch.iter().zip(s) {
                out[i] = v;
            }
        }
        Ok(out)
    }
}
