//! Follow-up detection: whether a question refers back to the conversation ([`refers_back`]).
//! Rule-based, no model; reads words through [`crate::words`].
//!
//! A self-contained question sees no history at all, so detection must be precise both ways. It
//! is a rule-based reading of the question (no model):
//!
//! * **Deictic**: talk about the conversation itself: "you said", "you mentioned", "we
//!   discussed", "your last answer", "as before", "mentioned earlier", "listed above".
//! * **Comparative**: "the other one", "the same" (unless an explicit comparand follows: "the
//!   same as statutory sick pay" is self-contained, "the same client as last week" is not), "the
//!   former", "the latter", "which one", a bare "both"/"either", "instead".
//! * **Ellipsis**: a question that continues the last one: "and ...", "but ...", "then ...",
//!   "what about ...", "how about ...", a short phrase that starts with a preposition ("For
//!   contractors?"), "so", "which" or "any" ("So who pays?", "Which is cheaper?", "Any
//!   exceptions?"), or one with no content words at all ("Why?", "Tell me more.").
//! * **Demonstrative**: "this policy", "that form", "those offices", "such requests": a
//!   demonstrative determiner whose noun was not named earlier in the question. "this year",
//!   "these days" and "those who ..." are not. "What is this policy's scope?" counts as a
//!   follow-up: in a conversation an unnamed "this policy" points at the one just discussed, and
//!   with no earlier turns the caller rewrites nothing anyway.
//! * **Pronoun**: it/they/them/he/she/him/her/his/its/their/this/that/these/those/there with no
//!   antecedent inside the question. A subject or possessive pronoun ("they", "its") is resolved
//!   by any earlier noun in the question; an object pronoun ("cover it", "approves them") only by
//!   a noun in an earlier clause (after a comma, "and", "if", "who", ...), since a pronoun object
//!   does not refer to its own clause's subject ("Does the travel policy cover it?" refers back).
//!   Expletive "it" ("Is it possible to ...", "How long does it take to ..."), existential
//!   "there" ("Is there a ...") and relative or complementiser "that" ("the form that managers
//!   sign", "say that contractors can ...") never count, nor does an acronym ("IT", "US").
//!
//! Measured on questions written as held-out checks before the rules saw them: 92% of
//! follow-ups detected, 96% of detections right (see the tests, which keep those questions).
//!
//! ```
//! use ragbox_core::conversation::follow_up::{refers_back, CueKind};
//! assert_eq!(refers_back("Who approves it?").map(|c| c.kind), Some(CueKind::Pronoun));
//! assert!(refers_back("What is the travel insurance limit for staff?").is_none());
//! ```

use serde::Serialize;

use crate::words::*;

/// What kind of reference back to the conversation a question makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CueKind {
    /// A pronoun with no antecedent in the question ("Who approves it?").
    Pronoun,
    /// A demonstrative determiner on a noun not named in the question ("that form").
    Demonstrative,
    /// A comparison with something earlier ("the other one", "the same client").
    Comparative,
    /// A continuation that leaves out what it is about ("And for contractors?", "Why?").
    Ellipsis,
    /// A reference to the conversation itself ("you said", "mentioned earlier").
    Deictic,
}

impl std::fmt::Display for CueKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            CueKind::Pronoun => "pronoun",
            CueKind::Demonstrative => "demonstrative",
            CueKind::Comparative => "comparative",
            CueKind::Ellipsis => "ellipsis",
            CueKind::Deictic => "deictic",
        })
    }
}

/// Why a question was judged to refer back: the kind of cue and the words that carry it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FollowUpCue {
    /// The kind of reference.
    pub kind: CueKind,
    /// The matched text, as written in the question.
    pub text: String,
}

impl std::fmt::Display for FollowUpCue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} \"{}\"", self.kind, self.text)
    }
}

// ---------------------------------------------------------------------------------------------
// Word lists (lowercase).


/// Words after which a content word is a noun even when it could be a verb ("the pay", "a claim").
const NOUN_MARKERS: &[&str] = &[
    "a", "an", "the", "my", "our", "your", "his", "her", "its", "their", "each", "every", "any", "some", "no", "all",
    "another", "which", "what", "whose", "this", "that", "these", "those", "such", "many", "much", "more", "most",
    "few", "several", "other", "same", "own",
];

/// Auxiliaries and modals: a pronoun followed by one is a subject.
const AUXILIARIES: &[&str] = &[
    "am", "is", "are", "was", "were", "be", "been", "do", "does", "did", "have", "has", "had", "can", "could", "will",
    "would", "shall", "should", "may", "might", "must", "not",
];

/// Words that separate clauses: an object pronoun may refer to a noun before one of these.
const CLAUSE_WORDS: &[&str] = &[
    "and", "or", "but", "if", "when", "whether", "because", "while", "although", "though", "unless", "once", "then",
    "so", "that", "which", "who", "whom", "whose", "where", "why", "how", "what", "after", "before", "until",
];


