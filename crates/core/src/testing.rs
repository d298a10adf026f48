//! Fakes and generated tiny models for tests and benches; compiled under `cfg(any(test, feature =
//! "testing"))`. Unit tests never load real weights: they use these.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use candle_core::{Device, Tensor};

use crate::embed::Embedder;
use crate::error::Result;
use crate::model::manifest::{Architecture, ModelSpec, Pooling};
use crate::types::{Embedding, ModelRole, TextKind};

/// A deterministic embedder: each word hashes to a bucket of a 16-dimensional vector.
#[derive(Debug, Clone)]
pub struct HashEmbedder {
    dims: usize,
}

impl Default for HashEmbedder {
    fn default() -> Self {
        HashEmbedder { dims: 16 }
    }
}

impl Embedder for HashEmbedder {
    fn model_id(&self) -> &str {
        "hash-16"
    }
    fn dims(&self) -> usize {
        self.dims
    }
    fn max_tokens(&self) -> usize {
        usize::MAX
    }
    fn count_tokens(&self, text: &str) -> usize {
        text.split_whitespace().count()
    }
    fn embed(&self, texts: &[&str], _kind: TextKind) -> Result<Vec<Embedding>> {
        crate::embed::check_texts(texts)?;
        Ok(texts
            .iter()
            .map(|t| {
                let mut v = vec![0f32; self.dims];
                let words: Vec<&str> = t.split_whitespace().collect();
                for w in &words {
                    let h = w.to_lowercase().bytes().fold(0xcbf29ce484222325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100000001b3));
                    v[(h % self.dims as u64) as usize] += 1.0;
                }
                let n = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-12);
                v.iter_mut().for_each(|x| *x /= n);
                Embedding { vector: v, tokens: words.len(), truncated_from: None }
            })
            .collect())
    }
}

/// Deterministic pseudo-random numbers ([`fastrand::Rng`], seeded), so generated models are the
/// same every run.
pub struct SeededRng(fastrand::Rng);

impl SeededRng {
    /// A generator from a seed.
    pub fn new(seed: u64) -> SeededRng {
        SeededRng(fastrand::Rng::with_seed(seed))
    }

    /// A float in [-scale, scale).
    pub fn next_f32(&mut self, scale: f32) -> f32 {
        (self.0.f32() * 2.0 - 1.0) * scale
    }

    /// An integer in [0, n) (0 when `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            self.0.usize(..n)
        }
    }
}

/// Words of the tiny model's vocabulary (after the five special tokens).
pub const TINY_WORDS: &[&str] = &[
    "the", "policy", "travel", "insurance", "claim", "a", "is", "of", "and", "to", "in", "for", "data",
    "retention", "security", "##s", "##ing", "ed", "report", "cat", "dog", "sat", "on", "mat", ".",
    ",", "?", "what", "how", "long", "must", "we", "keep", "records",
];

/// The files of a generated tiny BERT.
pub struct TinyBert {
    /// `config.json`.
    pub config: PathBuf,
    /// `tokenizer.json`.
    pub tokenizer: PathBuf,
    /// `model.safetensors`.
    pub weights: PathBuf,
}

