//! Rich Text Format (`.rtf`): the text, paragraph by paragraph, with headings (outline levels, or
//! paragraph styles named `heading N`), list entries (paragraphs with a list marker) and tables
//! (`\cell`/`\row`).
//!
//! Read by a small tokenizer of our own: the crate that exists (rtf-parser 0.4) joined every
//! paragraph (it ignores `\par`) and dropped the text after a `\uN?` escape, measured on pandoc's
//! and LibreOffice's output. Groups are tracked on a heap stack (no recursion); destinations that
//! are not body text (font, colour and style tables, document info, pictures, headers and footers,
//! field instructions, every `{\*...}` group) are skipped. `\'hh` bytes are decoded with the
//! document's code page (`\ansicpgN`, Windows-1252 by default), `\uN` as UTF-16 with its fallback
//! characters skipped (`\ucN`).
//!
//! Title: the `\info` group's `\title`, else the first heading, else the file stem.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use super::compose::{first_heading, Composer, Item};
use super::{finish, title_from_path, InputKind, Parser, SkipReason};
use crate::types::ParsedDocument;

/// The RTF parser.
#[derive(Debug, Clone, Copy, Default)]
pub struct RtfParser;

impl Parser for RtfParser {
    fn name(&self) -> &'static str {
        "rtf"
    }

    fn input(&self) -> InputKind {
        InputKind::Binary
    }

    fn parse(&self, path: &Path, bytes: &[u8]) -> Result<ParsedDocument, SkipReason> {
        let start = bytes.iter().position(|b| !b.is_ascii_whitespace()).unwrap_or(bytes.len());
        if !bytes[start..].starts_with(b"{\\rtf") {
            return Err(SkipReason::corrupt("not an RTF document (no {\\rtf header)"));
        }
        let mut reader = Reader::default();
        reader.read(&bytes[start..]);
        reader.end_paragraph();
        let mut composer = Composer::default();
        composer.extend(reader.items);
        let out = composer.finish();
        let title = reader
            .title
            .filter(|t| !t.trim().is_empty())
            .or_else(|| first_heading(&out.blocks))
            .unwrap_or_else(|| title_from_path(path));
        Ok(finish(self.name(), title, out.text, out.blocks, BTreeMap::new()))
    }
}

/// Destinations whose text is not the document's body.
const SKIPPED: &[&str] = &[
    "fonttbl", "colortbl", "stylesheet", "info", "pict", "object", "header", "headerl", "headerr", "headerf",
    "footer", "footerl", "footerr", "footerf", "fldinst", "datafield", "themedata", "colorschememapping",
    "latentstyles", "listtable", "listoverridetable", "rsidtbl", "generator", "xmlnstbl", "mmathPr", "pgdsctbl",
    "bkmkstart", "bkmkend", "filetbl", "revtbl", "listtext", "pntext", "pntxta", "pntxtb", "shppict", "nonshppict",
    "footnote", "annotation", "atnid", "atnauthor", "xe", "tc", "txe", "template", "userprops", "docvar",
];

/// The state of one group.
#[derive(Debug, Clone, Default)]
struct Group {
    /// Text here is not body text.
    skip: bool,
    /// Fallback characters after each `\uN`.
    uc: usize,
    /// Which destination the group is (for the style sheet and `\title`).
    destination: Option<&'static str>,
}

#[derive(Debug, Default)]
struct Reader {
    items: Vec<Item>,
    title: Option<String>,
    code_page: Option<&'static encoding_rs::Encoding>,
    /// Paragraph being read and its properties.
    paragraph: String,
    outline: Option<u8>,
    style: Option<i32>,
    in_table: bool,
    listed: bool,
    /// Table being read.
    row: Vec<String>,
    rows: Vec<Vec<String>>,
    /// Style number → heading level, from the style sheet.
    heading_styles: HashMap<i32, u8>,
    /// The style-sheet entry being read: its number and name.
    sheet_entry: (Option<i32>, String),
    /// Title text being read.
    info_title: String,
    /// UTF-16 units of `\uN` escapes not yet paired.
    pending_utf16: Vec<u16>,
    /// Fallback characters still to skip after a `\uN`.
    skip_fallback: usize,
}

