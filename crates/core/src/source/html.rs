//! HTML pages, parsed with scraper (html5ever), so broken markup parses as browsers parse it.
//!
//! The normalised text is the page's visible text, not its source: the DOM is walked and each
//! block's text appended as it is emitted, blocks separated by a blank line, so spans are exact.
//! Dropped: `script`, `style`, `nav`, `noscript`, `template`, `aside`, form controls, `svg`,
//! elements that are `hidden`, `aria-hidden`, `display:none` or `role=navigation`, page-level
//! `header`/`footer` (those inside `main` or `article` stay), and permalink anchors (`¶`, `§`).
//! When the page marks its main content (`main`, `[role=main]`, rustdoc's `#main-content`,
//! Sphinx's `div.body`, `article`) only that is read.
//!
//! Blocks: `h1`-`h6` headings, paragraphs (loose inline text too), each top-level `ul`/`ol` as one
//! List (`- item` / `1. item` lines, nested lists indented), tables (rows as lines, cells joined by
//! ` | `, header rows first), `pre` as Code (language from `language-*`/`lang-*`/`highlight-*`
//! classes), `blockquote` as Quote, and each `dt` with its `dd`s as a Definition. Whitespace inside
//! inline text is collapsed; `br` breaks the line. Title: `<title>`, else the first `h1`, else the
//! file stem.
//!
//! Nesting is bounded twice. A page whose elements nest deeper than [`MAX_NESTING`] (estimated by
//! a linear scan, [`nesting_estimate`]) is refused before html5ever sees it: html5ever's scope
//! checks walk the stack of open elements, so building a page nested `d` deep costs `d²` (100,000
//! nested `div`s ran for minutes). Below [`MAX_DEPTH`] elements the walk stops descending and takes
//! the rest of the subtree as plain text (a walk that recursed once per element overflowed the
//! stack on deep pages; both found by fuzzing).

use std::collections::BTreeMap;
use std::path::Path;

use scraper::{ElementRef, Html, Node, Selector};

use super::{decode_utf8, finish, one_line, title_from_path, Parser, RawBlock, SkipReason, TextBuilder};
use crate::types::{BlockKind, ParsedDocument};

/// The HTML parser.
#[derive(Debug, Clone, Copy, Default)]
pub struct HtmlParser;

impl Parser for HtmlParser {
    fn name(&self) -> &'static str {
        "html"
    }

    fn parse(&self, path: &Path, bytes: &[u8]) -> Result<ParsedDocument, SkipReason> {
        let source = decode_utf8(bytes)?;
        let depth = nesting_estimate(&source);
        if depth > MAX_NESTING {
            return Err(SkipReason::OverLimit {
                what: format!("HTML elements nested {depth} deep (the limit is {MAX_NESTING})"),
            });
        }
        let page = extract(&source);
        let title = page.title.unwrap_or_else(|| title_from_path(path));
        Ok(finish(self.name(), title, page.text, page.blocks, BTreeMap::new()))
    }
}

/// A page's visible text and its blocks.
#[derive(Debug, Default)]
pub(crate) struct Extracted {
    /// The visible text, blocks separated by blank lines.
    pub text: String,
    /// Blocks with spans into `text`.
    pub blocks: Vec<RawBlock>,
    /// `<title>`, else the first `h1`.
    pub title: Option<String>,
}

/// Elements never read.
const SKIPPED: &[&str] = &[
    "script", "style", "nav", "noscript", "template", "aside", "head", "svg", "math", "iframe", "canvas", "button",
    "select", "input", "textarea", "object", "embed", "audio", "video", "map", "link", "meta",
];

/// Classes of permalink anchors and screen-reader or toggle furniture.
const SKIPPED_CLASSES: &[&str] =
    &["anchor", "doc-anchor", "headerlink", "hideme", "sr-only", "visually-hidden", "screen-reader-text"];