/// Adjectives of an expletive "it" ("Is it possible to ...").
const EXPLETIVE_WORDS: &[&str] = &[
    "possible", "impossible", "ok", "okay", "allowed", "permitted", "mandatory", "compulsory", "necessary",
    "required", "true", "legal", "illegal", "acceptable", "appropriate", "safe", "worth", "normal", "common",
    "reasonable", "better", "best", "easier", "easy", "harder", "hard", "difficult", "likely", "unlikely",
    "important", "advisable", "feasible", "fine", "alright", "wise", "needed", "essential", "expected", "usual",
    "standard", "matter", "matters", "take", "takes", "took", "cost", "costs", "enough", "too", "against", "right",
    "wrong", "clear", "known", "sensible", "like",
];

/// What introduces the extraposed clause of an expletive "it".
const EXPLETIVE_CLAUSE: &[&str] = &["to", "that", "whether", "if", "when"];

/// Words after "this"/"these" that make a time expression, not a reference ("this year").
const TIME_NOUNS: &[&str] = &[
    "year", "years", "month", "months", "week", "weeks", "quarter", "quarters", "term", "morning", "afternoon",
    "evening", "weekend", "season", "summer", "winter", "spring", "autumn", "semester", "fortnight", "financial",
    "fiscal", "calendar", "academic", "days", "time", "today", "tonight",
];

/// Words after "those"/"these" that make them generic ("those who work part-time").
const GENERIC_AFTER_THOSE: &[&str] = &[
    "who", "whom", "whose", "that", "which", "with", "without", "in", "on", "at", "of", "from", "under", "over",
    "aged", "employed", "working", "eligible", "affected", "living", "based",
];

/// Words before "that" that make it a complementiser ("say that ...", "true that ...").
const COMPLEMENT_TAKERS: &[&str] = &[
    "say", "says", "said", "mean", "means", "meant", "ensure", "ensures", "require", "requires", "required",
    "confirm", "confirms", "know", "think", "believe", "state", "states", "stated", "true", "clear", "likely",
    "possible", "given", "provided", "assuming", "except", "now", "so", "such", "decide", "decides", "decided",
    "agree", "agrees", "agreed", "note", "notes", "show", "shows", "check", "mandatory", "necessary", "important",
    "than", "specify", "specifies", "stipulate", "stipulates", "explain", "explains", "suggest", "suggests",
    "claim", "claims", "prove", "verify", "guarantee", "allow", "fact", "sure", "aware", "way", "order",
];

/// Verbs that, after "you", talk about the conversation ("you said").
const YOU_VERBS: &[&str] = &[
    "said", "say", "mentioned", "mention", "told", "listed", "quoted", "cited", "described", "gave", "suggested",
    "meant", "mean", "referred", "recommended", "just", "showed", "wrote", "answered", "linked", "explained",
    "brought", "previously", "earlier", "already", "raised", "noted", "stated",
];

/// Verbs that, after "we", talk about the conversation ("we discussed").
const WE_VERBS: &[&str] = &["discussed", "talked", "spoke", "covered", "mentioned", "went", "looked", "chatted"];

/// Nouns that, after "your" or "previous"/"last", name a part of the conversation.
const TURN_NOUNS: &[&str] = &[
    "answer", "answers", "reply", "replies", "response", "responses", "question", "questions", "message", "point",
    "points", "list", "summary", "example", "examples", "suggestion", "suggestions", "turn", "previous", "last",
    "earlier", "first", "second",
];

/// Words that make "earlier"/"above"/"previously" point into the conversation ("mentioned
/// earlier"); alone at the end they do not ("Can I start earlier?").
const MENTION_VERBS: &[&str] = &[
    "mentioned", "said", "discussed", "listed", "gave", "given", "quoted", "showed", "shown", "asked", "cited",
    "described", "told", "noted", "stated", "explained",
];

/// The comparand after "same ... as" that points back ("as last week", "as before").
const BACK_COMPARANDS: &[&str] = &[
    "before", "earlier", "above", "previously", "you", "we", "that", "this", "it", "those", "these", "them", "then",
    "usual", "mentioned", "discussed",
];



fn is_clause_break(t: &Tok) -> bool {
    if t.punct {
        is_in(CLAUSE_PUNCT, &t.w)
    } else {
        is_in(CLAUSE_WORDS, &t.w)
    }
}


/// Looks like a plural noun (cannot be the antecedent of "it").
fn looks_plural(w: &str) -> bool {
    w.len() > 3
        && w.ends_with('s')
        && !(w.ends_with("ss") || w.ends_with("us") || w.ends_with("is"))
        && !is_in(&["news", "series", "species", "means", "politics", "economics", "physics", "sales"], w)
}


/// The words of a question, with the helpers the rules need.
struct Question<'q> {
    text: &'q str,
    toks: Vec<Tok>,
}

impl<'q> Question<'q> {
    fn new(text: &'q str) -> Self {
        Question { text, toks: tokenize(text) }
    }

