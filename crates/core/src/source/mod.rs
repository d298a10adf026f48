//! Documents in: one parser per format, each turning a file's bytes into a [`ParsedDocument`]
//! (normalised text plus structural [`Block`](crate::types::Block)s), and the reasons a file is
//! skipped.
//!
//! May import `types` and `error` only. A file that cannot be parsed is never fatal: the parser
//! returns a [`SkipReason`] and the caller reports it with the path and goes on.
//!
//! [`parse`] is the entry point: it checks size, emptiness, binary content and UTF-8 (for text
//! formats), picks a parser with [`parser_for`] and runs it. Every parser keeps the same
//! invariants: blocks are in reading order, do not overlap, are never empty, lie on character
//! boundaries inside `text`, and their `lines` agree with their spans; `text` has LF line ends and
//! no NULs.
//!
//! ```
//! use std::path::Path;
//! let doc = ragbox_core::source::parse(Path::new("notes.md"), b"# Notes\n\nHello.\n", 1 << 20).unwrap();
//! assert_eq!(doc.title, "Notes");
//! assert_eq!(&doc.text[doc.blocks[1].span.range()], "Hello.");
//! ```

pub mod code;
pub(crate) mod compose;
pub mod docx;
pub mod email;
pub mod epub;
pub mod guard;
pub mod html;
pub mod image;
pub mod invariants;
pub mod markdown;
pub mod ocr;
pub mod odf;
pub mod package;
pub mod pdf;
pub mod pdf_images;
pub mod pptx;
pub mod rtf;
pub mod scan;
pub mod sheet;
pub(crate) mod table;
pub mod text;
pub mod walk;
pub mod xls;

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;
use std::sync::Arc;

use serde::Serialize;

use crate::types::{Block, BlockKind, Lines, ParsedDocument, Span};

/// Why a file was not ingested. Shown to the user next to the path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum SkipReason {
    /// The file has no content (or only whitespace).
    Empty,
    /// The bytes look binary (NUL bytes or mostly control characters).
    Binary,
    /// A text format whose bytes are not UTF-8.
    NotUtf8 {
        /// Byte offset of the first invalid sequence.
        offset: usize,
    },
    /// Bigger than the configured limit.
    TooLarge {
        /// The file's size.
        bytes: u64,
        /// The limit.
        limit: u64,
    },
    /// The file could not be read (permissions, I/O error, a symlink loop...).
    Unreadable {
        /// What the operating system said.
        detail: String,
    },
    /// No parser handles this file type.
    Unsupported,
    /// The format's parser rejected the content.
    Corrupt {
        /// What the parser said.
        detail: String,
    },
    /// Parsing ran past its time budget ([`guard`]); the file is skipped, the run goes on.
    TimedOut {
        /// The budget, in seconds.
        limit_s: u64,
    },
    /// The file goes past a safety limit of the parsers (a line of many megabytes, PDF streams
    /// that inflate without bound, a flood of MIME parts).
    OverLimit {
        /// Which limit, and by how much.
        what: String,
    },
    /// An Office file protected by a password.
    Encrypted,
    /// Scanned pages (a PDF without a text layer, an image) and no OCR model installed.
    NeedsOcr,
    /// A legacy binary Office file (`.doc`, `.ppt`) that no parser here reads.
    Legacy {
        /// The application's name: `Word`, `PowerPoint`, `Excel`.
        format: &'static str,
    },
    /// A parser or chunker panicked on this file (a bug in ragbox, caught by [`guard`]).
    Crashed {
        /// The panic message.
        detail: String,
    },
    /// A symbolic link, not read ([`walk`] says which links are).
    Link {
        /// What it points to, resolved (not shown: see the `Display`).
        target: String,
        /// The target lies inside the folder being ingested (and is read under its own path).
        inside: bool,
    },
}

