//! Page images of scanned PDFs: for each page, its largest embedded image
//! XObject decoded to an `image::DynamicImage`.
//!
//! Supported: DCTDecode (JPEG, via `image`), FlateDecode / LZWDecode /
//! ASCII85Decode (via lopdf) with PNG (10-15) and TIFF (2) predictors,
//! CCITTFaxDecode Group 4 (`/K` < 0, via the `fax` crate: the bilevel pages
//! office scanners and fax servers write), and uncompressed data; DeviceGray /
//! CalGray, DeviceRGB / CalRGB, DeviceCMYK, ICCBased (by component count) and
//! Indexed (8-bit or less, RGB/Gray base) colour spaces; 1, 2, 4, 8 and 16 bits
//! per component; /ImageMask and the /Decode [1 0] inversion for 1-component
//! images; /Rotate on the page. JPXDecode, JBIG2Decode and CCITT Group 3 give
//! an "unsupported image encoding" error for that page.
//!
//! May import `types` and `error` only (through `source`). Never panics on
//! corrupt input: sizes are validated before allocation and each document /
//! page is additionally wrapped in `catch_unwind`.
//!
//! lopdf inflates FlateDecode streams without an output cap; a deflate bomb in
//! an image stream is refused before this runs, by the guard's count of what a
//! PDF's streams inflate to ([`guard`](super::guard)).

use std::collections::HashSet;
use std::io::Cursor;
use std::panic::{catch_unwind, AssertUnwindSafe};

use image::{DynamicImage, GrayImage, ImageFormat, ImageReader, RgbImage};
use lopdf::{Dictionary, Document, Object, ObjectId, Stream};

/// The reason a page has no image ([`page_image_results`]): a blank page, not a broken one.
pub const NO_IMAGE: &str = "no image on page";

/// Maximum nesting of Form XObjects searched for images.
const MAX_FORM_DEPTH: usize = 3;

/// Number of pages of a PDF.
pub fn page_count(bytes: &[u8]) -> Result<u32, String> {
    let doc = load(bytes)?;
    Ok(doc.get_pages().len() as u32)
}

/// For each page (1-based number), its largest image decoded. Pages without
/// images, or whose image cannot be decoded (unsupported encoding, too large,
/// corrupt), are left out; use [`page_image_results`] to see why.
pub fn page_images(bytes: &[u8], max_pixels: u64) -> Result<Vec<(u32, DynamicImage)>, String> {
    Ok(page_image_results(bytes, max_pixels)?
        .into_iter()
        .filter_map(|(n, r)| r.ok().map(|img| (n, img)))
        .collect())
}

/// Like [`page_images`] but returns every page with either its image or
/// the reason it has none ("no image", "unsupported image encoding
/// JPXDecode", "image too large ...", ...).
pub fn page_image_results(
    bytes: &[u8],
    max_pixels: u64,
) -> Result<Vec<(u32, Result<DynamicImage, String>)>, String> {
    let doc = load(bytes)?;
    let pages = doc.get_pages();
    let mut out = Vec::with_capacity(pages.len());
    for (num, page_id) in pages {
        let r = catch_unwind(AssertUnwindSafe(|| page_image(&doc, page_id, max_pixels)))
            .unwrap_or_else(|_| Err("internal error while decoding the page image".to_string()));
        out.push((num, r));
    }
    Ok(out)
}

fn load(bytes: &[u8]) -> Result<Document, String> {
    catch_unwind(AssertUnwindSafe(|| Document::load_mem(bytes)))
        .map_err(|_| "PDF parser panicked on corrupt input".to_string())?
        .map_err(|e| format!("cannot parse PDF: {e}"))
}

