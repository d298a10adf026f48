//! E-books (`.epub`, versions 2 and 3): the chapters in spine order, each XHTML file read by the
//! HTML parser ([`html`](super::html)), titled from the table of contents (the EPUB 3 `nav`
//! document, else the EPUB 2 NCX) when the chapter does not open with a heading of its own.
//!
//! Title: the package's `dc:title`, else the file stem. Metadata: `chapters`, `author`
//! (`dc:creator`).

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use super::docx::{attr, is};
use super::html::{self, MAX_NESTING};
use super::package::{self, all_text, Package};
use super::{finish, one_line, title_from_path, InputKind, Parser, SkipReason, TextBuilder};
use crate::types::{BlockKind, ParsedDocument, Span};

/// The EPUB parser.
#[derive(Debug, Clone, Copy, Default)]
pub struct EpubParser;

impl Parser for EpubParser {
    fn name(&self) -> &'static str {
        "epub"
    }

    fn input(&self) -> InputKind {
        InputKind::Binary
    }

    fn parse(&self, path: &Path, bytes: &[u8]) -> Result<ParsedDocument, SkipReason> {
        let mut pkg = Package::open(bytes, "e-book")?;
        let container = pkg.required("META-INF/container.xml")?;
        let container = package::xml(&container, "META-INF/container.xml")?;
        let opf_path = container
            .descendants()
            .find(|n| is(*n, "rootfile"))
            .and_then(|n| attr(n, "full-path"))
            .map(str::to_string)
            .ok_or_else(|| SkipReason::corrupt("META-INF/container.xml names no rootfile"))?;
        let opf_text = pkg.required(&opf_path)?;
        let opf = package::xml(&opf_text, &opf_path)?;
        let (title, author) = package::title_and_author(&opf);

        // id → (path, media type, properties)
        let mut manifest: HashMap<&str, (String, &str, &str)> = HashMap::new();
        for item in opf.descendants().filter(|n| is(*n, "item")) {
            let (Some(id), Some(href)) = (attr(item, "id"), attr(item, "href")) else { continue };
            let path = package::resolve(&opf_path, &percent_decode(href));
            manifest.insert(id, (path, attr(item, "media-type").unwrap_or(""), attr(item, "properties").unwrap_or("")));
        }
        let spine = opf.descendants().find(|n| is(*n, "spine"));
        let chapters: Vec<String> = spine
            .iter()
            .flat_map(|s| s.children().filter(|n| is(*n, "itemref")))
            .filter_map(|r| manifest.get(attr(r, "idref")?))
            .filter(|(_, media, _)| media.contains("html") || media.is_empty())
            .map(|(path, _, _)| path.clone())
            .collect();
        let nav = manifest.values().find(|(_, _, props)| props.split_whitespace().any(|p| p == "nav")).map(|(p, _, _)| p.clone());
        let ncx = spine.and_then(|s| attr(s, "toc")).and_then(|id| manifest.get(id)).map(|(p, _, _)| p.clone());
        let toc = match (nav, ncx) {
            (Some(nav), _) => toc_titles(&mut pkg, &nav, false)?,
            (None, Some(ncx)) => toc_titles(&mut pkg, &ncx, true)?,
            (None, None) => HashMap::new(),
        };

        let mut out = TextBuilder::default();
        for chapter in &chapters {
            let Some(xhtml) = pkg.text(chapter)? else { continue };
            let depth = html::nesting_estimate(&xhtml);
            if depth > MAX_NESTING {
                return Err(SkipReason::OverLimit {
                    what: format!("{chapter}: elements nested {depth} deep (the limit is {MAX_NESTING})"),
                });
            }
            let page = html::extract(&xhtml);
            if page.blocks.is_empty() {
                continue;
            }
            let opens_with_heading = matches!(page.blocks.first(), Some((BlockKind::Heading { .. }, _, _)));
            if let Some(title) = toc.get(chapter.as_str()).filter(|_| !opens_with_heading) {
                out.block(BlockKind::Heading { level: 1, title: title.clone() }, title, None);
            }
            let start = out.raw(&page.text);
            out.blocks.extend(
                page.blocks.into_iter().map(|(kind, span, p)| (kind, Span::new(span.start + start, span.end + start), p)),
            );
        }
        let mut metadata = BTreeMap::new();
        metadata.insert("chapters".to_string(), chapters.len().to_string());
        if let Some(author) = author {
            metadata.insert("author".to_string(), author);
        }
        let title = title.unwrap_or_else(|| title_from_path(path));
        Ok(finish(self.name(), title, out.text, out.blocks, metadata))
    }
}

