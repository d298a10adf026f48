//! Offline OCR engine for scanned pages: PP-OCR (DB text detector + CTC line
//! recognizer) models in rten format.
//!
//! Pipeline (after PaddleOCR / RapidOCR):
//! 1. detection: page resized so the longer side is <= `det_max_side` and each
//!    side is a multiple of 32, normalised with ImageNet mean/std, run through
//!    the DB detector -> probability map;
//! 2. probability map thresholded, 8-connected components -> axis-aligned
//!    boxes, box score (mean probability inside the box) filter, "unclip"
//!    (expand by area * ratio / perimeter), scaled back to page pixels;
//! 3. recognition: each box cropped from the page, resized to height 48,
//!    normalised to [-1, 1], batched by width, CTC greedy decode;
//! 4. reading order (recursive XY-cut with column detection) and paragraph
//!    joining.
//!
//! May import `types` and `error` only (through `source`); the models' files are found and
//! verified by the caller (`App::ocr`, from the manifest's `ocr` model). Settings were chosen on
//! 49 real PDF pages rendered at 200 dpi and reported on 20 others (docs/EVAL.md, docs/BENCHMARKS.md).

use std::fmt;
use std::path::Path;
use std::sync::Arc;

use image::imageops::FilterType;
use image::DynamicImage;
use rten::{Model, RunOptions, ThreadPool};
use rten_tensor::prelude::*;
use rten_tensor::NdTensor;

/// Recognizer input height (fixed by the model).
const REC_HEIGHT: u32 = 48;

/// Errors from [`OcrEngine`].
#[derive(Debug)]
pub enum OcrError {
    /// A model file could not be read or parsed.
    ModelLoad {
        /// The model file.
        path: String,
        /// What went wrong.
        message: String,
    },
    /// The dictionary could not be read or does not match the recognizer.
    Dictionary {
        /// The dictionary file.
        path: String,
        /// What went wrong.
        message: String,
    },
    /// The image has more pixels than allowed.
    ImageTooLarge {
        /// Image width.
        width: u32,
        /// Image height.
        height: u32,
        /// The limit ([`OcrOptions::max_pixels`]).
        max_pixels: u64,
    },
    /// Model inference failed.
    Inference(String),
    /// A model produced output of an unexpected shape or type.
    UnexpectedOutput(String),
}

impl fmt::Display for OcrError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OcrError::ModelLoad { path, message } => {
                write!(f, "failed to load OCR model {path}: {message}")
            }
            OcrError::Dictionary { path, message } => {
                write!(f, "bad OCR dictionary {path}: {message}")
            }
            OcrError::ImageTooLarge { width, height, max_pixels } => write!(
                f,
                "image too large for OCR: {width}x{height} pixels exceeds the limit of {max_pixels}"
            ),
            OcrError::Inference(m) => write!(f, "OCR inference failed: {m}"),
            OcrError::UnexpectedOutput(m) => write!(f, "unexpected OCR model output: {m}"),
        }
    }
}

impl std::error::Error for OcrError {}

/// Tunable parameters. `Default` holds the values chosen on the tuning pages.
#[derive(Clone, Debug)]
pub struct OcrOptions {
    /// Longer side of the detector input (rounded to a multiple of 32).
    /// Pages are downscaled to it, never upscaled beyond the original size.
    pub det_max_side: u32,
    /// Probability threshold for the binary text map.
    pub det_thresh: f32,
    /// Minimum mean probability of a box.
    pub box_thresh: f32,
    /// Unclip (box expansion) ratio.
    pub unclip_ratio: f32,
    /// Upper bound on detected boxes per page (largest kept).
    pub max_boxes: usize,
    /// Recognizer input width cap (long lines are squeezed beyond it).
    pub rec_max_width: u32,
    /// Minimum padded recognizer width (PaddleOCR pads to 320).
    pub rec_min_width: u32,
    /// Horizontal squeeze of line crops before recognition (1.0 = keep the
    /// aspect ratio). Recognition time is linear in the resulting width.
    pub rec_x_scale: f32,
    /// Lines per recognizer batch.
    pub rec_batch: usize,
    /// Lines with a lower confidence are dropped.
    pub min_line_confidence: f32,
    /// Images with more pixels are refused with [`OcrError::ImageTooLarge`].
    pub max_pixels: u64,
    /// Threads for inference (0 = rten's global pool).
    pub threads: usize,
}

impl Default for OcrOptions {
    fn default() -> Self {
        OcrOptions {
            det_max_side: 1280,
            // Line crops squeezed to 0.8 of their width: 0.8x the recognizer's work (most of a
            // page's time). Chosen on 49 pages as the fastest setting whose character error rate
            // rises by at most 0.5 points on every document (detector side 960-1280, squeeze
            // 0.7-1.0; docs/BENCHMARKS.md has the sweep); 0.7 breaks tables (5.9%).
            rec_x_scale: 0.8,
            det_thresh: 0.3,
            box_thresh: 0.5,
            unclip_ratio: 2.0,
            max_boxes: 2000,
            rec_max_width: 2400,
            rec_min_width: 0,
            rec_batch: 8,
            min_line_confidence: 0.5,
            max_pixels: 50_000_000,
            threads: 0,
        }
    }
}

