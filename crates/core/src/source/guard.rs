//! Parsing under guard: every file is parsed on its own thread with a time budget, behind
//! `catch_unwind`, after cheap checks of the limits that bound a parser's memory. A file over
//! budget, over a limit or that makes a parser panic is skipped with its [`SkipReason`]; the run
//! goes on.
//!
//! May import `types` and `error` only (through `source`).
//!
//! The limits ([`ParseLimits`]), checked before any parser runs:
//! - the file size (`ingest.max_file_bytes`);
//! - the longest line of a markdown, text or code file (a multi-megabyte line is a dump or a
//!   minified bundle, not prose, and costs the chunker's sentence splitting dearly);
//! - for PDFs, the bytes their Flate streams inflate to (a decompression bomb inflates a few
//!   kilobytes to gigabytes): measured by inflating each stream into a counter, never into memory;
//! - for zip containers (Word, OpenDocument, PowerPoint, Excel, EPUB), the bytes all their
//!   members inflate to, counted the same way (a zip bomb);
//! - for e-mail, the number of MIME boundary lines (a million tiny parts would be a million
//!   parsed parts in memory).
//!
//! And one after the parse: the text it made, at most [`ParseLimits::max_text_expansion`] bytes
//! per byte of the file (above a floor), so that a few kilobytes of repeated cells never become
//! megabytes of text and hundreds of thousands of chunks to embed.
//!
//! Deep nesting is bounded inside the parsers themselves: HTML nested deeper than
//! [`html::MAX_NESTING`](super::html::MAX_NESTING) is refused as [`SkipReason::OverLimit`], the
//! PDF reader limits its own object nesting, and markdown, text and code parse iteratively.
//!
//! A parse that runs past [`ParseLimits::timeout`] is abandoned: Rust cannot stop a thread, so it
//! runs on detached until it ends (its input is bounded by the limits above), and the file is
//! reported as [`SkipReason::TimedOut`].
//!
//! ```
//! use std::path::Path;
//! use ragbox_core::source::guard::{parse_guarded, ParseLimits};
//! let doc = parse_guarded(Path::new("a.md"), b"# A\n\ntext\n".to_vec(), &ParseLimits::default()).unwrap();
//! assert_eq!(doc.title, "A");
//! ```

use std::io::Read;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::sync::mpsc;
use std::time::Duration;

use super::{parse_in, parser_for, InputKind, ParseContext, SkipReason};
use crate::types::ParsedDocument;

/// Stack of a parse thread: generous, so that a parser's own recursion (bounded, but deep in
/// places) never overflows it. Only the pages touched are committed.
pub const PARSE_STACK_BYTES: usize = 64 << 20;

/// The bounds one parse runs within.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseLimits {
    /// Files larger than this are not parsed.
    pub max_file_bytes: u64,
    /// Wall-clock budget of one parse.
    pub timeout: Duration,
    /// Longest line of a markdown, text or code file.
    pub max_line_bytes: usize,
    /// Most bytes a PDF's Flate streams, or a zip container's members, may inflate to, all
    /// together.
    pub max_inflated_bytes: u64,
    /// Most MIME boundary lines (`--...` at a line start) in an e-mail file.
    pub max_mime_parts: usize,
    /// Most bytes of text a parse may make per byte of its file (above [`TEXT_FLOOR_BYTES`]): a
    /// format that repeats by reference (OpenDocument's repeated cells and rows) can make
    /// megabytes of text, and so hundreds of thousands of chunks to embed, from a few kilobytes.
    pub max_text_expansion: u64,
}

/// Text any file may make, whatever its size (its expansion is checked above this).
pub const TEXT_FLOOR_BYTES: u64 = 1 << 20;

/// [`ParseLimits::max_text_expansion`]'s default.
pub const MAX_TEXT_EXPANSION: u64 = 256;

/// Bytes of text a `file_bytes`-byte file may make at `expansion` bytes per byte (and at least
/// [`TEXT_FLOOR_BYTES`]).
pub fn text_budget(file_bytes: u64, expansion: u64) -> u64 {
    file_bytes.saturating_mul(expansion).max(TEXT_FLOOR_BYTES)
}

