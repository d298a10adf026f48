//! English words as ragbox reads them: a question's words and clause punctuation
//! ([`tokenize`], contractions expanded), the function words ([`is_stop`], [`is_preposition`]),
//! the verbs of policy questions ([`is_verb`]), the Snowball stem BM25 uses ([`stem`]), and a
//! text's content words ([`content_words`]). Rule-based, no model; imports nothing of the crate.
//! The follow-up detection, the rewrite, the resolver, the support check and the answerability
//! signals all read words through here.

use std::collections::HashSet;

/// Function words: never content, never antecedents.
pub const STOPWORDS: &[&str] = &[
    "a", "an", "the", "this", "that", "these", "those", "such", "some", "any", "all", "each", "every", "no", "none",
    "both", "either", "neither", "another", "other", "others", "same", "own", "one", "ones", "much", "many", "more",
    "most", "less", "least", "few", "fewer", "several", "enough", "i", "me", "my", "mine", "myself", "we", "us", "our",
    "ours", "ourselves", "you", "your", "yours", "yourself", "yourselves", "he", "him", "his", "himself", "she", "her",
    "hers", "herself", "it", "its", "itself", "they", "them", "their", "theirs", "themselves", "what", "which", "who",
    "whom", "whose", "where", "when", "why", "how", "whether", "am", "is", "are", "was", "were", "be", "been",
    "being", "do", "does", "did", "doing", "done", "have", "has", "had", "having", "can", "could", "will", "would",
    "shall", "should", "may", "might", "must", "ought", "get", "gets", "got", "not", "and", "or", "but", "nor", "if",
    "then", "than", "so", "because", "while", "although", "though", "unless", "once", "until", "about", "above",
    "across", "after", "against", "along", "among", "around", "as", "at", "before", "behind", "below", "beneath",
    "beside", "besides", "between", "beyond", "by", "despite", "down", "during", "except", "for", "from", "in",
    "inside", "into", "like", "near", "of", "off", "on", "onto", "out", "outside", "over", "past", "per",
    "regarding", "since", "through", "throughout", "to", "toward", "towards", "under", "underneath", "up", "upon",
    "via", "with", "within", "without", "there", "here", "now", "also", "too", "very", "just", "only", "even",
    "still", "already", "really", "exactly", "again", "ever", "never", "always", "often", "sometimes", "usually",
    "please", "yes", "ok", "okay", "well", "long", "far", "soon", "else", "instead", "former", "latter", "etc",
];

/// Prepositions: a fragment starting with one is an ellipsis ("For contractors?").
pub const PREPOSITIONS: &[&str] = &[
    "about", "above", "across", "after", "against", "along", "among", "around", "at", "before", "behind", "below",
    "beneath", "beside", "between", "beyond", "by", "despite", "during", "except", "for", "from", "in", "inside",
    "into", "near", "of", "off", "on", "onto", "outside", "over", "past", "per", "regarding", "since", "through",
    "throughout", "to", "toward", "towards", "under", "underneath", "until", "upon", "via", "with", "within",
    "without",
];

/// Punctuation that separates clauses or sentences.
pub const CLAUSE_PUNCT: &[&str] = &[",", ";", ":", "—", "–", "-", "(", ")", ".", "?", "!", "/"];

/// Common verbs of policy questions (base forms); inflections are recognised by [`is_verb`].
/// Words that are mostly nouns in this domain (leave, travel, claim, contact) are left out.
pub const VERBS: &[&str] = &[
    "accept", "affect", "agree", "allow", "apply", "approve", "arrange", "ask", "attend", "authorise", "authorize",
    "become", "begin", "belong", "book", "bring", "buy", "call", "cancel", "carry", "change", "check", "choose",
    "come", "complete", "confirm", "contain", "continue", "cost", "count", "cover", "decide", "define", "depend",
    "describe", "do", "end", "ensure", "expire", "explain", "fill", "find", "follow", "get", "give", "go", "handle",
    "happen", "have", "help", "hold", "include", "join", "keep", "know", "last", "let", "list", "look", "lose", "make",
    "manage", "matter", "mean", "meet", "mention", "need", "offer", "own", "pay", "permit", "provide", "qualify",
    "receive", "refer", "refund", "reimburse", "remain", "renew", "replace", "report", "request", "require",
    "resign", "return", "review", "run", "say", "see", "sell", "send", "set", "show", "sign", "spend", "start",
    "state", "stay", "stop", "submit", "take", "tell", "think", "use", "want", "work", "write",
];

