//! Grounded answers: the evidence of the retrieved passages is quoted and cited, or the
//! generator's reply becomes an answer whose every sentence carries checked citations and a
//! support flag. The question arrives standalone (the conversation module rewrites follow-ups).
//!
//! May import `types`, `error`, `words`, `chunk`, `embed`, `rerank`, `store`, `retrieve` and
//! `generate`.
//!
//! The flow of [`Answerer::answer`]: when retrieval refused (nothing cleared the floor) no
//! generator is called and the answer says so, listing the closest material as such; otherwise
//! the top passages go into the prompt (most relevant first, each with a short id), tokens
//! stream to the caller, citations are parsed and checked against the ids given (unknown ids
//! removed and reported), each valid id is mapped back to its chunk, and every sentence is
//! scored against the passages it cites.

pub mod cite;
pub mod evidence;
pub mod focus;
pub mod prompt;
pub mod quote;
pub mod segment;
pub mod support;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;

use crate::embed::Embedder;
use crate::error::Result;
use crate::rerank::Reranker;
use crate::generate::{GenerateRequest, Generator, TokenSink};
use crate::retrieve::{Hit, Retrieval};
use crate::store::ChunkRow;
use crate::types::{ChunkId, DocId, Lines, Span};

use cite::{parse_answer, strip_markers};
use evidence::{AnswerOutcome, Decision};
use focus::FocusScorer;
use prompt::{answer_messages_in, is_no_answer, PromptPassage};
use support::{Claim, SupportChecker, SupportMethod};

/// What the answer says when the generator wrote nothing but citation markers.
pub const NO_ANSWER_WRITTEN: &str = "The model wrote no answer from the passages it was given; the closest ones are listed below.";

/// What the answer says when no sentence the generator wrote is supported by the passages it
/// cites and no passage sentence clears the quote floor: the reply is withheld, not shown as an
/// answer (its sentences and their reasons stay in [`Answer::sentences`]).
pub const NO_SUPPORTED_ANSWER: &str =
    "The passages do not support the answer the model wrote, so it is not given as one; the closest passages are listed below.";

/// What the answer says when retrieval found no good source.
pub const NO_GOOD_SOURCE: &str = "I found no good source for this in your documents, so I will not answer it.";

/// Answer settings (from `[answer]` and `[generate]`).
#[derive(Debug, Clone, Serialize)]
pub struct AnswerOptions {
    /// Passages in the prompt.
    pub passages: usize,
    /// Most characters of one passage.
    pub passage_chars: usize,
    /// Most tokens generated.
    pub max_tokens: usize,
    /// 0: greedy.
    pub temperature: f64,
    /// Below this support score a cited sentence is flagged.
    pub support_floor: f32,
    /// The prompt's layout.
    pub prompt: prompt::AnswerPrompt,
    /// Sentences (list items, table rows) of the passages shown to the generator: those closest
    /// to the question, at most [`focus::PER_PASSAGE`] per passage; 0 shows whole passages.
    pub focus: usize,
    /// Which model scores the sentences against the question.
    pub focus_by: focus::FocusBy,
    /// Who writes the answer when the tenant has the cross-encoder.
    pub reader: evidence::Reader,
}

impl Default for AnswerOptions {
    fn default() -> Self {
        AnswerOptions { passages: 5, passage_chars: 800, max_tokens: 96, temperature: 0.0, support_floor: 0.65, prompt: prompt::AnswerPrompt::default(), focus: 4, focus_by: focus::FocusBy::default(), reader: evidence::Reader::default() }
    }
}


/// A passage given to the generator, and where it lives.
#[derive(Debug, Clone, Serialize)]
pub struct Source {
    /// The citation id the prompt gave it (1-based).
    pub id: usize,
    /// The chunk whose text was given: the parent section when siblings were merged, else the
    /// retrieved child.
    pub chunk: ChunkId,
    /// The retrieved child that matched the question.
    pub matched_chunk: ChunkId,
    /// The matched child's byte range in the document's normalised text (inside `span` when
    /// the passage is its merged section).
    pub matched_span: Span,
    /// Its document.
    pub doc: DocId,
    /// The document's path.
    pub document: PathBuf,
    /// The document's title.
    pub title: String,
    /// Heading breadcrumb.
    pub section_path: Vec<String>,
    /// Byte range of the passage in the document's normalised text.
    pub span: Span,
    /// Page, for paged formats.
    pub page: Option<u32>,
    /// Lines.
    pub lines: Lines,
    /// Retrieval's score for it.
    pub score: f32,
    /// The text given (cut to the passage budget).
    pub text: String,
    /// What the generator read of it when the prompt is focused (its sentences closest to the
    /// question); `None` when it read the whole `text`, or nothing of it (see [`Prompt`]).
    pub shown: Option<String>,
}

/// A checked citation: an id the generator used that names a passage it was given.
#[derive(Debug, Clone, Serialize)]
pub struct Citation {
    /// The id as cited.
    pub id: usize,
    /// The chunk cited.
    pub chunk: ChunkId,
    /// Its document's path.
    pub document: PathBuf,
    /// The document's title.
    pub title: String,
    /// Heading breadcrumb.
    pub section_path: Vec<String>,
    /// Byte range in the document's normalised text.
    pub span: Span,
    /// Page, for paged formats.
    pub page: Option<u32>,
}

/// One sentence of the answer and its support.
#[derive(Debug, Clone, Serialize)]
pub struct Sentence {
    /// The sentence, citation markers included.
    pub text: String,
    /// The valid ids it cites.
    pub citations: Vec<usize>,
    /// False when no cited passage supports it (or it cites nothing).
    pub supported: bool,
    /// The support score (method in [`Answer::support_method`]); `None` when it cites nothing.
    pub support: Option<f32>,
    /// Why it is flagged (`None` when supported): what the page and the CLI show.
    pub reason: Option<String>,
}

/// Why an answer was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Refusal {
    /// Retrieval found nothing above the floor; no generator was called.
    NoGoodSource,
    /// The generator read the passages and said they do not answer the question.
    PassagesDoNotAnswer,
    /// The generator's reply held citation markers and nothing else ("[1] [2]"), on the second
    /// try as well, or only restated the question ([`quote::restates`]), and no passage
    /// sentence cleared the quote floor: no answer was written, and none is made up in its place.
    NoAnswerWritten,
    /// No sentence of the generator's reply is supported by the passages it cites, and no
    /// passage sentence cleared the quote floor: the reply is withheld ([`NO_SUPPORTED_ANSWER`]);
    /// its flagged sentences, with their reasons, stay in [`Answer::sentences`].
    Unsupported,
    /// The passages are about the question's subject, but the answerability decision found that
    /// they do not give what it asks ([`evidence::decide`]); no generator was called, and the
    /// answer says what the closest passage covers.
    DocumentsDoNotSay,
}

impl Refusal {
    /// The outcome a reader is shown for it.
    pub fn outcome(self) -> AnswerOutcome {
        match self {
            Refusal::NoGoodSource => AnswerOutcome::NoGoodSource,
            _ => AnswerOutcome::DoesNotSay,
        }
    }
}

