//! A page read by OCR, shared by the image parser and the PDF parser's scanned pages: the engine's
//! text cleaned like a text layer's ([`clean_page`]), its failure as a skip reason, and the
//! confidence a document's metadata records (`ocr_pages`, `ocr_confidence`, and
//! `ocr_low_confidence_pages` for pages below [`LOW_CONFIDENCE`]), and the pages that could not be
//! read (`pages_unreadable`).

use std::collections::BTreeMap;

use super::normalise;
use super::ocr::{OcrEngine, OcrError};
use super::SkipReason;

/// Pages whose mean OCR line confidence is below this are listed as low-confidence.
pub const LOW_CONFIDENCE: f32 = 0.8;

/// Records which pages OCR read, its mean confidence and the low-confidence pages.
pub fn note_confidence(metadata: &mut BTreeMap<String, String>, read: &[(u32, f32)]) {
    if read.is_empty() {
        return;
    }
    let pages: Vec<String> = read.iter().map(|(n, _)| n.to_string()).collect();
    metadata.insert("ocr_pages".to_string(), pages.join(","));
    let mean = read.iter().map(|(_, c)| c).sum::<f32>() / read.len() as f32;
    metadata.insert("ocr_confidence".to_string(), format!("{mean:.3}"));
    let low: Vec<String> = read.iter().filter(|(_, c)| *c < LOW_CONFIDENCE).map(|(n, _)| n.to_string()).collect();
    if !low.is_empty() {
        metadata.insert("ocr_low_confidence_pages".to_string(), low.join(","));
    }
}

/// Records the pages whose image could not be decoded or read (`pages_unreadable`), if any.
pub fn note_unreadable(metadata: &mut BTreeMap<String, String>, pages: impl IntoIterator<Item = u32>) {
    let list: Vec<String> = pages.into_iter().map(|n| n.to_string()).collect();
    if !list.is_empty() {
        metadata.insert("pages_unreadable".to_string(), list.join(","));
    }
}

/// A page's text: normalised, lines trimmed, runs of blank lines collapsed to one, ends trimmed.
pub fn clean_page(page: &str) -> String {
    let page = normalise(page);
    let mut out = String::with_capacity(page.len());
    let mut blank = 0;
    for line in page.lines().map(str::trim) {
        if line.is_empty() {
            blank += 1;
            continue;
        }
        if !out.is_empty() {
            out.push_str(if blank > 0 { "\n\n" } else { "\n" });
        }
        blank = 0;
        out.push_str(line);
    }
    out
}

/// The skip reason of an OCR failure.
pub fn ocr_reason(e: OcrError) -> SkipReason {
    match e {
        OcrError::ImageTooLarge { width, height, max_pixels } => SkipReason::OverLimit {
            what: format!("an image of {width} x {height} pixels (the OCR limit is {} megapixels)", max_pixels / 1_000_000),
        },
        e => SkipReason::corrupt(format!("OCR: {e}")),
    }
}

/// Reads `image` with `engine`: the page's text (as [`clean_page`] leaves it) and its mean line
/// confidence.
pub fn read_page(engine: &OcrEngine, image: &::image::DynamicImage) -> Result<(String, f32), SkipReason> {
    let page = engine.read(image).map_err(ocr_reason)?;
    Ok((clean_page(&page.text), page.confidence))
}
