//! OpenDocument files: text (`.odt`), presentations (`.odp`) and spreadsheets (`.ods`), all one
//! `content.xml` in a zip, read with roxmltree through [`package`](super::package).
//!
//! - Text: `text:h` headings by outline level; paragraphs (a `Title` paragraph names the
//!   document); lists, numbered or bulleted as their list style says, nested; tables (header rows
//!   from `table:table-header-rows`, else the first); sections and text frames read in place;
//!   footnotes and endnotes (`text:note`) and comments (`office:annotation`) as their own sections
//!   at the end, each note's reference marked `[footnote N]`; tracked deletions
//!   (`text:tracked-changes`) and generated indexes (a table of contents) left out.
//! - Presentations: each `draw:page` a section titled by its title frame, else `Slide N`, its
//!   blocks on page N; speaker notes a `Speaker notes` sub-section.
//! - Spreadsheets: each `table:table` a sheet written by [`sheet`](super::sheet); a cell's value
//!   is its displayed text (the cached result of a formula, a date as the sheet shows it).
//!   Repeated rows and columns (`number-rows-repeated`, how a sheet claims a million empty rows)
//!   are never expanded when empty, and at most [`MAX_CELLS`] cells are read.
//!
//! Every kind's tables share one [`TableBudget`]: [`MAX_CELLS`] cells, and the text the guard
//! allows the file ([`guard::text_budget`]). A file whose repeated cells expand past that text is
//! refused as soon as they do (an 8.6 KB `.odt` of eight tables claiming 4 million cells each
//! took 25 s and 1.7 GB to expand before the guard refused its text).
//!
//! Title: `dc:title` in `meta.xml`, else the first Title paragraph or heading, else the file stem.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use roxmltree::Node;

use super::compose::{first_heading, Composer, Item};
use super::docx::{attr, child, is};
use super::package::{self, all_text, Package, MAX_DEPTH};
use super::{finish, guard, one_line, sheet, title_from_path, InputKind, Parser, SkipReason, TextBuilder};
use crate::types::ParsedDocument;

/// Cells one spreadsheet may have read (all sheets).
pub const MAX_CELLS: usize = 4_000_000;

/// Columns one row may have (the format's own limit).
const MAX_COLUMNS: usize = 16_384;

/// What one document's tables may still expand to: cells, and bytes of cell text.
#[derive(Debug, Clone, Copy)]
struct TableBudget {
    cells: usize,
    bytes: u64,
    /// The bytes of text it started with.
    limit: u64,
    /// The text ran past `bytes`: the file is refused.
    over_text: bool,
}

/// [`MAX_CELLS`] cells and no cap on their text of its own (the guard's check after the parse
/// still holds): a budget that reads tables, where a derived one (no cells) would drop them all.
impl Default for TableBudget {
    fn default() -> TableBudget {
        TableBudget::new(MAX_CELLS, u64::MAX)
    }
}

impl TableBudget {
    /// [`MAX_CELLS`] cells and the text the guard allows a `file_bytes`-byte file.
    fn for_file(file_bytes: usize) -> TableBudget {
        TableBudget::new(MAX_CELLS, guard::text_budget(file_bytes as u64, guard::MAX_TEXT_EXPANSION))
    }

    fn new(cells: usize, bytes: u64) -> TableBudget {
        TableBudget { cells, bytes, limit: bytes, over_text: false }
    }

    fn spent(&self) -> bool {
        self.cells == 0 || self.over_text
    }

    /// Takes one row of `cells` cells and `bytes` bytes of text ([`row_cells`]); false when it
    /// does not fit.
    fn take(&mut self, cells: usize, bytes: u64) -> bool {
        if self.cells < cells {
            self.cells = 0;
            return false;
        }
        if self.bytes < bytes {
            self.over_text = true;
            return false;
        }
        self.cells -= cells;
        self.bytes -= bytes;
        true
    }