impl fmt::Display for SkipReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SkipReason::Empty => f.write_str("empty file"),
            SkipReason::Binary => f.write_str("binary content"),
            SkipReason::NotUtf8 { offset } => write!(f, "not valid UTF-8 (first bad byte at offset {offset})"),
            SkipReason::TooLarge { bytes, limit } => {
                write!(f, "too large ({bytes} bytes; the limit is {limit}, setting ingest.max_file_bytes)")
            }
            SkipReason::Unreadable { detail } => write!(f, "unreadable: {detail}"),
            SkipReason::Unsupported => f.write_str("unsupported file type"),
            SkipReason::Corrupt { detail } => write!(f, "could not be parsed: {detail}"),
            SkipReason::TimedOut { limit_s } => {
                write!(f, "parsing took longer than {limit_s} s (setting ingest.parse_timeout_s)")
            }
            SkipReason::OverLimit { what } => write!(f, "over a parser safety limit: {what}"),
            SkipReason::NeedsOcr => write!(
                f,
                "{NEEDS_OCR}: the OCR model is not installed (scripts/setup/fetch-models.sh pp-ocrv6-small, \
                 or ragbox models import), then ingest again"
            ),
            SkipReason::Encrypted => f.write_str("encrypted: cannot be read without its password (save a copy without one)"),
            SkipReason::Legacy { format } => {
                let ext = match *format {
                    "PowerPoint" => "pptx",
                    "Excel" => "xlsx",
                    _ => "docx",
                };
                write!(
                    f,
                    "a legacy binary {format} file: convert it with LibreOffice \
                     (soffice --headless --convert-to {ext} FILE) and ingest the copy"
                )
            }
            SkipReason::Crashed { detail } => {
                write!(f, "the parser failed on this file (a bug in ragbox; please report it): {detail}")
            }
            // The target is not named: the reason is shown to whoever reads the link's folder,
            // and the target's name may be what they may not read.
            SkipReason::Link { inside: true, .. } => f.write_str(
                "a symbolic link to a file or folder inside the ingested folder: read there, under its own path and with \
                 its own readers, not twice",
            ),
            SkipReason::Link { inside: false, .. } => f.write_str(
                "a symbolic link out of the ingested folder: not followed, since it would give this folder's readers a \
                 file they may not read; ingest what it points to itself, or set `[ingest] follow_links = true`",
            ),
        }
    }
}

/// How a [`SkipReason::NeedsOcr`] message starts, so a stored skip can be recognised and retried
/// once the OCR model is there.
pub const NEEDS_OCR: &str = "scanned pages or an image to read";

impl SkipReason {
    /// A [`SkipReason::Corrupt`] with `detail`.
    pub fn corrupt(detail: impl Into<String>) -> Self {
        SkipReason::Corrupt { detail: detail.into() }
    }
}

/// What a parser expects of its input bytes; [`parse`] checks them accordingly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputKind {
    /// Text that must be UTF-8 (markdown, plain text, HTML, code).
    Utf8Text,
    /// Text-like bytes that may carry other charsets inside (e-mail): checked for binary content
    /// but not for UTF-8.
    TextBytes,
    /// A binary container format (Office files, e-books): neither check applies.
    Binary,
    /// A binary format whose pages may be images (PDF, page images): no check applies, and with
    /// an OCR engine the parse may take [`guard::OCR_TIMEOUT_FACTOR`] times the time budget.
    Scan,
}

/// What parsers may use beyond a file's bytes: the OCR engine that reads scanned pages and images
/// (none: such files are skipped with [`SkipReason::NeedsOcr`]).
#[derive(Clone, Default)]
pub struct ParseContext {
    /// The OCR engine, loaded from verified model files.
    pub ocr: Option<Arc<ocr::OcrEngine>>,
}

impl fmt::Debug for ParseContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ParseContext {{ ocr: {} }}", if self.ocr.is_some() { "loaded" } else { "none" })
    }
}

/// Turns one format's bytes into a parsed document.
pub trait Parser: Send + Sync {
    /// Short name, stored in the catalog (`markdown`, `html`...).
    fn name(&self) -> &'static str;
    /// Parses `bytes`, read from `path` (used for the title fallback and the language of code).
    fn parse(&self, path: &Path, bytes: &[u8]) -> Result<ParsedDocument, SkipReason>;
    /// Parses with what `context` offers (the PDF and image parsers read scanned pages with its
    /// OCR engine); the others ignore it.
    fn parse_in(&self, path: &Path, bytes: &[u8], context: &ParseContext) -> Result<ParsedDocument, SkipReason> {
        let _ = context;
        self.parse(path, bytes)
    }
    /// What the input bytes are expected to be; text by default.
    fn input(&self) -> InputKind {
        InputKind::Utf8Text
    }
}