/// Elements that flow inside a line of text.
const INLINE: &[&str] = &[
    "a", "abbr", "b", "bdi", "bdo", "cite", "code", "data", "dfn", "em", "i", "kbd", "mark", "q", "s", "samp", "small",
    "span", "strong", "sub", "sup", "time", "u", "var", "del", "ins", "label", "font", "tt", "wbr", "img", "big",
    "strike", "nobr", "output", "ruby", "rt", "rp",
];

/// Elements deeper than this are read as plain text, without recursion.
pub const MAX_DEPTH: usize = 128;

/// Pages whose elements nest deeper than this are not parsed (html5ever takes time quadratic in
/// the depth; 4,096 levels parse in well under a second, real pages rarely pass 100).
pub const MAX_NESTING: usize = 4096;

/// Elements that never nest: void elements and those whose end tag may be left out (an open `li`
/// is closed by the next `li`, so unclosed ones do not deepen the tree).
const NON_NESTING: &[&str] = &[
    "area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param", "source", "track", "wbr",
    "p", "li", "dt", "dd", "tr", "td", "th", "option", "optgroup", "thead", "tbody", "tfoot", "colgroup", "caption",
    "rb", "rt", "rtc", "rp", "html", "head", "body", "!doctype",
];

/// Elements whose content is raw text, not markup (skipped to their end tag).
const RAW_TEXT: &[&str] = &["script", "style", "textarea", "title", "xmp", "plaintext", "noembed", "noframes"];

/// The deepest element nesting of a page, estimated in one linear pass over its tags: start tags
/// minus end tags, ignoring [`NON_NESTING`] and self-closed elements, comments and raw text.
pub fn nesting_estimate(source: &str) -> usize {
    let b = source.as_bytes();
    let (mut depth, mut max, mut i) = (0usize, 0usize, 0usize);
    while let Some(off) = b[i..].iter().position(|&c| c == b'<') {
        let at = i + off + 1;
        if b[at..].starts_with(b"!--") {
            i = find_from(b, at, b"-->").map_or(b.len(), |j| j + 3);
            continue;
        }
        let closing = b.get(at) == Some(&b'/');
        let name_start = at + usize::from(closing);
        let name_len = b[name_start..].iter().take_while(|c| c.is_ascii_alphanumeric() || **c == b'!' || **c == b'-').count();
        if name_len == 0 {
            i = at;
            continue;
        }
        let name = source[name_start..name_start + name_len].to_ascii_lowercase();
        let gt = b[name_start..].iter().position(|&c| c == b'>').map_or(b.len(), |j| name_start + j);
        let self_closed = gt > 0 && gt < b.len() && b[gt - 1] == b'/';
        i = (gt + 1).min(b.len());
        if closing {
            if !NON_NESTING.contains(&name.as_str()) {
                depth = depth.saturating_sub(1);
            }
        } else if RAW_TEXT.contains(&name.as_str()) {
            let end = format!("</{name}");
            let lower_find = b[i..].windows(end.len()).position(|w| w.eq_ignore_ascii_case(end.as_bytes()));
            i = lower_find.map_or(b.len(), |j| i + j);
        } else if !self_closed && !NON_NESTING.contains(&name.as_str()) {
            depth += 1;
            max = max.max(depth);
        }
    }
    max
}

fn find_from(b: &[u8], from: usize, needle: &[u8]) -> Option<usize> {
    b.get(from..)?.windows(needle.len()).position(|w| w == needle).map(|j| from + j)
}

/// Selectors of the main content element, best first.
const MAIN_CONTENT: &[&str] = &["main", "[role=main]", "#main-content", "div.body", "article"];

