//! PDF documents, read with pdf-extract (on lopdf), page by page.
//!
//! The normalised text is the extracted text of each page in order, lines trimmed and blank-line
//! runs collapsed, pages separated by a blank line. Each page is analysed like plain text
//! ([`text::blocks_in`](super::text::blocks_in): paragraphs, numbered and ALL CAPS headings,
//! lists), and every block carries its 1-based page number. A page whose text cannot be read is
//! left empty; a file where no page can be read, or that is not a PDF, is `Corrupt`. pdf-extract
//! panics on some malformed files: the panic is caught and reported as `Corrupt` (the default panic
//! hook still prints it to stderr). Encrypted files are tried with the empty password.
//!
//! Scanned pages: a page whose text layer holds fewer than [`MIN_PAGE_CHARS`] characters is read
//! from its embedded image ([`pdf_images`](super::pdf_images)) by the OCR engine of the
//! [`ParseContext`], keeping its page number. Without an engine, a PDF with no text at all is
//! skipped with [`SkipReason::NeedsOcr`] (which names the fetch command); one with some text keeps
//! it and lists the unread pages in `pages_without_text`.
//!
//! Title: the Info dictionary's `Title`, else a heading that opens page 1, else the file stem.
//! Metadata: `pages`, and `author` when the Info dictionary names one; `pages_unreadable` (scanned
//! pages whose image could not be decoded: an unsupported encoding such as JBIG2; when no page
//! has text, the file is skipped with the first one's reason instead); `ocr_pages` (pages read by
//! OCR), `ocr_confidence` (their mean line confidence) and `ocr_low_confidence_pages` (pages
//! below [`LOW_CONFIDENCE`](super::scan::LOW_CONFIDENCE)).

use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;

use super::scan::{clean_page, note_confidence, note_unreadable, read_page};
use super::{finish, normalise, text, title_from_path, InputKind, ParseContext, Parser, SkipReason, TextBuilder};
use crate::types::{BlockKind, ParsedDocument};

/// The PDF parser.
#[derive(Debug, Clone, Copy, Default)]
pub struct PdfParser;