/// One recognised text line.
#[derive(Clone, Debug, PartialEq)]
pub struct OcrLine {
    /// The line's text.
    pub text: String,
    /// Mean of the recognizer's best-class probabilities over its characters.
    pub confidence: f32,
    /// x0, y0, x1, y1 in image pixels (x1/y1 exclusive).
    pub bbox: [u32; 4],
}

/// The text of one page.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct OcrPage {
    /// Lines in reading order.
    pub lines: Vec<OcrLine>,
    /// Lines joined: " " between boxes of one row, "\n" between lines of a
    /// paragraph, "\n\n" between paragraphs / columns.
    pub text: String,
    /// Mean line confidence weighted by characters (0 for an empty page).
    pub confidence: f32,
}

/// Detector + recognizer + dictionary.
pub struct OcrEngine {
    detector: Model,
    recognizer: Model,
    /// CTC classes: index 0 = blank, 1..=dict.len() = dictionary, then " ".
    classes: Vec<String>,
    opts: OcrOptions,
    pool: Option<Arc<ThreadPool>>,
}

impl OcrEngine {
    /// Loads the models and dictionary with default options.
    pub fn load(detector: &Path, recognizer: &Path, dictionary: &Path) -> Result<OcrEngine, OcrError> {
        Self::load_with_options(detector, recognizer, dictionary, OcrOptions::default())
    }

    /// Loads the models and dictionary with explicit options.
    pub fn load_with_options(
        detector: &Path,
        recognizer: &Path,
        dictionary: &Path,
        opts: OcrOptions,
    ) -> Result<OcrEngine, OcrError> {
        let load = |p: &Path| {
            Model::load_file(p).map_err(|e| OcrError::ModelLoad {
                path: p.display().to_string(),
                message: e.to_string(),
            })
        };
        let detector_model = load(detector)?;
        let recognizer_model = load(recognizer)?;
        let dict_err = |m: String| OcrError::Dictionary { path: dictionary.display().to_string(), message: m };
        let text = std::fs::read_to_string(dictionary).map_err(|e| dict_err(e.to_string()))?;
        let mut classes = Vec::with_capacity(20_000);
        classes.push(String::new()); // CTC blank
        for line in text.lines() {
            classes.push(line.trim_end_matches('\r').to_string());
        }
        classes.push(" ".to_string());
        if classes.len() < 3 {
            return Err(dict_err("dictionary is empty".into()));
        }
        // Check against the recognizer's declared class count when known.
        if let Some(&out) = recognizer_model.output_ids().first() {
            if let Some(shape) = recognizer_model.node_info(out).and_then(|i| i.shape()) {
                if let Some(rten::Dimension::Fixed(n)) = shape.last() {
                    if *n != classes.len() {
                        return Err(dict_err(format!(
                            "recognizer has {n} classes but dictionary gives {} (blank + {} + space)",
                            classes.len(),
                            classes.len() - 2
                        )));
                    }
                }
            }
        }
        let pool = if opts.threads > 0 { Some(Arc::new(ThreadPool::with_num_threads(opts.threads))) } else { None };
        Ok(OcrEngine { detector: detector_model, recognizer: recognizer_model, classes, opts, pool })
    }

    /// The settings it runs with.
    pub fn options(&self) -> &OcrOptions {
        &self.opts
    }

    fn run_opts(&self) -> Option<RunOptions> {
        self.pool.as_ref().map(|p| RunOptions::default().with_thread_pool(Some(p.clone())))
    }