    /// The refusal of a file whose tables expanded past their text.
    fn check(&self, file_bytes: usize) -> Result<(), SkipReason> {
        if !self.over_text {
            return Ok(());
        }
        Err(SkipReason::OverLimit {
            what: format!(
                "its tables' repeated cells expand past {} bytes of text from a {file_bytes}-byte file (more than {} per byte: repeated content expanded?)",
                self.limit,
                guard::MAX_TEXT_EXPANSION
            ),
        })
    }
}

/// Which OpenDocument kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OdfKind {
    /// `.odt`
    Text,
    /// `.odp`
    Presentation,
    /// `.ods`
    Spreadsheet,
}

/// The OpenDocument parser of one kind.
#[derive(Debug, Clone, Copy)]
pub struct OdfParser(pub OdfKind);

impl Parser for OdfParser {
    fn name(&self) -> &'static str {
        match self.0 {
            OdfKind::Text => "odt",
            OdfKind::Presentation => "odp",
            OdfKind::Spreadsheet => "ods",
        }
    }

    fn input(&self) -> InputKind {
        InputKind::Binary
    }

    fn parse(&self, path: &Path, bytes: &[u8]) -> Result<ParsedDocument, SkipReason> {
        let legacy = match self.0 {
            OdfKind::Text => "Word",
            OdfKind::Presentation => "PowerPoint",
            OdfKind::Spreadsheet => "Excel",
        };
        let mut pkg = Package::open(bytes, legacy)?;
        if let Some(manifest) = pkg.text("META-INF/manifest.xml")? {
            if manifest.contains("encryption-data") {
                return Err(SkipReason::Encrypted);
            }
        }
        let content = pkg.required("content.xml")?;
        let content = package::xml(&content, "content.xml")?;
        let styles_text = pkg.text("styles.xml")?.unwrap_or_default();
        let styles_doc = if styles_text.is_empty() { None } else { Some(package::xml(&styles_text, "styles.xml")?) };
        let mut styles = Styles::default();
        styles.read(&content);
        if let Some(doc) = &styles_doc {
            styles.read(doc);
        }
        let body = content
            .root_element()
            .children()
            .find(|n| is(*n, "body"))
            .and_then(|b| b.children().find(Node::is_element))
            .ok_or_else(|| SkipReason::corrupt("content.xml has no office:body"))?;
        let mut metadata = BTreeMap::new();
        let mut walker = Walker { styles, tables: TableBudget::for_file(bytes.len()), ..Walker::default() };
        let (text, blocks) = match self.0 {
            OdfKind::Text => {
                walker.blocks(body, 0, 0, None);
                let mut composer = Composer::default();
                composer.extend(std::mem::take(&mut walker.items));
                composer.notes("Footnotes", &walker.notes);
                composer.notes("Comments", &walker.comments);
                let out = composer.finish();
                (out.text, out.blocks)
            }
            OdfKind::Presentation => {
                let out = walker.slides(body);
                metadata.insert("slides".to_string(), walker.slide_count.to_string());
                (out.text, out.blocks)
            }
            OdfKind::Spreadsheet => {
                let mut out = TextBuilder::default();
                let mut sheets = 0;
                for table in body.children().filter(|n| is(*n, "table")) {
                    let name = attr(table, "name").unwrap_or("Sheet").to_string();
                    let (rows, _) = table_rows(table, &mut walker.tables);
                    sheet::push_sheet(&mut out, &name, rows);
                    sheets += 1;
                }
                metadata.insert("sheets".to_string(), sheets.to_string());
                (out.text, out.blocks)
            }
        };
        walker.tables.check(bytes.len())?;
        if walker.tables.cells == 0 {
            metadata.insert("truncated".to_string(), format!("read the first {MAX_CELLS} cells"));
        }
        let (meta_title, author) = match pkg.text("meta.xml")? {
            Some(text) => package::title_and_author(&package::xml(&text, "meta.xml")?),
            None => (None, None),
        };
        if let Some(author) = author {
            metadata.insert("author".to_string(), author);
        }
        let first_heading = if self.0 == OdfKind::Text { first_heading(&blocks) } else { None };
        let title = meta_title.or(walker.title).or(first_heading).unwrap_or_else(|| title_from_path(path));
        Ok(finish(self.name(), title, text, blocks, metadata))
    }
}