/// Irregular verb forms.
pub const IRREGULAR_VERBS: &[&str] = &[
    "said", "took", "taken", "got", "gotten", "paid", "kept", "lost", "made", "gave", "given", "sent", "ran", "knew",
    "known", "thought", "told", "found", "meant", "went", "gone", "came", "bought", "brought", "held", "sold",
    "spent", "wrote", "written", "saw", "seen", "chose", "chosen", "began", "begun", "did", "done", "had", "set",
];

/// Words allowed in a question with no content ("Why?", "Tell me more.", "Which one?").
pub const CONTINUATION_WORDS: &[&str] = &[
    "tell", "explain", "elaborate", "expand", "clarify", "mean", "sure", "example", "examples", "detail", "details",
    "continue", "go", "more", "why", "how", "so", "really", "exactly", "else", "one", "ones", "please", "again",
    "give", "show",
];

/// Extra words left out of content-word overlap (time and reference words carry no topic).
pub const OVERLAP_STOPWORDS: &[&str] = &[
    "week", "weeks", "month", "months", "year", "years", "time", "times", "today", "yesterday", "ago", "last",
    "previous", "earlier", "previously", "said", "mentioned", "discussed", "agree", "agreed", "tell", "know", "say",
    "mean", "thing", "things", "lot", "kind", "sort", "question", "answer",
];

/// Whether `w` is one of `list`.
pub fn is_in(list: &[&str], w: &str) -> bool {
    list.contains(&w)
}

/// A word (lowercased, contractions expanded) or a clause-separating punctuation mark.
#[derive(Debug, Clone)]
pub struct Tok {
    /// Lowercase word, or the punctuation mark.
    pub w: String,
    /// Byte range in the question (a contraction's parts share one).
    pub start: usize,
    /// End of that range.
    pub end: usize,
    /// Punctuation, not a word.
    pub punct: bool,
    /// Written with a capital (names: "Sarah", "Leeds").
    pub cap: bool,
}

fn is_word_char(c: char) -> bool {
    c.is_alphanumeric() || matches!(c, '£' | '$' | '€' | '%' | '&')
}

/// Splits `text` into words and clause punctuation; quotes and other marks are dropped.
pub fn tokenize(text: &str) -> Vec<Tok> {
    // In a question that is not all capitals, "IT", "US" or "WHO" is an acronym, not a word.
    let acronyms = text.chars().any(char::is_lowercase);
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    let mut toks = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let (start, c) = chars[i];
        if is_word_char(c) {
            let mut j = i + 1;
            while j < chars.len() {
                let cj = chars[j].1;
                let joins = |pred: fn(char) -> bool| {
                    j + 1 < chars.len() && pred(chars[j - 1].1) && pred(chars[j + 1].1)
                };
                if is_word_char(cj)
                    || (matches!(cj, '-' | '\'' | '’') && joins(char::is_alphanumeric))
                    || (matches!(cj, '.' | ',') && joins(|c| c.is_ascii_digit()))
                {
                    j += 1;
                } else {
                    break;
                }
            }
            let end = chars.get(j).map_or(text.len(), |&(b, _)| b);
            let raw = &text[start..end];
            let lower = raw.to_lowercase();
            if acronyms && raw.len() >= 2 && raw.chars().all(char::is_uppercase) && is_stop(&lower) && lower != "ok" {
                toks.push(Tok { w: raw.to_string(), start, end, punct: false, cap: true });
            } else {
                push_word(&mut toks, raw, start, end);
            }
            i = j;
        } else {
            // A hyphen only separates clauses when it stands alone (" - ").
            let s = c.to_string();
            if is_in(CLAUSE_PUNCT, &s) {
                toks.push(Tok { w: s, start, end: start + c.len_utf8(), punct: true, cap: false });
            }
            i += 1;
        }
    }
    toks
}

