//! Images of pages (`.png`, `.jpg`, `.tif`): read by the OCR engine of the [`ParseContext`]. A
//! multi-page TIFF (what scanners and fax servers write) is read page by page, each decoded only
//! when its turn comes. Without an engine the file is skipped with [`SkipReason::NeedsOcr`], which
//! names the fetch command; an image with no text in it is `Empty`. Decoding is bounded: at most
//! the engine's pixel budget a page, the decoder's own allocation limit, and [`MAX_PAGES`] pages.
//!
//! Blocks come from the recognised text as from a PDF's pages, each with its page number.
//! Metadata: `pages`, `ocr_pages`, `ocr_confidence` (the mean line confidence), and
//! `ocr_low_confidence_pages` for pages below [`LOW_CONFIDENCE`](super::scan::LOW_CONFIDENCE). A
//! page of a multi-page TIFF that cannot be read is listed in `pages_unreadable` and the others are
//! kept; a file none of whose pages can be read is skipped with the first page's reason.

use std::collections::BTreeMap;
use std::io::Cursor;
use std::path::Path;

use super::scan::{note_confidence, note_unreadable, read_page};
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
        let max_pixels = engine.options().max_pixels;
        let mut out = TextBuilder::default();
        let mut metadata = BTreeMap::new();
        // Pages with text and their confidence; pages read (with text or blank); pages not read.
        let mut read = Vec::new();
        let mut readable = 0u32;
        let mut unreadable = Vec::new();
        let mut first_error = None;
        let mut pages = Pages::of(bytes)?;
        let mut n = 0u32;
        while let Some(image) = pages.next_page(max_pixels) {
            n += 1;
            match image.and_then(|image| read_page(engine, &image)) {
                Ok((cleaned, confidence)) => {
                    readable += 1;
                    if !cleaned.is_empty() {
                        read.push((n, confidence));
                        let start = out.raw(&cleaned);
                        let end = out.text.len();
                        out.blocks.extend(text::blocks_in(&out.text, start, end, Some(n), text::Style::Pdf));
                    }
                }
                Err(reason) => {
                    unreadable.push(n);
                    first_error.get_or_insert(reason);
                }
            }
        }
        if readable == 0 {
            return Err(first_error.unwrap_or_else(|| SkipReason::corrupt("image: no pages")));
        }
        note_confidence(&mut metadata, &read);
        if n > 1 || !unreadable.is_empty() {
            metadata.insert("pages".to_string(), n.to_string());
        }
        note_unreadable(&mut metadata, unreadable);
        if pages.cut {
            metadata.insert("truncated".to_string(), format!("the first {MAX_PAGES} pages were read"));
        }
        Ok(finish(self.name(), title_from_path(path), out.text, out.blocks, metadata))
    }
}

/// Most pages read from one multi-page TIFF (the rest are left out, and the metadata says so).
pub const MAX_PAGES: usize = 5_000;

/// The pages of an image file, decoded one at a time: one page, or each image of a TIFF.
///
/// A TIFF's pages are found with the `tiff` crate's walk of its image directories (which
/// refuses cycles; thumbnails and masks are not pages), and each is decoded by `image`'s TIFF
/// reader (every colour type, bilevel fax pages included) from a copy of the file whose header
/// points at that page's directory.
pub(crate) struct Pages<'a> {
    bytes: &'a [u8],
    /// A TIFF, read page by page.
    tiff: Option<Tiff>,
    /// Pages handed out so far.
    next: usize,
    /// Whether a TIFF had more than [`MAX_PAGES`] images.
    cut: bool,
    /// Whether a TIFF's walk of its directories broke after the last offset found.
    broken: bool,
}

/// A multi-page TIFF being read.
struct Tiff {
    /// The file's copy whose header is re-pointed at each page in turn.
    copy: Vec<u8>,
    /// Where the header holds its pointer to the first image directory.
    pointer: std::ops::Range<usize>,
    /// The file's byte order ("MM").
    big_endian: bool,
    /// The offsets of the pages' image directories, in the file's order.
    offsets: Vec<u64>,
}

