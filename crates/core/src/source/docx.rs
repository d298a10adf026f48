//! Word documents (`.docx`, `.docm`, `.dotx`): the main document part of the Office Open XML
//! package, read with roxmltree through [`package`](super::package).
//!
//! - Headings: paragraphs whose style is a heading (`heading N` by name, or an outline level in
//!   the style, its bases or the paragraph) become sections; a `Title` paragraph names the
//!   document when the core properties do not.
//! - Lists: numbered paragraphs (`w:numPr`), bullets or numbers as `numbering.xml` says, nested by
//!   level.
//! - Tables: one Table block per table, header rows (`w:tblHeader`, else the first row) repeated
//!   when it is long ([`table`](super::table)); a one-column table (a layout box) is read as
//!   paragraphs.
//! - Tracked changes: insertions kept, deletions (`w:del`, `w:moveFrom`) left out. Field codes
//!   left out, their results kept. Text boxes read after the paragraph that anchors them.
//! - Footnotes, endnotes and comments: their own sections at the end (`Footnotes`, `Comments`),
//!   each reference in the text marked `[footnote N]`. Headers and footers are not read.
//!
//! Title: the core properties' `dc:title`, else the first Title paragraph, else the first heading,
//! else the file stem. Metadata: `author` (`dc:creator`).

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use roxmltree::Node;

use super::compose::{first_heading, Composer, Item};
use super::package::{self, all_text, Package, MAX_DEPTH};
use super::{finish, title_from_path, InputKind, Parser, SkipReason};
use crate::types::ParsedDocument;

/// The Word parser.
#[derive(Debug, Clone, Copy, Default)]
pub struct DocxParser;

impl Parser for DocxParser {
    fn name(&self) -> &'static str {
        "docx"
    }

    fn input(&self) -> InputKind {
        InputKind::Binary
    }

    fn parse(&self, path: &Path, bytes: &[u8]) -> Result<ParsedDocument, SkipReason> {
        let mut pkg = Package::open(bytes, "Word")?;
        let main = package::main_part(&mut pkg, "/officeDocument", "word/document.xml")?;
        let document = pkg.required(&main)?;
        let document = package::xml(&document, &main)?;
        let styles = match pkg.text("word/styles.xml")? {
            Some(text) => Styles::read(&package::xml(&text, "word/styles.xml")?),
            None => Styles::default(),
        };
        let numbering = match pkg.text("word/numbering.xml")? {
            Some(text) => ordered_lists(&package::xml(&text, "word/numbering.xml")?),
            None => HashMap::new(),
        };
        let mut walker = Walker { styles, numbering, ..Walker::default() };
        let body = document
            .root_element()
            .children()
            .find(|n| is(*n, "body"))
            .ok_or_else(|| SkipReason::corrupt(format!("{main} has no w:body")))?;
        walker.blocks(body, 0);

        let mut composer = Composer::default();
        composer.extend(walker.items);
        let footnotes = notes(&mut pkg, "word/footnotes.xml", "footnote", &walker.note_numbers)?;
        let endnotes = notes(&mut pkg, "word/endnotes.xml", "endnote", &walker.note_numbers)?;
        composer.notes("Footnotes", &[footnotes, endnotes].concat());
        composer.notes("Comments", &comments(&mut pkg)?);
        let out = composer.finish();

        let (core_title, author) = match pkg.text("docProps/core.xml")? {
            Some(text) => package::title_and_author(&package::xml(&text, "docProps/core.xml")?),
            None => (None, None),
        };
        let title = core_title
            .or(walker.title)
            .or_else(|| first_heading(&out.blocks))
            .unwrap_or_else(|| title_from_path(path));
        let mut metadata = BTreeMap::new();
        if let Some(author) = author {
            metadata.insert("author".to_string(), author);
        }
        Ok(finish(self.name(), title, out.text, out.blocks, metadata))
    }
}