/// Extracts the visible text and blocks of an HTML page.
pub(crate) fn extract(source: &str) -> Extracted {
    let html = Html::parse_document(source);
    let title = Selector::parse("title")
        .ok()
        .and_then(|s| html.select(&s).next())
        .map(|t| one_line(&t.text().collect::<String>()))
        .filter(|t| !t.is_empty());
    let root = MAIN_CONTENT.iter().filter_map(|s| Selector::parse(s).ok()).find_map(|s| html.select(&s).next());
    let mut walker = Walker::default();
    match root {
        Some(main) => walker.walk(main, true, 0),
        None => walker.walk(html.root_element(), false, 0),
    }
    walker.flush();
    let title = title.or(walker.first_h1);
    Extracted { text: walker.out.text, blocks: walker.out.blocks, title }
}

#[derive(Default)]
struct Walker {
    out: TextBuilder,
    /// Loose inline text not yet emitted.
    inline: String,
    first_h1: Option<String>,
}

impl Walker {
    /// Reads `el`'s children; `in_article` keeps `header`/`footer` elements (they belong to the
    /// article, not to the site). Below [`MAX_DEPTH`] the subtree's text is taken as it is.
    fn walk(&mut self, el: ElementRef<'_>, in_article: bool, depth: usize) {
        if depth >= MAX_DEPTH {
            push_subtree_text(&mut self.inline, el);
            return;
        }
        for child in el.children() {
            match child.value() {
                Node::Text(t) => push_collapsed(&mut self.inline, t),
                Node::Element(_) => {
                    let Some(child) = ElementRef::wrap(child) else { continue };
                    if is_skipped(child, in_article) {
                        continue;
                    }
                    self.element(child, in_article, depth + 1);
                }
                _ => {}
            }
        }
    }

    fn element(&mut self, el: ElementRef<'_>, in_article: bool, depth: usize) {
        let name = el.value().name();
        match name {
            "h1" | "h2" | "h3" | "h4" | "h5" | "h6" => {
                self.flush();
                let title = one_line(&inline_text(el));
                if title.is_empty() {
                    return;
                }
                let level = name.as_bytes()[1] - b'0';
                if level == 1 && self.first_h1.is_none() {
                    self.first_h1 = Some(title.clone());
                }
                self.out.block(BlockKind::Heading { level, title: title.clone() }, &title, None);
            }
            "p" => {
                self.flush();
                self.out.block(BlockKind::Paragraph, &inline_text(el), None);
            }
            "ul" | "ol" | "menu" => {
                self.flush();
                let mut list = String::new();
                render_list(el, 0, &mut list);
                self.out.block(BlockKind::List, &list, None);
            }
            "table" => {
                self.flush();
                self.out.block(BlockKind::Table, &render_table(el), None);
            }
            "pre" => {
                self.flush();
                let code: String = el.text().collect();
                self.out.block(BlockKind::Code { language: code_language(el), symbol: None }, &code, None);
            }
            "blockquote" => {
                self.flush();
                self.out.block(BlockKind::Quote, &inline_text(el), None);
            }
            "dl" => {
                self.flush();
                self.definitions(el);
            }
            "br" => self.inline.push('\n'),
            "hr" => self.flush(),
            _ if INLINE.contains(&name) => self.walk(el, in_article, depth),
            _ => {
                self.flush();
                self.walk(el, in_article || matches!(name, "article" | "main"), depth);
                self.flush();
            }
        }
    }

    /// Emits the loose inline text gathered so far as a paragraph.
    fn flush(&mut self) {
        let text = clean_lines(&self.inline);
        self.inline.clear();
        self.out.block(BlockKind::Paragraph, &text, None);
    }

    /// One Definition per `dt` with the `dd`s that follow it.
    fn definitions(&mut self, dl: ElementRef<'_>) {
        let mut term: Option<String> = None;
        let mut defs: Vec<String> = Vec::new();
        let items = dl.children().filter_map(ElementRef::wrap).flat_map(|c| {
            // `div` wrappers around dt/dd pairs are allowed.
            if c.value().name() == "div" {
                c.children().filter_map(ElementRef::wrap).collect::<Vec<_>>()
            } else {
                vec![c]
            }
        });
        for item in items {
            if is_skipped(item, true) {
                continue;
            }
            match item.value().name() {
                "dt" => {
                    if !defs.is_empty() || term.is_some() {
                        self.definition(term.take(), std::mem::take(&mut defs));
                    }
                    term = Some(one_line(&inline_text(item)));
                }
                "dd" => defs.push(inline_text(item)),
                _ => {}
            }
        }
        self.definition(term, defs);
    }