    /// Reads one page image.
    pub fn read(&self, image: &DynamicImage) -> Result<OcrPage, OcrError> {
        let (w, h) = (image.width(), image.height());
        if (w as u64) * (h as u64) > self.opts.max_pixels {
            return Err(OcrError::ImageTooLarge { width: w, height: h, max_pixels: self.opts.max_pixels });
        }
        if w < 8 || h < 8 {
            return Ok(OcrPage::default());
        }
        let t0 = std::time::Instant::now();
        // Grey pages (most scans) stay grey: resizing one channel gives what resizing three
        // equal ones would, at a third of the work; anything else is read as RGB.
        let converted;
        let page: &DynamicImage = match image {
            DynamicImage::ImageLuma8(_) | DynamicImage::ImageRgb8(_) => image,
            _ => {
                converted = DynamicImage::ImageRgb8(image.to_rgb8());
                &converted
            }
        };
        let boxes = self.detect(page)?;
        let t1 = t0.elapsed();
        if boxes.is_empty() {
            return Ok(OcrPage::default());
        }
        let recognised = self.recognize(page, &boxes)?;
        tracing::debug!(
            "ocr: detect {:.2}s ({} boxes), recognize {:.2}s",
            t1.as_secs_f64(),
            boxes.len(),
            (t0.elapsed() - t1).as_secs_f64()
        );
        let mut lines: Vec<OcrLine> = boxes
            .iter()
            .zip(recognised)
            .filter_map(|(b, (text, conf))| {
                let text = text.trim().to_string();
                if text.is_empty() || conf < self.opts.min_line_confidence {
                    None
                } else {
                    Some(OcrLine { text, confidence: conf, bbox: *b })
                }
            })
            .collect();
        let fboxes: Vec<[f32; 4]> = lines.iter().map(|l| l.bbox.map(|v| v as f32)).collect();
        let order = reading_order(&fboxes);
        let mut ordered = Vec::with_capacity(lines.len());
        let mut slots: Vec<Option<OcrLine>> = lines.drain(..).map(Some).collect();
        for i in order {
            if let Some(l) = slots.get_mut(i).and_then(Option::take) {
                ordered.push(l);
            }
        }
        let obox: Vec<[f32; 4]> = ordered.iter().map(|l| l.bbox.map(|v| v as f32)).collect();
        let texts: Vec<&str> = ordered.iter().map(|l| l.text.as_str()).collect();
        let text = join_lines(&texts, &obox);
        let (mut num, mut den) = (0f64, 0f64);
        for l in &ordered {
            let n = l.text.chars().count() as f64;
            num += l.confidence as f64 * n;
            den += n;
        }
        let confidence = if den > 0.0 { (num / den) as f32 } else { 0.0 };
        Ok(OcrPage { lines: ordered, text, confidence })
    }

    /// Runs the detector on a grey or RGB page; returns boxes in page pixel coordinates.
    fn detect(&self, page: &DynamicImage) -> Result<Vec<[u32; 4]>, OcrError> {
        let (w, h) = (page.width(), page.height());
        let (dw, dh) = det_input_size(w, h, self.opts.det_max_side);
        // DynamicImage's own methods, not imageops' generic functions: those would be compiled
        // into ragbox, unoptimised in dev builds (5-10x slower), these come built with `image`.
        let resized;
        let src: &DynamicImage = if (dw, dh) == (w, h) {
            page
        } else if dw <= w && dh <= h {
            resized = page.thumbnail_exact(dw, dh);
            &resized
        } else {
            resized = page.resize_exact(dw, dh, FilterType::Triangle);
            &resized
        };
        let mean = [0.485f32, 0.456, 0.406];
        let std = [0.229f32, 0.224, 0.225];
        let (dwu, dhu) = (dw as usize, dh as usize);
        let data = planes(src, |c, v| (v as f32 / 255.0 - mean[c]) / std[c]);
        let input = NdTensor::from_data([1, 3, dhu, dwu], data);
        let out = self
            .detector
            .run_one(input.into(), self.run_opts())
            .map_err(|e| OcrError::Inference(e.to_string()))?;
        let prob: NdTensor<f32, 4> =
            out.try_into().map_err(|e: rten::TryFromValueError| OcrError::UnexpectedOutput(e.to_string()))?;
        let [_, _, ph, pw] = prob.shape();
        if ph != dhu || pw != dwu {
            return Err(OcrError::UnexpectedOutput(format!("detector map {pw}x{ph}, expected {dwu}x{dhu}")));
        }
        let prob = prob.to_vec();
        let cands = db_boxes(&prob[..pw * ph], pw, ph, &self.opts);
        let sx = w as f32 / pw as f32;
        let sy = h as f32 / ph as f32;
        let boxes = cands
            .into_iter()
            .filter_map(|b| {
                let x0 = (b[0] * sx).floor().clamp(0.0, w as f32) as u32;
                let y0 = (b[1] * sy).floor().clamp(0.0, h as f32) as u32;
                let x1 = (b[2] * sx).ceil().clamp(0.0, w as f32) as u32;
                let y1 = (b[3] * sy).ceil().clamp(0.0, h as f32) as u32;
                (x1 > x0 + 1 && y1 > y0 + 1).then_some([x0, y0, x1, y1])
            })
            .collect();
        Ok(boxes)
    }