/// Writes a tiny random BERT (hidden 16, 2 layers, 2 heads, WordPiece vocabulary of
/// [`TINY_WORDS`]) into `dir`; with `classifier` the weights carry the `bert.` prefix, the
/// pooler and a one-logit head, as a cross-encoder's do.
pub fn write_tiny_bert(dir: &Path, seed: u64, classifier: bool) -> Result<TinyBert> {
    use tokenizers::models::wordpiece::WordPiece;
    use tokenizers::normalizers::BertNormalizer;
    use tokenizers::pre_tokenizers::bert::BertPreTokenizer;
    use tokenizers::processors::bert::BertProcessing;

    let (hidden, inter, layers, heads, max_pos) = (16usize, 32usize, 2usize, 2usize, 64usize);
    let words: Vec<&str> = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"].iter().chain(TINY_WORDS).copied().collect();
    let vocab_size = words.len();
    let vocab_file = dir.join("vocab.txt");
    std::fs::write(&vocab_file, words.join("\n") + "\n")?;
    let vocab_file = vocab_file.to_str().ok_or_else(|| crate::error::Error::Invalid("non-UTF-8 temp path".into()))?;
    let wp = WordPiece::from_file(vocab_file).unk_token("[UNK]".into()).build().map_err(crate::error::Error::Tokenizer)?;
    let mut tok = tokenizers::Tokenizer::new(wp);
    tok.with_normalizer(Some(BertNormalizer::default()));
    tok.with_pre_tokenizer(Some(BertPreTokenizer));
    tok.with_post_processor(Some(BertProcessing::new(("[SEP]".into(), 3), ("[CLS]".into(), 2))));
    let tokenizer = dir.join("tokenizer.json");
    tok.save(&tokenizer, false).map_err(crate::error::Error::Tokenizer)?;

    let config = dir.join("config.json");
    let cfg = serde_json::json!({
        "vocab_size": vocab_size, "hidden_size": hidden, "num_hidden_layers": layers,
        "num_attention_heads": heads, "intermediate_size": inter, "hidden_act": "gelu",
        "hidden_dropout_prob": 0.0, "max_position_embeddings": max_pos, "type_vocab_size": 2,
        "initializer_range": 0.02, "layer_norm_eps": 1e-12, "pad_token_id": 0, "model_type": "bert"
    });
    std::fs::write(&config, cfg.to_string())?;

    let mut rng = SeededRng::new(seed);
    let mut tensors: HashMap<String, Tensor> = HashMap::new();
    let p = if classifier { "bert." } else { "" };
    let mut add = |name: String, shape: &[usize], ones: bool| -> Result<()> {
        let n: usize = shape.iter().product();
        let data: Vec<f32> = (0..n).map(|_| if ones { 1.0 + rng.next_f32(0.1) } else { rng.next_f32(0.2) }).collect();
        tensors.insert(name, Tensor::from_vec(data, shape, &Device::Cpu)?);
        Ok(())
    };
    add(format!("{p}embeddings.word_embeddings.weight"), &[vocab_size, hidden], false)?;
    add(format!("{p}embeddings.position_embeddings.weight"), &[max_pos, hidden], false)?;
    add(format!("{p}embeddings.token_type_embeddings.weight"), &[2, hidden], false)?;
    add(format!("{p}embeddings.LayerNorm.weight"), &[hidden], true)?;
    add(format!("{p}embeddings.LayerNorm.bias"), &[hidden], false)?;
    for l in 0..layers {
        let b = format!("{p}encoder.layer.{l}");
        for m in ["attention.self.query", "attention.self.key", "attention.self.value", "attention.output.dense"] {
            add(format!("{b}.{m}.weight"), &[hidden, hidden], false)?;
            add(format!("{b}.{m}.bias"), &[hidden], false)?;
        }
        add(format!("{b}.attention.output.LayerNorm.weight"), &[hidden], true)?;
        add(format!("{b}.attention.output.LayerNorm.bias"), &[hidden], false)?;
        add(format!("{b}.intermediate.dense.weight"), &[inter, hidden], false)?;
        add(format!("{b}.intermediate.dense.bias"), &[inter], false)?;
        add(format!("{b}.output.dense.weight"), &[hidden, inter], false)?;
        add(format!("{b}.output.dense.bias"), &[hidden], false)?;
        add(format!("{b}.output.LayerNorm.weight"), &[hidden], true)?;
        add(format!("{b}.output.LayerNorm.bias"), &[hidden], false)?;
    }
    if classifier {
        add("bert.pooler.dense.weight".into(), &[hidden, hidden], false)?;
        add("bert.pooler.dense.bias".into(), &[hidden], false)?;
        add("classifier.weight".into(), &[1, hidden], false)?;
        add("classifier.bias".into(), &[1], false)?;
    }
    let weights = dir.join("model.safetensors");
    candle_core::safetensors::save(&tensors, &weights)?;
    Ok(TinyBert { config, tokenizer, weights })
}