impl Reader {
    fn read(&mut self, b: &[u8]) {
        let mut stack: Vec<Group> = vec![Group { uc: 1, ..Group::default() }];
        let mut i = 0;
        while i < b.len() {
            let c = b[i];
            match c {
                b'{' => {
                    self.flush_utf16();
                    let top = stack.last().cloned().unwrap_or_default();
                    stack.push(Group { destination: None, ..top });
                    i += 1;
                }
                b'}' => {
                    self.flush_utf16();
                    if let Some(g) = stack.pop() {
                        match g.destination {
                            Some("stylesheet-entry") => self.close_sheet_entry(),
                            Some("title") => {
                                if self.title.is_none() {
                                    self.title = Some(super::one_line(&self.info_title));
                                }
                            }
                            _ => {}
                        }
                    }
                    if stack.is_empty() {
                        break;
                    }
                    i += 1;
                }
                b'\\' => {
                    let (word, param, next) = control(b, i + 1);
                    i = next;
                    let group = stack.last_mut().expect("the stack keeps the document group");
                    match word {
                        Control::Symbol(s) => {
                            if s == b'*' {
                                group.skip = true;
                                continue;
                            }
                            if self.take_fallback() {
                                if s == b'\'' {
                                    i = (i + 2).min(b.len()); // the fallback byte's two hex digits
                                }
                                continue;
                            }
                            match s {
                                b'\'' => {
                                    let hex = |c: u8| (c as char).to_digit(16);
                                    if let (Some(h), Some(l)) = (b.get(i).and_then(|c| hex(*c)), b.get(i + 1).and_then(|c| hex(*c))) {
                                        i += 2;
                                        let byte = (h * 16 + l) as u8;
                                        let skip = group.skip;
                                        let text = self.decode(&[byte]);
                                        self.text(&text, skip, &stack);
                                    }
                                }
                                b'~' => self.text(" ", group.skip, &stack),
                                b'_' => self.text("-", group.skip, &stack),
                                b'{' | b'}' | b'\\' => {
                                    let t = (s as char).to_string();
                                    self.text(&t, group.skip, &stack)
                                }
                                b'\n' | b'\r' => {
                                    if !group.skip {
                                        self.end_paragraph();
                                    }
                                }
                                _ => {}
                            }
                        }
                        Control::Word(name) => self.word(&name, param, &mut stack),
                        Control::None => {}
                    }
                }
                b'\r' | b'\n' => i += 1,
                _ => {
                    let end = b[i..].iter().position(|c| matches!(c, b'{' | b'}' | b'\\' | b'\r' | b'\n')).map_or(b.len(), |p| i + p);
                    let chunk = &b[i..end];
                    i = end;
                    let group = stack.last().expect("the stack keeps the document group");
                    let mut chunk = chunk;
                    while !chunk.is_empty() && self.take_fallback() {
                        chunk = &chunk[1..];
                    }
                    if chunk.is_empty() {
                        continue;
                    }
                    let text = self.decode(chunk);
                    let skip = group.skip;
                    self.text(&text, skip, &stack);
                }
            }
        }
        self.flush_utf16();
    }

    /// Consumes one fallback character of a `\uN` escape, if any is due.
    fn take_fallback(&mut self) -> bool {
        if self.skip_fallback > 0 {
            self.skip_fallback -= 1;
            true
        } else {
            false
        }
    }

    fn decode(&self, bytes: &[u8]) -> String {
        match std::str::from_utf8(bytes) {
            Ok(s) if bytes.is_ascii() => s.to_string(),
            _ => self.code_page.unwrap_or(encoding_rs::WINDOWS_1252).decode_without_bom_handling(bytes).0.into_owned(),
        }
    }

    /// Text reaching the current group: body text, the title being read, or a style name.
    fn text(&mut self, text: &str, skip: bool, stack: &[Group]) {
        self.flush_utf16();
        match stack.last().and_then(|g| g.destination) {
            Some("title") => self.info_title.push_str(text),
            Some("stylesheet-entry") => self.sheet_entry.1.push_str(text),
            _ if !skip => self.paragraph.push_str(text),
            _ => {}
        }
    }

    fn flush_utf16(&mut self) {
        if self.pending_utf16.is_empty() {
            return;
        }
        let units = std::mem::take(&mut self.pending_utf16);
        let s: String = char::decode_utf16(units).map(|r| r.unwrap_or('\u{fffd}')).collect();
        self.paragraph.push_str(&s);
    }