    /// Recognises the text in each box; returns (text, confidence) per box.
    fn recognize(&self, page: &DynamicImage, boxes: &[[u32; 4]]) -> Result<Vec<(String, f32)>, OcrError> {
        // Crops resized to height 48, in the page's own format (grey or RGB); the model takes
        // three channels, filled from one when the page is grey.
        struct Crop {
            idx: usize,
            img: DynamicImage,
        }
        let mut crops: Vec<Crop> = Vec::with_capacity(boxes.len());
        let med_h = median(boxes.iter().map(|b| (b[3] - b[1]) as f32).collect());
        for (idx, b) in boxes.iter().enumerate() {
            let (cw, ch) = (b[2] - b[0], b[3] - b[1]);
            if cw == 0 || ch == 0 {
                continue;
            }
            let mut crop = page.crop_imm(b[0], b[1], cw, ch);
            if ch as f32 >= 1.5 * cw as f32 && ch as f32 > 2.0 * med_h {
                // Vertical text (much taller than the page's typical line):
                // rotate so it reads left to right. Short tall boxes are
                // single glyphs ("1", "i") and stay upright.
                crop = crop.rotate270();
            }
            let (cw, ch) = (crop.width(), crop.height());
            let xs = if self.opts.rec_x_scale.is_finite() { self.opts.rec_x_scale.clamp(0.25, 4.0) } else { 1.0 };
            let tw = ((REC_HEIGHT as f32 * xs * cw as f32 / ch as f32).round() as u32).clamp(8, self.opts.rec_max_width.max(8));
            let img = crop.resize_exact(tw, REC_HEIGHT, FilterType::Triangle);
            crops.push(Crop { idx, img });
        }
        crops.sort_by_key(|c| c.img.width());
        let mut results = vec![(String::new(), 0f32); boxes.len()];
        let batch = self.opts.rec_batch.max(1);
        for chunk in crops.chunks(batch) {
            let maxw = chunk.iter().map(|c| c.img.width()).max().unwrap_or(8);
            let bw = maxw.max(self.opts.rec_min_width.min(self.opts.rec_max_width)) as usize;
            let hh = REC_HEIGHT as usize;
            let n = chunk.len();
            let mut data = vec![0f32; n * 3 * hh * bw];
            for (bi, c) in chunk.iter().enumerate() {
                let line = planes(&c.img, |_, v| v as f32 / 127.5 - 1.0);
                let cw = c.img.width() as usize;
                for (plane, out) in line.chunks_exact(hh * cw).zip(data[bi * 3 * hh * bw..].chunks_exact_mut(hh * bw)) {
                    for (row, out_row) in plane.chunks_exact(cw).zip(out.chunks_exact_mut(bw)) {
                        out_row[..cw].copy_from_slice(row);
                    }
                }
            }
            let input = NdTensor::from_data([n, 3, hh, bw], data);
            let out = self
                .recognizer
                .run_one(input.into(), self.run_opts())
                .map_err(|e| OcrError::Inference(e.to_string()))?;
            let probs: NdTensor<f32, 3> =
                out.try_into().map_err(|e: rten::TryFromValueError| OcrError::UnexpectedOutput(e.to_string()))?;
            let [pn, t, k] = probs.shape();
            if pn != n || k != self.classes.len() {
                return Err(OcrError::UnexpectedOutput(format!(
                    "recognizer output [{pn}, {t}, {k}], expected [{n}, T, {}]",
                    self.classes.len()
                )));
            }
            let flat = probs.to_vec();
            for (bi, c) in chunk.iter().enumerate() {
                let steps = &flat[bi * t * k..(bi + 1) * t * k];
                let (ids, confs) = ragbox_kernels::best_per_row(steps, k);
                results[c.idx] = ctc_greedy_decode(&ids, &confs, &self.classes);
            }
        }
        Ok(results)
    }
}

/// Detector input size: longer side <= `max_side` (no upscaling beyond the
/// image), each side rounded to a multiple of 32 (at least 32).
pub fn det_input_size(w: u32, h: u32, max_side: u32) -> (u32, u32) {
    let longer = w.max(h).max(1) as f32;
    let scale = (max_side.max(32) as f32 / longer).min(1.0);
    let r = |v: u32| (((v as f32 * scale) / 32.0).round() as u32).max(1) * 32;
    (r(w), r(h))
}

/// An 8-bit grey or RGB image as three planes of `f(channel, value)`, channel-major (the
/// models' NCHW input); a grey image fills all three from its one channel. Each channel's 256
/// values are computed once: the loop is a table lookup, cheap even unoptimised.
fn planes(img: &DynamicImage, f: impl Fn(usize, u8) -> f32) -> Vec<f32> {
    let table: [[f32; 256]; 3] = std::array::from_fn(|c| std::array::from_fn(|v| f(c, v as u8)));
    let owned;
    let (raw, step): (&[u8], usize) = match img {
        DynamicImage::ImageLuma8(g) => (g.as_raw(), 1),
        DynamicImage::ImageRgb8(rgb) => (rgb.as_raw(), 3),
        other => {
            owned = other.to_rgb8();
            (owned.as_raw(), 3)
        }
    };
    let plane = raw.len() / step;
    let mut out = vec![0f32; 3 * plane];
    let dst: &mut [f32] = &mut out;
    // Plain index loops on slices: no iterator calls left behind in an unoptimised build.
    for c in 0..3 {
        let (table, offset) = (&table[c], if step == 1 { 0 } else { c });
        let mut i = 0;
        while i < plane {
            dst[c * plane + i] = table[raw[i * step + offset] as usize];
            i += 1;
        }
    }
    out
}