/// Chapter path → its title in the table of contents (the first entry naming it): the EPUB 3
/// navigation document's `toc` nav, or the EPUB 2 NCX's `navPoint`s.
fn toc_titles(pkg: &mut Package<'_>, part: &str, ncx: bool) -> Result<HashMap<String, String>, SkipReason> {
    let Some(text) = pkg.text(part)? else { return Ok(HashMap::new()) };
    let doc = package::xml(&text, part)?;
    let mut titles = HashMap::new();
    if ncx {
        for point in doc.descendants().filter(|n| is(*n, "navPoint")) {
            let label = point.children().find(|n| is(*n, "navLabel")).map(|l| one_line(&all_text(l)));
            let src = point.children().find(|n| is(*n, "content")).and_then(|c| attr(c, "src"));
            if let (Some(label), Some(src)) = (label, src) {
                let target = package::resolve(part, &percent_decode(src.split('#').next().unwrap_or("")));
                if !label.is_empty() {
                    titles.entry(target).or_insert(label);
                }
            }
        }
    } else {
        let nav = doc
            .descendants()
            .find(|n| is(*n, "nav") && attr(*n, "type") == Some("toc"))
            .or_else(|| doc.descendants().find(|n| is(*n, "nav")));
        for a in nav.iter().flat_map(|n| n.descendants().filter(|a| is(*a, "a"))) {
            let Some(href) = attr(a, "href") else { continue };
            let label = one_line(&all_text(a));
            let target = package::resolve(part, &percent_decode(href.split('#').next().unwrap_or("")));
            if !label.is_empty() {
                titles.entry(target).or_insert(label);
            }
        }
    }
    Ok(titles)
}

/// `%20` and friends decoded (hrefs in EPUB are URLs); a malformed escape is kept as it is.
fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            let hex = |c: u8| (c as char).to_digit(16);
            if let (Some(high), Some(low)) = (hex(b[i + 1]), hex(b[i + 2])) {
                out.push((high * 16 + low) as u8);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::testutil::fixture;

    #[test]
    fn percent_escapes_decode() {
        assert_eq!(percent_decode("ch%201.xhtml"), "ch 1.xhtml");
        assert_eq!(percent_decode("a%2"), "a%2");
        assert_eq!(percent_decode("%zz%41"), "%zzA");
    }

    #[test]
    fn pandoc_epub_reads_chapters_in_spine_order() {
        let doc = EpubParser.parse(Path::new("b.epub"), &fixture("office/book.epub")).unwrap();
        crate::source::testutil::check_document(&doc);
        assert_eq!(doc.title, "Harbourline Stories");
        assert_eq!(doc.metadata["author"], "Eva Lindqvist");
        let first = doc.text.find("Harbourline opened its first depot in Rotterdam Waalhaven in 1998").unwrap();
        let second = doc.text.find("The Antwerp depot followed in 2004 and the Hamburg depot in 2011.").unwrap();
        assert!(first < second);
        let headings: Vec<&str> = doc.blocks.iter().filter_map(|b| match &b.kind { BlockKind::Heading { title, .. } => Some(title.as_str()), _ => None }).collect();
        assert!(headings.contains(&"The first depot") && headings.contains(&"Crossing the border"), "{headings:?}");
    }
}