/// Candidate image: stream id, width, height.
fn page_image(doc: &Document, page_id: ObjectId, max_pixels: u64) -> Result<DynamicImage, String> {
    let mut candidates: Vec<(ObjectId, u64)> = Vec::new();
    let mut seen = HashSet::new();
    // Resources: the page's own dictionary and inherited ones.
    let (own, inherited) = doc.get_page_resources(page_id).map_err(|e| format!("bad page resources: {e}"))?;
    let mut res_dicts: Vec<&Dictionary> = Vec::new();
    if let Some(d) = own {
        res_dicts.push(d);
    }
    for id in inherited {
        if let Ok(d) = doc.get_dictionary(id) {
            res_dicts.push(d);
        }
    }
    for res in res_dicts {
        collect_images(doc, res, 0, &mut seen, &mut candidates);
    }
    let (id, _) = candidates
        .iter()
        .copied()
        .max_by_key(|&(_, area)| area)
        .ok_or_else(|| NO_IMAGE.to_string())?;
    let stream = doc
        .get_object(id)
        .and_then(Object::as_stream)
        .map_err(|e| format!("bad image object: {e}"))?;
    let img = decode_image(doc, stream, max_pixels)?;
    Ok(match page_rotation(doc, page_id) {
        90 => img.rotate90(),
        180 => img.rotate180(),
        270 => img.rotate270(),
        _ => img,
    })
}

/// The rows of a CCITTFaxDecode image as the filter defines its output: packed 1-bit samples, a
/// black pixel 1 when `/BlackIs1` is true and 0 otherwise. Group 4 only (`/K` < 0). Rows the data
/// ends before are white, as a fax decoder pads a page whose encoder left its blank end out.
fn ccitt_rows(data: &[u8], params: Option<&Dictionary>, w: u32, h: u32) -> Result<Vec<u8>, String> {
    let int = |key: &[u8], default: i64| params.and_then(|p| p.get(key).and_then(Object::as_i64).ok()).unwrap_or(default);
    if int(b"K", 0) >= 0 {
        return Err("unsupported image encoding CCITTFaxDecode (Group 3)".into());
    }
    let columns = int(b"Columns", 1728);
    if columns != i64::from(w) {
        return Err(format!("a CCITT image whose /Columns {columns} is not its width {w}"));
    }
    let black_is_1 = params.and_then(|p| p.get(b"BlackIs1").and_then(Object::as_bool).ok()).unwrap_or(false);
    let (Ok(width), Ok(height)) = (u16::try_from(w), u16::try_from(h)) else {
        return Err(format!("a CCITT image of {w}x{h} pixels (at most 65,535 a side)"));
    };
    let row_bytes = (w as usize).div_ceil(8);
    let white = if black_is_1 { 0x00 } else { 0xff };
    let mut out = Vec::with_capacity(row_bytes * h as usize);
    fax::decoder::decode_g4(data.iter().copied(), width, Some(height), |transitions| {
        if out.len() >= row_bytes * h as usize {
            return;
        }
        let start = out.len();
        out.resize(start + row_bytes, 0);
        for (x, color) in fax::decoder::pels(transitions, width).enumerate() {
            if (color == fax::Color::Black) == black_is_1 {
                out[start + x / 8] |= 0x80 >> (x % 8);
            }
        }
    });
    if out.is_empty() {
        return Err("bad CCITT image data".into());
    }
    out.resize(row_bytes * h as usize, white);
    Ok(out)
}

fn deref<'a>(doc: &'a Document, o: &'a Object) -> &'a Object {
    match o {
        Object::Reference(id) => doc.get_object(*id).unwrap_or(o),
        _ => o,
    }
}

fn collect_images(
    doc: &Document,
    resources: &Dictionary,
    depth: usize,
    seen: &mut HashSet<ObjectId>,
    out: &mut Vec<(ObjectId, u64)>,
) {
    let Ok(xobj) = resources.get(b"XObject") else { return };
    let Ok(xdict) = deref(doc, xobj).as_dict() else { return };
    for (_, v) in xdict.iter() {
        let Ok(id) = v.as_reference() else { continue };
        if !seen.insert(id) {
            continue;
        }
        let Ok(stream) = doc.get_object(id).and_then(Object::as_stream) else { continue };
        let d = &stream.dict;
        match d.get(b"Subtype").and_then(Object::as_name) {
            Ok(b"Image") => {
                let w = d.get(b"Width").map(|o| deref(doc, o)).and_then(Object::as_i64).unwrap_or(0);
                let h = d.get(b"Height").map(|o| deref(doc, o)).and_then(Object::as_i64).unwrap_or(0);
                if w > 0 && h > 0 {
                    out.push((id, (w as u64).saturating_mul(h as u64)));
                }
            }
            Ok(b"Form") if depth < MAX_FORM_DEPTH => {
                if let Ok(r) = d.get(b"Resources") {
                    if let Ok(rd) = deref(doc, r).as_dict() {
                        collect_images(doc, rd, depth + 1, seen, out);
                    }
                }
            }
            _ => {}
        }
    }
}