/// CTC greedy decoding: merge repeated classes, drop blanks (class 0).
/// Confidence = mean probability of the emitted characters (0 if none).
pub fn ctc_greedy_decode(ids: &[usize], probs: &[f32], classes: &[String]) -> (String, f32) {
    let mut text = String::new();
    let (mut sum, mut n) = (0f32, 0usize);
    let mut prev = usize::MAX;
    for (i, &id) in ids.iter().enumerate() {
        if id != 0 && id != prev {
            if let Some(s) = classes.get(id) {
                text.push_str(s);
                sum += probs.get(i).copied().unwrap_or(0.0);
                n += 1;
            }
        }
        prev = id;
    }
    let conf = if n > 0 { sum / n as f32 } else { 0.0 };
    (text, conf)
}

/// DB post-processing on a probability map (row-major `w` x `h`).
/// Returns expanded boxes [x0, y0, x1, y1] (x1/y1 exclusive) in map
/// coordinates, at most `opts.max_boxes` (largest kept).
pub fn db_boxes(prob: &[f32], w: usize, h: usize, opts: &OcrOptions) -> Vec<[f32; 4]> {
    if w == 0 || h == 0 || prob.len() < w * h {
        return Vec::new();
    }
    let mut labels = vec![0u32; w * h]; // 0 = unvisited/background
    let mut stack: Vec<usize> = Vec::new();
    struct Comp {
        x0: usize,
        y0: usize,
        x1: usize,
        y1: usize,
    }
    let mut comps: Vec<Comp> = Vec::new();
    let thresh = opts.det_thresh;
    for start in 0..w * h {
        if labels[start] != 0 || prob[start] <= thresh {
            continue;
        }
        let label = comps.len() as u32 + 1;
        let (sx, sy) = (start % w, start / w);
        let mut c = Comp { x0: sx, y0: sy, x1: sx, y1: sy };
        labels[start] = label;
        stack.push(start);
        while let Some(p) = stack.pop() {
            let (x, y) = (p % w, p / w);
            c.x0 = c.x0.min(x);
            c.x1 = c.x1.max(x);
            c.y0 = c.y0.min(y);
            c.y1 = c.y1.max(y);
            let ylo = y.saturating_sub(1);
            let yhi = (y + 1).min(h - 1);
            let xlo = x.saturating_sub(1);
            let xhi = (x + 1).min(w - 1);
            for ny in ylo..=yhi {
                for nx in xlo..=xhi {
                    let q = ny * w + nx;
                    if labels[q] == 0 && prob[q] > thresh {
                        labels[q] = label;
                        stack.push(q);
                    }
                }
            }
        }
        comps.push(c);
    }
    let mut out: Vec<([f32; 4], f32)> = Vec::new();
    for c in &comps {
        let bw = (c.x1 - c.x0 + 1) as f32;
        let bh = (c.y1 - c.y0 + 1) as f32;
        if bw.min(bh) < 3.0 {
            continue;
        }
        // Box score: mean probability over the box.
        let mut s = 0f64;
        for y in c.y0..=c.y1 {
            s += prob[y * w + c.x0..=y * w + c.x1].iter().map(|&v| v as f64).sum::<f64>();
        }
        let score = (s / (bw as f64 * bh as f64)) as f32;
        if score < opts.box_thresh {
            continue;
        }
        // Unclip: offset by area * ratio / perimeter.
        let d = bw * bh * opts.unclip_ratio / (2.0 * (bw + bh));
        let b = [
            (c.x0 as f32 - d).max(0.0),
            (c.y0 as f32 - d).max(0.0),
            (c.x1 as f32 + 1.0 + d).min(w as f32),
            (c.y1 as f32 + 1.0 + d).min(h as f32),
        ];
        if (b[2] - b[0]).min(b[3] - b[1]) < 5.0 {
            continue;
        }
        out.push((b, (b[2] - b[0]) * (b[3] - b[1])));
    }
    if out.len() > opts.max_boxes {
        out.sort_by(|a, b| b.1.total_cmp(&a.1));
        out.truncate(opts.max_boxes);
    }
    out.into_iter().map(|(b, _)| b).collect()
}

fn median(mut v: Vec<f32>) -> f32 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// Reading order of boxes [x0, y0, x1, y1]: returns indices. Regions are
/// split recursively: first at a clear vertical gutter (two columns, each
/// with several lines, read column by column), otherwise at clear
/// horizontal gaps (blocks); inside a block lines are grouped into rows
/// (top to bottom) and each row is read left to right.
pub fn reading_order(boxes: &[[f32; 4]]) -> Vec<usize> {
    let valid: Vec<usize> = (0..boxes.len())
        .filter(|&i| boxes[i].iter().all(|v| v.is_finite()) && boxes[i][2] > boxes[i][0] && boxes[i][3] > boxes[i][1])
        .collect();
    let med_h = median(valid.iter().map(|&i| boxes[i][3] - boxes[i][1]).collect()).max(1.0);
    let mut out = Vec::with_capacity(valid.len());
    order_region(boxes, valid, med_h, &mut out, 0);
    out
}