    fn word(&mut self, name: &str, param: Option<i32>, stack: &mut Vec<Group>) {
        let depth = stack.len();
        let group = stack.last_mut().expect("the stack keeps the document group");
        if SKIPPED.contains(&name) {
            group.skip = true;
            if name == "stylesheet" {
                group.destination = Some("stylesheet");
            }
            return;
        }
        if name == "title" && depth >= 2 {
            group.destination = Some("title");
            group.skip = true;
            return;
        }
        let in_sheet = depth >= 2 && stack[depth - 2].destination == Some("stylesheet");
        let group = stack.last_mut().expect("the stack keeps the document group");
        if in_sheet && name == "s" {
            group.destination = Some("stylesheet-entry");
            self.sheet_entry = (param, String::new());
            return;
        }
        if name != "u" {
            self.flush_utf16();
        }
        match name {
            "ansicpg" => {
                self.code_page = param.and_then(|p| u16::try_from(p).ok()).and_then(codepage::to_encoding);
            }
            "uc" => group.uc = param.unwrap_or(1).clamp(0, 8) as usize,
            "u" => {
                if let Some(p) = param {
                    if !group.skip {
                        self.pending_utf16.push(if p < 0 { (p + 65_536) as u16 } else { p as u16 });
                    }
                    self.skip_fallback = group.uc;
                }
            }
            _ if group.skip => {}
            "par" | "sect" | "page" => self.end_paragraph(),
            "line" => self.paragraph.push('\n'),
            "tab" => self.paragraph.push(' '),
            "emdash" => self.paragraph.push('\u{2014}'),
            "endash" => self.paragraph.push('\u{2013}'),
            "lquote" => self.paragraph.push('\u{2018}'),
            "rquote" => self.paragraph.push('\u{2019}'),
            "ldblquote" => self.paragraph.push('\u{201c}'),
            "rdblquote" => self.paragraph.push('\u{201d}'),
            "bullet" => self.listed = true,
            "pard" => {
                self.outline = None;
                self.style = None;
                self.in_table = false;
            }
            "outlinelevel" => self.outline = param.and_then(|p| u8::try_from(p).ok()).filter(|p| *p < 9).map(|p| p + 1),
            "s" => self.style = param,
            "intbl" => self.in_table = true,
            "ls" | "ilvl" => self.listed = true,
            "cell" => {
                let cell = super::one_line(&std::mem::take(&mut self.paragraph));
                self.row.push(cell);
            }
            "row" => {
                let row = std::mem::take(&mut self.row);
                self.rows.push(row);
            }
            _ => {}
        }
    }

    fn close_sheet_entry(&mut self) {
        let (number, name) = std::mem::take(&mut self.sheet_entry);
        let name = name.trim().trim_end_matches(';').trim().to_ascii_lowercase();
        if let (Some(n), Some(level)) = (number, name.strip_prefix("heading ").and_then(|l| l.trim().parse::<u8>().ok())) {
            self.heading_styles.insert(n, level.max(1));
        }
    }

    /// Ends the paragraph being read: a heading, a list entry or a paragraph (inside a table it
    /// waits for its row).
    fn end_paragraph(&mut self) {
        self.flush_utf16();
        if self.in_table {
            if !self.paragraph.trim().is_empty() {
                self.paragraph.push(' ');
            }
            return;
        }
        if !self.rows.is_empty() {
            let rows = std::mem::take(&mut self.rows);
            let header = usize::from(rows.len() > 1);
            self.items.push(Item::Table(rows, header));
        }
        let text = std::mem::take(&mut self.paragraph);
        let listed = std::mem::replace(&mut self.listed, false);
        let text = text.trim().trim_start_matches('\u{2022}').trim();
        if text.is_empty() {
            return;
        }
        let level = self.outline.or_else(|| self.style.and_then(|s| self.heading_styles.get(&s).copied()));
        self.items.push(match level {
            Some(level) => Item::Heading(level, text.to_string()),
            None if listed => Item::ListEntry(0, false, text.to_string()),
            None => Item::Paragraph(text.to_string()),
        });
    }
}

/// What follows a backslash.
#[derive(Debug, PartialEq)]
enum Control {
    /// A control word (`par`, `u`, ...).
    Word(String),
    /// A control symbol (`\'`, `\~`, `\*`, `\{`...).
    Symbol(u8),
    /// A backslash at the end of the input.
    None,
}