    fn w(&self, i: usize) -> &str {
        self.toks.get(i).map_or("", |t| t.w.as_str())
    }

    /// The word at `i`, or "" for punctuation and past the end.
    fn word(&self, i: usize) -> &str {
        match self.toks.get(i) {
            Some(t) if !t.punct => &t.w,
            _ => "",
        }
    }

    /// The token before `i` ("" at the start).
    fn prev(&self, i: usize) -> &str {
        if i == 0 {
            ""
        } else {
            self.w(i - 1)
        }
    }

    /// Whether nothing but punctuation follows `i`.
    fn is_last_word(&self, i: usize) -> bool {
        self.toks[i + 1..].iter().all(|t| t.punct)
    }

    /// The question's text from token `a` to token `b` (inclusive).
    fn span(&self, a: usize, b: usize) -> String {
        let (s, e) = (self.toks[a].start, self.toks[b.min(self.toks.len() - 1)].end);
        self.text[s..e.max(s)].to_string()
    }

    fn cue(&self, kind: CueKind, a: usize, b: usize) -> FollowUpCue {
        FollowUpCue { kind, text: self.span(a, b) }
    }

    fn is_content(&self, i: usize) -> bool {
        self.toks.get(i).is_some_and(|t| !t.punct && !is_stop(&t.w))
    }

    /// A content word that is a noun rather than a verb (by the word before it when ambiguous).
    fn is_noun(&self, i: usize) -> bool {
        if !self.is_content(i) || self.toks[i].w.chars().any(|c| c.is_ascii_digit()) {
            return false;
        }
        // A degree word ("how fast", "how soon", "how often") modifies, it names nothing.
        if self.prev(i) == "how" {
            return false;
        }
        if self.toks[i].cap && i > 0 {
            return true;
        }
        if !is_verb(&self.toks[i].w) {
            return true;
        }
        let p = self.prev(i);
        is_in(NOUN_MARKERS, p) || is_in(PREPOSITIONS, p)
    }

    /// Whether a noun before `i` (before a clause break, when `across_clause`) can be the
    /// antecedent of the pronoun at `i`.
    fn has_antecedent(&self, i: usize, across_clause: bool, singular: bool) -> bool {
        let end = if across_clause {
            match (0..i).rev().find(|&b| is_clause_break(&self.toks[b])) {
                Some(b) => b,
                None => return false,
            }
        } else {
            i
        };
        (0..end).any(|j| self.is_noun(j) && !(singular && looks_plural(&self.toks[j].w) && !self.toks[j].cap))
    }

    /// Whether the pronoun at `i` is a subject (followed by an auxiliary or a verb).
    fn is_subject(&self, i: usize) -> bool {
        let next = self.word(i + 1);
        is_in(AUXILIARIES, next) || is_verb(next)
    }

    /// "It" as in "Is it possible to ..." or "How long does it take to ...".
    fn is_expletive_it(&self, i: usize) -> bool {
        let mut k = i + 1;
        while is_in(&["is", "was", "be", "will", "not", "really", "always", "ever", "still", "generally"], self.word(k)) {
            k += 1;
        }
        is_in(EXPLETIVE_WORDS, self.word(k)) && (k + 1..self.toks.len()).any(|m| is_in(EXPLETIVE_CLAUSE, self.w(m)))
    }

    /// Whether the word at `i` (stemmed) occurs before `i`.
    fn named_before(&self, i: usize) -> bool {
        let s = stem(&self.toks[i].w);
        (0..i).any(|j| !self.toks[j].punct && stem(&self.toks[j].w) == s)
    }
}

// ---------------------------------------------------------------------------------------------
// Detection.

/// Why a question was judged to refer back to the conversation (for `--explain`), or `None`
/// when it is self-contained. See the module documentation for the rules.
pub fn refers_back(question: &str) -> Option<FollowUpCue> {
    let q = Question::new(question);
    if q.toks.iter().all(|t| t.punct) {
        return None;
    }
    comparative(&q).or_else(|| deictic(&q)).or_else(|| ellipsis(&q)).or_else(|| pronoun(&q)).or_else(|| no_content(&q))
}

/// Whether `question` is a what-if that continues a conversation ("What if I already deleted
/// some of the files?"): the follow-up detector reads it as self-contained, but after an answer
/// it asks about that answer's subject.
pub fn continues(question: &str) -> bool {
    let lower = question.trim().to_lowercase();
    ["what if ", "and if ", "but if ", "what happens if ", "and what if ", "but what if "].iter().any(|p| lower.starts_with(p))
}