fn order_region(boxes: &[[f32; 4]], idx: Vec<usize>, med_h: f32, out: &mut Vec<usize>, depth: usize) {
    if idx.len() <= 1 || depth > 12 {
        out.extend(order_rows(boxes, idx));
        return;
    }
    if let Some((left, right)) = column_split(boxes, &idx, med_h) {
        order_region(boxes, left, med_h, out, depth + 1);
        order_region(boxes, right, med_h, out, depth + 1);
        return;
    }
    let bands = horizontal_bands(boxes, &idx, med_h);
    if bands.len() > 1 {
        for b in bands {
            order_region(boxes, b, med_h, out, depth + 1);
        }
    } else {
        out.extend(order_rows(boxes, idx));
    }
}

/// Finds a clear vertical gutter: no box crosses it, it is at least one line
/// height wide, each side holds >= 3 boxes and covers >= 15% of the region
/// width, and the two sides overlap vertically by >= 50% of the shorter one.
fn column_split(boxes: &[[f32; 4]], idx: &[usize], med_h: f32) -> Option<(Vec<usize>, Vec<usize>)> {
    let mut iv: Vec<(f32, f32)> = idx.iter().map(|&i| (boxes[i][0], boxes[i][2])).collect();
    iv.sort_by(|a, b| a.0.total_cmp(&b.0));
    let rx0 = iv.first()?.0;
    let rx1 = iv.iter().map(|v| v.1).fold(f32::MIN, f32::max);
    let width = rx1 - rx0;
    let mut best: Option<(f32, f32)> = None; // (gap start, gap end)
    let mut reach = iv[0].1;
    for &(a, b) in &iv[1..] {
        if a > reach {
            let gap = a - reach;
            if gap >= med_h.max(0.01 * width) && best.map_or(true, |(g0, g1)| gap > g1 - g0) {
                // Candidate; validated below.
                let (g0, g1) = (reach, a);
                let left: Vec<usize> = idx.iter().copied().filter(|&i| boxes[i][2] <= g0).collect();
                let right: Vec<usize> = idx.iter().copied().filter(|&i| boxes[i][0] >= g1).collect();
                if row_count(boxes, &left) >= 3
                    && row_count(boxes, &right) >= 3
                    && (g0 - rx0) >= 0.15 * width
                    && (rx1 - g1) >= 0.15 * width
                {
                    let ext = |v: &[usize]| {
                        let y0 = v.iter().map(|&i| boxes[i][1]).fold(f32::MAX, f32::min);
                        let y1 = v.iter().map(|&i| boxes[i][3]).fold(f32::MIN, f32::max);
                        (y0, y1)
                    };
                    let (l0, l1) = ext(&left);
                    let (r0, r1) = ext(&right);
                    let ov = l1.min(r1) - l0.max(r0);
                    if ov >= 0.5 * (l1 - l0).min(r1 - r0)
                        && y_coverage(boxes, &left) >= 0.5
                        && y_coverage(boxes, &right) >= 0.5
                    {
                        best = Some((g0, g1));
                    }
                }
            }
        }
        reach = reach.max(b);
    }
    let (g0, _) = best?;
    let (left, right): (Vec<usize>, Vec<usize>) = idx.iter().partition(|&&i| boxes[i][2] <= g0);
    Some((left, right))
}

/// Fraction of the vertical extent of `idx` covered by its boxes: text
/// columns are dense (> 0.6), sparse side notes / labels are not.
fn y_coverage(boxes: &[[f32; 4]], idx: &[usize]) -> f32 {
    let mut iv: Vec<(f32, f32)> = idx.iter().map(|&i| (boxes[i][1], boxes[i][3])).collect();
    iv.sort_by(|a, b| a.0.total_cmp(&b.0));
    let Some(&(y0, _)) = iv.first() else { return 0.0 };
    let (mut covered, mut cs, mut ce, mut y1) = (0f32, iv[0].0, iv[0].1, iv[0].1);
    for &(a, b) in &iv[1..] {
        if a > ce {
            covered += ce - cs;
            cs = a;
            ce = b;
        } else {
            ce = ce.max(b);
        }
        y1 = y1.max(b);
    }
    covered += ce - cs;
    if y1 > y0 { covered / (y1 - y0) } else { 0.0 }
}