impl Default for ParseLimits {
    fn default() -> Self {
        ParseLimits {
            max_file_bytes: 32 << 20,
            timeout: Duration::from_secs(60),
            max_line_bytes: 1 << 20,
            max_inflated_bytes: 512 << 20,
            max_mime_parts: 100_000,
            max_text_expansion: MAX_TEXT_EXPANSION,
        }
    }
}

/// Checks `bytes` against the limits that do not need a parser: size, line length (markdown,
/// text, code), inflated PDF streams, MIME parts.
pub fn check_limits(path: &Path, bytes: &[u8], limits: &ParseLimits) -> Result<(), SkipReason> {
    let size = bytes.len() as u64;
    if size > limits.max_file_bytes {
        return Err(SkipReason::TooLarge { bytes: size, limit: limits.max_file_bytes });
    }
    let Some(parser) = parser_for(path) else { return Ok(()) };
    match parser.name() {
        "markdown" | "text" | "code" => {
            let longest = bytes.split(|&b| b == b'\n').map(<[u8]>::len).max().unwrap_or(0);
            if longest > limits.max_line_bytes {
                return Err(SkipReason::OverLimit {
                    what: format!("a line of {longest} bytes (the limit is {})", limits.max_line_bytes),
                });
            }
        }
        "pdf" => {
            let inflated = inflated_stream_bytes(bytes, limits.max_inflated_bytes);
            if inflated > limits.max_inflated_bytes {
                return Err(SkipReason::OverLimit {
                    what: format!(
                        "PDF streams inflate to more than {} MiB (a decompression bomb?)",
                        limits.max_inflated_bytes >> 20
                    ),
                });
            }
        }
        "docx" | "odt" | "odp" | "ods" | "pptx" | "xlsx" | "epub" => {
            let inflated = super::package::inflated_bytes(bytes, limits.max_inflated_bytes);
            if inflated > limits.max_inflated_bytes {
                return Err(SkipReason::OverLimit {
                    what: format!(
                        "the container's members inflate to more than {} MiB (a zip bomb?)",
                        limits.max_inflated_bytes >> 20
                    ),
                });
            }
        }
        "email" => {
            let parts = bytes.split(|&b| b == b'\n').filter(|l| l.starts_with(b"--")).count();
            if parts > limits.max_mime_parts {
                return Err(SkipReason::OverLimit {
                    what: format!("{parts} MIME boundary lines (the limit is {})", limits.max_mime_parts),
                });
            }
        }
        _ => {}
    }
    Ok(())
}

/// How many times [`ParseLimits::timeout`] a parse that may run OCR gets (a scanned page takes
/// seconds on two cores; a 100-page scan several minutes).
pub const OCR_TIMEOUT_FACTOR: u32 = 20;

/// Parses one file as [`parse`](super::parse) does, under guard: limits checked first, then the parser on its
/// own thread, its panics caught, its time bounded.
pub fn parse_guarded(path: &Path, bytes: Vec<u8>, limits: &ParseLimits) -> Result<ParsedDocument, SkipReason> {
    parse_guarded_in(path, bytes, limits, &ParseContext::default())
}

/// [`parse_guarded`] with what `context` offers the parsers (the OCR engine); a parse that may run
/// OCR gets [`OCR_TIMEOUT_FACTOR`] times the time budget.
pub fn parse_guarded_in(
    path: &Path,
    bytes: Vec<u8>,
    limits: &ParseLimits,
    context: &ParseContext,
) -> Result<ParsedDocument, SkipReason> {
    check_limits(path, &bytes, limits)?;
    let size = bytes.len() as u64;
    let (tx, rx) = mpsc::sync_channel(1);
    let owned = path.to_path_buf();
    let max = limits.max_file_bytes;
    let ocr = context.ocr.is_some() && parser_for(path).is_some_and(|p| p.input() == InputKind::Scan);
    let timeout = if ocr { limits.timeout * OCR_TIMEOUT_FACTOR } else { limits.timeout };
    let context = context.clone();
    let spawned = std::thread::Builder::new().name("ragbox-parse".into()).stack_size(PARSE_STACK_BYTES).spawn(move || {
        let result = catch_unwind(AssertUnwindSafe(|| parse_in(&owned, &bytes, max, &context)));
        // The receiver is gone when the parse ran past its budget; nothing to do then.
        let _ = tx.send(result.map_err(|p| panic_message(p.as_ref())));
    });
    if let Err(e) = spawned {
        return Err(SkipReason::Crashed { detail: format!("could not start a parse thread: {e}") });
    }
    match rx.recv_timeout(timeout) {
        Ok(Ok(result)) => result.and_then(|doc| within_text_budget(doc, size, limits)),
        Ok(Err(detail)) => Err(SkipReason::Crashed { detail }),
        Err(mpsc::RecvTimeoutError::Timeout) => {
            tracing::warn!(path = %path.display(), "parse abandoned after {:?}; its thread runs on until it ends", timeout);
            Err(SkipReason::TimedOut { limit_s: timeout.as_secs().max(1) })
        }
        Err(mpsc::RecvTimeoutError::Disconnected) => {
            Err(SkipReason::Crashed { detail: "the parse thread ended without a result".into() })
        }
    }
}

