//! The `llm` annotator: the local LLM reads a child chunk within its whole document and
//! writes a short note on what it covers, in its key terms (contextual retrieval); the note
//! follows the chunk's structural context (title and sections) in front of it, for embedding
//! and BM25.
//!
//! May import `types`, `error`, `generate`, `ingest` and `answer`. The document part of the
//! prompt is byte-identical across a document's chunks and comes first, so the generator's
//! prefix cache can compute it once: chunks are annotated one after another, and a chunk the
//! document already shows is pointed at by its opening words, not repeated. Caching per chunk
//! lives in `ingest` (the catalog's annotation table), so a chunk is never annotated twice.

use std::ops::Range;
use std::sync::Arc;

use crate::answer::prompt::context_messages;
use crate::error::Result;
use crate::generate::{block_on, Discard, GenerateRequest, Generator};
use crate::ingest::Annotator;

/// Most characters of a document shown with its chunks (its head): bounds the prompt on a CPU.
pub const DOCUMENT_CHARS: usize = 6000;

/// Most tokens of one note (ingest keeps [`crate::ingest::LLM_CONTEXT_TOKENS`] of each chunk's
/// window for it): a short phrase is asked for, and each generated token costs 45-80 ms on two cores.
const CONTEXT_MAX_TOKENS: usize = 32;

/// Annotates chunks with a [`Generator`].
pub struct LlmAnnotator {
    generator: Arc<dyn Generator>,
    id: String,
}

impl LlmAnnotator {
    /// An annotator over `generator`.
    pub fn new(generator: Arc<dyn Generator>) -> LlmAnnotator {
        // The id names the model and this prompt's version: a change to either re-annotates.
        let id = format!("llm-context-v4:{}", generator.model_id());
        LlmAnnotator { generator, id }
    }
}

/// The first `max` characters of `text`.
fn head(text: &str, max: usize) -> &str {
    match text.char_indices().nth(max) {
        Some((end, _)) => &text[..end],
        None => text,
    }
}

/// Openings the model puts in front of a note that say nothing about the chunk.
const FILLER: &[&str] = &["Context:", "context:", "This chunk covers", "The chunk covers", "It covers"];

/// A reply on one line, without a label or a filler opening ("This chunk covers ...").
fn clean(reply: &str) -> String {
    let text = reply.trim();
    let text = FILLER.iter().find_map(|f| text.strip_prefix(f)).unwrap_or(text).trim_start_matches([' ', ':']);
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

impl Annotator for LlmAnnotator {
    fn id(&self) -> &str {
        &self.id
    }

    fn contexts(&self, title: &str, document: &str, chunks: &[Range<usize>]) -> Result<Vec<String>> {
        let head = head(document, DOCUMENT_CHARS);
        let request = |range: &Range<usize>| {
            let chunk = document.get(range.clone()).unwrap_or_default();
            // A chunk inside the head is pointed at by its opening words, not repeated.
            let shown = range.end <= head.len();
            GenerateRequest::greedy(context_messages(title, head, chunk, shown), CONTEXT_MAX_TOKENS)
        };
        // One at a time, so a later request can find the document's prefix in the generator's
        // prefix cache (all at once, every request computed it anew and held its own KV cache:
        // 5 GB for SmolLM2 on one policy); with the 0.5B model the prefix cache made it 2-3 times
        // faster (docs/BENCHMARKS.md has today's rate). Four at a time after the first (which
        // fills the prefix cache) took 14-340 s a chunk instead of ~3.5: mistralrs batches only
        // sequences of equal length and makes the others wait.
        block_on(async {
            let mut out = Vec::with_capacity(chunks.len());
            for range in chunks {
                out.push(clean(&self.generator.generate(&request(range), &mut Discard).await?.text));
            }
            Ok(out)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::ScriptedGenerator;

    #[test]
    fn every_chunk_gets_a_context_and_the_document_leads_every_prompt() {
        let g = Arc::new(ScriptedGenerator::new(&["Context: From the travel policy.", "This chunk covers\ninsurance abroad.\n"]));
        let c = LlmAnnotator::new(g.clone());
        let doc = "The travel policy. chunk one. chunk two.";
        let out = c.contexts("Travel", doc, &[19..29, 30..40]).unwrap();
        assert_eq!(out, vec!["From the travel policy.".to_string(), "insurance abroad.".to_string()]);
        let calls = g.calls();
        assert_eq!(calls.len(), 2);
        let (a, b) = (&calls[0].last().unwrap().content, &calls[1].last().unwrap().content);
        assert!(a.contains(doc) && a.contains("chunk one") && b.contains("chunk two"), "{a}");
        let shared = a.chars().zip(b.chars()).take_while(|(x, y)| x == y).count();
        assert!(shared > a.find("</document>").unwrap(), "the whole document is a shared prefix");
    }
}