fn page_rotation(doc: &Document, page_id: ObjectId) -> i64 {
    let mut id = page_id;
    for _ in 0..32 {
        let Ok(d) = doc.get_dictionary(id) else { return 0 };
        if let Ok(r) = d.get(b"Rotate").map(|o| deref(doc, o)).and_then(Object::as_i64) {
            return r.rem_euclid(360);
        }
        match d.get(b"Parent").and_then(Object::as_reference) {
            Ok(p) => id = p,
            Err(_) => return 0,
        }
    }
    0
}

#[derive(Clone, Debug, PartialEq)]
enum Color {
    Gray,
    Rgb,
    Cmyk,
    /// Indexed: base components (1 or 3), palette bytes.
    Indexed(usize, Vec<u8>),
}

impl Color {
    fn comps(&self) -> usize {
        match self {
            Color::Gray | Color::Indexed(..) => 1,
            Color::Rgb => 3,
            Color::Cmyk => 4,
        }
    }
}

fn color_from_name(n: &[u8]) -> Option<Color> {
    match n {
        b"DeviceGray" | b"CalGray" | b"G" => Some(Color::Gray),
        b"DeviceRGB" | b"CalRGB" | b"RGB" => Some(Color::Rgb),
        b"DeviceCMYK" | b"CMYK" => Some(Color::Cmyk),
        _ => None,
    }
}

fn parse_color(doc: &Document, cs: &Object, depth: usize) -> Result<Color, String> {
    let cs = deref(doc, cs);
    if let Ok(n) = cs.as_name() {
        return color_from_name(n).ok_or_else(|| format!("unsupported colour space {}", String::from_utf8_lossy(n)));
    }
    let arr = cs.as_array().map_err(|_| "bad colour space".to_string())?;
    let family = arr.first().map(|o| deref(doc, o)).and_then(|o| o.as_name().ok()).unwrap_or(b"");
    match family {
        b"ICCBased" => {
            let n = arr
                .get(1)
                .map(|o| deref(doc, o))
                .and_then(|o| o.as_stream().ok())
                .and_then(|s| s.dict.get(b"N").ok().and_then(|o| o.as_i64().ok()))
                .unwrap_or(3);
            match n {
                1 => Ok(Color::Gray),
                3 => Ok(Color::Rgb),
                4 => Ok(Color::Cmyk),
                _ => Err(format!("unsupported ICC component count {n}")),
            }
        }
        b"Indexed" | b"I" if depth == 0 => {
            let base = parse_color(doc, arr.get(1).ok_or("bad Indexed colour space")?, 1)?;
            let bc = match base {
                Color::Gray => 1,
                Color::Rgb => 3,
                _ => return Err("unsupported Indexed base colour space".into()),
            };
            let hival = arr.get(2).map(|o| deref(doc, o)).and_then(|o| o.as_i64().ok()).unwrap_or(255).clamp(0, 255);
            let lookup = match arr.get(3).map(|o| deref(doc, o)) {
                Some(Object::String(b, _)) => b.clone(),
                Some(Object::Stream(s)) => s.get_plain_content().map_err(|e| format!("bad palette: {e}"))?,
                _ => return Err("bad Indexed palette".into()),
            };
            let need = (hival as usize + 1) * bc;
            let mut pal = lookup;
            pal.resize(need, 0);
            Ok(Color::Indexed(bc, pal))
        }
        b"CalRGB" | b"CalGray" | b"DeviceRGB" | b"DeviceGray" | b"DeviceCMYK" => {
            color_from_name(family).ok_or_else(|| "bad colour space".into())
        }
        other => Err(format!("unsupported colour space {}", String::from_utf8_lossy(other))),
    }
}

