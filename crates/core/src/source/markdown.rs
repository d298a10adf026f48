//! Markdown (CommonMark with tables, footnotes, strikethrough and YAML front matter), parsed with
//! pulldown-cmark.
//!
//! The normalised text is the markdown source itself (LF line ends, no BOM, no NULs); block spans
//! point into it, markup included. Top-level elements become blocks: headings (title without
//! markup), paragraphs, each whole top-level list as one List, tables (header row included),
//! fenced or indented code, block quotes, and paragraphs shaped like definitions
//! (`**Term**: text`, `Term — text`) as Definition. Front matter is no block; its `key: value`
//! lines go into the metadata and `title:` sets the title. Title: front matter, else the first H1,
//! else the file stem.

use std::collections::BTreeMap;
use std::path::Path;

use pulldown_cmark::{CodeBlockKind, Event, Options, Tag, TagEnd};

use super::{decode_utf8, finish, one_line, title_from_path, Parser, RawBlock, SkipReason};
use crate::types::{BlockKind, ParsedDocument, Span};

/// The markdown parser.
#[derive(Debug, Clone, Copy, Default)]
pub struct MarkdownParser;

impl Parser for MarkdownParser {
    fn name(&self) -> &'static str {
        "markdown"
    }

    fn parse(&self, path: &Path, bytes: &[u8]) -> Result<ParsedDocument, SkipReason> {
        let text = decode_utf8(bytes)?;
        let parsed = blocks_in(&text, 0);
        let title = parsed
            .metadata
            .get("title")
            .cloned()
            .filter(|t| !t.is_empty())
            .or(parsed.first_h1)
            .unwrap_or_else(|| title_from_path(path));
        Ok(finish(self.name(), title, text, parsed.blocks, parsed.metadata))
    }
}

/// What [`blocks_in`] finds.
#[derive(Debug, Default)]
pub(crate) struct Markdown {
    /// Blocks, spans offset by the base given.
    pub blocks: Vec<RawBlock>,
    /// Front matter `key: value` pairs.
    pub metadata: BTreeMap<String, String>,
    /// The first level-1 heading's title.
    pub first_h1: Option<String>,
}

fn options() -> Options {
    Options::ENABLE_TABLES
        | Options::ENABLE_FOOTNOTES
        | Options::ENABLE_STRIKETHROUGH
        | Options::ENABLE_YAML_STYLE_METADATA_BLOCKS
}

/// A top-level element being read.
struct Open {
    kind: BlockKind,
    span: Span,
    /// Heading text gathered so far.
    title: String,
    /// Whether this is the front matter.
    front_matter: bool,
}

/// Parses `src` (normalised markdown) and returns its top-level blocks, spans shifted by `base`.
pub(crate) fn blocks_in(src: &str, base: usize) -> Markdown {
    let mut out = Markdown::default();
    let mut depth = 0usize;
    let mut open: Option<Open> = None;
    for (event, range) in pulldown_cmark::Parser::new_ext(src, options()).into_offset_iter() {
        match event {
            Event::Start(tag) => {
                if depth == 0 {
                    let span = Span::new(base + range.start, base + range.end);
                    let (kind, front_matter) = match &tag {
                        Tag::Heading { level, .. } => {
                            (BlockKind::Heading { level: *level as u8, title: String::new() }, false)
                        }
                        Tag::List(_) => (BlockKind::List, false),
                        Tag::Table(_) => (BlockKind::Table, false),
                        Tag::CodeBlock(kind) => (BlockKind::Code { language: language(kind), symbol: None }, false),
                        Tag::BlockQuote(_) => (BlockKind::Quote, false),
                        Tag::MetadataBlock(_) => (BlockKind::Paragraph, true),
                        Tag::Paragraph => {
                            let kind = if is_definition(&src[range.clone()]) {
                                BlockKind::Definition
                            } else {
                                BlockKind::Paragraph
                            };
                            (kind, false)
                        }
                        _ => (BlockKind::Paragraph, false),
                    };
                    open = Some(Open { kind, span, title: String::new(), front_matter });
                }
                depth += 1;
            }
            Event::End(tag) => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    if let Some(block) = open.take() {
                        close(&mut out, block, tag);
                    }
                }
            }
            Event::Text(t) | Event::Code(t) | Event::InlineMath(t) | Event::DisplayMath(t) => {
                if let Some(block) = open.as_mut() {
                    if block.front_matter || matches!(block.kind, BlockKind::Heading { .. }) {
                        block.title.push_str(&t);
                    }
                }
            }
            Event::SoftBreak | Event::HardBreak => {
                if let Some(block) = open.as_mut() {
                    block.title.push(if block.front_matter { '\n' } else { ' ' });
                }
            }
            // Rules, stray HTML and the like at top level carry no text worth a block.
            _ => {}
        }
    }
    out
}