static MARKDOWN: markdown::MarkdownParser = markdown::MarkdownParser;
static TEXT: text::TextParser = text::TextParser;
static HTML: html::HtmlParser = html::HtmlParser;
static EMAIL: email::EmailParser = email::EmailParser;
static PDF: pdf::PdfParser = pdf::PdfParser;
static CODE: code::CodeParser = code::CodeParser;
static DOCX: docx::DocxParser = docx::DocxParser;
static ODT: odf::OdfParser = odf::OdfParser(odf::OdfKind::Text);
static ODP: odf::OdfParser = odf::OdfParser(odf::OdfKind::Presentation);
static ODS: odf::OdfParser = odf::OdfParser(odf::OdfKind::Spreadsheet);
static PPTX: pptx::PptxParser = pptx::PptxParser;
static XLSX: sheet::SheetParser = sheet::SheetParser(sheet::SheetFormat::Xlsx);
static CSV: sheet::SheetParser = sheet::SheetParser(sheet::SheetFormat::Csv);
static TSV: sheet::SheetParser = sheet::SheetParser(sheet::SheetFormat::Tsv);
static EPUB: epub::EpubParser = epub::EpubParser;
static RTF: rtf::RtfParser = rtf::RtfParser;
static IMAGE: image::ImageParser = image::ImageParser;
static LEGACY_WORD: Legacy = Legacy("Word");
static LEGACY_POWERPOINT: Legacy = Legacy("PowerPoint");
static XLS: xls::XlsParser = xls::XlsParser;

/// The parser for a file, chosen by its extension (case-insensitive):
///
/// | extension | parser |
/// |---|---|
/// | `md`, `markdown`, `mdown`, `mkd` | markdown |
/// | `txt`, `text`, `rst`, `log`, `adoc`, and files with no extension (README, LICENSE...) | text |
/// | `html`, `htm`, `xhtml` | html |
/// | `eml`, `mbox` | email |
/// | `pdf` | pdf |
/// | `rs`, `py`, `pyi`, `js`, `jsx`, `mjs`, `cjs`, `ts`, `mts`, `cts`, `tsx`, `go` | code |
/// | `docx`, `docm`, `dotx`, `dotm` | docx |
/// | `odt`, `ott` / `odp`, `otp` / `ods`, `ots` | odt / odp / ods |
/// | `pptx`, `pptm`, `ppsx`, `potx` | pptx |
/// | `xlsx`, `xlsm`, `xltx`, `xltm` | xlsx |
/// | `xls` | xls (read in a bounded child process, [`xls`]) |
/// | `csv` / `tsv`, `tab` | csv / tsv |
/// | `epub` | epub |
/// | `rtf` | rtf |
/// | `png`, `jpg`, `jpeg`, `tif`, `tiff` | image (read by OCR) |
/// | `doc`, `dot` / `ppt`, `pps`, `pot` | legacy: skipped with the command that converts them |
///
/// Extensionless files go to the text parser; [`parse`] rejects the binary ones (executables) by
/// content. Hidden files without an extension (`.bashrc`) count as extensionless. Anything else is
/// `None` (unsupported).
pub fn parser_for(path: &Path) -> Option<&'static dyn Parser> {
    let Some(ext) = path.extension().and_then(|e| e.to_str()) else {
        return Some(&TEXT);
    };
    let parser: &'static dyn Parser = match ext.to_ascii_lowercase().as_str() {
        "md" | "markdown" | "mdown" | "mkd" => &MARKDOWN,
        "txt" | "text" | "rst" | "log" | "adoc" => &TEXT,
        "html" | "htm" | "xhtml" => &HTML,
        "eml" | "mbox" => &EMAIL,
        "pdf" => &PDF,
        "rs" | "py" | "pyi" | "js" | "jsx" | "mjs" | "cjs" | "ts" | "mts" | "cts" | "tsx" | "go" => &CODE,
        "docx" | "docm" | "dotx" | "dotm" => &DOCX,
        "odt" | "ott" => &ODT,
        "odp" | "otp" => &ODP,
        "ods" | "ots" => &ODS,
        "pptx" | "pptm" | "ppsx" | "potx" => &PPTX,
        "xlsx" | "xlsm" | "xltx" | "xltm" => &XLSX,
        "xls" => &XLS,
        "csv" => &CSV,
        "tsv" | "tab" => &TSV,
        "epub" => &EPUB,
        "rtf" => &RTF,
        "png" | "jpg" | "jpeg" | "tif" | "tiff" => &IMAGE,
        "doc" | "dot" => &LEGACY_WORD,
        "ppt" | "pps" | "pot" => &LEGACY_POWERPOINT,
        _ => return None,
    };
    Some(parser)
}