/// Whether `n` is an element with local name `name` (any namespace).
pub(crate) fn is(n: Node<'_, '_>, name: &str) -> bool {
    n.is_element() && n.tag_name().name() == name
}

/// An attribute by local name (any namespace).
pub(crate) fn attr<'a>(n: Node<'a, '_>, name: &str) -> Option<&'a str> {
    n.attributes().find(|a| a.name() == name).map(|a| a.value())
}

/// The first child element with local name `name`.
pub(crate) fn child<'a, 'i>(n: Node<'a, 'i>, name: &str) -> Option<Node<'a, 'i>> {
    n.children().find(|c| is(*c, name))
}

/// What the paragraph styles say: heading level (1-based) by style id, and which is the Title.
#[derive(Debug, Default)]
struct Styles {
    heading: HashMap<String, u8>,
    title: Vec<String>,
}

impl Styles {
    fn read(doc: &roxmltree::Document<'_>) -> Styles {
        let mut based: HashMap<String, String> = HashMap::new();
        let mut level: HashMap<String, u8> = HashMap::new();
        let mut title = Vec::new();
        for style in doc.descendants().filter(|n| is(*n, "style")) {
            let Some(id) = attr(style, "styleId") else { continue };
            let name = child(style, "name").and_then(|n| attr(n, "val")).unwrap_or("").to_ascii_lowercase();
            if let Some(n) = name.strip_prefix("heading ").and_then(|n| n.trim().parse::<u8>().ok()) {
                level.insert(id.to_string(), n.max(1));
            } else if let Some(l) = child(style, "pPr").and_then(|p| child(p, "outlineLvl")).and_then(|o| attr(o, "val")) {
                if let Some(l) = l.parse::<u8>().ok().filter(|l| *l < 9) {
                    level.insert(id.to_string(), l + 1);
                }
            }
            if name == "title" {
                title.push(id.to_string());
            }
            if let Some(base) = child(style, "basedOn").and_then(|b| attr(b, "val")) {
                based.insert(id.to_string(), base.to_string());
            }
        }
        // A style based on a heading style is a heading of that level (a few hops at most).
        let mut heading = level.clone();
        for id in based.keys() {
            let mut at = id.as_str();
            for _ in 0..8 {
                if let Some(l) = level.get(at) {
                    heading.entry(id.clone()).or_insert(*l);
                    break;
                }
                match based.get(at) {
                    Some(next) => at = next,
                    None => break,
                }
            }
        }
        Styles { heading, title }
    }
}

/// Whether each `(numId, level)` of `numbering.xml` is numbered (else bulleted).
fn ordered_lists(doc: &roxmltree::Document<'_>) -> HashMap<(String, u8), bool> {
    let mut abstract_formats: HashMap<String, HashMap<u8, bool>> = HashMap::new();
    for a in doc.descendants().filter(|n| is(*n, "abstractNum")) {
        let Some(id) = attr(a, "abstractNumId") else { continue };
        let levels = a
            .children()
            .filter(|l| is(*l, "lvl"))
            .filter_map(|l| {
                let level = attr(l, "ilvl")?.parse::<u8>().ok()?;
                let format = child(l, "numFmt").and_then(|f| attr(f, "val")).unwrap_or("decimal");
                Some((level, !matches!(format, "bullet" | "none")))
            })
            .collect();
        abstract_formats.insert(id.to_string(), levels);
    }
    let mut out = HashMap::new();
    for num in doc.descendants().filter(|n| is(*n, "num")) {
        let (Some(id), Some(a)) = (attr(num, "numId"), child(num, "abstractNumId").and_then(|a| attr(a, "val"))) else {
            continue;
        };
        for (level, ordered) in abstract_formats.get(a).into_iter().flatten() {
            out.insert((id.to_string(), *level), *ordered);
        }
    }
    out
}

/// Walks the body, collecting items.
#[derive(Debug, Default)]
struct Walker {
    styles: Styles,
    numbering: HashMap<(String, u8), bool>,
    items: Vec<Item>,
    /// The first Title paragraph.
    title: Option<String>,
    /// Footnote/endnote id → the number shown at its reference, in order of reference.
    note_numbers: HashMap<(bool, String), usize>,
}