    fn definition(&mut self, term: Option<String>, defs: Vec<String>) {
        let term = term.unwrap_or_default();
        let single = defs.iter().all(|d| !d.contains('\n')) && defs.iter().map(String::len).sum::<usize>() <= 200;
        let text = match (term.is_empty(), single) {
            (true, _) => defs.join("\n"),
            (false, true) if !defs.is_empty() => format!("{term}: {}", defs.join(" ")),
            (false, _) => std::iter::once(term).chain(defs).collect::<Vec<_>>().join("\n"),
        };
        self.out.block(BlockKind::Definition, &text, None);
    }
}

fn is_skipped(el: ElementRef<'_>, in_article: bool) -> bool {
    let e = el.value();
    let name = e.name();
    if SKIPPED.contains(&name) || (!in_article && matches!(name, "header" | "footer")) {
        return true;
    }
    if e.attr("hidden").is_some()
        || e.attr("aria-hidden") == Some("true")
        || e.attr("role") == Some("navigation")
        || e.attr("style").is_some_and(|s| s.replace(' ', "").contains("display:none"))
    {
        return true;
    }
    e.classes().any(|c| SKIPPED_CLASSES.contains(&c))
}

/// Appends `s` with whitespace runs collapsed to one space.
fn push_collapsed(buf: &mut String, s: &str) {
    for c in s.chars() {
        if c.is_whitespace() {
            if !buf.is_empty() && !buf.ends_with([' ', '\n']) {
                buf.push(' ');
            }
        } else {
            buf.push(c);
        }
    }
}

/// Lines trimmed, blank ones dropped.
fn clean_lines(s: &str) -> String {
    s.lines().map(str::trim).filter(|l| !l.is_empty()).collect::<Vec<_>>().join("\n")
}

/// Appends the text of `el`'s whole subtree, whitespace collapsed, without recursion (for
/// subtrees below [`MAX_DEPTH`]).
fn push_subtree_text(buf: &mut String, el: ElementRef<'_>) {
    for t in el.text() {
        push_collapsed(buf, t);
    }
}

/// The text inside `el`, whitespace collapsed; `br` and block-level children start new lines.
fn inline_text(el: ElementRef<'_>) -> String {
    let mut buf = String::new();
    collect(el, &mut buf, 0);
    clean_lines(&buf)
}

fn collect(el: ElementRef<'_>, buf: &mut String, depth: usize) {
    if depth >= MAX_DEPTH {
        push_subtree_text(buf, el);
        return;
    }
    for child in el.children() {
        match child.value() {
            Node::Text(t) => push_collapsed(buf, t),
            Node::Element(_) => {
                let Some(child) = ElementRef::wrap(child) else { continue };
                if is_skipped(child, true) {
                    continue;
                }
                let name = child.value().name();
                if name == "br" {
                    buf.push('\n');
                } else if INLINE.contains(&name) {
                    collect(child, buf, depth + 1);
                } else {
                    buf.push('\n');
                    collect(child, buf, depth + 1);
                    buf.push('\n');
                }
            }
            _ => {}
        }
    }
}