/// Milliseconds per stage, and generation speed.
#[derive(Debug, Clone, Default, Serialize)]
pub struct AnswerTimings {
    /// Retrieval (all its stages).
    pub retrieve_ms: f64,
    /// Rewriting a follow-up question.
    pub rewrite_ms: f64,
    /// Waiting, after retrieval, for the LLM to be ready: the rest of its load when this answer
    /// started it (a first question in a fresh process), else ~0.
    pub model_wait_ms: f64,
    /// Building the prompt: the focused passages' sentences embedded and scored; for an
    /// evidence-first answer, every unit scored and the answerability decision.
    pub focus_ms: f64,
    /// From the generation request to the first token; for an evidence-first answer, from the
    /// end of retrieval to the answer's first streamed text.
    pub first_token_ms: f64,
    /// Generation, start to end.
    pub generate_ms: f64,
    /// The support check.
    pub support_ms: f64,
    /// From the question to the finished answer.
    pub total_ms: f64,
    /// Prompt tokens.
    pub prompt_tokens: usize,
    /// Tokens generated.
    pub completion_tokens: usize,
    /// Decoding speed after the first token.
    pub tokens_per_second: f64,
}

/// A finished answer.
#[derive(Debug, Clone, Serialize)]
pub struct Answer {
    /// The answer log row's id (what `ragbox feedback` takes); set once recorded.
    pub answer_id: Option<i64>,
    /// The question as asked.
    pub question: String,
    /// The question retrieval saw (differs when a follow-up was rewritten).
    pub standalone: String,
    /// The answer text, invalid citations removed.
    pub answer: String,
    /// Answered, the documents do not say, or no good source.
    pub outcome: AnswerOutcome,
    /// The answerability decision (evidence-first answers): its score, signals and evidence.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decision: Option<Decision>,
    /// A yes/no question's verdict ("Yes"/"No"), when the generator's log-odds on the evidence
    /// clear [`VERDICT_YES`] or [`VERDICT_NO`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verdict: Option<String>,
    /// The generator's log-odds of "Yes" over "No" for a yes/no question's evidence.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verdict_log_odds: Option<f32>,
    /// Valid citations, in order of first use.
    pub citations: Vec<Citation>,
    /// Ids the generator cited that it was not given; removed from the text.
    pub invalid_citations: Vec<String>,
    /// The answer's sentences with their citations and support flags.
    pub sentences: Vec<Sentence>,
    /// True when there was no good source.
    pub refused: bool,
    /// Why, when refused.
    pub refusal: Option<Refusal>,
    /// When refused: the closest material, which is not a source.
    pub closest: Vec<Source>,
    /// The passages the generator was given.
    pub sources: Vec<Source>,
    /// The generator, or `None` when none was called.
    pub model: Option<String>,
    /// Where the generator ran (`local`, `openai 10.0.0.5:8080`, a fallback and why), when one
    /// was called.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub written_by: Option<String>,
    /// How support was checked.
    pub support_method: SupportMethod,
    /// Time per stage.
    pub timings: AnswerTimings,
    /// Generation stopped at the token cap (`generate.max_tokens`): the answer may be cut short.
    pub hit_token_cap: bool,
    /// The token cap stopped the answer mid-sentence: that unfinished sentence is left out of
    /// `answer` and `sentences` (it was streamed), or, when it was the only one, ends in "…".
    pub cut_mid_sentence: bool,
    /// The first reply held no words (only citation markers or bracketed text) and the model was asked again:
    /// without the marker rule when that reply named passages ([`prompt::plain_messages`]), then,
    /// if still without words, on whole passages with the short rule
    /// ([`prompt::retry_messages`]); timings and token counts add up every request.
    pub second_try: bool,
    /// The messages of every request the generator was sent, in order (for `--explain`: the
    /// prompt as it was, not rebuilt). Not serialised.
    #[serde(skip)]
    pub prompts: Vec<Vec<crate::generate::Message>>,
}

impl Answer {
    /// The passages served: those given to the generator, or the closest material when refused.
    pub fn served(&self) -> &[Source] {
        if self.sources.is_empty() {
            &self.closest
        } else {
            &self.sources
        }
    }

    /// The chunk ids of [`Answer::served`].
    pub fn served_chunks(&self) -> Vec<ChunkId> {
        self.served().iter().map(|s| s.chunk).collect()
    }
}

/// Cuts `text` to at most `max_chars` characters, at a word boundary when one is near.
fn cut(text: &str, max_chars: usize) -> String {
    match text.char_indices().nth(max_chars) {
        None => text.to_string(),
        Some((end, _)) => {
            let head = &text[..end];
            let at = head.rfind(char::is_whitespace).filter(|&i| i > end / 2).unwrap_or(end);
            format!("{}…", head[..at].trim_end())
        }
    }
}

/// The passage of a hit given to the generator: its merged section when that fits the budget,
/// else the matched child.
fn source_of(id: usize, hit: &Hit, max_chars: usize) -> Source {
    let row: &ChunkRow = match &hit.section {
        Some(section) if section.text.chars().count() <= max_chars => section,
        _ => &hit.chunk,
    };
    Source {
        id,
        chunk: row.id,
        matched_chunk: hit.chunk.id,
        matched_span: hit.chunk.span,
        doc: row.doc,
        document: row.path.clone(),
        title: row.title.clone(),
        section_path: row.section_path.clone(),
        span: row.span,
        page: row.page,
        lines: row.lines,
        score: hit.score,
        text: cut(&row.text, max_chars),
        shown: None,
    }
}

/// How many times `passage_chars` a passage may hold when the generator reads only its focused
/// sentences: the budget then bounds what is read, not where the sentences are taken from. Cut
/// at 800 characters before focusing, the evidence sentence was past the cut for a third of
/// the held-out questions whose evidence retrieval had found (docs/EVAL.md).
pub const FOCUS_READS: usize = 4;

/// The passages of the first `options.passages` hits, ids from 1: what the generator is given,
/// or the closest material of a refusal. Each is cut to `options.passage_chars`, or to
/// [`FOCUS_READS`] times that when the generator reads focused sentences of it.
fn sources_of(retrieval: &Retrieval, options: &AnswerOptions, focused: bool) -> Vec<Source> {
    let budget = if focused { options.passage_chars * FOCUS_READS } else { options.passage_chars };
    retrieval.hits.iter().take(options.passages).enumerate().map(|(i, h)| source_of(i + 1, h, budget)).collect()
}

fn document_name(s: &Source) -> String {
    if !s.title.trim().is_empty() {
        return s.title.clone();
    }
    s.document.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default()
}

fn blank(question: &str, standalone: &str, retrieval: &Retrieval, support_method: SupportMethod) -> Answer {
    Answer {
        answer_id: None,
        question: question.to_string(),
        standalone: standalone.to_string(),
        answer: String::new(),
        outcome: AnswerOutcome::Answered,
        decision: None,
        verdict: None,
        verdict_log_odds: None,
        citations: Vec::new(),
        invalid_citations: Vec::new(),
        sentences: Vec::new(),
        refused: false,
        refusal: None,
        closest: Vec::new(),
        sources: Vec::new(),
        model: None,
        written_by: None,
        support_method,
        timings: AnswerTimings { retrieve_ms: retrieval.timings.total_ms, ..AnswerTimings::default() },
        hit_token_cap: false,
        cut_mid_sentence: false,
        second_try: false,
        prompts: Vec::new(),
    }
}

/// The answer when retrieval found no good source: says so, lists the closest material as such,
/// and calls no generator (callers need not even load one).
pub fn refuse(
    question: &str,
    standalone: &str,
    retrieval: &Retrieval,
    options: &AnswerOptions,
    support_method: SupportMethod,
) -> Answer {
    let mut answer = blank(question, standalone, retrieval, support_method);
    answer.refused = true;
    answer.refusal = Some(Refusal::NoGoodSource);
    answer.outcome = AnswerOutcome::NoGoodSource;
    answer.answer = NO_GOOD_SOURCE.to_string();
    answer.closest = sources_of(retrieval, options, false);
    answer.timings.total_ms = retrieval.timings.total_ms;
    answer
}