impl Walker {
    /// Block-level content: paragraphs, tables, content controls.
    fn blocks(&mut self, parent: Node<'_, '_>, depth: usize) {
        for n in parent.children().filter(Node::is_element) {
            match n.tag_name().name() {
                "p" => self.paragraph(n),
                "tbl" => self.table(n),
                "sdt" => {
                    if let Some(content) = child(n, "sdtContent") {
                        self.nested(content, depth);
                    }
                }
                "customXml" | "ins" | "moveTo" | "smartTag" => self.nested(n, depth),
                _ => {}
            }
        }
    }

    fn nested(&mut self, n: Node<'_, '_>, depth: usize) {
        if depth < MAX_DEPTH {
            self.blocks(n, depth + 1);
        } else {
            self.items.push(Item::Paragraph(all_text(n)));
        }
    }

    fn paragraph(&mut self, p: Node<'_, '_>) {
        let mut text = String::new();
        let mut boxes = Vec::new();
        self.runs(p, &mut text, &mut boxes, 0);
        let props = child(p, "pPr");
        let style = props.and_then(|pr| child(pr, "pStyle")).and_then(|s| attr(s, "val")).unwrap_or("");
        let outline = props
            .and_then(|pr| child(pr, "outlineLvl"))
            .and_then(|o| attr(o, "val"))
            .and_then(|l| l.parse::<u8>().ok())
            .filter(|l| *l < 9)
            .map(|l| l + 1);
        let numbered = props.and_then(|pr| child(pr, "numPr")).and_then(|np| {
            let id = child(np, "numId").and_then(|i| attr(i, "val")).filter(|id| *id != "0")?;
            let level = child(np, "ilvl").and_then(|l| attr(l, "val")).and_then(|l| l.parse::<u8>().ok()).unwrap_or(0);
            Some((id.to_string(), level))
        });
        let level = outline.or_else(|| self.styles.heading.get(style).copied());
        if !text.trim().is_empty() {
            if self.styles.title.iter().any(|t| t == style) {
                if self.title.is_none() {
                    self.title = Some(super::one_line(&text));
                }
                self.items.push(Item::Paragraph(text));
            } else if let Some(level) = level {
                self.items.push(Item::Heading(level, text));
            } else if let Some((id, level)) = numbered {
                let ordered = self.numbering.get(&(id, level)).copied().unwrap_or(false);
                self.items.push(Item::ListEntry(level as usize, ordered, text));
            } else {
                self.items.push(Item::Paragraph(text));
            }
        }
        for b in boxes {
            self.items.push(Item::Paragraph(b));
        }
    }

    /// The text of a paragraph's runs, in order: insertions kept, deletions and field codes left
    /// out, breaks as line ends, note references marked; text boxes gathered into `boxes`.
    fn runs(&mut self, n: Node<'_, '_>, text: &mut String, boxes: &mut Vec<String>, depth: usize) {
        for c in n.children() {
            if c.is_text() {
                continue; // whitespace between elements; run text lives in w:t
            }
            if !c.is_element() {
                continue;
            }
            match c.tag_name().name() {
                "t" => text.push_str(c.text().unwrap_or("")),
                "tab" | "ptab" => text.push(' '),
                "br" | "cr" => text.push('\n'),
                "noBreakHyphen" => text.push('-'),
                "del" | "moveFrom" | "delText" | "instrText" | "pPr" | "rPr" | "Fallback" | "fldData" => {}
                "footnoteReference" | "endnoteReference" => {
                    if let Some(id) = attr(c, "id") {
                        let next = self.note_numbers.len() + 1;
                        let key = (c.tag_name().name() == "endnoteReference", id.to_string());
                        let number = *self.note_numbers.entry(key).or_insert(next);
                        text.push_str(&format!(" [footnote {number}]"));
                    }
                }
                "txbxContent" => {
                    let t: Vec<String> = c.descendants().filter(|p| is(*p, "p")).map(|p| paragraph_text(p)).collect();
                    boxes.push(t.join("\n"));
                }
                _ if depth < MAX_DEPTH => self.runs(c, text, boxes, depth + 1),
                _ => text.push_str(&all_text(c)),
            }
        }
    }

