//! Images of pages (`.png`, `.jpg`, `.tif`): read by the OCR engine of the [`ParseContext`] (the
//! first frame of a multi-page TIFF). Without an engine the file is skipped with
//! [`SkipReason::NeedsOcr`], which names the fetch command; an image with no text in it is
//! `Empty`. Decoding is bounded: at most the engine's pixel budget, and the decoder's own
//! allocation limit.
//!
//! Blocks come from the recognised text as from a PDF page (page 1). Metadata: `ocr_confidence`
//! (the page's mean line confidence), and `ocr_low_confidence_pages` when it is below
//! [`LOW_CONFIDENCE`](super::scan::LOW_CONFIDENCE).

use std::collections::BTreeMap;
use std::io::Cursor;
use std::path::Path;

use super::scan::{note_confidence, read_page};
use super::{finish, text, title_from_path, InputKind, ParseContext, Parser, SkipReason, TextBuilder};
use crate::types::ParsedDocument;

/// The image parser.
#[derive(Debug, Clone, Copy, Default)]
pub struct ImageParser;

impl Parser for ImageParser {
    fn name(&self) -> &'static str {
        "image"
    }

    fn input(&self) -> InputKind {
        InputKind::Scan
    }

    fn parse(&self, path: &Path, bytes: &[u8]) -> Result<ParsedDocument, SkipReason> {
        self.parse_in(path, bytes, &ParseContext::default())
    }

    fn parse_in(&self, path: &Path, bytes: &[u8], context: &ParseContext) -> Result<ParsedDocument, SkipReason> {
        let Some(engine) = &context.ocr else { return Err(SkipReason::NeedsOcr) };
        let image = decode(bytes, engine.options().max_pixels)?;
        let (cleaned, confidence) = read_page(engine, &image)?;
        let mut out = TextBuilder::default();
        let mut metadata = BTreeMap::new();
        if !cleaned.is_empty() {
            let start = out.raw(&cleaned);
            let end = out.text.len();
            out.blocks.extend(text::blocks_in(&out.text, start, end, Some(1), text::Style::Pdf));
            note_confidence(&mut metadata, &[(1, confidence)]);
        }
        Ok(finish(self.name(), title_from_path(path), out.text, out.blocks, metadata))
    }
}

/// Decodes an image, refusing one of more than `max_pixels` before its pixels are allocated.
pub fn decode(bytes: &[u8], max_pixels: u64) -> Result<::image::DynamicImage, SkipReason> {
    let reader = ::image::ImageReader::new(Cursor::new(bytes))
        .with_guessed_format()
        .map_err(|e| SkipReason::corrupt(format!("image: {e}")))?;
    let (w, h) = reader.into_dimensions().map_err(|e| SkipReason::corrupt(format!("image: {e}")))?;
    if u64::from(w) * u64::from(h) > max_pixels {
        return Err(SkipReason::OverLimit {
            what: format!("an image of {w} x {h} pixels (the OCR limit is {} megapixels)", max_pixels / 1_000_000),
        });
    }
    let mut reader = ::image::ImageReader::new(Cursor::new(bytes))
        .with_guessed_format()
        .map_err(|e| SkipReason::corrupt(format!("image: {e}")))?;
    let mut limits = ::image::Limits::default();
    limits.max_alloc = Some(max_pixels.saturating_mul(8));
    reader.limits(limits);
    reader.decode().map_err(|e| SkipReason::corrupt(format!("image: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_an_ocr_engine_an_image_says_how_to_get_one() {
        let png = crate::source::testutil::fixture("scanned/page-1.png");
        let err = ImageParser.parse(Path::new("page.png"), &png).unwrap_err();
        assert_eq!(err, SkipReason::NeedsOcr);
        assert!(err.to_string().contains("scripts/fetch-models.sh pp-ocrv6-small"), "{err}");
    }

    #[test]
    fn decoding_refuses_a_huge_image_before_allocating_it() {
        let png = crate::source::testutil::fixture("scanned/page-1.png");
        assert!(matches!(decode(&png, 1_000_000), Err(SkipReason::OverLimit { .. })));
        assert!(decode(&png, 50_000_000).is_ok());
        assert!(matches!(decode(b"\x89PNG\r\n\x1a\nbroken", 50_000_000), Err(SkipReason::Corrupt { .. })));
    }
}