/// Pushes one written word, expanding contractions ("it's" -> it is, "doesn't" -> does not).
fn push_word(toks: &mut Vec<Tok>, raw: &str, start: usize, end: usize) {
    let cap = raw.chars().next().is_some_and(char::is_uppercase);
    let w = raw.to_lowercase().replace('’', "'");
    let mut push = |w: &str, cap: bool| toks.push(Tok { w: w.to_string(), start, end, punct: false, cap });
    if let Some(base) = w.strip_suffix("n't") {
        let base = match base {
            "ca" => "can",
            "wo" => "will",
            "sha" => "shall",
            b => b,
        };
        push(base, cap);
        push("not", false);
    } else if let Some(base) = w.strip_suffix("'s") {
        push(base, cap);
        // "it's" is "it is"; "policy's" is a possessive and stays one word.
        if is_in(&["it", "that", "what", "there", "he", "she", "who", "where", "how", "when", "here", "this"], base) {
            push("is", false);
        }
    } else if let Some((base, rest)) = w.split_once('\'') {
        let expanded = match rest {
            "re" => Some("are"),
            "ll" => Some("will"),
            "ve" => Some("have"),
            "d" => Some("would"),
            "m" => Some("am"),
            _ => None,
        };
        match expanded {
            Some(x) => {
                push(base, cap);
                push(x, false);
            }
            None => push(&w, cap),
        }
    } else {
        push(&w, cap);
    }
}

/// Whether `w` (lowercase) is a function word: never content, never an antecedent.
pub fn is_stop(w: &str) -> bool {
    is_in(STOPWORDS, w)
}

/// Whether `w` (lowercase) is a preposition.
pub fn is_preposition(w: &str) -> bool {
    is_in(PREPOSITIONS, w)
}

/// Whether `w` is a form of one of the listed verbs.
pub fn is_verb(w: &str) -> bool {
    if is_in(IRREGULAR_VERBS, w) || is_in(VERBS, w) {
        return true;
    }
    let mut bases: Vec<String> = Vec::new();
    for suffix in ["s", "es", "ed", "d", "ing"] {
        if let Some(b) = w.strip_suffix(suffix) {
            bases.push(b.to_string());
            bases.push(format!("{b}e"));
            // Doubled consonant: "stopped", "setting".
            let bytes = b.as_bytes();
            if bytes.len() >= 2 && bytes[bytes.len() - 1] == bytes[bytes.len() - 2] {
                bases.push(b[..b.len() - 1].to_string());
            }
        }
    }
    for suffix in ["ies", "ied"] {
        if let Some(b) = w.strip_suffix(suffix) {
            bases.push(format!("{b}y"));
        }
    }
    bases.iter().any(|b| is_in(VERBS, b))
}

/// The word's Snowball (Porter 2) English stem, the stemmer BM25 uses too: "policies" and
/// "policy" meet, as do "clients" and "client".
pub fn stem(w: &str) -> String {
    // Creating one only picks the algorithm's function.
    rust_stemmers::Stemmer::create(rust_stemmers::Algorithm::English).stem(w).into_owned()
}

/// Content words of `text`: lowercased, stopwords removed, stemmed.
pub fn content_words(text: &str) -> HashSet<String> {
    tokenize(text)
        .into_iter()
        .filter(|t| !t.punct && !is_stop(&t.w) && !is_in(OVERLAP_STOPWORDS, &t.w) && !is_in(CONTINUATION_WORDS, &t.w))
        .map(|t| stem(t.w.trim_matches('\'')))
        .filter(|w| !w.is_empty())
        .collect()
}