/// What [`Answerer::answer`] would give the generator for `standalone`, without asking it (nor
/// loading it): an answer with no text whose sources are the prompt's passages, each with the
/// text the generator would read (`eval --qa --prompts-only`: where the evidence stops, measured
/// without a model). A refused retrieval gives the refusal, as `answer` does.
pub fn unasked(
    question: &str,
    standalone: &str,
    retrieval: &Retrieval,
    options: &AnswerOptions,
    focus: Option<&FocusScorer>,
    support_method: SupportMethod,
) -> Result<Answer> {
    if retrieval.no_good_source() {
        return Ok(refuse(question, standalone, retrieval, options, support_method));
    }
    let mut answer = blank(question, standalone, retrieval, support_method);
    let t = Instant::now();
    if let Some(scorer) = focus.filter(|f| f.is_cross_encoder() && options.reader == evidence::Reader::Evidence) {
        let (sources, decision) = evidence_of(scorer, standalone, retrieval, options)?;
        answer.sources = sources;
        answer.decision = decision;
    } else {
        answer.sources = prompt_for(standalone, retrieval, options, focus)?.sources;
    }
    answer.timings.focus_ms = t.elapsed().as_secs_f64() * 1e3;
    answer.timings.total_ms = answer.timings.focus_ms + answer.timings.retrieve_ms;
    Ok(answer)
}

/// What the generator is asked: the prompt, the second try's prompt, and the passages drawn on.
pub struct Prompt {
    /// The messages of the first request.
    pub messages: Vec<crate::generate::Message>,
    /// The messages of a second request, for a first reply of citation markers alone: the same
    /// passages and a rule without markers ([`prompt::plain_messages`]).
    pub plain: Option<Vec<crate::generate::Message>>,
    /// The messages of a last request, for a reply that held no words: whole passages and the
    /// short rule ([`prompt::retry_messages`]).
    pub retry: Option<Vec<crate::generate::Message>>,
    /// The passages, whole (citations and support checks read them).
    pub sources: Vec<Source>,
}

/// The prompt `retrieval` produces for `question` (also for `--explain`). With `focus` (the
/// tenant's cross-encoder or embedder) and `options.focus` above 0, each passage is shown as its
/// sentences closest to the question ([`focus`]), and a passage with none of them is left out of
/// the prompt.
pub fn prompt_for(question: &str, retrieval: &Retrieval, options: &AnswerOptions, focus: Option<&FocusScorer>) -> Result<Prompt> {
    let focusing = focus.is_some() && options.focus > 0;
    let sources = sources_of(retrieval, options, focusing);
    let names: Vec<String> = sources.iter().map(document_name).collect();
    let sections: Vec<String> = sources.iter().map(|s| s.section_path.join(" > ")).collect();
    let focused = match focus {
        Some(scorer) if options.focus > 0 => {
            let texts: Vec<&str> = sources.iter().map(|s| s.text.as_str()).collect();
            Some(focus::focus(scorer, question, &texts, options.focus)?).filter(|f| f.shown.iter().any(Option::is_some))
        }
        _ => None,
    };
    fn passage<'a>(s: &Source, document: &'a str, section: &'a str, text: &'a str) -> PromptPassage<'a> {
        PromptPassage { id: s.id, document, section, page: s.page, text }
    }
    let whole: Vec<PromptPassage> =
        sources.iter().enumerate().map(|(i, s)| passage(s, &names[i], &sections[i], &s.text)).collect();
    let (messages, plain) = match focused.as_ref().map(|f| &f.shown) {
        Some(f) => {
            let shown: Vec<PromptPassage> = (0..sources.len())
                .filter_map(|i| Some(passage(&sources[i], &names[i], &sections[i], f[i].as_deref()?)))
                .collect();
            (answer_messages_in(options.prompt, question, &shown), prompt::plain_messages(options.prompt, question, &shown))
        }
        None => (answer_messages_in(options.prompt, question, &whole), prompt::plain_messages(options.prompt, question, &whole)),
    };
    // The second try reads whole passages, each within the plain budget.
    let cut_texts: Vec<String> = sources.iter().map(|s| cut(&s.text, options.passage_chars)).collect();
    let cut_whole: Vec<PromptPassage> =
        sources.iter().enumerate().map(|(i, s)| passage(s, &names[i], &sections[i], &cut_texts[i])).collect();
    let retry = prompt::retry_messages(options.prompt, question, if focusing { &cut_whole } else { &whole });
    let mut sources = sources;
    if let Some(f) = focused {
        for (s, shown) in sources.iter_mut().zip(f.shown) {
            s.shown = Some(shown.unwrap_or_default());
        }
    }
    Ok(Prompt { messages, plain, retry, sources })
}

/// Whether a reply says anything outside brackets: citation markers, section numbers ("[1]
/// [7.1]") and a passage's label copied from the prompt ("[Harbourline Logistics, 1. Minutes]")
/// answer nothing. A bracket still open at the end (a marker or a label being streamed) is not
/// words yet.
fn has_words(text: &str) -> bool {
    let text = strip_markers(text);
    let open = text.rfind('[').filter(|&at| !text[at..].contains(']'));
    outside_brackets(&text[..open.unwrap_or(text.len())]).chars().any(char::is_alphanumeric)
}

/// `text` without its bracketed groups ("[7.1]", "[Title, Section]").
fn outside_brackets(text: &str) -> String {
    let mut kept = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('[') {
        kept.push_str(&rest[..at]);
        match rest[at..].find(']') {
            Some(end) => rest = &rest[at + end + 1..],
            None => {
                kept.push_str(&rest[at..]);
                rest = "";
            }
        }
    }
    kept.push_str(rest);
    kept
}

/// Holds tokens back while the reply is markers and spaces only, so a reply that gets a second
/// try never shows its first one ("[1]" and nothing after it).
struct UntilWords<'a> {
    inner: &'a mut (dyn TokenSink + Send),
    held: String,
    open: bool,
}

impl TokenSink for UntilWords<'_> {
    fn token(&mut self, text: &str) {
        if self.open {
            return self.inner.token(text);
        }
        self.held.push_str(text);
        if has_words(&self.held) {
            self.open = true;
            self.inner.token(&std::mem::take(&mut self.held));
        }
    }
    fn cancelled(&self) -> bool {
        self.inner.cancelled()
    }
}

/// The text of `parsed` without an unfinished last sentence (one that does not end in `.`, `!`,
/// `?` or `…`, citation markers aside), or with "…" after it when it is the only sentence;
/// `None` when the last sentence is finished.
fn finished_sentences(parsed: &cite::ParsedAnswer) -> Option<String> {
    let last = parsed.sentences.last()?;
    let words = strip_markers(&last.text);
    let end = words.trim_end().trim_end_matches(['"', '\'', ')', '*']);
    if end.ends_with(['.', '!', '?', '…']) {
        return None;
    }
    if parsed.sentences.len() == 1 {
        return Some(format!("{} …", parsed.text.trim_end()));
    }
    Some(parsed.text[..last.span.start].trim_end().to_string())
}

/// Turns a retrieval into an answer.
pub struct Answerer {
    generator: Arc<dyn Generator>,
    support: SupportChecker,
    options: AnswerOptions,
    focus: Option<FocusScorer>,
}