fn deictic(q: &Question) -> Option<FollowUpCue> {
    for (i, t) in q.toks.iter().enumerate() {
        let next = q.word(i + 1);
        let hit = match t.w.as_str() {
            "you" => is_in(YOU_VERBS, next),
            "we" => is_in(WE_VERBS, next),
            "your" => is_in(TURN_NOUNS, next),
            "previous" | "last" | "prior" => {
                is_in(&["answer", "answers", "reply", "response", "question", "message", "point"], next)
            }
            "earlier" => {
                is_in(&["answer", "answers", "reply", "response", "question", "message", "point"], next)
                    || is_in(MENTION_VERBS, q.prev(i))
            }
            "as" | "like" => {
                is_in(&["before", "above", "previously", "earlier"], next)
                    || (next == "last" && is_in(&["week", "time", "session"], q.word(i + 2)))
            }
            "previously" => is_in(MENTION_VERBS, q.prev(i)),
            // "listed above", "the above", or last ("the figures above?"), but not "grade 7 and above".
            "above" => {
                is_in(&["the", "as", "see"], q.prev(i))
                    || is_in(MENTION_VERBS, q.prev(i))
                    || (q.is_last_word(i) && !is_in(&["and", "or"], q.prev(i)))
            }
            "above-mentioned" | "abovementioned" | "aforementioned" => true,
            _ => false,
        };
        if hit {
            let end = if is_in(&["you", "we", "your", "previous", "last", "earlier", "prior", "as", "like"], &t.w) {
                i + 1
            } else {
                i
            };
            return Some(q.cue(CueKind::Deictic, i, end));
        }
    }
    None
}

fn comparative(q: &Question) -> Option<FollowUpCue> {
    let n = q.toks.len();
    for (i, t) in q.toks.iter().enumerate() {
        let next = q.word(i + 1);
        let the = q.prev(i) == "the";
        let from = if the { i - 1 } else { i };
        match t.w.as_str() {
            "same" => {
                // "at the same time" is an idiom, not a comparison.
                if q.prev(i.saturating_sub(1)) == "at" && the && next == "time" {
                    continue;
                }
                // An explicit comparand in the same sentence ("the same as statutory sick pay")
                // makes it self-contained, unless the comparand itself points back.
                let stop = (i + 1..n).find(|&k| q.toks[k].punct && q.toks[k].w != ",").unwrap_or(n);
                // "Is the policy on gifts the same for suppliers and clients?": both sides named.
                if (0..i).any(|j| q.is_noun(j)) && (i + 1..stop).any(|k| q.w(k) == "and" || q.w(k) == "or") {
                    continue;
                }
                if let Some(k) = (i + 1..stop).find(|&k| q.toks[k].w == "as") {
                    let c = q.word(k + 1);
                    let back = is_in(BACK_COMPARANDS, c) || (c == "last" && is_in(&["week", "time", "session"], q.word(k + 2)));
                    if !back {
                        continue;
                    }
                }
                let end = if q.is_content(i + 1) { i + 1 } else { i };
                return Some(q.cue(CueKind::Comparative, from, end));
            }
            "other" | "others" if the => {
                if q.prev(i.saturating_sub(1)) == "on" && next == "hand" {
                    continue;
                }
                let end = if q.is_content(i + 1) || next == "one" || next == "ones" { i + 1 } else { i };
                return Some(q.cue(CueKind::Comparative, from, end));
            }
            "latter" if the => return Some(q.cue(CueKind::Comparative, from, i)),
            "former" if the && (!q.is_content(i + 1) || is_in(&["option", "choice", "case"], next)) => {
                return Some(q.cue(CueKind::Comparative, from, i))
            }
            "one" | "ones" if i > 0 => {
                let p = q.prev(i);
                // "which one" (not "which one of the ..."), "the first one", "the cheaper one".
                if p == "which" && next != "of" {
                    return Some(q.cue(CueKind::Comparative, i - 1, i));
                }
                if i >= 2 && q.w(i - 2) == "the" && q.is_content(i - 1) {
                    return Some(q.cue(CueKind::Comparative, i - 2, i));
                }
            }
            "both" | "either" | "neither" => {
                let pair = match t.w.as_str() {
                    "both" => "and",
                    "either" => "or",
                    _ => "nor",
                };
                let named = (i + 1..n).any(|k| q.toks[k].w == pair);
                if !named && !q.is_noun(i + 1) {
                    return Some(q.cue(CueKind::Comparative, i, i));
                }
            }
            "instead" if q.is_last_word(i) => return Some(q.cue(CueKind::Comparative, i, i)),
            "rest" if the && next != "of" => return Some(q.cue(CueKind::Comparative, from, i)),
            _ => {}
        }
    }
    None
}

fn ellipsis(q: &Question) -> Option<FollowUpCue> {
    let words: Vec<usize> = (0..q.toks.len()).filter(|&i| !q.toks[i].punct).collect();
    let first = *words.first()?;
    let w0 = q.w(first);
    let w1 = words.get(1).map_or("", |&i| q.w(i));
    if (words.len() >= 2 && is_in(&["and", "or", "but", "also", "plus", "then"], w0))
        || (words.len() <= 4 && w0 == "so")
        || (words.len() <= 3 && w0 == "which")
        || (words.len() <= 3 && is_in(&["any", "anything", "anyone"], w0))
    {
        return Some(q.cue(CueKind::Ellipsis, first, first));
    }
    if ((w0 == "what" || w0 == "how") && w1 == "about")
        || (w0 == "what" && w1 == "of")
        || (w0 == "same" && is_in(&["for", "with", "goes"], w1))
    {
        return Some(q.cue(CueKind::Ellipsis, first, words[1]));
    }
    // A bare prepositional phrase: "For contractors?", "In the Leeds office?".
    if words.len() <= 5 && is_in(PREPOSITIONS, w0) && !words.iter().any(|&i| is_in(AUXILIARIES, q.w(i))) {
        return Some(q.cue(CueKind::Ellipsis, first, *words.last().unwrap_or(&first)));
    }
    None
}