/// Splits a region at horizontal gaps of at least half a line height.
fn horizontal_bands(boxes: &[[f32; 4]], idx: &[usize], med_h: f32) -> Vec<Vec<usize>> {
    let mut v: Vec<usize> = idx.to_vec();
    v.sort_by(|&a, &b| boxes[a][1].total_cmp(&boxes[b][1]));
    let mut bands: Vec<Vec<usize>> = Vec::new();
    let mut reach = f32::MIN;
    for i in v {
        let b = boxes[i];
        if bands.is_empty() || b[1] - reach >= 0.5 * med_h {
            bands.push(vec![i]);
            reach = b[3];
        } else {
            bands.last_mut().unwrap().push(i);
            reach = reach.max(b[3]);
        }
    }
    bands
}

/// Number of text rows among `idx`.
fn row_count(boxes: &[[f32; 4]], idx: &[usize]) -> usize {
    group_rows(boxes, idx.to_vec()).len()
}

/// Groups boxes into rows (vertical centres close) top to bottom, each row
/// left to right.
fn order_rows(boxes: &[[f32; 4]], idx: Vec<usize>) -> Vec<usize> {
    group_rows(boxes, idx).into_iter().flatten().collect()
}

fn group_rows(boxes: &[[f32; 4]], mut idx: Vec<usize>) -> Vec<Vec<usize>> {
    let yc = |i: usize| (boxes[i][1] + boxes[i][3]) * 0.5;
    let hgt = |i: usize| boxes[i][3] - boxes[i][1];
    idx.sort_by(|&a, &b| yc(a).total_cmp(&yc(b)));
    let mut rows: Vec<(f32, f32, Vec<usize>)> = Vec::new(); // (centre, height, members)
    for i in idx {
        if let Some(row) = rows.last_mut() {
            if (yc(i) - row.0).abs() <= 0.5 * row.1.min(hgt(i)) {
                let n = row.2.len() as f32;
                row.0 = (row.0 * n + yc(i)) / (n + 1.0);
                row.2.push(i);
                continue;
            }
        }
        rows.push((yc(i), hgt(i), vec![i]));
    }
    rows.into_iter()
        .map(|(_, _, mut members)| {
            members.sort_by(|&a, &b| boxes[a][0].total_cmp(&boxes[b][0]));
            members
        })
        .collect()
}