impl Answerer {
    /// An answerer that writes with `generator` and checks support with `support`.
    pub fn new(generator: Arc<dyn Generator>, support: SupportChecker, options: AnswerOptions) -> Answerer {
        Answerer { generator, support, options, focus: None }
    }

    /// The answer stack over `retriever`, the one way the service and `eval` assemble it: writes
    /// with `generator`, checks support by `method` with the embedder retrieval ranks with (else
    /// the one `fallback` loads, asked only when the method needs it and retrieval has none), and
    /// focuses with the models retrieval ranks with.
    pub fn over(
        retriever: &crate::retrieve::Retriever<'_>,
        generator: Arc<dyn Generator>,
        method: SupportMethod,
        options: AnswerOptions,
        fallback: impl FnOnce() -> Result<Arc<dyn Embedder>>,
    ) -> Result<Answerer> {
        let support = match (method, retriever.embedder()) {
            (SupportMethod::Llm, _) => SupportChecker::Llm(generator.clone()),
            (SupportMethod::Off, _) => SupportChecker::Off,
            (method, Some(e)) => SupportChecker::new(method, e.clone(), &generator),
            (method, None) => SupportChecker::new(method, fallback()?, &generator),
        };
        Ok(Answerer::new(generator, support, options).with_focus_of(retriever))
    }

    /// Shows the generator each passage's sentences closest to the question, scored by the
    /// tenant's `embedder` or `reranker` as `AnswerOptions::focus_by` says, instead of whole
    /// passages (`AnswerOptions::focus`).
    pub fn with_focus(mut self, embedder: Option<Arc<dyn Embedder>>, reranker: Option<Arc<dyn Reranker>>) -> Answerer {
        self.focus = FocusScorer::choose(self.options.focus_by, embedder, reranker);
        self
    }

    /// [`Answerer::with_focus`] with the models `retriever` ranks with: the focus reads the
    /// passages as retrieval did.
    pub fn with_focus_of(self, retriever: &crate::retrieve::Retriever<'_>) -> Answerer {
        self.with_focus(retriever.embedder().cloned(), retriever.reranker().cloned())
    }

    /// The generator.
    pub fn generator(&self) -> &Arc<dyn Generator> {
        &self.generator
    }

    /// Answers `question` from `retrieval` (run for `standalone`), streaming tokens into `sink`.
    /// No generator call when retrieval refused.
    pub async fn answer(
        &self,
        question: &str,
        standalone: &str,
        retrieval: &Retrieval,
        sink: &mut (dyn TokenSink + Send),
    ) -> Result<Answer> {
        let started = Instant::now();
        if retrieval.no_good_source() {
            let answer = refuse(question, standalone, retrieval, &self.options, self.support.method());
            sink.token(&answer.answer);
            return Ok(answer);
        }
        let cross = self.focus.as_ref().filter(|f| f.is_cross_encoder());
        if let Some(scorer) = cross.filter(|_| self.options.reader == evidence::Reader::Evidence) {
            return self.evidence_first(scorer, question, standalone, retrieval, sink, started).await;
        }
        let mut answer = blank(question, standalone, retrieval, self.support.method());

        let t = Instant::now();
        let Prompt { messages, plain, retry, sources } = prompt_for(standalone, retrieval, &self.options, self.focus.as_ref())?;
        answer.timings.focus_ms = t.elapsed().as_secs_f64() * 1e3;
        let mut request = GenerateRequest {
            messages,
            max_tokens: self.options.max_tokens,
            temperature: self.options.temperature,
            stop: prompt::answer_stop(self.options.prompt),
        };
        let mut held = UntilWords { inner: sink, held: String::new(), open: false };
        let ids: Vec<usize> = sources.iter().map(|s| s.id).collect();
        answer.prompts.push(request.messages.clone());
        let mut generation = self.generator.generate(&request, &mut held).await?;
        let mut earlier = Vec::new();
        // A reply of markers alone names the passages that answer: asked again without the
        // marker rule, the sentence it writes is cited to them.
        let named = parse_answer(&generation.text, &ids).cited;
        if let Some(plain) = plain.filter(|_| !has_words(&generation.text) && !named.is_empty() && !held.cancelled()) {
            request.messages = plain;
            answer.prompts.push(request.messages.clone());
            held.held.clear();
            earlier.push(std::mem::replace(&mut generation, self.generator.generate(&request, &mut held).await?));
            // Cited to the first passage named (a reply that names them all has copied the
            // rule's "[1], [2] or [3]": the first is the best ranked).
            let unmarked = parse_answer(&generation.text, &ids).cited.is_empty();
            if has_words(&generation.text) && unmarked && !is_no_answer(&generation.text) {
                let marker = format!("[{}]", named[0]);
                held.token(&format!(" {marker}"));
                generation.text = format!("{} {marker}", generation.text.trim_end());
            }
        }
        if let Some(retry) = retry.filter(|_| !has_words(&generation.text) && !held.cancelled()) {
            request.messages = retry;
            answer.prompts.push(request.messages.clone());
            held.held.clear();
            earlier.push(std::mem::replace(&mut generation, self.generator.generate(&request, &mut held).await?));
        }
        answer.second_try = answer.prompts.len() > 1;
        answer.hit_token_cap = generation.completion_tokens >= self.options.max_tokens;
        for first in earlier {
            // The timings and token counts are the answer's: every request.
            generation.first_token_ms += first.total_ms;
            generation.total_ms += first.total_ms;
            generation.prompt_tokens += first.prompt_tokens;
            generation.completion_tokens += first.completion_tokens;
        }
        let wrote = has_words(&generation.text);
        let mut parsed = parse_answer(&generation.text, &ids);
        if answer.hit_token_cap {
            if let Some(whole) = finished_sentences(&parsed) {
                parsed = parse_answer(&whole, &ids);
                answer.cut_mid_sentence = true;
            }
        }
        let not_answered = if !wrote {
            Some(quote::NotAnswered::NoWords)
        } else if is_no_answer(&parsed.text) {
            Some(quote::NotAnswered::Declined)
        } else if quote::restates(&parsed.text, standalone) {
            Some(quote::NotAnswered::RestatedQuestion)
        } else {
            None
        };
        if !held.open {
            // Only a reply without words is still held back: it is not shown as an answer.
            held.inner.token(NO_ANSWER_WRITTEN);
        } else if not_answered == Some(quote::NotAnswered::RestatedQuestion) {
            held.inner.token(&format!("\n\n{NO_ANSWER_WRITTEN}"));
        }
        answer.model = Some(self.generator.model_id().to_string());
        answer.written_by = Some(generation.written_by.clone());
        answer.timings.first_token_ms = generation.first_token_ms;
        answer.timings.generate_ms = generation.total_ms;
        answer.timings.prompt_tokens = generation.prompt_tokens;
        answer.timings.completion_tokens = generation.completion_tokens;
        answer.timings.tokens_per_second = generation.tokens_per_second();

        answer.citations = citations(&parsed, &sources);
        answer.invalid_citations = parsed.invalid.clone();
        answer.answer = parsed.text.clone();

        if matches!(not_answered, Some(quote::NotAnswered::NoWords | quote::NotAnswered::RestatedQuestion)) {
            answer.withhold(Refusal::NoAnswerWritten, NO_ANSWER_WRITTEN, sources);
        } else if not_answered == Some(quote::NotAnswered::Declined) {
            answer.refused = true;
            answer.refusal = Some(Refusal::PassagesDoNotAnswer);
            answer.outcome = AnswerOutcome::DoesNotSay;
            answer.closest = sources;
            answer.sentences = parsed
                .sentences
                .iter()
                .map(|s| Sentence { text: s.text.clone(), citations: s.citations.clone(), supported: true, support: None, reason: None })
                .collect();
        } else {
            let t = Instant::now();
            answer.sentences = self.checked(standalone, &parsed, &sources).await?;
            // An answer none of whose sentences its passages support is withheld; its (amber)
            // sentences stay, with their reasons.
            if !answer.sentences.is_empty() && !answer.sentences.iter().any(|s| s.supported) {
                held.inner.token(&format!("{}{NO_SUPPORTED_ANSWER}", if held.open { "\n\n" } else { "" }));
                answer.withhold(Refusal::Unsupported, NO_SUPPORTED_ANSWER, sources);
            } else {
                answer.sources = sources;
            }
            answer.timings.support_ms = t.elapsed().as_secs_f64() * 1e3;
        }
        // A reply that is no answer gives way to the evidence, when there is a cross-encoder to
        // choose it: after a blank line, or in place of the notice when nothing was shown.
        let no_answer = matches!(answer.refusal, Some(Refusal::NoAnswerWritten | Refusal::Unsupported | Refusal::PassagesDoNotAnswer));
        if let (true, Some(scorer)) = (no_answer, cross) {
            sink.token("\n\n");
            let mut instead = self.evidence_first(scorer, question, standalone, retrieval, sink, started).await?;
            let mut prompts = std::mem::take(&mut answer.prompts);
            prompts.append(&mut instead.prompts);
            instead.prompts = prompts;
            instead.model = answer.model.clone();
            instead.written_by = answer.written_by.clone();
            instead.second_try = answer.second_try;
            let t = &answer.timings;
            (instead.timings.prompt_tokens, instead.timings.completion_tokens) = (t.prompt_tokens, t.completion_tokens);
            instead.timings.generate_ms += t.generate_ms;
            instead.timings.first_token_ms = t.first_token_ms;
            return Ok(instead);
        }
        answer.timings.total_ms = started.elapsed().as_secs_f64() * 1e3 + answer.timings.retrieve_ms;
        Ok(answer)
    }
}