/// Paragraph and list styles: which paragraph styles are the Title, which list levels numbered.
#[derive(Debug, Default)]
struct Styles {
    title: Vec<String>,
    /// (list style, level from 1) → numbered.
    ordered: HashMap<(String, usize), bool>,
}

impl Styles {
    fn read(&mut self, doc: &roxmltree::Document<'_>) {
        for n in doc.descendants().filter(Node::is_element) {
            match n.tag_name().name() {
                "style" => {
                    let name = attr(n, "name").unwrap_or("");
                    let parent = attr(n, "parent-style-name").unwrap_or("");
                    if name == "Title" || parent == "Title" {
                        self.title.push(name.to_string());
                    }
                }
                "list-style" => {
                    let Some(name) = attr(n, "name") else { continue };
                    for level in n.children().filter(Node::is_element) {
                        let ordered = level.tag_name().name() == "list-level-style-number";
                        let l = attr(level, "level").and_then(|l| l.parse().ok()).unwrap_or(1);
                        self.ordered.insert((name.to_string(), l), ordered);
                    }
                }
                _ => {}
            }
        }
    }
}

/// Walks text content, collecting items, notes and comments.
#[derive(Debug, Default)]
struct Walker {
    styles: Styles,
    items: Vec<Item>,
    notes: Vec<String>,
    comments: Vec<String>,
    title: Option<String>,
    slide_count: usize,
    /// What the document's tables may still expand to (all tables together).
    tables: TableBudget,
}

/// Elements never read: generated indexes, change tracking, declarations, forms.
const SKIPPED: &[&str] = &[
    "tracked-changes",
    "table-of-content",
    "alphabetical-index",
    "illustration-index",
    "table-index",
    "object-index",
    "user-index",
    "bibliography",
    "sequence-decls",
    "variable-decls",
    "user-field-decls",
    "forms",
    "soft-page-break",
];

impl Walker {
    /// Block-level content of a text body, section, frame or cell.
    fn blocks(&mut self, parent: Node<'_, '_>, depth: usize, list_depth: usize, list_style: Option<&str>) {
        for n in parent.children().filter(Node::is_element) {
            let name = n.tag_name().name();
            if SKIPPED.contains(&name) {
                continue;
            }
            match name {
                "h" => {
                    let level = attr(n, "outline-level").and_then(|l| l.parse::<u8>().ok()).unwrap_or(1);
                    let text = self.inline_text(n);
                    self.items.push(Item::Heading(level.max(1), text));
                }
                "p" => {
                    let text = self.inline_text(n);
                    let style = attr(n, "style-name").unwrap_or("");
                    if self.title.is_none() && self.styles.title.iter().any(|t| t == style) && !text.trim().is_empty() {
                        self.title = Some(one_line(&text));
                    }
                    self.items.push(Item::Paragraph(text));
                    self.frames(n, depth);
                }
                "list" => {
                    let style = attr(n, "style-name").or(list_style);
                    self.list(n, depth, list_depth, style);
                }
                "table" => {
                    let (rows, header) = table_rows(n, &mut self.tables);
                    self.items.push(Item::Table(rows, header));
                }
                "section" | "text-box" | "frame" | "g" | "index-body" => self.nested(n, depth, list_depth, list_style),
                _ => {}
            }
        }
    }

    fn nested(&mut self, n: Node<'_, '_>, depth: usize, list_depth: usize, list_style: Option<&str>) {
        if depth < MAX_DEPTH {
            self.blocks(n, depth + 1, list_depth, list_style);
        } else {
            self.items.push(Item::Paragraph(all_text(n)));
        }
    }

    /// Text frames anchored inside a paragraph, read after it.
    fn frames(&mut self, p: Node<'_, '_>, depth: usize) {
        for frame in p.children().filter(|c| is(*c, "frame")) {
            self.nested(frame, depth, 0, None);
        }
    }

