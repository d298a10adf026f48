//! Tokenizer loading with explicit truncation and no padding.
//!
//! The `tokenizer.json` files shipped with models carry their own truncation and padding settings
//! (MiniLM's truncates at 128 and pads to 128); ragbox sets both itself so the limit is the
//! manifest's and batches are padded only to their own longest member.

use std::path::Path;

use tokenizers::{Tokenizer, TruncationDirection, TruncationParams, TruncationStrategy};

use crate::error::{Error, Result};

/// A tokenizer truncating at `max_tokens` (special tokens included), and its untruncated twin
/// used to report how long a truncated text really was.
pub struct TextTokenizer {
    truncating: Tokenizer,
    full: Tokenizer,
    max_tokens: usize,
}

/// One tokenised text (or pair).
#[derive(Debug, Clone)]
pub struct Tokens {
    /// Token ids, special tokens included.
    pub ids: Vec<u32>,
    /// Segment ids (0 for the first text, 1 for the second of a pair).
    pub type_ids: Vec<u32>,
    /// Full length when truncated.
    pub truncated_from: Option<usize>,
}

impl TextTokenizer {
    /// Loads `tokenizer.json` and sets truncation at `max_tokens`.
    pub fn load(path: &Path, max_tokens: usize) -> Result<TextTokenizer> {
        let mut full = Tokenizer::from_file(path).map_err(|e| Error::ModelFormat {
            model: path.display().to_string(),
            reason: format!("not a tokenizer.json: {e}"),
        })?;
        full.with_padding(None);
        full.with_truncation(None).map_err(Error::Tokenizer)?;
        let mut truncating = full.clone();
        truncating
            .with_truncation(Some(TruncationParams {
                max_length: max_tokens,
                strategy: TruncationStrategy::LongestFirst,
                stride: 0,
                direction: TruncationDirection::Right,
            }))
            .map_err(Error::Tokenizer)?;
        Ok(TextTokenizer { truncating, full, max_tokens })
    }

    /// The limit in tokens.
    pub fn max_tokens(&self) -> usize {
        self.max_tokens
    }

    /// Tokens in `text`, without special tokens and without truncation (0 if it cannot be
    /// tokenised, which the tokenizers of our models never refuse).
    pub fn count(&self, text: &str) -> usize {
        self.full.encode(text, false).map_or(0, |e| e.len())
    }

    /// The id of a token in the vocabulary.
    pub fn token_id(&self, token: &str) -> Option<u32> {
        self.full.token_to_id(token)
    }

    /// Tokenises single texts (in parallel), truncating each at the limit.
    pub fn encode_texts(&self, texts: &[&str]) -> Result<Vec<Tokens>> {
        let encs = self.truncating.encode_batch(texts.to_vec(), true).map_err(Error::Tokenizer)?;
        encs.into_iter()
            .zip(texts)
            .map(|(e, text)| {
                let truncated_from = if e.get_overflowing().is_empty() {
                    None
                } else {
                    Some(self.full.encode(*text, true).map_err(Error::Tokenizer)?.len())
                };
                Ok(Tokens { ids: e.get_ids().to_vec(), type_ids: e.get_type_ids().to_vec(), truncated_from })
            })
            .collect()
    }

    /// Tokenises (first, second) pairs as `[CLS] first [SEP] second [SEP]`, truncating the longer
    /// side first.
    pub fn encode_pairs(&self, pairs: &[(&str, &str)]) -> Result<Vec<Tokens>> {
        let inputs: Vec<tokenizers::EncodeInput> =
            pairs.iter().map(|(a, b)| (*a, *b).into()).collect();
        let encs = self.truncating.encode_batch(inputs, true).map_err(Error::Tokenizer)?;
        encs.into_iter()
            .zip(pairs)
            .map(|(e, (a, b))| {
                let truncated_from = if e.get_overflowing().is_empty() {
                    None
                } else {
                    Some(self.full.encode((*a, *b), true).map_err(Error::Tokenizer)?.len())
                };
                Ok(Tokens { ids: e.get_ids().to_vec(), type_ids: e.get_type_ids().to_vec(), truncated_from })
            })
            .collect()
    }
}