/// Legacy binary Office files (Word and PowerPoint 97-2003): skipped with the command that
/// converts them ([`SkipReason::Legacy`]); no maintained crate reads `.doc`/`.ppt`. (Excel 97-2003
/// is read by [`xls`].)
#[derive(Debug, Clone, Copy)]
pub struct Legacy(pub &'static str);

impl Parser for Legacy {
    fn name(&self) -> &'static str {
        match self.0 {
            "PowerPoint" => "ppt",
            _ => "doc",
        }
    }

    fn input(&self) -> InputKind {
        InputKind::Binary
    }

    fn parse(&self, _path: &Path, bytes: &[u8]) -> Result<ParsedDocument, SkipReason> {
        if package::is_ole(bytes) {
            Err(package::ole_reason(bytes, self.0))
        } else {
            Err(SkipReason::corrupt(format!("not a {} 97-2003 file (no OLE header)", self.0)))
        }
    }
}

/// Parses one file: rejects it when larger than `max_bytes`, empty or whitespace-only, binary (text
/// formats), or not UTF-8 (formats that must be), then runs the parser [`parser_for`] picks. A
/// document that yields no block at all (an HTML page of scripts, a scanned PDF) is `Empty`.
pub fn parse(path: &Path, bytes: &[u8], max_bytes: u64) -> Result<ParsedDocument, SkipReason> {
    parse_in(path, bytes, max_bytes, &ParseContext::default())
}

/// [`parse`] with what `context` offers the parsers (the OCR engine).
pub fn parse_in(path: &Path, bytes: &[u8], max_bytes: u64, context: &ParseContext) -> Result<ParsedDocument, SkipReason> {
    let size = bytes.len() as u64;
    if size > max_bytes {
        return Err(SkipReason::TooLarge { bytes: size, limit: max_bytes });
    }
    if bytes.iter().all(|b| b.is_ascii_whitespace()) {
        return Err(SkipReason::Empty);
    }
    let parser = parser_for(path).ok_or(SkipReason::Unsupported)?;
    match parser.input() {
        InputKind::Utf8Text => {
            check_not_binary(bytes)?;
            let text = std::str::from_utf8(bytes).map_err(|e| SkipReason::NotUtf8 { offset: e.valid_up_to() })?;
            if text.trim_start_matches('\u{feff}').trim().is_empty() {
                return Err(SkipReason::Empty);
            }
        }
        InputKind::TextBytes => check_not_binary(bytes)?,
        InputKind::Binary | InputKind::Scan => {}
    }
    let doc = parser.parse_in(path, bytes, context)?;
    if doc.blocks.is_empty() {
        return Err(SkipReason::Empty);
    }
    Ok(doc)
}

/// How much of a file the binary check looks at.
const SNIFF_BYTES: usize = 8 * 1024;

/// Whether `bytes` look binary: a NUL byte, or more than 10% control characters (other than tab,
/// line ends, form feed and escape), in the first 8 KiB.
pub fn looks_binary(bytes: &[u8]) -> bool {
    let head = &bytes[..bytes.len().min(SNIFF_BYTES)];
    if head.contains(&0) {
        return true;
    }
    let control =
        head.iter().filter(|&&b| (b < 0x20 && !matches!(b, b'\t' | b'\n' | b'\r' | 0x0c | 0x1b)) || b == 0x7f).count();
    control * 10 > head.len()
}