/// Joins lines (already in reading order): " " between boxes on the same
/// row, "\n\n" when the vertical gap exceeds ~0.7 line heights (line pitch
/// > ~1.7 heights) or the next line starts above (new column), else "\n".
pub fn join_lines(texts: &[&str], boxes: &[[f32; 4]]) -> String {
    let med_h = median(boxes.iter().map(|b| b[3] - b[1]).collect()).max(1.0);
    let mut s = String::new();
    for (i, t) in texts.iter().enumerate() {
        if i > 0 {
            let (p, b) = (boxes[i - 1], boxes[i]);
            let ov = p[3].min(b[3]) - p[1].max(b[1]);
            let same_row = ov > 0.5 * (p[3] - p[1]).min(b[3] - b[1]) && b[0] >= p[2] - 0.5 * med_h;
            if same_row {
                s.push(' ');
            } else if b[1] < p[1] || b[1] - p[3] > 0.7 * med_h {
                s.push_str("\n\n");
            } else {
                s.push('\n');
            }
        }
        s.push_str(t);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn classes() -> Vec<String> {
        ["", "a", "b", "c", " "].iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn engine_is_send_and_sync() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<OcrEngine>();
        assert_send_sync::<OcrPage>();
        assert_send_sync::<OcrError>();
    }

    #[test]
    fn ctc_merges_repeats_and_drops_blanks() {
        let (t, c) = ctc_greedy_decode(&[0, 1, 1, 0, 1, 2, 2, 0, 4, 3], &[1.0, 0.8, 0.9, 1.0, 0.6, 0.7, 0.7, 1.0, 0.5, 0.4], &classes());
        assert_eq!(t, "aab c");
        // emitted at steps 1, 4, 5, 8, 9
        assert!((c - (0.8 + 0.6 + 0.7 + 0.5 + 0.4) / 5.0).abs() < 1e-6);
    }

    #[test]
    fn ctc_empty_and_out_of_range() {
        assert_eq!(ctc_greedy_decode(&[], &[], &classes()), (String::new(), 0.0));
        assert_eq!(ctc_greedy_decode(&[0, 0], &[0.9, 0.9], &classes()), (String::new(), 0.0));
        let (t, _) = ctc_greedy_decode(&[99, 1], &[0.9, 0.9], &classes());
        assert_eq!(t, "a");
    }

    #[test]
    fn det_sizes_are_multiples_of_32() {
        assert_eq!(det_input_size(1700, 2200, 1280), (992, 1280));
        assert_eq!(det_input_size(100, 50, 1280), (96, 64));
        assert_eq!(det_input_size(5, 5, 1280), (32, 32));
        let (w, h) = det_input_size(100_000, 10, 960);
        assert_eq!((w % 32, h % 32), (0, 0));
        assert!(w <= 960 && h >= 32);
    }

    #[test]
    fn rows_read_left_to_right_top_to_bottom() {
        let b = [[200.0, 10.0, 300.0, 30.0], [10.0, 12.0, 150.0, 30.0], [10.0, 40.0, 300.0, 60.0]];
        assert_eq!(reading_order(&b), vec![1, 0, 2]);
    }

    #[test]
    fn two_columns_read_column_by_column() {
        let mut b = Vec::new();
        // title across both columns
        b.push([10.0, 0.0, 590.0, 20.0]);
        for r in 0..5 {
            let y = 60.0 + r as f32 * 25.0;
            b.push([10.0, y, 280.0, y + 20.0]); // left column
            b.push([320.0, y, 590.0, y + 20.0]); // right column
        }
        let order = reading_order(&b);
        assert_eq!(order, vec![0, 1, 3, 5, 7, 9, 2, 4, 6, 8, 10]);
        let texts: Vec<String> = order.iter().map(|i| format!("l{i}")).collect();
        let tr: Vec<&str> = texts.iter().map(|s| s.as_str()).collect();
        let ob: Vec<[f32; 4]> = order.iter().map(|&i| b[i]).collect();
        let s = join_lines(&tr, &ob);
        assert_eq!(s, "l0\n\nl1\nl3\nl5\nl7\nl9\n\nl2\nl4\nl6\nl8\nl10");
    }

    #[test]
    fn narrow_gap_is_not_a_column() {
        // words on one line separated by small gaps stay in one row
        let b = [[10.0, 0.0, 100.0, 20.0], [110.0, 0.0, 200.0, 20.0], [10.0, 25.0, 200.0, 45.0]];
        assert_eq!(reading_order(&b), vec![0, 1, 2]);
    }

    #[test]
    fn sparse_side_notes_are_not_a_column() {
        // dense left text; three short notes far apart on the right
        let mut b = Vec::new();
        for r in 0..30 {
            let y = r as f32 * 25.0;
            b.push([10.0, y, 280.0, y + 20.0]);
        }
        for &y in &[50.0f32, 300.0, 600.0] {
            b.push([400.0, y, 590.0, y + 20.0]);
        }
        let order = reading_order(&b);
        // the note at y=50 is read on its row (after left line 2), not at the end
        let pos = order.iter().position(|&i| i == 30).unwrap();
        assert_eq!(order[pos - 1], 2);
    }

    #[test]
    fn two_row_table_reads_row_by_row() {
        let b = [
            [10.0, 0.0, 100.0, 20.0], [200.0, 0.0, 300.0, 20.0], [400.0, 0.0, 500.0, 20.0],
            [10.0, 25.0, 100.0, 45.0], [200.0, 25.0, 300.0, 45.0], [400.0, 25.0, 500.0, 45.0],
        ];
        assert_eq!(reading_order(&b), vec![0, 1, 2, 3, 4, 5]);
    }

    #[test]
    fn paragraph_gap_gives_blank_line() {
        let b = [[0.0, 0.0, 100.0, 20.0], [0.0, 24.0, 100.0, 44.0], [0.0, 80.0, 100.0, 100.0]];
        assert_eq!(join_lines(&["a", "b", "c"], &b), "a\nb\n\nc");
    }

    #[test]
    fn degenerate_boxes_are_ignored() {
        let b = [[0.0, 0.0, 0.0, 10.0], [f32::NAN, 0.0, 1.0, 1.0], [0.0, 0.0, 5.0, 5.0]];
        assert_eq!(reading_order(&b), vec![2]);
        assert!(reading_order(&[]).is_empty());
    }

    #[test]
    fn db_boxes_finds_blobs_and_bounds_count() {
        let (w, h) = (64, 32);
        let mut p = vec![0f32; w * h];
        for y in 10..16 {
            for x in 5..40 {
                p[y * w + x] = 0.9;
            }
        }
        let opts = OcrOptions::default();
        let b = db_boxes(&p, w, h, &opts);
        assert_eq!(b.len(), 1);
        assert!(b[0][0] < 5.0 && b[0][2] > 40.0 && b[0][1] < 10.0 && b[0][3] > 16.0);
        // checkerboard of 3x3 blobs, bounded count
        let mut p = vec![0f32; 200 * 200];
        for by in 0..40 {
            for bx in 0..40 {
                for y in 0..3 {
                    for x in 0..3 {
                        p[(by * 5 + y) * 200 + bx * 5 + x] = 1.0;
                    }
                }
            }
        }
        let o = OcrOptions { max_boxes: 100, ..OcrOptions::default() };
        assert_eq!(db_boxes(&p, 200, 200, &o).len(), 100);
        assert!(db_boxes(&[], 0, 0, &o).is_empty());
    }
}