/// Appends a list's items as lines (`- item`, `1. item`), nested lists indented two spaces (up to
/// [`MAX_DEPTH`] levels; deeper lists are read as text). Numbering saturates: `start` may be any
/// number a page writes (`<ol start=18446744073709551615>` overflowed it before; found by fuzzing,
/// fuzzing).
fn render_list(list: ElementRef<'_>, depth: usize, out: &mut String) {
    let ordered = list.value().name() == "ol";
    let mut n: i64 = list.value().attr("start").and_then(|s| s.trim().parse().ok()).unwrap_or(1);
    for li in list.children().filter_map(ElementRef::wrap) {
        if is_skipped(li, true) {
            continue;
        }
        let mut text = String::new();
        let mut nested = Vec::new();
        for child in li.children() {
            match child.value() {
                Node::Text(t) => push_collapsed(&mut text, t),
                Node::Element(_) => {
                    let Some(child) = ElementRef::wrap(child) else { continue };
                    if is_skipped(child, true) {
                        continue;
                    }
                    match child.value().name() {
                        "ul" | "ol" | "menu" if depth + 1 < MAX_DEPTH => nested.push(child),
                        "br" => text.push('\n'),
                        _ => {
                            text.push(' ');
                            collect(child, &mut text, depth + 1);
                            text.push(' ');
                        }
                    }
                }
                _ => {}
            }
        }
        let item = one_line(&text);
        if li.value().name() == "li" || !item.is_empty() {
            let marker = if ordered { format!("{n}. ") } else { "- ".to_string() };
            out.push_str(&"  ".repeat(depth));
            out.push_str(&marker);
            out.push_str(&item);
            out.push('\n');
            n = n.saturating_add(1);
        }
        for sub in nested {
            render_list(sub, depth + 1, out);
        }
    }
}

/// A table's rows as lines, cells joined by ` | `, header rows (`thead`) first.
fn render_table(table: ElementRef<'_>) -> String {
    let mut head = Vec::new();
    let mut body = Vec::new();
    let mut rows = |section: ElementRef<'_>, into_head: bool| {
        for tr in section.children().filter_map(ElementRef::wrap).filter(|e| e.value().name() == "tr") {
            let cells: Vec<String> = tr
                .children()
                .filter_map(ElementRef::wrap)
                .filter(|c| matches!(c.value().name(), "td" | "th") && !is_skipped(*c, true))
                .map(|c| one_line(&inline_text(c)))
                .collect();
            if cells.iter().all(String::is_empty) {
                continue;
            }
            let row = cells.join(" | ");
            if into_head {
                head.push(row);
            } else {
                body.push(row);
            }
        }
    };
    rows(table, false);
    for section in table.children().filter_map(ElementRef::wrap) {
        match section.value().name() {
            "thead" => rows(section, true),
            "tbody" | "tfoot" => rows(section, false),
            _ => {}
        }
    }
    let caption = Selector::parse("caption")
        .ok()
        .and_then(|s| table.select(&s).next())
        .map(|c| one_line(&c.text().collect::<String>()))
        .filter(|c| !c.is_empty());
    caption.into_iter().chain(head).chain(body).collect::<Vec<_>>().join("\n")
}