fn check_not_binary(bytes: &[u8]) -> Result<(), SkipReason> {
    if looks_binary(bytes) {
        Err(SkipReason::Binary)
    } else {
        Ok(())
    }
}

/// Decodes UTF-8 text and normalises it (see [`normalise`]); `NotUtf8` names the first bad byte.
pub fn decode_utf8(bytes: &[u8]) -> Result<String, SkipReason> {
    let text = std::str::from_utf8(bytes).map_err(|e| SkipReason::NotUtf8 { offset: e.valid_up_to() })?;
    Ok(normalise(text))
}

/// Normalised text: a leading byte-order mark removed, CRLF and lone CR turned into LF, NULs
/// removed.
pub fn normalise(text: &str) -> String {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\r' => {
                if chars.peek() == Some(&'\n') {
                    chars.next();
                }
                out.push('\n');
            }
            '\0' => {}
            c => out.push(c),
        }
    }
    out
}

/// The title a document gets when its content names none: the file stem ("travel-policy" for
/// `travel-policy.md`), or the whole file name when it has no stem.
pub fn title_from_path(path: &Path) -> String {
    path.file_stem()
        .or_else(|| path.file_name())
        .map(|s| s.to_string_lossy().into_owned())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "untitled".to_string())
}

/// Maps byte offsets of a text to 1-based line numbers.
#[derive(Debug, Clone)]
pub struct LineIndex {
    /// Byte offset where each line starts; the first is 0.
    starts: Vec<usize>,
}

impl LineIndex {
    /// Indexes the line starts of `text` (lines end at `\n`).
    pub fn new(text: &str) -> Self {
        let mut starts = vec![0];
        starts.extend(text.bytes().enumerate().filter(|&(_, b)| b == b'\n').map(|(i, _)| i + 1));
        LineIndex { starts }
    }

    /// The 1-based line holding byte `offset` (an offset past the end is on the last line).
    pub fn line_of(&self, offset: usize) -> u32 {
        let line = match self.starts.binary_search(&offset) {
            Ok(i) => i + 1,
            Err(i) => i,
        };
        u32::try_from(line).unwrap_or(u32::MAX)
    }

    /// The lines a span covers: from the line of its first byte to the line of its last byte.
    pub fn lines(&self, span: Span) -> Lines {
        let first = self.line_of(span.start);
        let last = if span.is_empty() { first } else { self.line_of(span.end - 1) };
        Lines { first, last }
    }
}

/// A block before its lines are known: kind, span into the text being built, page.
pub(crate) type RawBlock = (BlockKind, Span, Option<u32>);

/// Finishes a document: trims each block's span (whitespace at both ends; code keeps the
/// indentation of its first line), drops blocks left empty or overlapping the one before, and
/// computes lines.
pub(crate) fn finish(
    parser: &str,
    title: String,
    text: String,
    raw: Vec<RawBlock>,
    metadata: BTreeMap<String, String>,
) -> ParsedDocument {
    let index = LineIndex::new(&text);
    let mut blocks: Vec<Block> = Vec::with_capacity(raw.len());
    for (kind, span, page) in raw {
        let Some(span) = trim_span(&text, span, matches!(kind, BlockKind::Code { .. })) else {
            continue;
        };
        if blocks.last().is_some_and(|b| b.span.end > span.start) {
            continue;
        }
        let lines = index.lines(span);
        blocks.push(Block { kind, span, page, lines });
    }
    let title = one_line(&title);
    ParsedDocument { parser: parser.to_string(), title, text, blocks, metadata }
}

/// `span` with whitespace trimmed off (for code: whole blank lines at the start, whitespace at the
/// end), or `None` when nothing is left or the span does not fit the text.
fn trim_span(text: &str, span: Span, keep_indent: bool) -> Option<Span> {
    let slice = text.get(span.range())?;
    let end = span.start + slice.trim_end().len();
    let start = if keep_indent {
        let trimmed = slice.trim_end();
        let content = trimmed.trim_start();
        let lead = trimmed.len() - content.len();
        // Back up to the start of the first non-blank line.
        let line_start = trimmed[..lead].rfind('\n').map_or(0, |i| i + 1);
        span.start + line_start
    } else {
        span.start + (slice.len() - slice.trim_start().len())
    };
    (start < end).then(|| Span::new(start, end))
}