impl<'a> Pages<'a> {
    /// The pages of `bytes`: a TIFF's walked, any other image one page.
    pub(crate) fn of(bytes: &'a [u8]) -> Result<Pages<'a>, SkipReason> {
        let mut pages = Pages { bytes, tiff: None, next: 0, cut: false, broken: false };
        let big_endian = match bytes.get(..4) {
            Some(b"II*\0") | Some(b"II+\0") => false,
            Some(b"MM\0*") | Some(b"MM\0+") => true,
            _ => return Ok(pages),
        };
        let pointer = if bytes[2..4] == [0, 42] || bytes[2..4] == [42, 0] { 4..8 } else { 8..16 };
        let mut decoder =
            tiff::decoder::Decoder::new(Cursor::new(bytes)).map_err(|e| SkipReason::corrupt(format!("image: TIFF: {e}")))?;
        // Each directory's offset, and whether it is a page rather than a page's thumbnail
        // (NewSubfileType bit 0, "reduced resolution") or transparency mask (bit 2).
        let mut found: Vec<(u64, bool)> = Vec::new();
        loop {
            if let Some(ifd) = decoder.ifd_pointer() {
                let subfile = decoder.find_tag_unsigned::<u32>(tiff::tags::Tag::NewSubfileType).ok().flatten().unwrap_or(0);
                found.push((ifd.0, subfile & 0b101 == 0));
            }
            if !decoder.more_images() {
                break;
            }
            if found.len() >= MAX_PAGES {
                pages.cut = true;
                break;
            }
            if decoder.next_image().is_err() {
                pages.broken = true;
                break;
            }
        }
        let any_page = found.iter().any(|(_, page)| *page);
        let offsets = found.into_iter().filter(|(_, page)| *page || !any_page).map(|(offset, _)| offset).collect();
        pages.tiff = Some(Tiff { copy: bytes.to_vec(), pointer, big_endian, offsets });
        Ok(pages)
    }

    /// The next page's image (or why it cannot be read), `None` after the last.
    pub(crate) fn next_page(&mut self, max_pixels: u64) -> Option<Result<::image::DynamicImage, SkipReason>> {
        let i = self.next;
        self.next += 1;
        let Some(tiff) = &mut self.tiff else {
            return (i == 0).then(|| decode(self.bytes, max_pixels));
        };
        let Some(&offset) = tiff.offsets.get(i) else {
            // A broken walk leaves one page unread after the last it found.
            return (i == tiff.offsets.len() && self.broken)
                .then(|| Err(SkipReason::corrupt("image: TIFF: a page's image directory cannot be read")));
        };
        let at = &mut tiff.copy[tiff.pointer.clone()];
        match (at.len(), tiff.big_endian) {
            // A classic TIFF's offsets are 32-bit: its walk read them as such.
            (4, false) => at.copy_from_slice(&u32::try_from(offset).unwrap_or(u32::MAX).to_le_bytes()),
            (4, true) => at.copy_from_slice(&u32::try_from(offset).unwrap_or(u32::MAX).to_be_bytes()),
            (_, false) => at.copy_from_slice(&offset.to_le_bytes()),
            (_, true) => at.copy_from_slice(&offset.to_be_bytes()),
        }
        Some(decode(&tiff.copy, max_pixels))
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
        assert!(err.to_string().contains("scripts/setup/fetch-models.sh pp-ocrv6-small"), "{err}");
    }

    const TIFF: &str = "scanned/business-continuity-plan-pages-1-2.tif";

    /// The images `Pages` hands out, or their skip reasons.
    fn pages(bytes: &[u8]) -> Vec<Result<::image::DynamicImage, SkipReason>> {
        let mut pages = Pages::of(bytes).unwrap();
        std::iter::from_fn(|| pages.next_page(50_000_000)).collect()
    }

    #[test]
    fn every_page_of_a_multi_page_tiff_is_decoded_in_order() {
        let tif = crate::source::testutil::fixture(TIFF);
        let read = pages(&tif);
        assert_eq!(read.len(), 2);
        let images: Vec<_> = read.into_iter().map(Result::unwrap).collect();
        for image in &images {
            assert_eq!((image.width(), image.height()), (1654, 2339));
        }
        // Bilevel fax pages come out as grey, white paper and black ink, and the pages differ.
        let (first, second) = (images[0].to_luma8(), images[1].to_luma8());
        let dark = |g: &::image::GrayImage| g.pixels().filter(|p| p.0[0] < 128).count();
        assert!(dark(&first) * 10 < first.len(), "mostly white paper: {} dark pixels", dark(&first));
        assert!(dark(&first) > 1000 && dark(&second) > 1000);
        assert_ne!(first, second);
        // A one-page image is one page.
        assert_eq!(pages(&crate::source::testutil::fixture("scanned/page-1.png")).len(), 1);
    }

    #[test]
    fn a_tiff_whose_second_page_cannot_be_found_keeps_its_first() {
        let mut tif = crate::source::testutil::fixture(TIFF);
        assert_eq!(&tif[..4], b"II*\0");
        // The first directory's pointer to the next one, sent past the end of the file.
        let ifd = u32::from_le_bytes(tif[4..8].try_into().unwrap()) as usize;
        let entries = u16::from_le_bytes(tif[ifd..ifd + 2].try_into().unwrap()) as usize;
        let next = ifd + 2 + 12 * entries;
        tif[next..next + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        let read = pages(&tif);
        assert_eq!(read.len(), 2, "the first page, then the one that cannot be read");
        assert!(read[0].is_ok());
        assert!(matches!(&read[1], Err(SkipReason::Corrupt { .. })), "{:?}", read[1].as_ref().err());
        // Cut short inside the second page's image data: the first page still reads.
        let tif = crate::source::testutil::fixture(TIFF);
        let read = pages(&tif[..tif.len() - 20_000]);
        assert!(read[0].is_ok());
        assert!(read.iter().skip(1).all(Result::is_err));
    }

    #[test]
    fn mutated_tiffs_give_pages_or_reasons_never_a_panic() {
        let tif = crate::source::testutil::fixture(TIFF);
        let mut rng = fastrand::Rng::with_seed(0x9e37_79b9_7f4a_7c15);
        for case in 0..120 {
            let mut bytes = tif.clone();
            // Set bytes, two in three of them in the header (the first 16 bytes) or near the end,
            // where tiffcp writes the last page's image directory after its data.
            for _ in 0..1 + rng.usize(..8) {
                let at = match rng.usize(..3) {
                    0 => rng.usize(..16),
                    1 => bytes.len() - 1 - rng.usize(..400),
                    _ => rng.usize(..bytes.len()),
                };
                bytes[at] = rng.u8(..);
            }
            if case % 10 == 0 {
                bytes.truncate(rng.usize(..bytes.len()));
            }
            let Ok(mut pages) = Pages::of(&bytes) else { continue };
            let mut n = 0;
            while let Some(page) = pages.next_page(50_000_000) {
                n += 1;
                assert!(n <= MAX_PAGES + 1, "case {case}");
                drop(page);
            }
        }
    }

    #[test]
    fn a_tiffs_thumbnails_are_not_pages() {
        use tiff::encoder::{colortype::Gray8, TiffEncoder};
        // A page, its reduced-resolution thumbnail, and a second page.
        let mut tif = Cursor::new(Vec::new());
        let mut encoder = TiffEncoder::new(&mut tif).unwrap();
        for (size, shade, thumbnail) in [(64u32, 10u8, false), (16, 20, true), (48, 30, false)] {
            let mut image = encoder.new_image::<Gray8>(size, size).unwrap();
            if thumbnail {
                image.encoder().write_tag(tiff::tags::Tag::NewSubfileType, 1u32).unwrap();
            }
            image.write_data(&vec![shade; (size * size) as usize]).unwrap();
        }
        let read: Vec<_> = pages(tif.get_ref()).into_iter().map(Result::unwrap).collect();
        let seen: Vec<_> = read.iter().map(|i| (i.width(), i.to_luma8().get_pixel(0, 0).0[0])).collect();
        assert_eq!(seen, [(64, 10), (48, 30)]);
    }

    #[test]
    fn a_multi_page_tiff_without_an_ocr_engine_says_how_to_get_one() {
        let tif = crate::source::testutil::fixture(TIFF);
        assert_eq!(ImageParser.parse(Path::new("scan.tif"), &tif).unwrap_err(), SkipReason::NeedsOcr);
    }

    #[test]
    fn decoding_refuses_a_huge_image_before_allocating_it() {
        let png = crate::source::testutil::fixture("scanned/page-1.png");
        assert!(matches!(decode(&png, 1_000_000), Err(SkipReason::OverLimit { .. })));
        assert!(decode(&png, 50_000_000).is_ok());
        assert!(matches!(decode(b"\x89PNG\r\n\x1a\nbroken", 50_000_000), Err(SkipReason::Corrupt { .. })));
    }
}