    fn list(&mut self, list: Node<'_, '_>, depth: usize, list_depth: usize, style: Option<&str>) {
        if depth >= MAX_DEPTH {
            self.items.push(Item::Paragraph(all_text(list)));
            return;
        }
        let ordered = style
            .and_then(|s| self.styles.ordered.get(&(s.to_string(), list_depth + 1)).copied())
            .unwrap_or(false);
        for item in list.children().filter(|c| is(*c, "list-item") || is(*c, "list-header")) {
            let mut parts = Vec::new();
            for c in item.children().filter(Node::is_element) {
                match c.tag_name().name() {
                    "p" | "h" => parts.push(self.inline_text(c)),
                    "list" => {
                        if !parts.is_empty() {
                            self.items.push(Item::ListEntry(list_depth, ordered, parts.join(" ")));
                            parts.clear();
                        }
                        let nested_style = attr(c, "style-name").or(style);
                        self.list(c, depth + 1, list_depth + 1, nested_style);
                    }
                    _ => {}
                }
            }
            if !parts.is_empty() {
                self.items.push(Item::ListEntry(list_depth, ordered, parts.join(" ")));
            }
        }
    }

    /// A paragraph's or heading's text: spans and links read through, spaces, tabs and line
    /// breaks kept, notes and comments taken aside (their reference marked), frames left to
    /// [`Walker::frames`].
    fn inline_text(&mut self, n: Node<'_, '_>) -> String {
        let mut out = String::new();
        self.inline(n, &mut out, 0);
        out
    }

    fn inline(&mut self, n: Node<'_, '_>, out: &mut String, depth: usize) {
        for c in n.children() {
            if c.is_text() {
                out.push_str(c.text().unwrap_or(""));
                continue;
            }
            if !c.is_element() {
                continue;
            }
            match c.tag_name().name() {
                "s" | "tab" => out.push(' '),
                "line-break" => out.push('\n'),
                "note" => {
                    let body: Vec<String> = child(c, "note-body")
                        .map(|b| b.descendants().filter(|p| is(*p, "p")).map(|p| one_line(&all_text(p))).collect())
                        .unwrap_or_default();
                    let number = self.notes.len() + 1;
                    out.push_str(&format!(" [footnote {number}]"));
                    self.notes.push(format!("[footnote {number}] {}", body.join("\n")));
                }
                "annotation" => {
                    let author = child(c, "creator").map(|a| one_line(&all_text(a))).filter(|a| !a.is_empty());
                    let body: Vec<String> =
                        c.children().filter(|p| is(*p, "p") || is(*p, "list")).map(|p| one_line(&all_text(p))).collect();
                    let body = body.join("\n");
                    if !body.trim().is_empty() {
                        self.comments.push(match author {
                            Some(a) => format!("Comment by {a}: {body}"),
                            None => format!("Comment: {body}"),
                        });
                    }
                }
                "frame" | "annotation-end" | "bookmark" | "bookmark-start" | "bookmark-end" | "soft-page-break"
                | "change" | "change-start" | "change-end" | "reference-mark-start" | "reference-mark-end"
                | "note-citation" | "tracked-changes" => {}
                _ if depth < MAX_DEPTH => self.inline(c, out, depth + 1),
                _ => out.push_str(&all_text(c)),
            }
        }
    }

    /// Each `draw:page` of a presentation as a section on its own page.
    fn slides(&mut self, body: Node<'_, '_>) -> TextBuilder {
        let mut composer = Composer::default();
        for (i, page) in body.children().filter(|n| is(*n, "page")).enumerate() {
            let number = i + 1;
            self.slide_count = number;
            composer.page = Some(u32::try_from(number).unwrap_or(u32::MAX));
            let mut title = None;
            let mut content = Vec::new();
            for frame in page.descendants().filter(|f| is(*f, "frame")) {
                if frame.ancestors().any(|a| is(a, "notes")) {
                    continue;
                }
                if attr(frame, "class") == Some("title") && title.is_none() {
                    title = Some(one_line(&all_text(frame)));
                    continue;
                }
                self.items.clear();
                self.blocks(frame, 1, 0, None);
                content.append(&mut self.items);
            }
            let title = title.filter(|t| !t.is_empty()).unwrap_or_else(|| format!("Slide {number}"));
            composer.push(Item::Heading(1, title));
            composer.extend(content);
            if let Some(notes) = page.children().find(|n| is(*n, "notes")) {
                self.items.clear();
                for frame in notes.descendants().filter(|f| is(*f, "frame") && attr(*f, "class") == Some("notes")) {
                    self.blocks(frame, 1, 0, None);
                }
                let notes = std::mem::take(&mut self.items);
                if notes.iter().any(|i| !matches!(i, Item::Paragraph(p) if p.trim().is_empty())) {
                    composer.push(Item::Heading(2, "Speaker notes".to_string()));
                    composer.extend(notes);
                }
            }
        }
        composer.finish()
    }
}