fn pronoun(q: &Question) -> Option<FollowUpCue> {
    for (i, t) in q.toks.iter().enumerate() {
        if t.punct {
            continue;
        }
        let next = q.word(i + 1);
        let unresolved = match t.w.as_str() {
            "it" => !q.is_expletive_it(i) && !q.has_antecedent(i, !q.is_subject(i), true),
            "its" => !q.has_antecedent(i, false, true),
            "they" | "their" | "theirs" => !q.has_antecedent(i, false, false),
            "he" | "she" | "his" | "hers" => !q.has_antecedent(i, false, true),
            "them" | "him" => !q.has_antecedent(i, true, false),
            "her" => {
                let possessive = q.is_content(i + 1);
                !q.has_antecedent(i, !possessive, true)
            }
            "there" => {
                let existential = is_in(&["is", "are", "was", "were", "be", "been"], q.prev(i))
                    || (is_in(AUXILIARIES, next) && !is_in(&["do", "does", "did", "not"], next));
                !existential && !q.has_antecedent(i, true, false)
            }
            "such" if next != "as" && next != "that" && (q.is_content(i + 1) || next == "a" || next == "an") => {
                return Some(q.cue(CueKind::Demonstrative, i, i + 1));
            }
            "this" | "these" | "those" | "that" => {
                if let Some(cue) = demonstrative(q, i) {
                    return Some(cue);
                }
                false
            }
            _ => false,
        };
        if unresolved {
            return Some(q.cue(CueKind::Pronoun, i, i));
        }
    }
    None
}

/// "this"/"that"/"these"/"those" at `i`: a determiner on an unnamed noun, or a pronoun with no
/// antecedent; `None` for time expressions, generic "those who", relative and complementiser
/// "that", and resolved uses.
fn demonstrative(q: &Question, i: usize) -> Option<FollowUpCue> {
    let w = q.w(i);
    let next = q.word(i + 1);
    let plural = w == "these" || w == "those";
    if (w == "this" || w == "these") && is_in(TIME_NOUNS, next) {
        return None;
    }
    if plural && is_in(GENERIC_AFTER_THOSE, next) {
        return None;
    }
    if w == "that" && !q.is_last_word(i) {
        let prev = q.prev(i);
        let opens = i == 0
            || q.toks[i - 1].punct
            || is_in(AUXILIARIES, prev)
            || is_in(PREPOSITIONS, prev)
            || is_in(&["and", "or", "but", "if", "what", "which", "who", "where", "when", "why", "how", "like"], prev);
        if !opens {
            // "What did you base that on?", "Who signed that off?": a pronoun before a final particle.
            let particle = (is_in(PREPOSITIONS, next) || is_in(&["off", "up", "out", "back"], next)) && q.is_last_word(i + 1);
            if !particle && (is_in(COMPLEMENT_TAKERS, prev) || q.is_noun(i - 1) || !is_verb(prev)) {
                return None; // relative ("the form that ...") or complementiser ("say that ...")
            }
            // After a verb: a determiner only in "approves that contract?" / "that contract from X".
            let after = q.w(i + 2);
            let closes = q.toks.get(i + 2).is_none_or(|t| t.punct) || is_in(PREPOSITIONS, after) || is_in(CLAUSE_WORDS, after);
            if !(particle || (q.is_noun(i + 1) && closes)) {
                return None;
            }
        }
    }
    if next == "one" || next == "ones" {
        return Some(q.cue(CueKind::Demonstrative, i, i + 1));
    }
    // A determiner on a noun ("this policy"); a word that may be a verb ("that request", "does
    // that apply") is read as the pronoun's neighbour instead, which refers back all the same.
    if q.is_content(i + 1) && !is_verb(next) {
        if q.named_before(i + 1) {
            return None;
        }
        return Some(q.cue(CueKind::Demonstrative, i, i + 1));
    }
    let resolved = if q.is_subject(i) {
        q.has_antecedent(i, false, !plural)
    } else {
        q.has_antecedent(i, true, !plural)
    };
    (!resolved).then(|| q.cue(CueKind::Pronoun, i, i))
}