/// The language of a `pre`: a `language-*`, `lang-*` or `highlight-*` class on it, its `code`
/// child or its two nearest ancestors (Sphinx wraps it twice); rustdoc's `rust` class.
fn code_language(pre: ElementRef<'_>) -> Option<String> {
    let code = pre.children().filter_map(ElementRef::wrap).find(|c| c.value().name() == "code");
    let ancestors = pre.ancestors().filter_map(ElementRef::wrap).take(2);
    for el in [Some(pre), code].into_iter().flatten().chain(ancestors) {
        for class in el.value().classes() {
            for prefix in ["language-", "lang-", "highlight-"] {
                if let Some(lang) = class.strip_prefix(prefix) {
                    if !lang.is_empty() && lang != "default" {
                        return Some(lang.to_string());
                    }
                }
            }
        }
    }
    pre.value().classes().any(|c| c == "rust").then(|| "rust".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::testutil::check_document;

    fn parse(s: &str) -> ParsedDocument {
        let doc = HtmlParser.parse(Path::new("/site/page.html"), s.as_bytes()).unwrap();
        check_document(&doc);
        doc
    }

    fn blocks(doc: &ParsedDocument) -> Vec<(BlockKind, &str)> {
        doc.blocks.iter().map(|b| (b.kind.clone(), &doc.text[b.span.range()])).collect()
    }

    fn h(level: u8, title: &str) -> BlockKind {
        BlockKind::Heading { level, title: title.to_string() }
    }

    #[test]
    fn visible_text_in_blocks() {
        let page = r#"<!DOCTYPE html><html><head><title> Travel
            policy </title><style>p { color: red }</style><script>var x = "<p>no</p>";</script></head>
<body>
<header><a href="/">Home</a></header>
<nav><ul><li>Menu item</li></ul></nav>
<h1>Travel <em>policy</em></h1>
<p>Book   trips through
   the <a href="/portal">portal</a>.<br>Ask first.</p>
<div>Loose text in a div</div>
<ul><li>medical <b>costs</b></li><li>luggage<ul><li>lost</li></ul></li></ul>
<ol start="3"><li>third</li><li>fourth</li></ol>
<table><tbody><tr><td>Hotel</td><td>150</td></tr></tbody><thead><tr><th>Item</th><th>Limit</th></tr></thead></table>
<pre class="language-python">def f():
    return 1
</pre>
<blockquote><p>Quoted</p><p>advice</p></blockquote>
<dl><dt>Per diem</dt><dd>a daily allowance</dd></dl>
<p hidden>secret</p><div style="display: none">gone</div><aside>ad</aside>
<footer>(c) 2024</footer>
</body></html>"#;
        let doc = parse(page);
        assert_eq!(doc.title, "Travel policy");
        assert_eq!(
            blocks(&doc),
            vec![
                (h(1, "Travel policy"), "Travel policy"),
                (BlockKind::Paragraph, "Book trips through the portal.\nAsk first."),
                (BlockKind::Paragraph, "Loose text in a div"),
                (BlockKind::List, "- medical costs\n- luggage\n  - lost"),
                (BlockKind::List, "3. third\n4. fourth"),
                (BlockKind::Table, "Item | Limit\nHotel | 150"),
                (BlockKind::Code { language: Some("python".into()), symbol: None }, "def f():\n    return 1"),
                (BlockKind::Quote, "Quoted\nadvice"),
                (BlockKind::Definition, "Per diem: a daily allowance"),
            ]
        );
        for gone in ["Home", "Menu item", "no</p>", "secret", "gone", "ad\n", "(c)", "color"] {
            assert!(!doc.text.contains(gone), "{gone:?} leaked into {:?}", doc.text);
        }
        assert!(doc.text.contains("Travel policy\n\nBook trips"));
    }

    #[test]
    fn rustdoc_main_content_is_preferred() {
        let page = r##"<html><head><title>Vec in std::vec - Rust</title></head><body class="rustdoc struct">
<nav class="sidebar"><h2>Sidebar</h2><ul><li>push</li></ul></nav>
<main><div class="width-limiter"><rustdoc-search></rustdoc-search><section id="main-content" class="content">
<div class="main-heading"><h1>Struct <span class="struct">Vec</span><button id="copy-path">Copy</button></h1></div>
<details class="toggle top-doc" open><summary class="hideme"><span>Expand description</span></summary>
<div class="docblock"><p>A contiguous growable array type.</p>
<h2 id="examples"><a class="doc-anchor" href="#examples">§</a>Examples</h2>
<div class="example-wrap"><pre class="rust rust-example-rendered"><code><span class="kw">let</span> v = vec![1];</code></pre></div>
</div></details></section></div></main></body></html>"##;
        let doc = parse(page);
        assert_eq!(doc.title, "Vec in std::vec - Rust");
        let got = blocks(&doc);
        assert_eq!(got[0], (h(1, "Struct Vec"), "Struct Vec"));
        assert_eq!(got[1], (BlockKind::Paragraph, "A contiguous growable array type."));
        assert_eq!(got[2], (h(2, "Examples"), "Examples"));
        assert_eq!(got[3], (BlockKind::Code { language: Some("rust".into()), symbol: None }, "let v = vec![1];"));
        assert!(!doc.text.contains("Sidebar") && !doc.text.contains("Expand description"));
    }

    #[test]
    fn sphinx_body_and_title_fallbacks() {
        let page = r##"<html><body><div class="sphinxsidebar" role="navigation"><p>Search</p></div>
<div class="document"><div class="body" role="main"><section><h1>Install<a class="headerlink" href="#install">¶</a></h1>
<div class="highlight-bash notranslate"><div class="highlight"><pre>pip install x</pre></div></div>
<dl class="py function"><dt class="sig">f(x)</dt><dd><p>Does f.</p><p>Twice.</p></dd></dl></section></div></div></body></html>"##;
        let doc = parse(page);
        assert_eq!(doc.title, "Install");
        assert_eq!(
            blocks(&doc),
            vec![
                (h(1, "Install"), "Install"),
                (BlockKind::Code { language: Some("bash".into()), symbol: None }, "pip install x"),
                (BlockKind::Definition, "f(x)\nDoes f.\nTwice."),
            ]
        );
        let doc = parse("<p>Just a paragraph, no title.</p>");
        assert_eq!(doc.title, "page");
    }

    #[test]
    fn r16_deeply_nested_html_is_read_without_recursing_to_the_bottom() {
        for depth in [MAX_DEPTH - 1, MAX_DEPTH + 1, MAX_NESTING - 8] {
            for tag in ["div", "span", "ul><li", "table><tr><td", "blockquote", "dl><dd"] {
                let close: String = tag.split("><").collect::<Vec<_>>().iter().rev().map(|t| format!("</{t}>")).collect();
                let page = format!("<p>top</p>{}deep text{}", format!("<{tag}>").repeat(depth), close.repeat(depth));
                assert!(nesting_estimate(&page) <= depth + 1, "{tag} x {depth}: {}", nesting_estimate(&page));
                // The default test thread has a 2 MiB stack: a walk that recursed per level overflowed it.
                let doc = parse(&page);
                assert!(doc.text.contains("deep text"), "{tag} x {depth}");
            }
        }
    }

    #[test]
    fn r16_nesting_past_the_limit_is_refused_in_linear_time() {
        let t = std::time::Instant::now();
        let page = format!("{}x{}", "<div>".repeat(100_000), "</div>".repeat(100_000));
        let r = HtmlParser.parse(Path::new("deep.html"), page.as_bytes());
        assert!(matches!(&r, Err(SkipReason::OverLimit { what }) if what.contains("nested 100000 deep")), "{r:?}");
        assert!(t.elapsed() < std::time::Duration::from_secs(5), "{:?}", t.elapsed());
        // What does not nest is not counted: unclosed list items, void elements, scripts, comments.
        let flat = format!(
            "<!DOCTYPE html><ul>{}</ul><script>{}</script><!-- {} --><p>a<br>b<img src=x><hr/>",
            "<li>item".repeat(10_000),
            "if (a<b) x<y;".repeat(10_000),
            "<div>".repeat(10_000)
        );
        assert_eq!(nesting_estimate(&flat), 1);
        assert_eq!(nesting_estimate("<div><span><b>x</b></span></div><div></div>"), 3);
    }

    #[test]
    fn r16_huge_ordered_list_start_saturates() {
        let doc = parse("<ol start=\"18446744073709551615\"><li>a</li><li>b</li></ol><ol start=-3><li>c</li></ol><ol start=9223372036854775807><li>x</li><li>y</li></ol>");
        assert!(doc.text.contains("1. a\n2. b"), "an unparsable start counts from 1: {:?}", doc.text);
        assert!(doc.text.contains("-3. c"), "{:?}", doc.text);
        assert!(doc.text.contains("9223372036854775807. x\n9223372036854775807. y"), "{:?}", doc.text);
    }
}