impl Parser for PdfParser {
    fn name(&self) -> &'static str {
        "pdf"
    }

    fn input(&self) -> InputKind {
        InputKind::Scan
    }

    fn parse(&self, path: &Path, bytes: &[u8]) -> Result<ParsedDocument, SkipReason> {
        self.parse_in(path, bytes, &ParseContext::default())
    }

    fn parse_in(&self, path: &Path, bytes: &[u8], context: &ParseContext) -> Result<ParsedDocument, SkipReason> {
        if !bytes.starts_with(b"%PDF") && !bytes[..bytes.len().min(1024)].windows(5).any(|w| w == b"%PDF-") {
            return Err(SkipReason::corrupt("not a PDF (no %PDF- header)"));
        }
        let extracted = catch_unwind(AssertUnwindSafe(|| extract(bytes))).map_err(|panic| {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".to_string());
            SkipReason::corrupt(format!("PDF reader failed: {what}"))
        })??;
        let mut pages: Vec<String> = extracted.pages.iter().map(|p| clean_page(p)).collect();
        let scanned: Vec<u32> = (1..=pages.len() as u32)
            .filter(|n| pages[*n as usize - 1].chars().filter(|c| !c.is_whitespace()).count() < MIN_PAGE_CHARS)
            .collect();
        let mut metadata = BTreeMap::new();
        if !scanned.is_empty() {
            match &context.ocr {
                Some(engine) => {
                    let mut read = Vec::new();
                    let mut unreadable: Vec<(u32, String)> = Vec::new();
                    let images = super::pdf_images::page_image_results(bytes, engine.options().max_pixels)
                        .map_err(|e| SkipReason::corrupt(format!("PDF page images: {e}")))?;
                    for (n, image) in images {
                        if !scanned.contains(&n) {
                            continue;
                        }
                        let image = match image {
                            Ok(image) => image,
                            // A page with neither text nor an image is blank, not unreadable.
                            Err(e) if e == super::pdf_images::NO_IMAGE => continue,
                            Err(e) => {
                                unreadable.push((n, e));
                                continue;
                            }
                        };
                        let (ocr_text, confidence) = read_page(engine, &image)?;
                        let slot = &mut pages[n as usize - 1];
                        if ocr_text.len() > slot.len() {
                            *slot = ocr_text;
                            read.push((n, confidence));
                        }
                    }
                    note_confidence(&mut metadata, &read);
                    if let Some((first, reason)) = unreadable.first() {
                        // Said in the skip reason when nothing else on the file reads, else kept
                        // in the metadata beside the pages that did.
                        if pages.iter().all(String::is_empty) {
                            let more = match unreadable.len() - 1 {
                                0 => String::new(),
                                n => format!(" (and {n} more scanned page{})", if n == 1 { "" } else { "s" }),
                            };
                            return Err(SkipReason::corrupt(format!("the image of scanned page {first}: {reason}{more}")));
                        }
                        note_unreadable(&mut metadata, unreadable.iter().map(|(n, _)| *n));
                    }
                }
                None if scanned.len() == pages.len() => return Err(SkipReason::NeedsOcr),
                None => {
                    let list: Vec<String> = scanned.iter().map(u32::to_string).collect();
                    metadata.insert("pages_without_text".to_string(), list.join(","));
                }
            }
        }
        let mut out = TextBuilder::default();
        let mut blocks = Vec::new();
        for (i, page_text) in pages.iter().enumerate() {
            if page_text.is_empty() {
                continue;
            }
            let start = out.raw(page_text);
            let end = out.text.len();
            let number = u32::try_from(i + 1).unwrap_or(u32::MAX);
            blocks.extend(text::blocks_in(&out.text, start, end, Some(number), text::Style::Pdf));
        }
        metadata.insert("pages".to_string(), extracted.pages.len().to_string());
        if let Some(author) = extracted.author {
            metadata.insert("author".to_string(), author);
        }
        let title = extracted.title.or_else(|| match blocks.first() {
            Some((BlockKind::Heading { title, .. }, _, Some(1))) => Some(title.clone()),
            _ => None,
        });
        let title = title.unwrap_or_else(|| title_from_path(path));
        Ok(finish(self.name(), title, out.text, blocks, metadata))
    }
}

/// A page whose text layer has fewer non-blank characters than this is read by OCR (a scan
/// with a stray page number or a few hidden characters counts as no text).
pub const MIN_PAGE_CHARS: usize = 16;

/// What the PDF reader gives back.
struct Extracted {
    /// Text of each page, in page order (empty where a page failed).
    pages: Vec<String>,
    title: Option<String>,
    author: Option<String>,
}

fn extract(bytes: &[u8]) -> Result<Extracted, SkipReason> {
    let mut doc = pdf_extract::Document::load_mem(bytes).map_err(|e| SkipReason::corrupt(format!("PDF: {e}")))?;
    if doc.is_encrypted() {
        doc.decrypt("").map_err(|e| SkipReason::corrupt(format!("encrypted PDF: {e}")))?;
    }
    let numbers: Vec<u32> = doc.get_pages().keys().copied().collect();
    if numbers.is_empty() {
        return Err(SkipReason::corrupt("PDF has no pages"));
    }
    let mut pages = Vec::with_capacity(numbers.len());
    let mut failed = 0;
    for n in numbers {
        let mut s = String::new();
        let ok = {
            let mut dev = pdf_extract::PlainTextOutput::new(&mut s);
            pdf_extract::output_doc_page(&doc, &mut dev, n).is_ok()
        };
        if !ok {
            failed += 1;
            s.clear();
        }
        pages.push(s);
    }
    if failed == pages.len() {
        return Err(SkipReason::corrupt("no page of the PDF could be read"));
    }
    Ok(Extracted { pages, title: info(&doc, b"Title"), author: info(&doc, b"Author") })
}