fn decode_image(doc: &Document, stream: &Stream, max_pixels: u64) -> Result<DynamicImage, String> {
    let d = &stream.dict;
    let geti = |k: &[u8]| d.get(k).map(|o| deref(doc, o)).and_then(Object::as_i64).ok();
    let w = geti(b"Width").unwrap_or(0);
    let h = geti(b"Height").unwrap_or(0);
    if w <= 0 || h <= 0 || w > 1_000_000 || h > 1_000_000 {
        return Err(format!("bad image size {w}x{h}"));
    }
    let (w, h) = (w as u32, h as u32);
    let pixels = w as u64 * h as u64;
    if pixels > max_pixels {
        return Err(format!("image too large: {w}x{h} exceeds {max_pixels} pixels"));
    }
    let filters: Vec<Vec<u8>> = match d.get(b"Filter").map(|o| deref(doc, o)) {
        Ok(Object::Name(n)) => vec![n.clone()],
        Ok(Object::Array(a)) => a.iter().filter_map(|o| deref(doc, o).as_name().ok().map(|n| n.to_vec())).collect(),
        _ => vec![],
    };
    let is_ccitt = filters.last().is_some_and(|f| f == b"CCITTFaxDecode" || f == b"CCF");
    if is_ccitt && filters.len() != 1 {
        return Err("unsupported image encoding (filter chain ending in CCITTFaxDecode)".into());
    }
    for f in &filters {
        let unsupported = matches!(f.as_slice(), b"JPXDecode" | b"JBIG2Decode" | b"RunLengthDecode" | b"RL");
        if unsupported {
            return Err(format!("unsupported image encoding {}", String::from_utf8_lossy(f)));
        }
    }
    let is_dct = filters.last().is_some_and(|f| f == b"DCTDecode" || f == b"DCT");
    if is_dct {
        if filters.len() != 1 {
            return Err("unsupported image encoding (filter chain ending in DCTDecode)".into());
        }
        let mut reader = ImageReader::with_format(Cursor::new(&stream.content[..]), ImageFormat::Jpeg);
        let mut limits = image::Limits::default();
        limits.max_image_width = Some(w.saturating_mul(2).max(64));
        limits.max_image_height = Some(h.saturating_mul(2).max(64));
        limits.max_alloc = Some(max_pixels.saturating_mul(4).saturating_add(64 << 20));
        reader.limits(limits);
        let img = reader.decode().map_err(|e| format!("bad JPEG image: {e}"))?;
        if img.width() as u64 * img.height() as u64 > max_pixels {
            return Err("image too large".into());
        }
        return Ok(img);
    }

    let image_mask = d.get(b"ImageMask").and_then(Object::as_bool).unwrap_or(false);
    let bpc = if image_mask { 1 } else { geti(b"BitsPerComponent").unwrap_or(8) };
    if !matches!(bpc, 1 | 2 | 4 | 8 | 16) {
        return Err(format!("unsupported bits per component {bpc}"));
    }
    let bpc = bpc as usize;
    let color = if image_mask {
        Color::Gray
    } else {
        match d.get(b"ColorSpace") {
            Ok(cs) => parse_color(doc, cs, 0)?,
            Err(_) => return Err("image without colour space".into()),
        }
    };
    let comps = color.comps();
    let row_bytes = ((w as usize) * comps * bpc).div_ceil(8);
    let expected = row_bytes.checked_mul(h as usize).ok_or("image too large")?;

    // Decompress without /DecodeParms, then apply the predictor here (lopdf's
    // predictor handling assumes >= 8 bits per component).
    let params: Option<Dictionary> = d
        .get(b"DecodeParms")
        .map(|o| deref(doc, o))
        .ok()
        .and_then(|o| match o {
            Object::Dictionary(p) => Some(p.clone()),
            Object::Array(a) => a.last().and_then(|x| deref(doc, x).as_dict().ok().cloned()),
            _ => None,
        });
    let raw = if filters.is_empty() {
        stream.content.clone()
    } else if is_ccitt {
        if bpc != 1 || comps != 1 {
            return Err(format!("a CCITT image with {comps} components of {bpc} bits (it has one of 1 bit)"));
        }
        ccitt_rows(&stream.content, params.as_ref(), w, h)?
    } else {
        let mut dict = d.clone();
        dict.remove(b"DecodeParms");
        let s = Stream::new(dict, stream.content.clone()).with_compression(false);
        s.decompressed_content().map_err(|e| format!("cannot decompress image: {e}"))?
    };
    let predictor = params.as_ref().and_then(|p| p.get(b"Predictor").and_then(Object::as_i64).ok()).unwrap_or(1);
    let data = match predictor {
        1 => raw,
        2 => tiff_predictor(raw, row_bytes, comps, bpc)?,
        10..=15 => png_unfilter(&raw, row_bytes, ((comps * bpc).div_ceil(8)).max(1), h as usize)?,
        p => return Err(format!("unsupported predictor {p}")),
    };
    if data.len() < expected {
        return Err(format!("image data truncated: {} of {expected} bytes", data.len()));
    }
    let invert = d
        .get(b"Decode")
        .and_then(Object::as_array)
        .ok()
        .and_then(|a| {
            let a0 = a.first().and_then(|o| o.as_float().ok())?;
            let a1 = a.get(1).and_then(|o| o.as_float().ok())?;
            Some(a0 > a1)
        })
        .unwrap_or(false);
    to_image(&data[..expected], w, h, bpc, &color, row_bytes, invert)
}