fn close(out: &mut Markdown, block: Open, _end: TagEnd) {
    if block.front_matter {
        out.metadata.extend(front_matter(&block.title));
        return;
    }
    let kind = match block.kind {
        BlockKind::Heading { level, .. } => {
            let title = one_line(&block.title);
            if title.is_empty() {
                return;
            }
            if level == 1 && out.first_h1.is_none() {
                out.first_h1 = Some(title.clone());
            }
            BlockKind::Heading { level, title }
        }
        kind => kind,
    };
    out.blocks.push((kind, block.span, None));
}

/// The language of a fenced code block: the first word of its info string.
fn language(kind: &CodeBlockKind<'_>) -> Option<String> {
    match kind {
        CodeBlockKind::Fenced(info) => info
            .split(|c: char| c.is_whitespace() || c == ',' || c == '{')
            .next()
            .filter(|l| !l.is_empty())
            .map(str::to_string),
        CodeBlockKind::Indented => None,
    }
}

/// Simple `key: value` lines of YAML front matter (nested structures are skipped; quotes around
/// values removed).
fn front_matter(yaml: &str) -> BTreeMap<String, String> {
    let mut map = BTreeMap::new();
    for line in yaml.lines() {
        if line.starts_with([' ', '\t', '-', '#']) {
            continue;
        }
        let Some((key, value)) = line.split_once(':') else { continue };
        let key = key.trim();
        let value = value.trim();
        if key.is_empty() || value.is_empty() || key.contains(' ') {
            continue;
        }
        let value = value
            .strip_prefix('"')
            .and_then(|v| v.strip_suffix('"'))
            .or_else(|| value.strip_prefix('\'').and_then(|v| v.strip_suffix('\'')))
            .unwrap_or(value);
        map.insert(key.to_string(), value.to_string());
    }
    map
}