    fn table(&mut self, t: Node<'_, '_>) {
        let mut rows = Vec::new();
        let mut header = 0;
        for (i, tr) in t.children().filter(|r| is(*r, "tr")).enumerate() {
            let repeated_header = child(tr, "trPr").and_then(|p| child(p, "tblHeader")).is_some_and(|h| {
                !matches!(attr(h, "val"), Some("0" | "false" | "off"))
            });
            if repeated_header && header == i {
                header = i + 1;
            }
            let cells: Vec<String> = tr
                .children()
                .filter(|c| is(*c, "tc") || is(*c, "sdt"))
                .map(|tc| {
                    let paragraphs: Vec<String> =
                        tc.descendants().filter(|p| is(*p, "p")).map(|p| paragraph_text(p)).collect();
                    super::one_line(&paragraphs.join(" "))
                })
                .collect();
            rows.push(cells);
        }
        let width = rows.iter().map(Vec::len).max().unwrap_or(0);
        if width <= 1 {
            // A one-column table is a layout box: its cells are paragraphs.
            for row in rows.into_iter().flatten().filter(|c| !c.trim().is_empty()) {
                self.items.push(Item::Paragraph(row));
            }
            return;
        }
        let header = if header == 0 { usize::from(rows.len() > 1) } else { header };
        self.items.push(Item::Table(rows, header));
    }
}

/// A paragraph's own text (inside tables, text boxes and notes): `w:t` under it, deletions and
/// field codes left out; iterative, any depth.
fn paragraph_text(p: Node<'_, '_>) -> String {
    let mut out = String::new();
    let mut skip_until: Option<roxmltree::NodeId> = None;
    for n in p.descendants() {
        if let Some(end) = skip_until {
            if n.ancestors().any(|a| a.id() == end) {
                continue;
            }
            skip_until = None;
        }
        if !n.is_element() {
            continue;
        }
        match n.tag_name().name() {
            "del" | "moveFrom" | "instrText" | "delText" | "Fallback" => skip_until = Some(n.id()),
            "t" => out.push_str(n.text().unwrap_or("")),
            "tab" | "br" | "cr" => out.push(' '),
            _ => {}
        }
    }
    out
}

/// The notes of a `footnotes.xml` / `endnotes.xml` part, as `[footnote N] text`, numbered as
/// referenced (notes never referenced follow, numbered on).
fn notes(
    pkg: &mut Package<'_>,
    part: &str,
    element: &str,
    numbers: &HashMap<(bool, String), usize>,
) -> Result<Vec<String>, SkipReason> {
    let Some(text) = pkg.text(part)? else { return Ok(Vec::new()) };
    let doc = package::xml(&text, part)?;
    let endnote = element == "endnote";
    let mut found: Vec<(usize, String)> = Vec::new();
    let mut next = numbers.len() + 1;
    for note in doc.root_element().children().filter(|n| is(*n, element)) {
        if matches!(attr(note, "type"), Some("separator" | "continuationSeparator" | "continuationNotice")) {
            continue;
        }
        let body: Vec<String> =
            note.descendants().filter(|p| is(*p, "p")).map(|p| paragraph_text(p)).filter(|t| !t.trim().is_empty()).collect();
        if body.is_empty() {
            continue;
        }
        let id = attr(note, "id").unwrap_or("").to_string();
        let number = numbers.get(&(endnote, id)).copied().unwrap_or_else(|| {
            next += 1;
            next - 1
        });
        found.push((number, format!("[footnote {number}] {}", body.join("\n"))));
    }
    found.sort_by_key(|(n, _)| *n);
    Ok(found.into_iter().map(|(_, t)| t).collect())
}