/// Reads sample `i` (0-based within the row) of `bpc` bits, scaled to 0..=255.
fn sample(row: &[u8], i: usize, bpc: usize) -> u8 {
    match bpc {
        8 => row[i],
        16 => row[2 * i],
        _ => {
            let bit = i * bpc;
            let byte = row[bit / 8];
            let shift = 8 - bpc - (bit % 8);
            let v = (byte >> shift) & ((1u8 << bpc) - 1);
            ((v as u32 * 255) / ((1u32 << bpc) - 1)) as u8
        }
    }
}

/// Raw index (not scaled) for Indexed images.
fn index_sample(row: &[u8], i: usize, bpc: usize) -> usize {
    match bpc {
        8 => row[i] as usize,
        16 => row[2 * i] as usize,
        _ => {
            let bit = i * bpc;
            ((row[bit / 8] >> (8 - bpc - (bit % 8))) & ((1u8 << bpc) - 1)) as usize
        }
    }
}

fn to_image(
    data: &[u8],
    w: u32,
    h: u32,
    bpc: usize,
    color: &Color,
    row_bytes: usize,
    invert: bool,
) -> Result<DynamicImage, String> {
    let (wu, hu) = (w as usize, h as usize);
    match color {
        Color::Gray => {
            let mut buf = Vec::with_capacity(wu * hu);
            for row in data.chunks_exact(row_bytes).take(hu) {
                for x in 0..wu {
                    let v = sample(row, x, bpc);
                    buf.push(if invert { 255 - v } else { v });
                }
            }
            GrayImage::from_raw(w, h, buf).map(DynamicImage::ImageLuma8).ok_or("bad gray image".into())
        }
        Color::Rgb | Color::Cmyk => {
            let c = color.comps();
            let mut buf = Vec::with_capacity(wu * hu * 3);
            let mut px = [0u8; 4];
            for row in data.chunks_exact(row_bytes).take(hu) {
                for x in 0..wu {
                    for (k, p) in px.iter_mut().enumerate().take(c) {
                        *p = sample(row, x * c + k, bpc);
                    }
                    if c == 3 {
                        buf.extend_from_slice(&px[..3]);
                    } else {
                        let k = 255 - px[3] as u32;
                        for p in &px[..3] {
                            buf.push(((255 - *p as u32) * k / 255) as u8);
                        }
                    }
                }
            }
            RgbImage::from_raw(w, h, buf).map(DynamicImage::ImageRgb8).ok_or("bad colour image".into())
        }
        Color::Indexed(bc, pal) => {
            let n = pal.len() / bc;
            let mut buf = Vec::with_capacity(wu * hu * 3);
            for row in data.chunks_exact(row_bytes).take(hu) {
                for x in 0..wu {
                    let i = index_sample(row, x, bpc).min(n.saturating_sub(1));
                    if *bc == 3 {
                        buf.extend_from_slice(&pal[i * 3..i * 3 + 3]);
                    } else {
                        let g = pal[i];
                        buf.extend_from_slice(&[g, g, g]);
                    }
                }
            }
            RgbImage::from_raw(w, h, buf).map(DynamicImage::ImageRgb8).ok_or("bad indexed image".into())
        }
    }
}