/// Reads the control word or symbol starting at `i` (after the backslash): its name, its numeric
/// parameter, and where the next token starts (a single space delimiter is consumed).
fn control(b: &[u8], mut i: usize) -> (Control, Option<i32>, usize) {
    let Some(&first) = b.get(i) else { return (Control::None, None, i) };
    if !first.is_ascii_alphabetic() {
        return (Control::Symbol(first), None, i + 1);
    }
    let start = i;
    while i < b.len() && b[i].is_ascii_alphabetic() && i - start < 32 {
        i += 1;
    }
    let name = String::from_utf8_lossy(&b[start..i]).into_owned();
    let num_start = i;
    if i < b.len() && b[i] == b'-' {
        i += 1;
    }
    while i < b.len() && b[i].is_ascii_digit() && i - num_start < 10 {
        i += 1;
    }
    let param = std::str::from_utf8(&b[num_start..i]).ok().and_then(|s| s.parse::<i64>().ok()).map(|v| v.clamp(i32::MIN as i64, i32::MAX as i64) as i32);
    if i < b.len() && b[i] == b' ' {
        i += 1;
    }
    (Control::Word(name), param, i)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::testutil::check_document;
    use crate::types::BlockKind;

    fn parse(rtf: &str) -> ParsedDocument {
        let doc = RtfParser.parse(Path::new("letter.rtf"), rtf.as_bytes()).unwrap();
        check_document(&doc);
        doc
    }

    fn blocks(doc: &ParsedDocument) -> Vec<&str> {
        doc.blocks.iter().map(|b| &doc.text[b.span.range()]).collect()
    }

    #[test]
    fn pandoc_rtf_keeps_paragraphs_headings_lists_and_unicode() {
        let rtf = r"{\rtf1\ansi\deff0{\fonttbl{\f0 \fswiss Helvetica;}}
{\colortbl;\red255\green0\blue0;}
{\pard \ql \f0 \sa180 \li0 \fi0 \outlinelevel0 \b \fs36 Heading One\par}
{\pard \ql \f0 \sa180 \li0 \fi0 A paragraph with {\b bold} and caf\u233? \u163?5.\par}
{\pard \ql \f0 \sa0 \li360 \fi-360 \bullet \tx360\tab item one\par}
{\pard \ql \f0 \sa0 \li360 \fi-360 \bullet \tx360\tab item two\sa180\par}
}";
        let doc = parse(rtf);
        assert_eq!(blocks(&doc), vec!["Heading One", "A paragraph with bold and café £5.", "- item one\n- item two"]);
        assert_eq!(doc.title, "Heading One");
        assert_eq!(doc.blocks[0].kind, BlockKind::Heading { level: 1, title: "Heading One".into() });
    }

    #[test]
    fn styles_info_hex_bytes_and_tables() {
        let rtf = r"{\rtf1\ansi\ansicpg1252{\stylesheet{\s1 heading 1;}{\s0 Normal;}}{\info{\title Expenses}{\author A}}
{\*\generator Writer}\pard\s1 Claims\par
\pard Submit within 30 days \'96 no later.\par
\trowd\pard\intbl City\cell Cap\cell\row
\pard\intbl London\cell GBP 210\cell\row
\pard After the table.\par}";
        let doc = parse(rtf);
        assert_eq!(doc.title, "Expenses");
        assert_eq!(
            blocks(&doc),
            vec!["Claims", "Submit within 30 days \u{2013} no later.", "City | Cap\nLondon | GBP 210", "After the table."]
        );
        assert_eq!(doc.blocks[0].kind, BlockKind::Heading { level: 1, title: "Claims".into() });
    }

    #[test]
    fn not_rtf_and_hostile_input() {
        assert!(matches!(RtfParser.parse(Path::new("a.rtf"), b"hello"), Err(SkipReason::Corrupt { .. })));
        let deep = format!("{{\\rtf1 {}text{}}}", "{".repeat(100_000), "}".repeat(100_000));
        let doc = RtfParser.parse(Path::new("a.rtf"), deep.as_bytes()).unwrap();
        assert_eq!(doc.text, "text");
        let unclosed = "{\\rtf1 \\u-3 \\' \\";
        let _ = RtfParser.parse(Path::new("a.rtf"), unclosed.as_bytes());
    }

    #[test]
    fn libreoffice_rtf_keeps_paragraphs_and_unicode_without_fallbacks() {
        let doc = RtfParser.parse(Path::new("letter.rtf"), &crate::source::testutil::fixture("office/letter.rtf")).unwrap();
        check_document(&doc);
        let b = blocks(&doc);
        assert!(b.contains(&"Dear Ms Müller, thank you for your order of 12 pallets. The delivery to your café in Rotterdam is confirmed for Tuesday 4 June 2024."), "{b:?}");
        assert!(doc.text.contains("The transport costs £180 (€210), payable within 30 days."), "{b:?}");
    }
}
