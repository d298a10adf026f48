//! A reranker from the local LLM: each (query, passage) pair is scored pointwise by the
//! generator's next-token log-odds of "yes" over "no" to "does this passage help answer the
//! query?". All pairs of a query go to the generator in one call (the local backend scores them
//! one after another: see `GgufGenerator::yes_no`), and the prompt puts the query before the
//! passage so its prefix is shared and can be served from the prefix cache.

use std::sync::Arc;

use super::{block_on, Generator, Message};
use crate::error::Result;
use crate::rerank::Reranker;

/// Most characters of a passage in the relevance prompt.
const PASSAGE_CHARS: usize = 1200;

/// The relevance prompt for one pair: query first (the shared, cacheable prefix), then the
/// passage; the reply's first token is "yes" or "no".
pub fn relevance_messages(query: &str, passage: &str) -> Vec<Message> {
    let passage = match passage.char_indices().nth(PASSAGE_CHARS) {
        Some((end, _)) => &passage[..end],
        None => passage,
    };
    vec![
        Message::system("You judge whether a passage helps answer a search query. Answer with one word: yes or no."),
        Message::user(format!("Query: {query}\n\nPassage: {passage}\n\nDoes the passage help answer the query? Answer yes or no.")),
    ]
}

/// Scores passages with a [`Generator`]'s yes/no logits.
pub struct LlmReranker {
    generator: Arc<dyn Generator>,
    id: String,
}

impl LlmReranker {
    /// A reranker over `generator`.
    pub fn new(generator: Arc<dyn Generator>) -> LlmReranker {
        let id = format!("llm:{}", generator.model_id());
        LlmReranker { generator, id }
    }
}

impl Reranker for LlmReranker {
    fn model_id(&self) -> &str {
        &self.id
    }

    /// Must be called from synchronous code (it blocks on the generation runtime).
    fn score(&self, query: &str, passages: &[&str]) -> Result<Vec<f32>> {
        let prompts: Vec<Vec<Message>> = passages.iter().map(|p| relevance_messages(query, p)).collect();
        block_on(self.generator.yes_no(&prompts))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::ScriptedGenerator;

    #[test]
    fn scores_come_back_in_input_order_and_the_query_leads_every_prompt() {
        let g = Arc::new(ScriptedGenerator::new(&[]).with_yes_no(&[2.0, -1.0, 0.5]));
        let r = LlmReranker::new(g.clone());
        assert_eq!(r.model_id(), "llm:scripted");
        let scores = r.score("travel insurance limit", &["a", "b", "c"]).unwrap();
        assert_eq!(scores, vec![2.0, -1.0, 0.5]);
        let calls = g.calls();
        assert_eq!(calls.len(), 3);
        let (a, b) = (&calls[0][1].content, &calls[1][1].content);
        let shared = a.chars().zip(b.chars()).take_while(|(x, y)| x == y).count();
        assert!(shared >= "Query: travel insurance limit".len(), "{a} / {b}");
    }
}