/// Whitespace runs (line ends included) collapsed to one space, ends trimmed.
pub(crate) fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Builds a document's text block by block, for formats whose normalised text is generated (HTML,
/// e-mail, PDF): blocks are separated by a blank line and each span is exact.
#[derive(Debug, Default)]
pub(crate) struct TextBuilder {
    /// The text so far.
    pub text: String,
    /// The blocks so far.
    pub blocks: Vec<RawBlock>,
}

impl TextBuilder {
    /// Appends `content` (normalised, then trimmed) as one block, after a blank line; skips it when
    /// blank.
    pub fn block(&mut self, kind: BlockKind, content: &str, page: Option<u32>) {
        let content = normalise(content);
        let keep_indent = matches!(kind, BlockKind::Code { .. });
        let Some(trimmed) = trim_span(&content, Span::new(0, content.len()), keep_indent) else {
            return;
        };
        let content = &content[trimmed.range()];
        let start = self.raw(content);
        let end = self.text.len();
        self.blocks.push((kind, Span::new(start, end), page));
    }

    /// Appends `content` (already normalised) after a blank line and returns where it starts; the
    /// caller adds blocks inside it.
    pub fn raw(&mut self, content: &str) -> usize {
        if !self.text.is_empty() {
            if !self.text.ends_with('\n') {
                self.text.push('\n');
            }
            if !self.text.ends_with("\n\n") {
                self.text.push('\n');
            }
        }
        let start = self.text.len();
        self.text.push_str(content);
        start
    }
}

#[cfg(test)]
pub(crate) mod testutil {
    //! What the parsers' unit tests share: fixtures and the parser invariants as an assertion.

    use crate::types::{BlockKind, ParsedDocument};

    /// The bytes of `tests/data/NAME` (the Office fixtures live in `tests/data/office/`).
    pub fn fixture(name: &str) -> Vec<u8> {
        let path = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).join("tests/data").join(name);
        std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    /// Each block's kind and text.
    pub fn blocks_of(doc: &ParsedDocument) -> Vec<(BlockKind, String)> {
        doc.blocks.iter().map(|b| (b.kind.clone(), doc.text[b.span.range()].to_string())).collect()
    }