/// Whether a paragraph's source reads as a definition: `**Term**: text`, `**Term:** text`, or
/// `Term — text` with a term of at most three words.
fn is_definition(src: &str) -> bool {
    let first = src.lines().next().unwrap_or("").trim();
    for strong in ["**", "__"] {
        if let Some(rest) = first.strip_prefix(strong) {
            if let Some(end) = rest.find(strong) {
                let term = &rest[..end];
                let after = rest[end + strong.len()..].trim_start();
                let colon_inside = term.ends_with(':') && !after.is_empty();
                let colon_after = after.starts_with(':') && after.len() > 1;
                let dash_after = (after.starts_with('—') || after.starts_with('–')) && after.chars().count() > 2;
                return !term.is_empty() && term.len() <= 80 && (colon_inside || colon_after || dash_after);
            }
        }
    }
    for dash in [" — ", " – "] {
        if let Some((term, def)) = first.split_once(dash) {
            let words = term.split_whitespace().count();
            return (1..=3).contains(&words)
                && !term.ends_with(['.', ',', ';', ':'])
                && !def.trim().is_empty()
                && term.chars().next().is_some_and(char::is_uppercase);
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::testutil::check_document;
    use crate::types::Lines;

    fn parse(s: &str) -> ParsedDocument {
        let doc = MarkdownParser.parse(Path::new("/docs/handbook.md"), s.as_bytes()).unwrap();
        check_document(&doc);
        doc
    }

    const HANDBOOK: &str = "---\r\ntitle: \"Staff handbook\"\r\nowner: HR team\r\ntags:\r\n  - policy\r\n---\r\n\r\n\
# Travel *policy*\r\n\r\nBook trips through the **portal**.\r\nAsk your manager first.\r\n\r\n\
## 4.2 Insurance\r\n\r\n- medical\r\n- luggage\r\n  - lost\r\n- cancellation\r\n\r\n\
| Item | Limit |\r\n|------|-------|\r\n| Hotel | 150 |\r\n| Meals | 40 |\r\n\r\n\
```rust,ignore\r\nfn main() {}\r\n```\r\n\r\n    indented code\r\n\r\n\
> Quoted advice\r\n> over two lines\r\n\r\n\
**Per diem**: a daily allowance for meals.\r\n\r\n\
Setext heading\r\n--------------\r\n\r\nText with a footnote.[^1]\r\n\r\n[^1]: The note.\r\n";

    #[test]
    fn blocks_titles_and_front_matter() {
        let doc = parse(HANDBOOK);
        assert_eq!(doc.title, "Staff handbook");
        assert_eq!(doc.metadata.get("owner").map(String::as_str), Some("HR team"));
        assert!(!doc.metadata.contains_key("tags"));
        assert!(!doc.text.contains('\r'));
        let got: Vec<(&BlockKind, &str)> = doc.blocks.iter().map(|b| (&b.kind, &doc.text[b.span.range()])).collect();
        let h = |level: u8, title: &str| BlockKind::Heading { level, title: title.to_string() };
        let expected: Vec<(BlockKind, &str)> = vec![
            (h(1, "Travel policy"), "# Travel *policy*"),
            (BlockKind::Paragraph, "Book trips through the **portal**.\nAsk your manager first."),
            (h(2, "4.2 Insurance"), "## 4.2 Insurance"),
            (BlockKind::List, "- medical\n- luggage\n  - lost\n- cancellation"),
            (BlockKind::Table, "| Item | Limit |\n|------|-------|\n| Hotel | 150 |\n| Meals | 40 |"),
            (BlockKind::Code { language: Some("rust".into()), symbol: None }, "```rust,ignore\nfn main() {}\n```"),
            (BlockKind::Code { language: None, symbol: None }, "indented code"),
            (BlockKind::Quote, "> Quoted advice\n> over two lines"),
            (BlockKind::Definition, "**Per diem**: a daily allowance for meals."),
            (h(2, "Setext heading"), "Setext heading\n--------------"),
            (BlockKind::Paragraph, "Text with a footnote.[^1]"),
            (BlockKind::Paragraph, "[^1]: The note."),
        ];
        assert_eq!(got.len(), expected.len(), "{got:#?}");
        for (g, e) in got.iter().zip(&expected) {
            assert_eq!((g.0, g.1), (&e.0, e.1));
        }
        assert_eq!(doc.blocks[0].lines, Lines { first: 8, last: 8 });
    }

    #[test]
    fn title_from_first_h1_else_stem() {
        assert_eq!(parse("Intro.\n\n# The `ragbox` guide\n\n# Second\n").title, "The ragbox guide");
        assert_eq!(parse("## Only a subsection\n\ntext\n").title, "handbook");
    }

    #[test]
    fn definitions_by_shape() {
        assert!(is_definition("**Term**: the meaning"));
        assert!(is_definition("**Term:** the meaning"));
        assert!(is_definition("Per diem — a daily allowance"));
        assert!(!is_definition("**Bold** start of a sentence."));
        assert!(!is_definition("The meeting ran late — very late."));
    }

    #[test]
    fn offsets_with_a_base() {
        let md = blocks_in("# A\n\ntext", 100);
        assert_eq!(md.blocks[1].1, Span::new(105, 109));
    }

    proptest::proptest! {
        #[test]
        fn invariants_hold_on_random_markdown(
            s in "((#{1,3} |> |- |1\\. |    |```|\\| a \\| b \\||---|\\*\\*|\\[\\^1\\]: |)[a-zé *_`|:—]{0,15}(\n|\r\n){0,2}){0,25}"
        ) {
            if let Ok(doc) = MarkdownParser.parse(Path::new("x.md"), s.as_bytes()) {
                check_document(&doc);
            }
        }

        #[test]
        fn invariants_hold_on_arbitrary_strings(s in "\\PC{0,200}") {
            if let Ok(doc) = MarkdownParser.parse(Path::new("x.md"), s.as_bytes()) {
                check_document(&doc);
            }
        }
    }
}