/// A short question with no content words at all: "Why?", "How so?", "Which one?", "Tell me
/// more." ("What can you do?" is about ragbox itself and does not count.)
fn no_content(q: &Question) -> Option<FollowUpCue> {
    let words: Vec<&str> = q.toks.iter().filter(|t| !t.punct).map(|t| t.w.as_str()).collect();
    if words.len() > 6 || words.iter().any(|w| !is_stop(w) && !is_in(CONTINUATION_WORDS, w)) {
        return None;
    }
    let to_ragbox = words.iter().any(|w| *w == "you" || *w == "your");
    let continues = words.iter().any(|w| is_in(CONTINUATION_WORDS, w) && !is_stop(w))
        || words.iter().all(|w| is_in(CONTINUATION_WORDS, w));
    if to_ragbox && !continues {
        return None;
    }
    Some(q.cue(CueKind::Ellipsis, 0, q.toks.len() - 1))
}


#[cfg(test)]
mod tests {
    use super::*;

    // Precision and recall. The rules were written against FOLLOW_UPS and SELF_CONTAINED (40
    // each; all pass). Then three sets were written before running them, as held-out checks:
    // round 1 (32 follow-ups / 35 self-contained): 29/32 detected, 1/35 falsely flagged ("IT"
    // read as a pronoun); round 2 (22 / 35): 20/22 detected, 2/35 falsely flagged; round 3
    // (20 / 20): 19/20 detected, 0/20 falsely flagged. Held out, that is 68/74 follow-ups
    // detected (92% recall) and 3/90 self-contained questions flagged (precision 68/71 = 96%).
    // Each miss was then fixed and all rounds are kept below as regression cases: every case
    // now passes (100% precision and recall on the 114 follow-ups and 130 self-contained
    // questions here; expect the held-out figures on new text).

    /// Follow-ups that must be detected, with the kind of cue expected.
    const FOLLOW_UPS: &[(&str, CueKind)] = &[
        ("Who approves it?", CueKind::Pronoun),
        ("When does that apply?", CueKind::Pronoun),
        ("And for contractors?", CueKind::Ellipsis),
        ("What about the other one?", CueKind::Comparative),
        ("Is the same true for the Leeds office?", CueKind::Comparative),
        ("Same client as last week — what did we agree?", CueKind::Comparative),
        ("How long does it take?", CueKind::Pronoun),
        ("How soon must they reply once a request arrives?", CueKind::Pronoun),
        ("Does the travel policy cover them?", CueKind::Pronoun),
        // Debatable; counted as a follow-up (see the module docs).
        ("What is this policy's scope?", CueKind::Demonstrative),
        ("Can they carry over unused days?", CueKind::Pronoun),
        ("What did you say the deadline was?", CueKind::Deictic),
        ("Which of those applies to part-time staff?", CueKind::Pronoun),
        ("How about remote workers?", CueKind::Ellipsis),
        ("Is there a form for that?", CueKind::Pronoun),
        ("What is its retention period?", CueKind::Pronoun),
        ("Why?", CueKind::Ellipsis),
        ("In the Leeds office?", CueKind::Ellipsis),
        ("Who signed that contract?", CueKind::Demonstrative),
        ("Does the latter require manager approval?", CueKind::Comparative),
        ("Can you explain the second option you mentioned?", CueKind::Deictic),
        ("Tell me more.", CueKind::Ellipsis),
        ("Do both need sign-off from finance?", CueKind::Comparative),
        ("Where do I send it once it's signed?", CueKind::Pronoun),
        ("Does her team follow the same rules?", CueKind::Comparative),
        ("Who should I contact there?", CueKind::Pronoun),
        ("What was the limit you quoted earlier?", CueKind::Deictic),
        ("Is the limit different for such trips?", CueKind::Demonstrative),
        ("But what if the employee is abroad?", CueKind::Ellipsis),
        ("Does this also cover contractors?", CueKind::Pronoun),
        ("What about the client we discussed last week?", CueKind::Deictic),
        ("Which one applies to contractors?", CueKind::Comparative),
        ("For how long?", CueKind::Ellipsis),
        ("Is it mandatory?", CueKind::Pronoun),
        ("What does the handbook say about it?", CueKind::Pronoun),
        ("Who approves that request?", CueKind::Pronoun),
        ("Can I use a personal card instead?", CueKind::Comparative),
        ("What's the deadline for those forms?", CueKind::Demonstrative),
        ("Does it apply to contractors?", CueKind::Pronoun),
        ("What do you mean?", CueKind::Deictic),
        ("Is the leave allowance the same as before?", CueKind::Comparative),
    ];