/// At or above these log-odds of "Yes" over "No" (the model ~88% sure) the verdict is "Yes". On
/// the dev halves the 0.5B model's log-odds lay between -1.1 and 0 for yes and no questions
/// alike (docs/EVAL.md, "Evidence first"): no threshold told them apart, so it gives no verdict
/// and the evidence answers alone; a backend without logits (±1) never gives one either.
pub const VERDICT_YES: f32 = 2.0;
/// At or below these log-odds the verdict is "No".
pub const VERDICT_NO: f32 = -2.0;

/// The verdict of `log_odds` ("Yes" over "No"), or none between the thresholds.
fn verdict(log_odds: f32) -> Option<&'static str> {
    if log_odds >= VERDICT_YES {
        Some("Yes")
    } else if log_odds <= VERDICT_NO {
        Some("No")
    } else {
        None
    }
}

/// The passages of an evidence-first answer (each up to [`FOCUS_READS`] times the passage budget,
/// so the evidence is chosen from every unit of what retrieval found) and the answerability
/// decision over them; each passage's `shown` is the evidence taken from it ("" when none).
fn evidence_of(scorer: &FocusScorer, standalone: &str, retrieval: &Retrieval, options: &AnswerOptions) -> Result<(Vec<Source>, Option<Decision>)> {
    let mut sources = sources_of(retrieval, options, true);
    let headings: Vec<String> = sources.iter().map(|s| format!("{}\n{}", document_name(s), s.section_path.join(" > "))).collect();
    let passages: Vec<evidence::Passage> = sources
        .iter()
        .zip(&headings)
        .map(|(s, h)| evidence::Passage { id: s.id, text: &s.text, heading: h.clone(), context: s.section_path.last().cloned().unwrap_or_else(|| s.title.clone()) })
        .collect();
    let decision = evidence::decide(scorer, standalone, &passages)?;
    for s in &mut sources {
        // As the passage writes it (a table row after its header row), so it can be found there.
        let quoted: Vec<String> = decision.iter().flat_map(|d| &d.evidence).filter(|e| e.passage == s.id).map(|e| e.unit.shown()).collect();
        s.shown = Some(quoted.join(" "));
    }
    Ok((sources, decision))
}

/// An answer's sentences made of `units` of passage `id`, verbatim, each with its marker before
/// its closing punctuation; `verdict` ("Yes", "No") opens the first. List items stand on lines
/// of their own.
fn evidence_sentences(units: &[evidence::EvidenceUnit], verdict: Option<&str>) -> cite::ParsedAnswer {
    let mut parsed = cite::ParsedAnswer { text: String::new(), sentences: Vec::new(), cited: Vec::new(), invalid: Vec::new() };
    for (i, e) in units.iter().enumerate() {
        let marker = format!("[{}]", e.passage);
        let mut sentence = evidence::with_marker(&e.text, &marker);
        if i == 0 {
            if let Some(v) = verdict {
                sentence = format!("{v}. {sentence}");
            }
        }
        if !parsed.text.is_empty() {
            parsed.text.push_str(if e.unit.item || units[i - 1].text.trim_end().ends_with(':') { "\n" } else { " " });
        }
        let start = parsed.text.len();
        parsed.text.push_str(&sentence);
        parsed.sentences.push(cite::AnswerSentence { text: sentence, citations: vec![e.passage], span: start..parsed.text.len() });
        if !parsed.cited.contains(&e.passage) {
            parsed.cited.push(e.passage);
        }
    }
    parsed
}

impl Answerer {
    /// The evidence-first answer: every unit of the passages scored by the cross-encoder, the
    /// answerability decision, then either the evidence verbatim and cited (a yes/no question's
    /// verdict from the generator before it, when the generator gives one) or, when the evidence
    /// does not state the answer, what the documents do not say with the closest passage. The
    /// generator is asked only for a yes/no verdict.
    async fn evidence_first(
        &self,
        scorer: &FocusScorer,
        question: &str,
        standalone: &str,
        retrieval: &Retrieval,
        sink: &mut (dyn TokenSink + Send),
        started: Instant,
    ) -> Result<Answer> {
        let mut answer = blank(question, standalone, retrieval, self.support.method());
        let t = Instant::now();
        let (sources, decision) = evidence_of(scorer, standalone, retrieval, &self.options)?;
        answer.timings.focus_ms = t.elapsed().as_secs_f64() * 1e3;
        let Some(decision) = decision else {
            // Passages of headings alone: nothing to quote.
            answer.withhold(Refusal::DocumentsDoNotSay, evidence::NOTHING_TO_QUOTE, sources);
            sink.token(&answer.answer);
            answer.timings.total_ms = started.elapsed().as_secs_f64() * 1e3 + answer.timings.retrieve_ms;
            return Ok(answer);
        };
        if decision.outcome == AnswerOutcome::DoesNotSay {
            let closest = evidence_sentences(&decision.evidence, None);
            answer.answer = format!("{} The closest they come: {}", evidence::DOES_NOT_SAY, closest.text);
            sink.token(&answer.answer);
            answer.timings.first_token_ms = t.elapsed().as_secs_f64() * 1e3;
            answer.withhold(Refusal::DocumentsDoNotSay, &answer.answer.clone(), sources);
            answer.decision = Some(decision);
            answer.timings.total_ms = started.elapsed().as_secs_f64() * 1e3 + answer.timings.retrieve_ms;
            return Ok(answer);
        }
        // A yes/no question: the generator's verdict on the evidence, from its log-odds of "Yes"
        // over "No"; between the two thresholds it gives none and the evidence stands alone.
        if decision.signals.asks == evidence::Asks::YesNo && !sink.cancelled() {
            let rule: Vec<&str> = decision.evidence.iter().map(|e| e.text.as_str()).collect();
            let messages = prompt::verdict_messages(standalone, &rule.join(" "));
            answer.prompts.push(messages.clone());
            let g = Instant::now();
            let log_odds = self.generator.yes_no(&[messages]).await?.first().copied().unwrap_or(0.0);
            answer.verdict_log_odds = Some(log_odds);
            answer.verdict = verdict(log_odds).map(str::to_string);
            answer.model = Some(self.generator.model_id().to_string());
            answer.timings.generate_ms = g.elapsed().as_secs_f64() * 1e3;
        }
        let parsed = evidence_sentences(&decision.evidence, answer.verdict.as_deref());
        sink.token(&parsed.text);
        answer.timings.first_token_ms = t.elapsed().as_secs_f64() * 1e3;
        answer.answer = parsed.text.clone();
        answer.citations = citations(&parsed, &sources);
        // Verbatim and cited to the passage it is taken from: supported by construction.
        answer.sentences = parsed
            .sentences
            .iter()
            .map(|s| Sentence { text: s.text.clone(), citations: s.citations.clone(), supported: true, support: None, reason: None })
            .collect();
        answer.sources = sources;
        answer.decision = Some(decision);
        answer.timings.total_ms = started.elapsed().as_secs_f64() * 1e3 + answer.timings.retrieve_ms;
        Ok(answer)
    }
}

