//! What kind of query retrieval is given: a question put in words ("How long is CCTV footage
//! kept?", "who wrote the lppl") or a statement (a claim, a few keywords). Claims and keywords
//! lean on their exact terms, which BM25 matches; questions on their meaning, which the
//! embedder's cosine carries better (docs/EVAL.md: the first stage's vote in the
//! rerank mix).
//!
//! ```
//! use ragbox_core::retrieve::query::is_question;
//! assert!(is_question("Can I claim a hotel in London for 250 pounds a night?"));
//! assert!(is_question("who sang the song that won eurovision in 1974"));
//! assert!(!is_question("Vitamin D deficiency increases the risk of multiple sclerosis."));
//! assert!(!is_question("gluten free diet autism"));
//! ```

/// Words a question in English opens with: interrogatives and the auxiliaries of a yes/no question.
const OPENERS: &[&str] = &[
    "what", "which", "who", "whom", "whose", "when", "where", "why", "how", "is", "are", "was", "were", "am", "do",
    "does", "did", "can", "could", "should", "would", "will", "shall", "may", "might", "must", "has", "have", "had",
    "isn't", "aren't", "don't", "doesn't", "didn't", "can't", "won't", "shouldn't",
];

/// Whether `query` is a question: it ends with a question mark, or its first word is one a
/// question opens with.
pub fn is_question(query: &str) -> bool {
    let query = query.trim();
    if query.ends_with('?') {
        return true;
    }
    let first = query.split_whitespace().next().unwrap_or_default();
    let first = first.trim_matches(|c: char| !c.is_alphanumeric() && c != '\'').to_lowercase().replace('’', "'");
    OPENERS.contains(&first.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn questions_and_statements() {
        for q in ["What's the hotel cap in London?", "How do I get out of the Python prompt", "Is += on a list in place", "I lost my FIDO2 key, what do I do?"] {
            assert!(is_question(q), "{q}");
        }
        for s in ["0-dimensional biomaterials show inductive properties.", "hotel cap london", "", "Howard Hughes biography"] {
            assert!(!is_question(s), "{s}");
        }
    }
}