/// The comments of `word/comments.xml`, as `Comment by AUTHOR: text`.
fn comments(pkg: &mut Package<'_>) -> Result<Vec<String>, SkipReason> {
    let Some(text) = pkg.text("word/comments.xml")? else { return Ok(Vec::new()) };
    let doc = package::xml(&text, "word/comments.xml")?;
    Ok(doc
        .root_element()
        .children()
        .filter(|n| is(*n, "comment"))
        .filter_map(|c| {
            let body: Vec<String> =
                c.descendants().filter(|p| is(*p, "p")).map(|p| paragraph_text(p)).filter(|t| !t.trim().is_empty()).collect();
            if body.is_empty() {
                return None;
            }
            Some(match attr(c, "author").filter(|a| !a.trim().is_empty()) {
                Some(author) => format!("Comment by {author}: {}", body.join("\n")),
                None => format!("Comment: {}", body.join("\n")),
            })
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::testutil::{blocks_of, check_document, fixture};
    use crate::types::BlockKind;

    fn heading(level: u8, title: &str) -> (BlockKind, String) {
        (BlockKind::Heading { level, title: title.into() }, title.into())
    }

    #[test]
    fn pandoc_docx_keeps_headings_lists_table_and_footnote() {
        let doc = DocxParser.parse(Path::new("handbook.docx"), &fixture("office/headings-lists-table.docx")).unwrap();
        check_document(&doc);
        let b = blocks_of(&doc);
        assert_eq!(b[0], heading(1, "Depot handbook"));
        assert_eq!(b[1].1, "Every depot keeps this handbook at the gate office. [footnote 1]");
        assert_eq!(b[2], heading(2, "Opening the depot"));
        assert_eq!(b[3], heading(3, "Morning checklist"));
        assert_eq!(
            b[4],
            (BlockKind::List, "- Unlock gate 3 and switch on the yard lights.\n- Check that the fire exits are clear.\n- Start the dock scanners.".into())
        );
        assert!(b[5].1.starts_with("1. Sign in to the shift-planning app.\n2. Read"), "{:?}", b[5]);
        assert_eq!(b[6], heading(2, "Contacts"));
        assert_eq!(b[7], (BlockKind::Table, "Role | Name | Extension\nSite lead | Ruben Claes | 4101\nService desk | IT | 4357".into()));
        assert_eq!(b[8], heading(1, "Footnotes"));
        assert_eq!(b[9].1, "[footnote 1] The handbook is reviewed every January.");
        assert_eq!(doc.title, "Depot handbook");
    }

    #[test]
    fn tracked_changes_keep_insertions_and_drop_deletions() {
        let doc = DocxParser.parse(Path::new("t.docx"), &fixture("office/tracked-changes.docx")).unwrap();
        check_document(&doc);
        assert!(doc.text.contains("The Antwerp depot opens at 06:00 on Saturdays."), "{}", doc.text);
        assert!(doc.text.contains("The shift ends at 12:00. Overtime is paid at the weekend rate."), "{}", doc.text);
        assert!(!doc.text.contains("07:00") && !doc.text.contains("Lunch"), "{}", doc.text);
    }

    #[test]
    fn encrypted_legacy_and_broken_files_say_why() {
        assert_eq!(DocxParser.parse(Path::new("e.docx"), &fixture("office/encrypted.docx")).err(), Some(SkipReason::Encrypted));
        assert_eq!(
            DocxParser.parse(Path::new("l.docx"), &fixture("office/legacy.doc")).err(),
            Some(SkipReason::Legacy { format: "Word" })
        );
        let mut cut = fixture("office/headings-lists-table.docx");
        cut.truncate(cut.len() / 2);
        assert!(matches!(DocxParser.parse(Path::new("c.docx"), &cut), Err(SkipReason::Corrupt { .. })));
    }
}