/// A text entry of the document's Info dictionary.
fn info(doc: &pdf_extract::Document, key: &[u8]) -> Option<String> {
    let id = doc.trailer.get(b"Info").ok()?.as_reference().ok()?;
    let dict = doc.get_dictionary(id).ok()?;
    let value = pdf_extract::decode_text_string(dict.get(key).ok()?).ok()?;
    let value = super::one_line(&normalise(&value));
    (!value.is_empty()).then_some(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::testutil::check_document;

    const LPPL: &[u8] = include_bytes!("../../../../tests/fixtures/source/lppl.pdf");

    fn summary(doc: &ParsedDocument) -> Vec<(u32, &str)> {
        doc.blocks.iter().map(|b| (b.page.unwrap_or(0), &doc.text[b.span.range()])).collect()
    }

    #[test]
    fn real_pdf_has_pages_headings_and_words_in_place() {
        let doc = PdfParser.parse(Path::new("/docs/lppl.pdf"), LPPL).unwrap();
        check_document(&doc);
        assert_eq!(doc.parser, "pdf");
        assert_eq!(doc.metadata.get("pages").map(String::as_str), Some("8"));
        assert_eq!(doc.title, "The LATEX Project Public License");
        let blocks = summary(&doc);
        let pages: Vec<u32> = blocks.iter().map(|b| b.0).collect();
        assert!(pages.windows(2).all(|w| w[0] <= w[1]), "pages go backwards: {pages:?}");
        assert_eq!(pages.first(), Some(&1));
        assert_eq!(pages.last(), Some(&8));
        let page_of = |needle: &str| blocks.iter().find(|b| b.1.contains(needle)).map(|b| b.0);
        assert_eq!(page_of("Preamble"), Some(1));
        assert_eq!(page_of("Base Interpreter A program"), Some(2));
        assert_eq!(page_of("There is no warranty for the Work"), Some(4));
        assert_eq!(page_of("How to Use This License"), Some(7));
        let heading = |title: &str| {
            doc.blocks.iter().any(|b| matches!(&b.kind, BlockKind::Heading { title: t, .. } if t == title))
        };
        assert!(heading("No Warranty") && heading("Maintenance of The Work"));
        // Lone page numbers are not blocks.
        assert!(blocks.iter().all(|b| b.1.trim().parse::<u32>().is_err()));
    }

    #[test]
    fn truncated_and_garbage_pdfs_are_corrupt() {
        let half = &LPPL[..LPPL.len() / 2];
        assert!(matches!(PdfParser.parse(Path::new("half.pdf"), half), Err(SkipReason::Corrupt { .. })));
        let garbage: Vec<u8> = (0..4096u32).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8).collect();
        assert!(matches!(PdfParser.parse(Path::new("x.pdf"), &garbage), Err(SkipReason::Corrupt { .. })));
        let fake = b"%PDF-1.4\n1 0 obj << /Type /Catalog >> endobj\ntrailer << /Root 1 0 R >>\n%%EOF\n";
        assert!(matches!(PdfParser.parse(Path::new("x.pdf"), fake), Err(SkipReason::Corrupt { .. })));
        // Through the entry point: binary content is fine for a PDF, and the skip reason holds.
        assert!(matches!(crate::source::parse(Path::new("half.pdf"), half, 1 << 30), Err(SkipReason::Corrupt { .. })));
        assert!(crate::source::parse(Path::new("lppl.pdf"), LPPL, 1 << 30).is_ok());
    }

    #[test]
    fn a_scanned_pdf_without_an_ocr_engine_says_how_to_get_one() {
        let scan = crate::source::testutil::fixture("scanned/business-continuity-plan-scanned.pdf");
        assert_eq!(PdfParser.parse(Path::new("scan.pdf"), &scan).err(), Some(SkipReason::NeedsOcr));
    }
}
