//! The embedder shared by every BERT-family encoder: prefix, tokenise, batch by length, encode,
//! pool, normalise. Each architecture only supplies its [`TokenEncoder`].

use candle_core::{Device, Tensor};
use rayon::prelude::*;

use crate::embed::pooling::{l2_normalize, pool};
use crate::embed::{check_texts, Embedder};
use crate::error::{Error, Result};
use crate::model::batch::{batch_tensors, plan_batches, BatchLimits, BatchTensors};
use crate::model::{Pooling, Precision, TextTokenizer};
use crate::types::{Embedding, TextKind};

/// How an embedder runs.
#[derive(Debug, Clone)]
pub struct EmbedOptions {
    /// Where the model runs (see `model::device`).
    pub device: Device,
    /// Batch limits.
    pub batch: BatchLimits,
    /// Precision of the dense layers (resolved against `device` at load).
    pub precision: Precision,
}

impl Default for EmbedOptions {
    /// The CPU, default batches, `auto` precision (as `embed.precision`'s default).
    fn default() -> Self {
        EmbedOptions { device: Device::Cpu, batch: BatchLimits::default(), precision: Precision::Auto }
    }
}

/// An encoder body: input tensors in, `(batch, seq, hidden)` token states out.
pub(crate) trait TokenEncoder: Send + Sync {
    fn forward(&self, batch: &BatchTensors) -> candle_core::Result<Tensor>;
}

/// A transformer embedder: tokenizer + encoder + pooling, as the manifest describes it.
pub struct TransformerEmbedder {
    pub(crate) model_id: String,
    pub(crate) dims: usize,
    pub(crate) pooling: Pooling,
    pub(crate) query_prefix: String,
    pub(crate) passage_prefix: String,
    pub(crate) tokenizer: TextTokenizer,
    pub(crate) encoder: Box<dyn TokenEncoder>,
    pub(crate) device: Device,
    pub(crate) limits: BatchLimits,
    pub(crate) pad_id: u32,
}

impl TransformerEmbedder {
    /// Token ids exactly as the model sees them (prefix applied, truncated), for tests and `trace`.
    pub fn token_ids(&self, text: &str, kind: TextKind) -> Result<Vec<u32>> {
        let text = format!("{}{text}", self.prefix(kind));
        Ok(self.tokenizer.encode_texts(&[&text])?.remove(0).ids)
    }

    fn prefix(&self, kind: TextKind) -> &str {
        match kind {
            TextKind::Query => &self.query_prefix,
            TextKind::Passage => &self.passage_prefix,
        }
    }

    fn embed_batch(&self, tokens: &[crate::model::Tokens], indices: &[usize]) -> Result<Vec<Vec<f32>>> {
        let _span = tracing::trace_span!("embed_batch", n = indices.len()).entered();
        let batch = batch_tensors(tokens, indices, self.pad_id, &self.device)?;
        let states = self.encoder.forward(&batch)?;
        let pooled = pool(&states, &batch.mask, self.pooling)?;
        Ok(l2_normalize(&pooled)?.to_vec2::<f32>()?)
    }
}

impl Embedder for TransformerEmbedder {
    fn model_id(&self) -> &str {
        &self.model_id
    }

    fn dims(&self) -> usize {
        self.dims
    }

    fn max_tokens(&self) -> usize {
        self.tokenizer.max_tokens()
    }

    fn count_tokens(&self, text: &str) -> usize {
        self.tokenizer.count(text)
    }