/// The rows of a `table:table` and how many are header rows. Repeated rows and cells are expanded
/// only when they hold something, within `budget` (spent as rows are taken; once spent, no more
/// rows).
fn table_rows(table: Node<'_, '_>, budget: &mut TableBudget) -> (Vec<Vec<String>>, usize) {
    let mut rows = Vec::new();
    let mut header = 0;
    let mut pending: Vec<(Node<'_, '_>, bool)> = Vec::new();
    // Row containers nest (header rows, row groups); walk them iteratively.
    let mut stack: Vec<(Node<'_, '_>, bool)> = vec![(table, false)];
    while let Some((n, in_header)) = stack.pop() {
        let mut children: Vec<(Node<'_, '_>, bool)> = Vec::new();
        for c in n.children().filter(Node::is_element) {
            match c.tag_name().name() {
                "table-row" => children.push((c, in_header)),
                "table-header-rows" => children.push((c, true)),
                "table-rows" | "table-row-group" => children.push((c, in_header)),
                _ => {}
            }
        }
        for c in children.into_iter().rev() {
            stack.push(c);
        }
        if is(n, "table-row") {
            pending.push((n, in_header));
        }
    }
    for (row, in_header) in pending {
        if budget.spent() {
            break;
        }
        let (cells, bytes) = row_cells(row, budget);
        if budget.spent() {
            break;
        }
        if cells.iter().all(String::is_empty) {
            continue;
        }
        let repeat: usize = attr(row, "number-rows-repeated").and_then(|r| r.parse().ok()).unwrap_or(1).max(1);
        for _ in 0..repeat {
            if !budget.take(cells.len(), bytes) {
                break;
            }
            if in_header && header == rows.len() {
                header += 1;
            }
            rows.push(cells.clone());
        }
    }
    if header == 0 && rows.len() > 1 {
        header = 1;
    }
    (rows, header)
}