/// Undoes PNG row filters (each row prefixed by a filter-type byte).
fn png_unfilter(data: &[u8], row_bytes: usize, bpp: usize, rows: usize) -> Result<Vec<u8>, String> {
    let stride = row_bytes + 1;
    let n = (data.len() / stride).min(rows);
    let mut out = vec![0u8; n * row_bytes];
    let mut prev = vec![0u8; row_bytes];
    for r in 0..n {
        let src = &data[r * stride..(r + 1) * stride];
        let (ft, line) = (src[0], &src[1..]);
        let cur = &mut out[r * row_bytes..(r + 1) * row_bytes];
        for i in 0..row_bytes {
            let a = if i >= bpp { cur[i - bpp] } else { 0 };
            let b = prev[i];
            let c = if i >= bpp { prev[i - bpp] } else { 0 };
            let x = line[i];
            cur[i] = match ft {
                0 => x,
                1 => x.wrapping_add(a),
                2 => x.wrapping_add(b),
                3 => x.wrapping_add(((a as u16 + b as u16) / 2) as u8),
                4 => {
                    let p = a as i16 + b as i16 - c as i16;
                    let (pa, pb, pc) = ((p - a as i16).abs(), (p - b as i16).abs(), (p - c as i16).abs());
                    let pred = if pa <= pb && pa <= pc { a } else if pb <= pc { b } else { c };
                    x.wrapping_add(pred)
                }
                t => return Err(format!("bad PNG filter type {t}")),
            };
        }
        prev.copy_from_slice(cur);
    }
    Ok(out)
}

/// TIFF predictor 2 (horizontal differencing), 8-bit components only.
fn tiff_predictor(mut data: Vec<u8>, row_bytes: usize, comps: usize, bpc: usize) -> Result<Vec<u8>, String> {
    if bpc != 8 {
        return Err("unsupported TIFF predictor depth".into());
    }
    for row in data.chunks_exact_mut(row_bytes) {
        for i in comps..row.len() {
            row[i] = row[i].wrapping_add(row[i - comps]);
        }
    }
    Ok(data)
}

#[cfg(test)]
mod tests {
    use super::*;
    use lopdf::dictionary;

    /// Builds a one-page PDF holding `img` as its only XObject.
    fn pdf_with_image(img: Stream) -> Vec<u8> {
        let mut doc = Document::with_version("1.5");
        let pages_id = doc.new_object_id();
        let img_id = doc.add_object(img);
        let content = Stream::new(dictionary! {}, b"q 100 0 0 100 0 0 cm /Im0 Do Q".to_vec());
        let content_id = doc.add_object(content);
        let page_id = doc.add_object(dictionary! {
            "Type" => "Page",
            "Parent" => pages_id,
            "MediaBox" => vec![0.into(), 0.into(), 100.into(), 100.into()],
            "Contents" => content_id,
            "Resources" => dictionary! { "XObject" => dictionary! { "Im0" => img_id } },
        });
        doc.objects.insert(
            pages_id,
            Object::Dictionary(dictionary! { "Type" => "Pages", "Kids" => vec![page_id.into()], "Count" => 1 }),
        );
        let catalog_id = doc.add_object(dictionary! { "Type" => "Catalog", "Pages" => pages_id });
        doc.trailer.set("Root", catalog_id);
        let mut out = Vec::new();
        doc.save_to(&mut out).unwrap();
        out
    }

    #[test]
    fn gray_uncompressed_and_flate() {
        let data: Vec<u8> = (0..12u8).map(|v| v * 20).collect();
        let dict = dictionary! {"Type" => "XObject", "Subtype" => "Image", "Width" => 4, "Height" => 3,
            "ColorSpace" => "DeviceGray", "BitsPerComponent" => 8};
        let pdf = pdf_with_image(Stream::new(dict.clone(), data.clone()));
        let imgs = page_images(&pdf, 1000).unwrap();
        assert_eq!(imgs.len(), 1);
        assert_eq!(imgs[0].0, 1);
        assert_eq!(imgs[0].1.to_luma8().into_raw(), data);
        let mut s = Stream::new(dict, data.clone());
        s.compress().unwrap();
        let imgs = page_images(&pdf_with_image(s), 1000).unwrap();
        assert_eq!(imgs[0].1.to_luma8().into_raw(), data);
        // too large
        let r = page_image_results(&pdf, 5).unwrap();
        assert!(r[0].1.as_ref().unwrap_err().contains("too large"));
    }