impl Answer {
    /// Makes this answer the refusal `refusal` saying `text`, with no citations and `closest` as
    /// the passages it had; its sentences, if any, stay as they were judged.
    fn withhold(&mut self, refusal: Refusal, text: &str, closest: Vec<Source>) {
        self.refused = true;
        self.refusal = Some(refusal);
        self.outcome = refusal.outcome();
        self.answer = text.to_string();
        self.citations.clear();
        self.invalid_citations.clear();
        self.closest = closest;
    }
}

impl Answerer {
    /// `parsed`'s sentences with their support verdicts against the passages each cites.
    async fn checked(&self, standalone: &str, parsed: &cite::ParsedAnswer, sources: &[Source]) -> Result<Vec<Sentence>> {
        // A passage's title and section count as its text: a name may be only in its heading.
        let grounds: Vec<String> =
            sources.iter().map(|p| format!("{}\n{}\n{}", document_name(p), p.section_path.join(" > "), p.text)).collect();
        let ground = |id: usize| sources.iter().position(|s| s.id == id).map(|i| grounds[i].as_str());
        let claims: Vec<Claim> = parsed
            .sentences
            .iter()
            .map(|s| Claim { text: strip_markers(&s.text), passages: s.citations.iter().filter_map(|&id| ground(id)).collect() })
            .collect();
        let verdicts = self.support.verdicts(standalone, &claims, self.options.support_floor).await?;
        Ok(parsed
            .sentences
            .iter()
            .zip(verdicts)
            .map(|(s, v)| Sentence { text: s.text.clone(), citations: s.citations.clone(), supported: v.supported, support: v.score, reason: v.reason })
            .collect())
    }
}