    #[tracing::instrument(skip_all, fields(model = %self.model_id, n = texts.len()))]
    fn embed(&self, texts: &[&str], kind: TextKind) -> Result<Vec<Embedding>> {
        check_texts(texts)?;
        let prefix = self.prefix(kind);
        let prefixed: Vec<String> = texts.iter().map(|t| format!("{prefix}{t}")).collect();
        let refs: Vec<&str> = prefixed.iter().map(String::as_str).collect();
        let tokens = self.tokenizer.encode_texts(&refs)?;
        let lengths: Vec<usize> = tokens.iter().map(|t| t.ids.len()).collect();
        let plan = plan_batches(&lengths, self.limits);
        // On the CPU, batches run side by side: the matmuls use every core, but the element-wise
        // work between them is single-threaded, so two batches in flight keep all cores busy.
        let vectors: Vec<Vec<Vec<f32>>> = if self.device.is_cpu() {
            plan.par_iter().map(|b| self.embed_batch(&tokens, b)).collect::<Result<_>>()?
        } else {
            plan.iter().map(|b| self.embed_batch(&tokens, b)).collect::<Result<_>>()?
        };
        let truncated = tokens.iter().filter(|t| t.truncated_from.is_some()).count();
        if truncated > 0 {
            tracing::info!(truncated, of = texts.len(), limit = self.max_tokens(), "texts truncated to the model's limit");
        }
        let mut out: Vec<Option<Embedding>> = vec![None; texts.len()];
        for (batch, rows) in plan.iter().zip(vectors) {
            for (&i, vector) in batch.iter().zip(rows) {
                let t = &tokens[i];
                out[i] = Some(Embedding { vector, tokens: t.ids.len(), truncated_from: t.truncated_from });
            }
        }
        out.into_iter()
            .map(|e| e.ok_or_else(|| Error::Bug("a text was left out of every batch".into())))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::embed::bert;
    use crate::testing::{tiny_embed_spec, write_tiny_bert};
    use crate::types::cosine;

    fn tiny(max_tokens: usize, max_items: usize) -> (tempfile::TempDir, TransformerEmbedder) {
        let dir = tempfile::tempdir().unwrap();
        let files = write_tiny_bert(dir.path(), 7, false).unwrap();
        let options = EmbedOptions { batch: BatchLimits { max_items, max_tokens: 10_000 }, ..EmbedOptions::default() };
        let e = bert::from_files(&tiny_embed_spec(max_tokens), &files.config, &files.tokenizer, &files.weights, &options).unwrap();
        (dir, e)
    }

    const TEXTS: &[&str] = &[
        "the cat sat on the mat .",
        "policy",
        "how long must we keep the travel insurance claim records ?",
        "data retention policy for security reports and records",
        "a dog",
    ];

    #[test]
    fn padding_and_batching_do_not_change_vectors() {
        let (_d, batched) = tiny(64, 4);
        let (_d2, single) = tiny(64, 1);
        let a = batched.embed(TEXTS, TextKind::Passage).unwrap();
        for (i, text) in TEXTS.iter().enumerate() {
            let b = single.embed(&[text], TextKind::Passage).unwrap();
            let c = cosine(&a[i].vector, &b[0].vector);
            assert!(c > 0.99999, "text {i}: cosine {c} between batched and alone");
            assert_eq!(a[i].tokens, b[0].tokens);
        }
    }

    #[test]
    fn vectors_are_unit_length_and_in_input_order() {
        let (_d, e) = tiny(64, 2);
        let out = e.embed(TEXTS, TextKind::Passage).unwrap();
        assert_eq!(out.len(), TEXTS.len());
        for (i, v) in out.iter().enumerate() {
            let norm: f32 = v.vector.iter().map(|x| x * x).sum::<f32>().sqrt();
            assert!((norm - 1.0).abs() < 1e-5, "norm {norm}");
            assert_eq!(v.vector.len(), 16);
            assert_eq!(v.tokens, e.token_ids(TEXTS[i], TextKind::Passage).unwrap().len());
        }
        let reversed: Vec<&str> = TEXTS.iter().rev().copied().collect();
        let back = e.embed(&reversed, TextKind::Passage).unwrap();
        assert!(cosine(&back[0].vector, &out[TEXTS.len() - 1].vector) > 0.99999);
    }

    #[test]
    fn truncation_is_reported_with_the_full_length() {
        let (_d, e) = tiny(8, 4);
        let long = "the policy of the travel insurance claim records is long";
        let out = e.embed(&[long, "policy"], TextKind::Passage).unwrap();
        assert_eq!(out[0].tokens, 8);
        assert_eq!(out[0].truncated_from, Some(12), "10 words + [CLS] + [SEP]");
        assert_eq!(out[1].truncated_from, None);
    }

    #[test]
    fn query_prefix_is_applied_and_empty_text_refused() {
        let (_d, e) = tiny(64, 4);
        let q = e.token_ids("policy", TextKind::Query).unwrap();
        let p = e.token_ids("policy", TextKind::Passage).unwrap();
        assert_eq!(q.len(), p.len() + 1, "the tiny spec's query prefix is one word");
        let err = e.embed(&["policy", "  "], TextKind::Passage).unwrap_err().to_string();
        assert!(err.contains("text 2 of 2 is empty"), "{err}");
    }
}