    /// Panics unless `doc` keeps the parser invariants ([`super::invariants`]).
    pub fn check_document(doc: &ParsedDocument) {
        if let Err(broken) = super::invariants::check_document(doc) {
            panic!("{broken}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalise_line_ends_bom_and_nuls() {
        assert_eq!(normalise("\u{feff}a\r\nb\rc\0d\n"), "a\nb\ncd\n");
        assert_eq!(normalise("\r\r\n"), "\n\n");
    }

    #[test]
    fn line_index_maps_offsets_to_lines() {
        let text = "ab\ncd\n\nef";
        let idx = LineIndex::new(text);
        assert_eq!(idx.line_of(0), 1);
        assert_eq!(idx.line_of(2), 1); // the '\n' belongs to line 1
        assert_eq!(idx.line_of(3), 2);
        assert_eq!(idx.line_of(6), 3);
        assert_eq!(idx.line_of(7), 4);
        assert_eq!(idx.lines(Span::new(3, 9)), Lines { first: 2, last: 4 });
        assert_eq!(idx.lines(Span::new(0, 3)), Lines { first: 1, last: 1 });
    }

    #[test]
    fn title_falls_back_to_the_file_stem() {
        assert_eq!(title_from_path(Path::new("/a/travel-policy.md")), "travel-policy");
        assert_eq!(title_from_path(Path::new("README")), "README");
    }

    #[test]
    fn parser_choice_by_extension() {
        let name = |p: &str| parser_for(Path::new(p)).map(|p| p.name());
        assert_eq!(name("a.MD"), Some("markdown"));
        assert_eq!(name("notes.txt"), Some("text"));
        assert_eq!(name("README"), Some("text"));
        assert_eq!(name("page.htm"), Some("html"));
        assert_eq!(name("m.eml"), Some("email"));
        assert_eq!(name("box.mbox"), Some("email"));
        assert_eq!(name("x.pdf"), Some("pdf"));
        assert_eq!(name("lib.rs"), Some("code"));
        assert_eq!(name("app.tsx"), Some("code"));
        assert_eq!(name("photo.jpg"), Some("image"));
        assert_eq!(name("photo.gif"), None);
        assert_eq!(name("Policy.DOCX"), Some("docx"));
        assert_eq!(name("deck.pptx"), Some("pptx"));
        assert_eq!(name("book.xlsm"), Some("xlsx"));
        assert_eq!(name("old.xls"), Some("xls"));
        // No reader child is registered in unit tests: skipped with the command that converts it.
        let bomb = testutil::fixture("../fixtures/fuzz/xls-calamine-memory-bomb.xls");
        assert_eq!(parse(Path::new("old.xls"), &bomb, 1 << 20), Err(SkipReason::Legacy { format: "Excel" }));
        assert_eq!(name("a.ods"), Some("ods"));
        assert_eq!(name("rows.tsv"), Some("tsv"));
        assert_eq!(name("old.doc"), Some("doc"));
    }

    #[test]
    fn bad_input_gives_the_right_skip_reason() {
        let limit = 1 << 20;
        assert_eq!(parse(Path::new("a.txt"), b"", limit), Err(SkipReason::Empty));
        assert_eq!(parse(Path::new("a.txt"), b"  \n\t\r\n ", limit), Err(SkipReason::Empty));
        assert_eq!(parse(Path::new("a.md"), "\u{feff}\n ".as_bytes(), limit), Err(SkipReason::Empty));
        assert_eq!(parse(Path::new("a.txt"), b"hello\0world\x01\x02", limit), Err(SkipReason::Binary));
        let controls: Vec<u8> = (0..200).map(|i| if i % 3 == 0 { 0x01 } else { b'a' }).collect();
        assert_eq!(parse(Path::new("a.txt"), &controls, limit), Err(SkipReason::Binary));
        assert_eq!(
            parse(Path::new("a.md"), b"# Title\n\ncaf\xe9 au lait\n", limit),
            Err(SkipReason::NotUtf8 { offset: 12 })
        );
        assert_eq!(parse(Path::new("a.txt"), b"0123456789", 4), Err(SkipReason::TooLarge { bytes: 10, limit: 4 }));
        assert_eq!(parse(Path::new("a.gif"), b"GIF89a", limit), Err(SkipReason::Unsupported));
        assert_eq!(parse(Path::new("a.jpg"), b"\xff\xd8\xff", limit), Err(SkipReason::NeedsOcr));
        assert_eq!(parse(Path::new("a.html"), b"<script>var x = 1;</script>", limit), Err(SkipReason::Empty));
        let legacy = testutil::fixture("office/legacy.doc");
        assert_eq!(parse(Path::new("a.doc"), &legacy, limit), Err(SkipReason::Legacy { format: "Word" }));
        assert!(SkipReason::Legacy { format: "Word" }.to_string().contains("soffice --headless --convert-to docx"));
        assert!(SkipReason::Encrypted.to_string().starts_with("encrypted: cannot be read without its password"));
    }

    #[test]
    fn parse_dispatches_and_normalises() {
        let doc = parse(Path::new("notes.txt"), b"\xef\xbb\xbfFirst line\r\nsecond line\r\n", 1 << 20).unwrap();
        testutil::check_document(&doc);
        assert_eq!(doc.parser, "text");
        assert_eq!(doc.text, "First line\nsecond line\n");
        assert_eq!(doc.blocks.len(), 1);
    }

    #[test]
    fn text_builder_separates_blocks_with_a_blank_line() {
        let mut b = TextBuilder::default();
        b.block(BlockKind::Paragraph, "  one\r\n", None);
        b.block(BlockKind::Paragraph, "   ", None);
        b.block(BlockKind::Code { language: None, symbol: None }, "\n    indented()\n", Some(2));
        assert_eq!(b.text, "one\n\n    indented()");
        let doc = finish("t", "x".into(), b.text, b.blocks, BTreeMap::new());
        testutil::check_document(&doc);
        assert_eq!(&doc.text[doc.blocks[1].span.range()], "    indented()");
        assert_eq!(doc.blocks[1].lines, Lines { first: 3, last: 3 });
    }
}