    /// Self-contained questions that must not be detected.
    const SELF_CONTAINED: &[&str] = &[
        "What is the travel insurance limit for staff?",
        "How many days of annual leave do employees get?",
        "What does the data retention policy say about e-mail and how long is it kept?",
        "Which office handles payroll?",
        "Is it possible to carry over unused annual leave into next year?",
        "Is there a dress code for client meetings?",
        "How many days of leave do I have left this year?",
        "What is the form that managers sign for overtime?",
        "Does the policy say that contractors can work remotely?",
        "Can staff bring their children to the office?",
        "If a laptop is lost, who pays to replace it?",
        "Do employees who work from home get an equipment allowance?",
        "How long does it take to get an expense claim reimbursed?",
        "What is the notice period for permanent staff in the London office?",
        "Who is responsible for fire safety at the Leeds site?",
        "Does each department set its own training budget?",
        "When employees resign, what happens to their pension contributions?",
        "What is the maximum hotel rate for business travel in Europe?",
        "Does the parental leave policy apply to both mothers and fathers?",
        "Are those who work part-time entitled to sick pay?",
        "How do I report a data breach and who should I tell about it?",
        "What are the rules for claiming mileage on a personal car?",
        "Is it mandatory for new starters to complete security training?",
        "What should I do if my laptop is stolen while travelling?",
        "Who do I ask about the pension scheme?",
        "What counts as gross misconduct under the disciplinary policy?",
        "Which expenses need a receipt, and how long must they be kept?",
        "What happens to unused holiday when someone leaves the company?",
        "What is the policy on using personal phones for work e-mail?",
        "How much parental leave can a father take, and is it paid?",
        "What can you tell me about the travel policy?",
        "Can you summarise the remote working policy?",
        "Is statutory sick pay the same as company sick pay?",
        "Can I book two days off at the same time as a bank holiday?",
        "Which one of the pension schemes has the lower fees?",
        "What is the policy on claiming expenses above £500?",
        "When did Sarah say she would return the signed lease?",
        "Does the bonus scheme pay out this quarter?",
        "Is the VPN required when working from a hotel?",
        "What is it like to work in the Manchester office?",
    ];

    /// Held-out follow-ups (rounds 1-3), checked for detection only.
    const MORE_FOLLOW_UPS: &[&str] = &[
        "Does that include weekends?", "What if they refuse?", "Can she appeal?", "Is that before or after tax?",
        "How do I apply for it?", "And the deadline?", "Who else needs to sign it?", "What about part-timers?",
        "Is the other form shorter?", "Can I claim those back?", "Does the same apply to interns?",
        "What was the figure you gave?", "Where is it kept?", "What happens if I miss it?", "Why not?", "During probation?",
        "Are these taxable?", "Do they get the same allowance?", "Which form did you mention?", "Can you give an example?",
        "Is that still current?", "What did the second one say?", "Does his manager need to approve?",
        "Who do I send them to?", "Is there an exception for that?", "How much is it?", "Or by train?", "Any exceptions?",
        "How often?", "So who pays?", "What are its limits?", "Is this mandatory for contractors too?",
        "Does that cover flights as well?", "What if I lose them?", "Is he allowed to?", "Can I do that remotely?",
        "Who decides that?", "And if the manager is away?", "Are they covered by the same insurance?", "Which is cheaper?",
        "Is the first one still valid?", "How did you calculate that?", "What about Scotland?", "Does it need to be signed?",
        "What is the deadline for it?", "Under which section?", "Could you clarify?", "Do I need to tell them?",
        "What did the policy you cited say about refunds?", "Are those rules the same in Leeds?", "What does it cost?",
        "Where do I find that form?", "Which one is newer?", "Then who signs off?", "Is it taxable?", "Who pays for them?",
        "Can I appeal against it?", "Does the other office do it differently?", "What's the limit there?",
        "How about for directors?", "Is that the latest version?", "Do they need a visa?", "Where can I read more about it?",
        "And after probation?", "Are they paid?", "What did you base that on?", "When was this last updated?",
        "Is the same form used?", "Who wrote it?", "Is her approval enough?", "What if it's rejected?",
        "Which of these is mandatory?", "Does either need a receipt?", "With a doctor's note?",
    ];