    #[test]
    fn one_bit_and_png_predictor() {
        // 10x2 1-bit: row bytes = 2. Row 0: 1010101010, row 1: all zero.
        let raw = [0b1010_1010u8, 0b1000_0000, 0, 0];
        let dict = dictionary! {"Subtype" => "Image", "Width" => 10, "Height" => 2,
            "ColorSpace" => "DeviceGray", "BitsPerComponent" => 1};
        let pdf = pdf_with_image(Stream::new(dict, raw.to_vec()));
        let img = page_images(&pdf, 1000).unwrap().remove(0).1.to_luma8();
        assert_eq!(img.get_pixel(0, 0).0[0], 255);
        assert_eq!(img.get_pixel(1, 0).0[0], 0);
        assert_eq!(img.get_pixel(8, 0).0[0], 255);
        assert_eq!(img.get_pixel(5, 1).0[0], 0);
        // PNG Up predictor on RGB 2x2
        let filtered = vec![0u8, 10, 20, 30, 40, 50, 60, 2, 1, 1, 1, 1, 1, 1];
        let dict = dictionary! {"Subtype" => "Image", "Width" => 2, "Height" => 2,
            "ColorSpace" => "DeviceRGB", "BitsPerComponent" => 8,
            "DecodeParms" => dictionary!{"Predictor" => 12, "Colors" => 3, "Columns" => 2}};
        let mut s = Stream::new(dict, filtered);
        s.compress().unwrap();
        let img = page_images(&pdf_with_image(s), 1000).unwrap().remove(0).1.to_rgb8();
        assert_eq!(img.into_raw(), vec![10, 20, 30, 40, 50, 60, 11, 21, 31, 41, 51, 61]);
    }

    #[test]
    fn ccitt_group_4_pages_are_the_pixels_of_the_tiff_they_were_made_from() {
        // tiff2pdf copies the TIFF's Group 4 data into the PDF unchanged (/BlackIs1 true, as the
        // TIFF is min-is-black), so image's TIFF reader and the CCITT path here must agree.
        let pdf = crate::source::testutil::fixture("scanned/business-continuity-plan-pages-1-2-g4.pdf");
        let tif = crate::source::testutil::fixture("scanned/business-continuity-plan-pages-1-2.tif");
        let from_pdf = page_images(&pdf, 50_000_000).unwrap();
        let mut tiff_pages = crate::source::image::Pages::of(&tif).unwrap();
        let from_tiff: Vec<_> = std::iter::from_fn(|| tiff_pages.next_page(50_000_000)).map(Result::unwrap).collect();
        assert_eq!(from_pdf.len(), 2);
        for ((n, page), tiff_page) in from_pdf.iter().zip(&from_tiff) {
            let (a, b) = (page.to_luma8(), tiff_page.to_luma8());
            assert_eq!(a.dimensions(), (1654, 2339), "page {n}");
            let differ = a.pixels().zip(b.pixels()).filter(|(x, y)| x != y).count();
            assert_eq!(differ, 0, "page {n}: {differ} pixels differ");
            let dark = a.pixels().filter(|p| p.0[0] < 128).count();
            assert!(dark > 1000 && dark * 10 < a.len(), "page {n}: black ink on white paper ({dark} dark)");
        }
    }

    #[test]
    fn mutated_group_4_data_gives_an_image_or_a_reason() {
        // The first page's Group 4 stream, mutated, in a PDF of its own; the decoder is bounded
        // by the image's height, so every case ends.
        let pdf = crate::source::testutil::fixture("scanned/business-continuity-plan-pages-1-2-g4.pdf");
        let doc = Document::load_mem(&pdf).unwrap();
        let (_, page) = doc.get_pages().into_iter().next().unwrap();
        let (own, _) = doc.get_page_resources(page).unwrap();
        let xobjects = own.unwrap().get(b"XObject").and_then(Object::as_dict).unwrap();
        let id = xobjects.iter().next().unwrap().1.as_reference().unwrap();
        let stream = doc.get_object(id).and_then(Object::as_stream).unwrap().clone();
        let mut rng = fastrand::Rng::with_seed(0x2545_f491_4f6c_dd1d);
        for case in 0..60 {
            let mut data = stream.content.clone();
            for _ in 0..1 + rng.usize(..16) {
                let at = rng.usize(..data.len());
                data[at] = rng.u8(..);
            }
            if case % 6 == 0 {
                data.truncate(rng.usize(..data.len()));
            }
            let mut dict = stream.dict.clone();
            dict.remove(b"Length");
            let r = page_image_results(&pdf_with_image(Stream::new(dict, data)), 50_000_000).unwrap();
            if let Ok(image) = &r[0].1 {
                assert_eq!((image.width(), image.height()), (1654, 2339), "case {case}");
            }
        }
    }