/// `doc` if its text is within [`ParseLimits::max_text_expansion`] bytes per byte of its
/// `file_bytes`-byte file (or [`TEXT_FLOOR_BYTES`]), else [`SkipReason::OverLimit`].
fn within_text_budget(doc: ParsedDocument, file_bytes: u64, limits: &ParseLimits) -> Result<ParsedDocument, SkipReason> {
    let text = doc.text.len() as u64;
    let budget = text_budget(file_bytes, limits.max_text_expansion);
    if text <= budget {
        return Ok(doc);
    }
    Err(SkipReason::OverLimit {
        what: format!(
            "{text} bytes of text from a {file_bytes}-byte file (more than {} per byte: repeated content expanded?)",
            limits.max_text_expansion
        ),
    })
}

/// Runs `f` (a chunker, say) with its panics caught and turned into [`SkipReason::Crashed`].
pub fn caught<T>(what: &str, f: impl FnOnce() -> T) -> Result<T, SkipReason> {
    catch_unwind(AssertUnwindSafe(f)).map_err(|p| SkipReason::Crashed { detail: format!("{what}: {}", panic_message(p.as_ref())) })
}

/// The message of a caught panic.
pub fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".to_string())
}

/// Bytes the Flate (zlib) streams of a PDF inflate to, all together, counted without keeping
/// them; stops counting once past `budget`. Streams that are not zlib count what they decode to
/// before the first error (usually nothing).
pub fn inflated_stream_bytes(pdf: &[u8], budget: u64) -> u64 {
    let mut total = 0u64;
    let mut pos = 0;
    let mut buf = vec![0u8; 64 << 10];
    while let Some(i) = find(&pdf[pos..], b"stream") {
        let at = pos + i;
        let mut start = at + b"stream".len();
        pos = start;
        if at >= 3 && &pdf[at - 3..at] == b"end" {
            continue;
        }
        // The keyword is followed by CRLF or LF.
        if pdf.get(start) == Some(&b'\r') {
            start += 1;
        }
        if pdf.get(start) != Some(&b'\n') {
            continue;
        }
        start += 1;
        let end = find(&pdf[start..], b"endstream").map_or(pdf.len(), |j| start + j);
        let mut decoder = flate2::read::ZlibDecoder::new(&pdf[start..end]);
        loop {
            match decoder.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    total += n as u64;
                    if total > budget {
                        return total;
                    }
                }
            }
        }
        pos = end;
    }
    total
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn limits() -> ParseLimits {
        ParseLimits { timeout: Duration::from_secs(20), ..ParseLimits::default() }
    }

    fn zlib(bytes: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
        e.write_all(bytes).unwrap();
        e.finish().unwrap()
    }

    /// A PDF whose one content stream inflates to `inflated` bytes of spaces.
    fn pdf_bomb(inflated: usize) -> Vec<u8> {
        let mut e = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
        let block = vec![b' '; 1 << 20];
        let mut left = inflated;
        while left > 0 {
            let n = left.min(block.len());
            e.write_all(&block[..n]).unwrap();
            left -= n;
        }
        let data = e.finish().unwrap();
        let mut pdf = b"%PDF-1.4\n1 0 obj << /Type /Catalog /Pages 2 0 R >> endobj\n\
2 0 obj << /Type /Pages /Kids [3 0 R] /Count 1 >> endobj\n\
3 0 obj << /Type /Page /Parent 2 0 R /Contents 4 0 R >> endobj\n"
            .to_vec();
        pdf.extend_from_slice(format!("4 0 obj << /Length {} /Filter /FlateDecode >>\nstream\n", data.len()).as_bytes());
        pdf.extend_from_slice(&data);
        pdf.extend_from_slice(b"\nendstream\nendobj\ntrailer << /Root 1 0 R >>\n%%EOF\n");
        pdf
    }

    #[test]
    fn inflated_bytes_are_counted_without_keeping_them() {
        let pdf = pdf_bomb(3 << 20);
        assert_eq!(inflated_stream_bytes(&pdf, u64::MAX), 3 << 20);
        assert!(inflated_stream_bytes(&pdf, 1 << 20) > 1 << 20, "stops just past the budget");
        let two = [b"stream\n".to_vec(), zlib(b"hello"), b"\nendstream stream\r\n".to_vec(), zlib(b"world!"), b"endstream".to_vec()].concat();
        assert_eq!(inflated_stream_bytes(&two, u64::MAX), 11);
    }

    #[test]
    fn a_decompression_bomb_is_skipped() {
        // 256 MiB of spaces in about 256 KB, against a limit of 64 MiB (the default is 512 MiB).
        let bomb = pdf_bomb(256 << 20);
        assert!(bomb.len() < 1 << 20, "{}", bomb.len());
        let r = parse_guarded(Path::new("bomb.pdf"), bomb, &ParseLimits { max_inflated_bytes: 64 << 20, ..limits() });
        assert!(matches!(&r, Err(SkipReason::OverLimit { what }) if what.contains("decompression bomb")), "{r:?}");
    }

    #[test]
    fn a_ten_megabyte_line_is_skipped_and_a_long_html_line_is_not() {
        let line = "word ".repeat(2 << 20); // 10 MiB
        let r = parse_guarded(Path::new("line.txt"), line.clone().into_bytes(), &limits());
        assert!(matches!(&r, Err(SkipReason::OverLimit { what }) if what.contains("line of 10485760 bytes")), "{r:?}");
        let r = parse_guarded(Path::new("line.md"), line.into_bytes(), &limits());
        assert!(matches!(r, Err(SkipReason::OverLimit { .. })), "{r:?}");
        // Minified HTML is one long line; its parser does not mind.
        let html = format!("<html><body>{}</body></html>", "<p>para</p>".repeat(200_000));
        let doc = parse_guarded(Path::new("min.html"), html.into_bytes(), &limits()).unwrap();
        assert_eq!(doc.blocks.len(), 200_000);
    }

    #[test]
    fn a_million_tiny_mime_parts_are_skipped() {
        let mut eml = b"From: a@example.com\nSubject: parts\nContent-Type: multipart/mixed; boundary=b\n\n".to_vec();
        for _ in 0..1_000_000 {
            eml.extend_from_slice(b"--b\n\nx\n");
        }
        eml.extend_from_slice(b"--b--\n");
        let r = parse_guarded(Path::new("parts.eml"), eml, &limits());
        assert!(matches!(&r, Err(SkipReason::OverLimit { what }) if what.contains("1000001 MIME")), "{r:?}");
    }

    #[test]
    fn deep_nesting_parses_within_budget() {
        let depth = 100_000;
        let html = format!("{}<p>deep text</p>{}", "<div>".repeat(4000), "</div>".repeat(4000));
        let doc = parse_guarded(Path::new("deep.html"), html.into_bytes(), &limits()).unwrap();
        assert!(doc.text.contains("deep text"));
        let html = format!("{}<p>deep text</p>{}", "<div>".repeat(depth), "</div>".repeat(depth));
        let r = parse_guarded(Path::new("deep.html"), html.into_bytes(), &limits());
        assert!(matches!(r, Err(SkipReason::OverLimit { .. })), "{r:?}");
        let md = format!("{}deep quote\n", "> ".repeat(depth));
        let r = parse_guarded(Path::new("deep.md"), md.into_bytes(), &limits());
        assert!(matches!(r, Ok(_) | Err(SkipReason::OverLimit { .. })), "{r:?}");
        let code = format!("fn f() {{ let x = {}1{}; }}\n", "(".repeat(depth), ")".repeat(depth));
        let r = parse_guarded(Path::new("deep.rs"), code.into_bytes(), &limits());
        assert!(r.is_ok(), "{r:?}");
    }

    #[test]
    fn a_slow_parse_times_out_and_a_panic_is_caught() {
        // A budget no parse can meet.
        let tight = ParseLimits { timeout: Duration::from_nanos(1), ..ParseLimits::default() };
        let big = "Some prose here.\n".repeat(200_000);
        let r = parse_guarded(Path::new("slow.txt"), big.into_bytes(), &tight);
        assert_eq!(r, Err(SkipReason::TimedOut { limit_s: 1 }));
        let r = caught("chunker structural", || -> u32 { panic!("boom") });
        assert_eq!(r, Err(SkipReason::Crashed { detail: "chunker structural: boom".into() }));
        assert!(SkipReason::Crashed { detail: "x".into() }.to_string().contains("bug in ragbox"));
    }

    /// A spreadsheet of 1.5 KB whose one cell repeats across 16,000 columns and 200 rows (3.2
    /// million cells) makes megabytes of text: skipped with its reason; the same sheet with
    /// the cell repeated 20 times parses.
    #[test]
    fn repeated_cells_that_expand_past_the_text_budget_are_skipped() {
        use std::io::Write;
        let sheet = |columns: usize, rows: usize| {
            let content = format!(
                r#"<?xml version="1.0" encoding="UTF-8"?><office:document-content xmlns:office="urn:oasis:names:tc:opendocument:xmlns:office:1.0" xmlns:table="urn:oasis:names:tc:opendocument:xmlns:table:1.0" xmlns:text="urn:oasis:names:tc:opendocument:xmlns:text:1.0"><office:body><office:spreadsheet><table:table table:name="S"><table:table-row table:number-rows-repeated="{rows}"><table:table-cell table:number-columns-repeated="{columns}"><text:p>x</text:p></table:table-cell></table:table-row></table:table></office:spreadsheet></office:body></office:document-content>"#
            );
            let mut out = std::io::Cursor::new(Vec::new());
            let mut w = zip::ZipWriter::new(&mut out);
            let stored = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
            w.start_file("mimetype", stored).unwrap();
            w.write_all(b"application/vnd.oasis.opendocument.spreadsheet").unwrap();
            w.start_file("content.xml", zip::write::SimpleFileOptions::default()).unwrap();
            w.write_all(content.as_bytes()).unwrap();
            w.finish().unwrap();
            out.into_inner()
        };
        let bomb = sheet(16_000, 200);
        assert!(bomb.len() < 4096, "{} bytes", bomb.len());
        let r = parse_guarded(Path::new("repeated.ods"), bomb, &limits());
        assert!(matches!(&r, Err(SkipReason::OverLimit { what }) if what.contains("bytes of text from a")), "{r:?}");
        let small = parse_guarded(Path::new("repeated.ods"), sheet(20, 2), &limits()).expect("a small repeat parses");
        assert!(small.text.contains("x"), "{:?}", small.text);
    }

    #[test]
    fn a_zip_bomb_docx_is_refused_before_parsing() {
        use std::io::Write;
        let mut out = std::io::Cursor::new(Vec::new());
        let mut w = zip::ZipWriter::new(&mut out);
        w.start_file("word/document.xml", zip::write::SimpleFileOptions::default()).unwrap();
        let zeros = vec![b' '; 1 << 20];
        for _ in 0..80 {
            w.write_all(&zeros).unwrap();
        }
        w.finish().unwrap();
        let bomb = out.into_inner();
        assert!(bomb.len() < 1 << 20);
        let r = parse_guarded(Path::new("bomb.docx"), bomb, &ParseLimits { max_inflated_bytes: 64 << 20, ..limits() });
        assert!(matches!(r, Err(SkipReason::OverLimit { ref what }) if what.contains("zip bomb")), "{r:?}");
    }
}