/// The valid citations of `parsed`, in order of first use.
fn citations(parsed: &cite::ParsedAnswer, sources: &[Source]) -> Vec<Citation> {
    parsed
        .cited
        .iter()
        .filter_map(|&id| sources.iter().find(|s| s.id == id))
        .map(|s| Citation {
            id: s.id,
            chunk: s.chunk,
            document: s.document.clone(),
            title: s.title.clone(),
            section_path: s.section_path.clone(),
            span: s.span,
            page: s.page,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::generate::block_on;
    use crate::retrieve::{Evidence, Timings};
    use crate::testing::{HashEmbedder, ScriptedGenerator};
    use crate::types::ChunkRole;

    fn row(id: u64, path: &str, text: &str) -> ChunkRow {
        ChunkRow {
            id: ChunkId(id),
            doc: DocId(id),
            path: PathBuf::from(path),
            title: format!("Doc {id}"),
            ordinal: 0,
            role: ChunkRole::Child,
            parent: None,
            section_path: vec!["Policy".into(), format!("{id} Section")],
            span: Span { start: 10 * id as usize, end: 10 * id as usize + text.len() },
            page: Some(id as u32),
            lines: Lines { first: 1, last: 2 },
            tokens: 10,
            context: String::new(),
            text: text.into(),
            readers: Vec::new(),
        }
    }

    fn retrieval(refused: bool) -> Retrieval {
        let texts = ["Expense claims are due within 30 days of the trip.", "Receipts are kept for 7 years."];
        Retrieval {
            query: "q".into(),
            tenant: "t".into(),
            model: "hash-16".into(),
            reranker: None,
            rerank_weight: 1.0,
            bm25_vote: None,
            evidence: Evidence::Similarity { model: "hash-16".into() },
            floor: Some(0.5),
            best_evidence: Some(if refused { 0.1 } else { 0.9 }),
            refused,
            hits: texts
                .iter()
                .enumerate()
                .map(|(i, t)| Hit {
                    rank: i + 1,
                    chunk: row(i as u64 + 1, &format!("/docs/{i}.md"), t),
                    section: None,
                    children: vec![ChunkId(i as u64 + 1)],
                    score: 1.0 / (i as f32 + 1.0),
                    evidence: Some(0.9),
                })
                .collect(),
            candidates: Vec::new(),
            timings: Timings::default(),
            withheld: Vec::new(),
        }
    }

    fn answerer(reply: &str) -> (Answerer, Arc<ScriptedGenerator>) {
        let g = Arc::new(ScriptedGenerator::new(&[reply]));
        let support = SupportChecker::Similarity(Arc::new(HashEmbedder::default()));
        (Answerer::new(g.clone(), support, AnswerOptions { support_floor: 0.6, ..AnswerOptions::default() }), g)
    }

    #[test]
    fn citations_are_checked_mapped_and_each_sentence_flagged() {
        let (a, g) = answerer("Expense claims are due within 30 days of the trip [1][7]. Receipts are kept for 7 years [2]. Bicycles are free.");
        let mut streamed = String::new();
        let answer = block_on(a.answer("When?", "When?", &retrieval(false), &mut |t: &str| streamed.push_str(t))).unwrap();
        assert_eq!(g.calls().len(), 1, "one generation");
        assert!(streamed.contains("[7]"), "tokens stream as generated");
        assert_eq!(answer.invalid_citations, vec!["7".to_string()]);
        assert!(!answer.answer.contains("[7]") && answer.answer.contains("[1]"), "{}", answer.answer);
        let ids: Vec<usize> = answer.citations.iter().map(|c| c.id).collect();
        assert_eq!(ids, vec![1, 2]);
        assert_eq!(answer.citations[1].chunk, ChunkId(2));
        assert_eq!(answer.citations[1].document, PathBuf::from("/docs/1.md"));
        assert_eq!(answer.citations[1].page, Some(2));
        assert_eq!(answer.citations[1].section_path, vec!["Policy".to_string(), "2 Section".into()]);
        let flags: Vec<bool> = answer.sentences.iter().map(|s| s.supported).collect();
        assert_eq!(flags, vec![true, true, false], "{:?}", answer.sentences);
        assert_eq!(answer.sentences[2].support, None, "an uncited sentence has nothing to check");
        assert!(!answer.refused && answer.closest.is_empty() && answer.sources.len() == 2);
        // The prompt gave the passages in rank order, each with its id, before the question.
        let prompt = g.calls()[0].iter().map(|m| m.content.clone()).collect::<String>();
        let (p1, p2, q) = (prompt.find("30 days").unwrap(), prompt.find("7 years").unwrap(), prompt.rfind("When?").unwrap());
        assert!(p1 < p2 && p2 < q, "{prompt}");
    }

    #[test]
    fn an_answer_stopped_by_the_token_cap_keeps_only_its_finished_sentences() {
        // The scripted generator counts words as tokens: 12 words reach a cap of 12.
        let reply = "Claims are due within 30 days [1]. Receipts are kept for seven";
        let g = Arc::new(ScriptedGenerator::new(&[reply]));
        let a = Answerer::new(g, SupportChecker::Off, AnswerOptions { max_tokens: 12, ..AnswerOptions::default() });
        let answer = block_on(a.answer("When?", "When?", &retrieval(false), &mut crate::generate::Discard)).unwrap();
        assert!(answer.hit_token_cap && answer.cut_mid_sentence);
        assert_eq!(answer.answer, "Claims are due within 30 days [1].");
        assert_eq!(answer.sentences.len(), 1);
        // A single unfinished sentence stays, marked as cut.
        let g = Arc::new(ScriptedGenerator::new(&["Claims are due within 30 days of the last day of the trip [1] and"]));
        let a = Answerer::new(g, SupportChecker::Off, AnswerOptions { max_tokens: 8, ..AnswerOptions::default() });
        let answer = block_on(a.answer("When?", "When?", &retrieval(false), &mut crate::generate::Discard)).unwrap();
        assert!(answer.cut_mid_sentence && answer.answer.ends_with(" …"), "{}", answer.answer);
        // A finished answer at the cap is left as it is.
        let g = Arc::new(ScriptedGenerator::new(&["Claims are due within 30 days [1]."]));
        let a = Answerer::new(g, SupportChecker::Off, AnswerOptions { max_tokens: 6, ..AnswerOptions::default() });
        let answer = block_on(a.answer("When?", "When?", &retrieval(false), &mut crate::generate::Discard)).unwrap();
        assert!(answer.hit_token_cap && !answer.cut_mid_sentence);
    }

    #[test]
    fn a_refused_retrieval_calls_no_generator_and_lists_the_closest_material() {
        let (a, g) = answerer("should never be generated");
        let answer = block_on(a.answer("q", "q", &retrieval(true), &mut crate::generate::Discard)).unwrap();
        assert!(g.calls().is_empty());
        assert!(answer.refused && answer.refusal == Some(Refusal::NoGoodSource));
        assert_eq!(answer.answer, NO_GOOD_SOURCE);
        assert_eq!(answer.closest.len(), 2);
        assert!(answer.model.is_none() && answer.citations.is_empty());
    }

    #[test]
    fn the_model_saying_the_passages_do_not_answer_is_a_refusal() {
        let (a, _) = answerer(prompt::NO_ANSWER);
        let answer = block_on(a.answer("q", "q", &retrieval(false), &mut crate::generate::Discard)).unwrap();
        assert!(answer.refused && answer.refusal == Some(Refusal::PassagesDoNotAnswer));
        assert_eq!(answer.closest.len(), 2);
    }

    /// An answerer that shows the generator one focused sentence (by the fake embedder) and
    /// says `replies`, one per request; no support check.
    fn focused_on_one_sentence(replies: &[&str]) -> (Answerer, Arc<ScriptedGenerator>) {
        let g = Arc::new(ScriptedGenerator::new(replies));
        let embedder: Arc<dyn Embedder> = Arc::new(HashEmbedder::default());
        let a = Answerer::new(g.clone(), SupportChecker::Off, AnswerOptions { focus: 1, ..AnswerOptions::default() })
            .with_focus(Some(embedder), None);
        (a, g)
    }

    #[test]
    fn a_reply_of_markers_alone_is_asked_again_without_the_marker_rule_and_cited_to_what_it_named() {
        let (a, g) = focused_on_one_sentence(&["[2]", "Receipts are kept for 7 years."]);
        let mut streamed = String::new();
        let answer = block_on(a.answer("receipts kept years", "receipts kept years", &retrieval(false), &mut |t: &str| streamed.push_str(t))).unwrap();
        assert_eq!(g.calls().len(), 2);
        assert!(answer.second_try);
        // Both prompts show the focused sentence; the second asks for no markers.
        let first = g.calls()[0].iter().map(|m| m.content.clone()).collect::<String>();
        let second = g.calls()[1].iter().map(|m| m.content.clone()).collect::<String>();
        assert!(first.contains("[2] Receipts are kept for 7 years.") && first.contains("in square brackets"), "{first}");
        assert!(second.contains("[2] Receipts are kept for 7 years.") && !second.contains("30 days"), "{second}");
        assert!(!second.contains("square brackets"), "{second}");
        // The sentence is cited to the passage the first reply named; the bare "[2]" never
        // reached the reader.
        assert_eq!(answer.answer.trim(), "Receipts are kept for 7 years. [2]");
        assert_eq!(streamed.trim(), "Receipts are kept for 7 years. [2]");
        assert_eq!(answer.citations.iter().map(|c| c.id).collect::<Vec<_>>(), [2]);
        assert_eq!(answer.sentences[0].citations, [2]);
    }

    #[test]
    fn a_reply_without_words_on_both_tries_is_asked_on_whole_passages_last() {
        let (a, g) = focused_on_one_sentence(&["[1]", "[1]", "Claims are due within 30 days [1]. (from Doc 1, Policy > 1 Section) and on"]);
        let mut streamed = String::new();
        let answer = block_on(a.answer("receipts kept years", "receipts kept years", &retrieval(false), &mut |t: &str| streamed.push_str(t))).unwrap();
        assert_eq!(g.calls().len(), 3);
        assert_eq!(answer.prompts, g.calls(), "the answer keeps every request it made, for --explain");
        let last = g.calls()[2].iter().map(|m| m.content.clone()).collect::<String>();
        assert!(last.contains("30 days") && last.contains("7 years"), "whole passages: {last}");
        // The reply stops before the source label it started to copy.
        assert_eq!(answer.answer.trim(), "Claims are due within 30 days [1].");
        assert_eq!(streamed.trim(), "Claims are due within 30 days [1].");
        assert_eq!(answer.citations.len(), 1);
    }

    #[test]
    fn an_empty_first_reply_skips_the_unmarked_try() {
        // Nothing named: a sentence without markers could not be cited, so the whole-passage
        // try comes next.
        let g = Arc::new(ScriptedGenerator::new(&["", "Receipts are kept for 7 years [2]."]));
        let a = Answerer::new(g.clone(), SupportChecker::Off, AnswerOptions::default());
        let answer = block_on(a.answer("q", "q", &retrieval(false), &mut crate::generate::Discard)).unwrap();
        assert_eq!(g.calls().len(), 2);
        let second = g.calls()[1].iter().map(|m| m.content.clone()).collect::<String>();
        assert!(second.contains("square brackets"), "{second}");
        assert_eq!(answer.answer.trim(), "Receipts are kept for 7 years [2].");
    }

    /// A cross-encoder that scores a unit by how many of the question's words it holds (a logit
    /// of 3 for three words: the range the real one gives a fair match).
    struct Overlap;

    impl Reranker for Overlap {
        fn model_id(&self) -> &str {
            "overlap"
        }
        fn score(&self, query: &str, passages: &[&str]) -> Result<Vec<f32>> {
            let words: Vec<String> = query.split_whitespace().map(str::to_lowercase).collect();
            Ok(passages.iter().map(|p| words.iter().filter(|w| p.to_lowercase().contains(w.as_str())).count() as f32).collect())
        }
        fn scores_sentences_cheaply(&self) -> bool {
            true
        }
    }

    /// An evidence-first answerer (the `Overlap` cross-encoder scores every unit) whose generator
    /// says `replies`, and the answer to `q` with what was streamed.
    fn evidence_first(q: &str, replies: &[&str]) -> (Answer, String, Arc<ScriptedGenerator>) {
        let g = Arc::new(ScriptedGenerator::new(replies));
        let support = SupportChecker::Grounded(Arc::new(HashEmbedder::default()));
        let cross: Option<Arc<dyn Reranker>> = Some(Arc::new(Overlap));
        let a = Answerer::new(g.clone(), support, AnswerOptions::default()).with_focus(Some(Arc::new(HashEmbedder::default())), cross);
        let mut streamed = String::new();
        let answer = block_on(a.answer(q, q, &retrieval(false), &mut |t: &str| streamed.push_str(t))).unwrap();
        (answer, streamed, g)
    }

    #[test]
    fn with_a_cross_encoder_the_evidence_is_the_answer_verbatim_and_cited() {
        let (answer, streamed, g) = evidence_first("How long are receipts kept", &["should never be generated"]);
        assert!(g.calls().is_empty(), "no generator for a question that is not yes/no");
        assert_eq!(answer.outcome, AnswerOutcome::Answered);
        // The best unit first, then the runner-up (also above the floor).
        assert_eq!(answer.answer, "Receipts are kept for 7 years [2]. Expense claims are due within 30 days of the trip [1].");
        assert_eq!(streamed, answer.answer);
        assert_eq!(answer.citations.iter().map(|c| c.id).collect::<Vec<_>>(), [2, 1]);
        assert!(answer.sentences.len() == 2 && answer.sentences.iter().all(|s| s.supported) && answer.sentences[0].citations == [2]);
        let d = answer.decision.as_ref().unwrap();
        assert!(d.score >= d.floor && d.evidence[0].text == "Receipts are kept for 7 years.", "{d:?}");
        assert!(d.evidence[1].score >= d.floor && d.by == evidence::DecidedBy::Logit, "{d:?}");
        assert_eq!(answer.sources.len(), 2);
        assert_eq!(answer.sources[1].shown.as_deref(), Some("Receipts are kept for 7 years."), "what was quoted of each passage");
        assert_eq!(answer.sources[0].shown.as_deref(), Some("Expense claims are due within 30 days of the trip."));
        assert!(answer.model.is_none() && !answer.refused);
    }

    #[test]
    fn a_yes_no_question_gets_a_verdict_only_when_the_generator_is_decisive() {
        // The scripted generator has no logits: "Yes." is +1, short of the threshold.
        let (answer, streamed, g) = evidence_first("Are receipts kept for 7 years?", &["Yes."]);
        assert_eq!(g.calls().len(), 1, "one verdict request");
        let prompt = g.calls()[0].iter().map(|m| m.content.clone()).collect::<String>();
        assert!(prompt.contains("Rule: Receipts are kept for 7 years.") && prompt.contains("Are receipts kept for 7 years?"), "{prompt}");
        assert_eq!(answer.verdict_log_odds, Some(1.0));
        assert!(answer.verdict.is_none() && answer.answer.starts_with("Receipts are kept for 7 years [2]."), "{}", answer.answer);
        assert_eq!(streamed, answer.answer);
        assert_eq!(answer.model.as_deref(), Some(g.model_id()));
        assert_eq!((verdict(2.5), verdict(-2.0), verdict(1.9), verdict(-1.0)), (Some("Yes"), Some("No"), None, None));
        let parsed = evidence_sentences(&answer.decision.as_ref().unwrap().evidence, Some("No"));
        assert!(parsed.text.starts_with("No. Receipts are kept for 7 years [2]."), "{}", parsed.text);
    }

    #[test]
    fn a_question_no_unit_states_is_the_documents_do_not_say() {
        let (answer, streamed, g) = evidence_first("Which Singapore office holds passports?", &["should never be generated"]);
        assert!(g.calls().is_empty());
        assert_eq!(answer.outcome, AnswerOutcome::DoesNotSay);
        assert!(answer.refused && answer.refusal == Some(Refusal::DocumentsDoNotSay));
        assert_eq!(answer.refusal.map(Refusal::outcome), Some(AnswerOutcome::DoesNotSay));
        assert!(answer.answer.starts_with(evidence::DOES_NOT_SAY), "{}", answer.answer);
        assert!(answer.answer.contains("The closest they come: Expense claims are due within 30 days of the trip [1]."), "the closest passage: {}", answer.answer);
        assert_eq!(streamed, answer.answer);
        assert!(answer.sources.is_empty() && answer.closest.len() == 2 && answer.citations.is_empty());
        let d = answer.decision.as_ref().unwrap();
        assert!(d.score < d.floor && d.evidence.len() == 1, "{d:?}");
    }

    #[test]
    fn a_reply_of_markers_alone_every_time_is_no_answer_and_says_so() {
        let g = Arc::new(ScriptedGenerator::new(&["[1] [2]", " [1]"]));
        let a = Answerer::new(g.clone(), SupportChecker::Off, AnswerOptions::default());
        let mut streamed = String::new();
        let answer = block_on(a.answer("q", "q", &retrieval(false), &mut |t: &str| streamed.push_str(t))).unwrap();
        assert_eq!(g.calls().len(), 3, "the unmarked try and the whole-passage try");
        assert!(answer.refused && answer.refusal == Some(Refusal::NoAnswerWritten));
        assert_eq!(answer.answer, NO_ANSWER_WRITTEN);
        assert_eq!(streamed, NO_ANSWER_WRITTEN, "the markers never reach the reader");
        assert!(answer.citations.is_empty() && answer.sentences.is_empty() && answer.sources.is_empty());
        assert_eq!(answer.closest.len(), 2, "the passages it had are listed");
    }

    #[test]
    fn markers_and_a_marker_being_streamed_are_not_words() {
        for text in [
            "",
            "[1]",
            " [1] [2]",
            "[1], [2]",
            "[",
            "[1",
            "[1] [2",
            "[1, 2",
            "[1] [7.1]",
            "[1] [11.2]",
            "[1] [7.",
            "[1] [Harbourline Logistics, 1. Minutes of the previous meeting]",
            "[1] [Harbourline Logis",
        ] {
            assert!(!has_words(text), "{text:?}");
        }
        for text in ["[1] 30 days", "30", "[1] 0.2", "[1] a [2", "[1] See [7.1] for the steps.", "a_list += [1, 2, 3]", "[1] 30 days [Travel policy]"] {
            assert!(has_words(text), "{text:?}");
        }
    }

    #[test]
    fn passages_are_cut_at_a_word_boundary() {
        assert_eq!(cut("short", 10), "short");
        let long = "alpha beta gamma delta epsilon";
        let c = cut(long, 12);
        assert!(c.ends_with('…') && c.len() < long.len(), "{c}");
        assert!(long.starts_with(c.trim_end_matches('…')));
    }
}