    #[test]
    fn ccitt_other_than_group_4_or_broken_is_a_reason() {
        let g4 = |params: Dictionary, data: Vec<u8>| {
            let dict = dictionary! {"Subtype" => "Image", "Width" => 16, "Height" => 4,
                "ColorSpace" => "DeviceGray", "BitsPerComponent" => 1, "Filter" => "CCITTFaxDecode",
                "DecodeParms" => params};
            page_image_results(&pdf_with_image(Stream::new(dict, data)), 100_000).unwrap().remove(0).1
        };
        let group_3 = g4(dictionary! {"K" => 0, "Columns" => 16}, vec![0; 8]).unwrap_err();
        assert!(group_3.contains("unsupported image encoding CCITTFaxDecode (Group 3)"), "{group_3}");
        let columns = g4(dictionary! {"K" => -1, "Columns" => 8}, vec![0; 8]).unwrap_err();
        assert!(columns.contains("/Columns 8"), "{columns}");
        assert!(g4(dictionary! {"K" => -1, "Columns" => 16}, Vec::new()).is_err());
    }

    #[test]
    fn unsupported_and_corrupt() {
        let dict = dictionary! {"Subtype" => "Image", "Width" => 10, "Height" => 10,
            "ColorSpace" => "DeviceGray", "BitsPerComponent" => 8, "Filter" => "JPXDecode"};
        let pdf = pdf_with_image(Stream::new(dict, vec![1, 2, 3]));
        let r = page_image_results(&pdf, 1000).unwrap();
        assert!(r[0].1.as_ref().unwrap_err().contains("unsupported image encoding"));
        assert!(page_images(&pdf, 1000).unwrap().is_empty());
        // truncated data
        let dict = dictionary! {"Subtype" => "Image", "Width" => 100, "Height" => 100,
            "ColorSpace" => "DeviceGray", "BitsPerComponent" => 8};
        let pdf = pdf_with_image(Stream::new(dict, vec![1, 2, 3]));
        assert!(page_image_results(&pdf, 100_000).unwrap()[0].1.is_err());
        // bad JPEG
        let dict = dictionary! {"Subtype" => "Image", "Width" => 10, "Height" => 10,
            "ColorSpace" => "DeviceRGB", "BitsPerComponent" => 8, "Filter" => "DCTDecode"};
        let pdf = pdf_with_image(Stream::new(dict, vec![0xFF, 0xD8, 0xFF, 0, 1, 2]));
        assert!(page_image_results(&pdf, 100_000).unwrap()[0].1.is_err());
        // not a PDF / truncated PDF
        assert!(page_images(b"hello", 100).is_err());
        let half = &pdf[..pdf.len() / 2];
        let _ = page_images(half, 100);
        for cut in (0..pdf.len()).step_by(37) {
            let mut b = pdf.clone();
            b[cut] ^= 0x5a;
            let _ = page_images(&b, 100_000);
        }
    }

    #[test]
    fn cmyk_and_indexed() {
        let dict = dictionary! {"Subtype" => "Image", "Width" => 1, "Height" => 1,
            "ColorSpace" => "DeviceCMYK", "BitsPerComponent" => 8};
        let pdf = pdf_with_image(Stream::new(dict, vec![0, 255, 255, 0]));
        let img = page_images(&pdf, 10).unwrap().remove(0).1.to_rgb8();
        assert_eq!(img.get_pixel(0, 0).0, [255, 0, 0]);
        let dict = dictionary! {"Subtype" => "Image", "Width" => 2, "Height" => 1, "BitsPerComponent" => 8,
            "ColorSpace" => vec![Object::Name(b"Indexed".to_vec()), Object::Name(b"DeviceRGB".to_vec()), 1.into(),
                Object::String(vec![1, 2, 3, 4, 5, 6], lopdf::StringFormat::Hexadecimal)]};
        let pdf = pdf_with_image(Stream::new(dict, vec![1, 0]));
        let img = page_images(&pdf, 10).unwrap().remove(0).1.to_rgb8();
        assert_eq!(img.into_raw(), vec![4, 5, 6, 1, 2, 3]);
    }
}