    /// Held-out self-contained questions (rounds 1-3).
    const MORE_SELF_CONTAINED: &[&str] = &[
        "What is the procedure for reporting a workplace injury?", "Who approves overtime for hourly staff?",
        "How do I request a new laptop and how long does it take to arrive?", "Can contractors access the staff canteen?",
        "What is the company policy on working from abroad?", "Is there a limit on client entertainment spending?",
        "What is the per diem for travel to New York?", "Do new employees get a probation review after six months?",
        "What documents do I need to submit with an expense claim?", "How is the annual bonus calculated?",
        "Which holidays does the company observe this year?", "Are employees allowed to use company cars for personal trips?",
        "When does the open enrolment period for benefits start?", "Does the code of conduct cover social media posts?",
        "If an employee is injured at work, who must they notify?",
        "What training must managers complete before they can hire?", "Is it required that visitors sign in at reception?",
        "Can I carry over my unused leave to next year?",
        "What should a manager do when an employee reports harassment to them?",
        "How do I change my bank details for payroll?", "Who is the data protection officer?",
        "What is the retention period for invoices?", "Are pets allowed in the office?",
        "How many sick days can I take without a doctor's note?", "What is the maximum I can spend on a client gift?",
        "Is it true that the office closes early on Fridays?", "Does the pension scheme match employee contributions?",
        "What is the escalation path for IT security incidents?", "When will the new travel policy take effect?",
        "How should staff store confidential documents when they work from home?", "Do interns get paid holiday?",
        "Which managers can approve purchases above £10,000?", "Can I expense a taxi home after working late?",
        "What does the whistleblowing policy say about anonymity?",
        "What are the rules on outside employment and do I need to declare it?",
        "Who do I contact if my payslip is wrong?", "How do I book a meeting room?", "What counts as a conflict of interest?",
        "Is there parking at the Leeds office?", "Which forms must a new starter complete on their first day?",
        "How long is the notice period and can it be shortened?", "Can a manager refuse a flexible working request?",
        "What do I do if I find a security vulnerability in our website?", "Is it OK to share my screen with a client?",
        "Do staff need approval before they travel abroad?", "What happens to my pension if I leave the company?",
        "How are expenses reimbursed to those working remotely?",
        "Who owns the intellectual property of work I do at home?",
        "Are employees reimbursed for broadband when they work from home?",
        "Do managers have to approve timesheets every week?",
        "What is the difference between gross misconduct and misconduct?",
        "How do I report an expense that was paid twice?", "What does HR need from me when I return from sick leave?",
        "Can I use AI tools like ChatGPT for customer data?", "Is the staff discount available to family members?",
        "What should I do with a lost visitor badge and who do I give it to?", "When are salaries paid each month?",
        "What is the procedure when a client complains about an invoice?",
        "Do interns receive the same benefits as permanent employees?", "Is eye test cost covered for screen users?",
        "How many people can attend the summer party?",
        "Does the company pay for professional memberships and how do I claim them?", "What is this year's pay rise?",
        "Are there any restrictions on political activity outside work?",
        "What is the policy if an employee's visa expires?", "Can I take my laptop to the US?",
        "How should I respond if a journalist contacts me?", "Which team handles data subject access requests?",
        "Do employees get time off for jury service?", "Is the policy on gifts the same for suppliers and clients?",
        "Can I bring a guest to the staff party?", "What happens if I miss the deadline for my annual review?",
        "Who approves requests for unpaid leave?", "How do I update my emergency contact details?",
        "What is the dress code on Fridays?", "Is working from home allowed during the notice period?",
        "What equipment does IT provide to new starters?", "Do contractors have to follow the code of conduct?",
        "How do I get reimbursed for a train ticket I bought myself?", "What is the approval limit for team leads?",
        "Can employees sell their unused holiday back to the company?",
        "Which insurance covers equipment stolen from a car?",
        "What is the process when someone is off sick for more than a week?", "When do I get my P60?",
        "Does the firm offer a cycle-to-work scheme?", "Is smoking permitted anywhere on site?",
        "How much notice must I give before taking parental leave?", "What are the core hours for flexible working?",
        "Who should visitors report to when they arrive?", "Are personal devices allowed on the corporate network?",
    ];

    #[test]
    fn held_out_rounds_stay_correct() {
        let missed: Vec<&str> = MORE_FOLLOW_UPS.iter().copied().filter(|q| refers_back(q).is_none()).collect();
        assert!(missed.is_empty(), "follow-ups missed: {missed:#?}");
        let flagged: Vec<String> =
            MORE_SELF_CONTAINED.iter().filter_map(|q| refers_back(q).map(|cue| format!("{q}: {cue}"))).collect();
        assert!(flagged.is_empty(), "self-contained flagged: {flagged:#?}");
    }

    #[test]
    fn follow_ups_are_detected() {
        let mut wrong = Vec::new();
        for (q, kind) in FOLLOW_UPS {
            match refers_back(q) {
                Some(cue) if cue.kind == *kind => assert!(!cue.text.is_empty() && q.contains(&cue.text), "{q}: {cue}"),
                other => wrong.push(format!("{q}: expected {kind}, got {other:?}")),
            }
        }
        assert!(wrong.is_empty(), "{} of {} follow-ups missed:\n{}", wrong.len(), FOLLOW_UPS.len(), wrong.join("\n"));
    }

    #[test]
    fn self_contained_questions_are_not() {
        let wrong: Vec<String> =
            SELF_CONTAINED.iter().filter_map(|q| refers_back(q).map(|cue| format!("{q}: {cue}"))).collect();
        assert!(wrong.is_empty(), "{} of {} self-contained flagged:\n{}", wrong.len(), SELF_CONTAINED.len(), wrong.join("\n"));
    }

    #[test]
    fn cues_quote_the_question() {
        let cue = refers_back("Same client as last week — what did we agree?").unwrap();
        assert_eq!(cue.text, "Same client");
        assert_eq!(refers_back("What about the other one?").unwrap().text, "the other one");
        assert_eq!(refers_back("Who approves it?").unwrap().to_string(), "pronoun \"it\"");
        assert_eq!(serde_json::to_value(refers_back("Why?").unwrap()).unwrap()["kind"], "ellipsis");
        assert!(refers_back("").is_none() && refers_back("  ?! ").is_none());
    }
}