/// One row's cell texts and their bytes (each cell's text and a separator); empty repeated cells
/// are expanded only when a value follows them, and a row stops at the cells `budget` has left;
/// a row whose text alone passes the budget's bytes marks it spent (`over_text`) and is cut there.
fn row_cells(row: Node<'_, '_>, budget: &mut TableBudget) -> (Vec<String>, u64) {
    let mut cells = Vec::new();
    let mut empty_run = 0usize;
    let mut bytes = 0u64;
    for cell in row.children().filter(|c| is(*c, "table-cell") || is(*c, "covered-table-cell")) {
        let repeat: usize = attr(cell, "number-columns-repeated").and_then(|r| r.parse().ok()).unwrap_or(1).max(1);
        let paragraphs: Vec<String> = cell.children().filter(|p| is(*p, "p") || is(*p, "h")).map(|p| one_line(&all_text(p))).collect();
        let text = paragraphs.join(" ");
        if text.is_empty() {
            empty_run = empty_run.saturating_add(repeat);
            continue;
        }
        if cells.len() + empty_run >= MAX_COLUMNS || budget.cells <= cells.len() + empty_run {
            break;
        }
        let n = repeat.min(MAX_COLUMNS - cells.len() - empty_run);
        let more = empty_run as u64 + n as u64 * (text.len() as u64 + 1);
        if bytes + more > budget.bytes {
            budget.over_text = true;
            break;
        }
        bytes += more;
        cells.extend(std::iter::repeat_n(String::new(), empty_run));
        empty_run = 0;
        cells.extend(std::iter::repeat_n(text, n));
    }
    (cells, bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::testutil::{blocks_of, check_document, fixture};
    use crate::types::BlockKind;

    #[test]
    fn pandoc_odt_reads_like_the_docx() {
        let doc = OdfParser(OdfKind::Text).parse(Path::new("h.odt"), &fixture("office/headings-lists-table.odt")).unwrap();
        check_document(&doc);
        let b = blocks_of(&doc);
        assert_eq!(b[0].0, BlockKind::Heading { level: 1, title: "Depot handbook".into() });
        assert_eq!(b[1].1, "Every depot keeps this handbook at the gate office. [footnote 1]");
        assert_eq!(b[3].0, BlockKind::Heading { level: 3, title: "Morning checklist".into() });
        assert!(b[4].1.starts_with("- Unlock gate 3"), "{:?}", b[4]);
        assert!(b[5].1.starts_with("1. Sign in to the shift-planning app."), "{:?}", b[5]);
        assert!(b.contains(&(BlockKind::Table, "Role | Name | Extension\nSite lead | Ruben Claes | 4101\nService desk | IT | 4357".into())));
        assert!(b.iter().any(|(_, t)| t == "[footnote 1] The handbook is reviewed every January."));
    }

    #[test]
    fn odp_slides_are_sections_with_their_notes() {
        let doc = OdfParser(OdfKind::Presentation).parse(Path::new("s.odp"), &fixture("office/slides.odp")).unwrap();
        check_document(&doc);
        let b = blocks_of(&doc);
        let titles: Vec<&str> = b.iter().filter_map(|(k, _)| match k { BlockKind::Heading { level: 1, title } => Some(title.as_str()), _ => None }).collect();
        assert_eq!(titles, vec!["Depot volumes", "Late deliveries by depot", "Next steps"]);
        assert!(doc.text.contains("Rotterdam handled 41,250 parcels in the week starting 6 May 2024."));
        assert!(b.iter().any(|(k, t)| *k == BlockKind::Table && t.starts_with("Depot | Late parcels | Share\nRotterdam | 812 | 2.0%")), "{b:?}");
        let notes = b.iter().position(|(k, _)| matches!(k, BlockKind::Heading { title, .. } if title == "Speaker notes")).unwrap();
        assert_eq!(b[notes + 1].1, "Rotterdam had its busiest April so far.");
        assert_eq!(doc.blocks[notes].page, Some(1));
        assert_eq!(doc.blocks.last().unwrap().page, Some(3));
    }

    #[test]
    fn ods_sheets_label_rows_with_cached_values_and_dates() {
        let doc = OdfParser(OdfKind::Spreadsheet).parse(Path::new("s.ods"), &fixture("office/sheet.ods")).unwrap();
        check_document(&doc);
        assert!(doc.text.contains("Depot: Rotterdam | Week starting: 2024-05-06 | Parcels: 41250 | Fuel (litres): 5120.5"), "{}", doc.text);
        assert!(doc.text.contains("Depot: Total | Parcels: 75380 | Fuel (litres): 9311.5"), "{}", doc.text);
        assert!(doc.text.contains("Figures are for the week starting 6 May 2024."));
        assert_eq!(doc.metadata["sheets"], "2");
    }

    /// A small `.odt` whose tables repeat cells into more text than the guard allows its file is
    /// refused while they expand, the budget shared by all its tables (each table had its own 4
    /// million cells: eight such tables in 8.6 KB took 25 s and 1.7 GB before the guard refused
    /// the text); the same tables within the budget are read.
    #[test]
    fn repeated_cells_past_the_files_text_budget_are_refused_while_they_expand() {
        use std::io::Write;
        let odt = |repeat: u64, tables: usize| {
            let table = format!(
                r#"<table:table table:name="T"><table:table-row table:number-rows-repeated="{repeat}"><table:table-cell table:number-columns-repeated="64"><text:p>cell text</text:p></table:table-cell></table:table-row></table:table>"#
            );
            let content = format!(
                r#"<?xml version="1.0" encoding="UTF-8"?><office:document-content xmlns:office="urn:oasis:names:tc:opendocument:xmlns:office:1.0" xmlns:text="urn:oasis:names:tc:opendocument:xmlns:text:1.0" xmlns:table="urn:oasis:names:tc:opendocument:xmlns:table:1.0"><office:body><office:text><text:h text:outline-level="1">Tables</text:h>{}</office:text></office:body></office:document-content>"#,
                table.repeat(tables)
            );
            let mut w = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
            let stored = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
            w.start_file("mimetype", stored).unwrap();
            w.write_all(b"application/vnd.oasis.opendocument.text").unwrap();
            w.start_file("content.xml", zip::write::SimpleFileOptions::default()).unwrap();
            w.write_all(content.as_bytes()).unwrap();
            w.finish().unwrap().into_inner()
        };
        // 8 tables × 4,000 rows × 64 cells of 10 bytes: 20 MB of text from about 1.5 KB.
        let big = odt(4_000, 8);
        assert!(big.len() < 4_096, "{} bytes", big.len());
        match OdfParser(OdfKind::Text).parse(Path::new("big.odt"), &big) {
            Err(SkipReason::OverLimit { what }) => assert!(what.contains("repeated cells expand past 1048576 bytes of text"), "{what}"),
            other => panic!("expected OverLimit, got {other:?}"),
        }
        // The same tables at 100 rows each (512 KB of text) are read whole.
        let doc = OdfParser(OdfKind::Text).parse(Path::new("small.odt"), &odt(100, 8)).unwrap();
        check_document(&doc);
        assert!(doc.text.matches("cell text").count() >= 8 * 100 * 64);
        // The budget is the document's, not each table's: eight tables of 40 rows against a
        // budget of 250 rows' text stop in the seventh.
        let row_bytes = 64 * ("cell text".len() as u64 + 1);
        let xml = format!(
            r#"<t:t xmlns:t="t" xmlns:x="x">{}</t:t>"#,
            r#"<t:table><t:table-row t:number-rows-repeated="40"><t:table-cell t:number-columns-repeated="64"><x:p>cell text</x:p></t:table-cell></t:table-row></t:table>"#.repeat(8)
        );
        let tree = roxmltree::Document::parse(&xml).unwrap();
        let mut budget = TableBudget::new(MAX_CELLS, 250 * row_bytes);
        let read: Vec<usize> = tree.root_element().children().map(|t| table_rows(t, &mut budget).0.len()).collect();
        assert_eq!(read, [40, 40, 40, 40, 40, 40, 10, 0]);
        assert!(budget.over_text && budget.cells > 0);
    }

    #[test]
    fn a_default_budget_reads_a_table() {
        let xml = r#"<t:table xmlns:t="t" xmlns:x="x"><t:table-row><t:table-cell><x:p>a</x:p></t:table-cell><t:table-cell><x:p>b</x:p></t:table-cell></t:table-row></t:table>"#;
        let doc = roxmltree::Document::parse(xml).unwrap();
        let mut budget = TableBudget::default();
        let (rows, _) = table_rows(doc.root_element(), &mut budget);
        assert_eq!(rows, [vec!["a".to_string(), "b".to_string()]]);
        assert!(!budget.spent());
    }

    #[test]
    fn repeated_empty_rows_and_columns_are_never_expanded() {
        let rows = format!(
            r#"<t:table xmlns:t="t" xmlns:x="x"><t:table-row t:number-rows-repeated="1048576"><t:table-cell t:number-columns-repeated="16384"/></t:table-row><t:table-row><t:table-cell t:number-columns-repeated="16000"/><t:table-cell><x:p>far</x:p></t:table-cell></t:table-row><t:table-row t:number-rows-repeated="{}"><t:table-cell><x:p>v</x:p></t:table-cell></t:table-row></t:table>"#,
            1u64 << 20
        );
        let doc = roxmltree::Document::parse(&rows).unwrap();
        let mut budget = TableBudget::new(100_000, u64::MAX);
        let (rows, _) = table_rows(doc.root_element(), &mut budget);
        assert_eq!(rows[0].len(), 16_001);
        assert_eq!(budget.cells, 0, "the repeated row stops at the budget");
        assert!(!budget.over_text);
        assert!(rows.len() < 100_000);
    }
}