/// A manifest entry for a generated tiny embedder (no files pinned: tests load it by path).
pub fn tiny_embed_spec(max_tokens: usize) -> ModelSpec {
    ModelSpec {
        name: "tiny-bert".into(),
        role: ModelRole::Embed,
        architecture: Architecture::Bert,
        repo: "ragbox-tests/tiny-bert".into(),
        dims: Some(16),
        pooling: Some(Pooling::Mean),
        query_prefix: "what ".into(),
        passage_prefix: String::new(),
        max_tokens,
        attention_heads: None,
        auto_precision: None,
        default_fetch: false,
        files: vec![],
    }
}

/// A generator that replies from a script, in order, and records every request it was given.
/// When the script runs out it repeats its last reply. `yes_no` answers from `yes_no_scores`
/// (cycled), else by the default one-token generation.
#[derive(Default)]
pub struct ScriptedGenerator {
    replies: Vec<String>,
    yes_no_scores: Vec<f32>,
    calls: std::sync::Mutex<Vec<Vec<crate::generate::Message>>>,
}

impl ScriptedGenerator {
    /// A generator that says `replies`, one per request.
    pub fn new(replies: &[&str]) -> ScriptedGenerator {
        ScriptedGenerator { replies: replies.iter().map(|r| r.to_string()).collect(), ..Default::default() }
    }

    /// Also answers yes/no prompts with these log-odds, cycled.
    pub fn with_yes_no(mut self, scores: &[f32]) -> ScriptedGenerator {
        self.yes_no_scores = scores.to_vec();
        self
    }

    /// Every request's messages so far.
    pub fn calls(&self) -> Vec<Vec<crate::generate::Message>> {
        self.calls.lock().map(|c| c.clone()).unwrap_or_default()
    }
}

#[async_trait::async_trait]
impl crate::generate::Generator for ScriptedGenerator {
    fn model_id(&self) -> &str {
        "scripted"
    }

    async fn generate(
        &self,
        request: &crate::generate::GenerateRequest,
        sink: &mut (dyn crate::generate::TokenSink + Send),
    ) -> Result<crate::generate::Generation> {
        let n = {
            let mut calls = self.calls.lock().map_err(|_| crate::error::Error::Bug("poisoned".into()))?;
            calls.push(request.messages.clone());
            calls.len()
        };
        let reply = self.replies.get(n - 1).or(self.replies.last()).cloned().unwrap_or_default();
        let text = crate::generate::until_stop(&reply, &request.stop).to_string();
        let mut words = 0;
        for piece in text.split_inclusive(' ') {
            sink.token(piece);
            words += 1;
        }
        Ok(crate::generate::Generation { text, prompt_tokens: 0, completion_tokens: words, first_token_ms: 1.0, total_ms: 2.0, written_by: "local".into() })
    }

    async fn yes_no(&self, conversations: &[Vec<crate::generate::Message>]) -> Result<Vec<f32>> {
        if self.yes_no_scores.is_empty() {
            let mut out = Vec::new();
            for c in conversations {
                let g = self.generate(&crate::generate::GenerateRequest::greedy(c.clone(), 2), &mut crate::generate::Discard).await?;
                out.push(if g.text.trim().to_lowercase().starts_with("yes") { 1.0 } else { -1.0 });
            }
            return Ok(out);
        }
        if let Ok(mut calls) = self.calls.lock() {
            calls.extend(conversations.iter().cloned());
        }
        Ok((0..conversations.len()).map(|i| self.yes_no_scores[i % self.yes_no_scores.len()]).collect())
    }
}
