//! A u8 × i8 → i32 GEMM for CPUs with AVX-512 VNNI: one `vpdpbusd` is 64 multiply-adds, and a
//! register tile of 6 activation rows × 64 weight columns keeps 24 of them in flight for every
//! 4 weight loads and 6 broadcasts.
//!
//! rten-gemm's VNNI kernel reaches 90-120 GMAC/s on two Zen 4 cores for BERT's shapes, about a
//! third of what the instruction allows; what this one does differently:
//! - the activation rows are read where they lie (each step broadcasts 4 bytes of a row), so
//!   there is no packing pass over the activations (`pack_a` was 7-10% of an int8 embedding);
//! - the weights are packed once, at load, in the order the tile reads them: panels of 64
//!   columns, each a run of 256-byte steps (4 inputs × 64 columns);
//! - several weight matrices that share the activations (a layer's weights and their rounding
//!   residual) are panels of one packed set, so one pass over the activations serves both.
//!
//! Exact: integer sums, the same as any other order of adding them (tests check it against a
//! plain loop).

use std::arch::x86_64::*;
use std::mem::MaybeUninit;

use rayon::prelude::*;

/// Columns per panel: four 16-lane registers of i32 sums.
const PANEL: usize = 64;
/// Activation rows per register tile (6 × 4 accumulators, 4 weight registers, 1 broadcast).
const TILE_ROWS: usize = 6;
/// Rows per parallel task: 16 tiles.
const TASK_ROWS: usize = 96;

/// How `ragbox doctor` names this kernel.
pub const KERNEL_NAME: &str = "ragbox avx512-vnni 6x64";

/// Whether this CPU runs [`VnniWeights::gemm`].
pub fn available() -> bool {
    is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512bw") && is_x86_feature_detected!("avx512vnni")
}

/// 64 bytes on a cache line: one register's load.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([i8; 64]);

/// One or more int8 weight matrices with the same number of inputs, packed for the tile.
pub struct VnniWeights {
    inputs: usize,
    /// Steps of 4 inputs (the last one zero-padded).
    steps: usize,
    /// The output columns of each matrix.
    parts: Vec<usize>,
    panels: Vec<Panel>,
    /// Panel `p` is `lines[p·steps·4 ..][.. steps·4]`: per step, 4 lines of 16 columns × 4 inputs.
    lines: Vec<Line>,
}

/// 64 (or, at a matrix's end, fewer) columns of one matrix.
#[derive(Clone, Copy)]
struct Panel {
    part: usize,
    column: usize,
    width: usize,
}

impl VnniWeights {
    /// Packs `parts`, each `(inputs, outputs_i)` row-major (input-major, as a GEMM's B).
    pub fn pack(inputs: usize, parts: &[(&[i8], usize)]) -> VnniWeights {
        let steps = inputs.div_ceil(4);
        let mut panels = Vec::new();
        for (part, &(b, outputs)) in parts.iter().enumerate() {
            assert_eq!(b.len(), inputs * outputs, "weights are not {inputs} × {outputs}");
            for column in (0..outputs).step_by(PANEL) {
                panels.push(Panel { part, column, width: PANEL.min(outputs - column) });
            }
        }
        let mut lines = vec![Line([0; 64]); panels.len() * steps * 4];
        for (p, panel) in panels.iter().enumerate() {
            let (b, outputs) = parts[panel.part];
            let lines = &mut lines[p * steps * 4..(p + 1) * steps * 4];
            for input in 0..inputs {
                let (step, within) = (input / 4, input % 4);
                for j in 0..panel.width {
                    lines[step * 4 + j / 16].0[(j % 16) * 4 + within] = b[input * outputs + panel.column + j];
                }
            }
        }
        VnniWeights { inputs, steps, parts: parts.iter().map(|&(_, n)| n).collect(), panels, lines }
    }

    /// `outputs[i]` (`rows × outputs_i`, row-major) = the i32 sums of `a` (`rows × inputs` codes,
    /// rows `stride` bytes apart) times matrix `i`. Every element is written.
    ///
    /// Panics unless [`available`].
    pub fn gemm(&self, a: &[u8], stride: usize, rows: usize, outputs: &mut [&mut [MaybeUninit<i32>]]) {
        assert!(available(), "this CPU lacks AVX-512 VNNI");
        assert!(stride >= self.inputs && (rows == 0 || a.len() >= (rows - 1) * stride + self.inputs), "activations are short");
        assert_eq!(outputs.len(), self.parts.len(), "one output per weight matrix");
        for (out, &n) in outputs.iter().zip(&self.parts) {
            assert_eq!(out.len(), rows * n, "an output is not {rows} × {n}");
        }
        if rows == 0 {
            return;
        }
        let targets: Vec<Target> = outputs.iter_mut().zip(&self.parts).map(|(o, &n)| Target(o.as_mut_ptr().cast(), n)).collect();
        // Enough tasks for every thread to have several, in row blocks times panel groups.
        let row_blocks = rows.div_ceil(TASK_ROWS);
        let wanted = 4 * rayon::current_num_threads();
        let groups = wanted.div_ceil(row_blocks).clamp(1, self.panels.len());
        let per_group = self.panels.len().div_ceil(groups);
        let groups = self.panels.len().div_ceil(per_group);
        (0..row_blocks * groups).into_par_iter().for_each(|task| {
            let (block, group) = (task / groups, task % groups);
            let first_row = block * TASK_ROWS;
            let block_rows = TASK_ROWS.min(rows - first_row);
            for p in group * per_group..((group + 1) * per_group).min(self.panels.len()) {
                let panel = self.panels[p];
                let Target(out, ldo) = targets[panel.part];
                let b = &self.lines[p * self.steps * 4..(p + 1) * self.steps * 4];
                for tile in (0..block_rows).step_by(TILE_ROWS) {
                    let row = first_row + tile;
                    let a = &a[row * stride..];
                    // SAFETY: the CPU has the features (checked above); `a` holds the tile's rows
                    // (checked above); the tile writes rows `row..` of `out`, columns
                    // `panel.column..+width`, inside the output checked above, and no other task
                    // writes them.
                    unsafe {
                        let out = out.add(row * ldo + panel.column);
                        match TILE_ROWS.min(block_rows - tile) {
                            6 => tile_rows::<6>(a, stride, self.inputs, b, out, ldo, panel.width),
                            5 => tile_rows::<5>(a, stride, self.inputs, b, out, ldo, panel.width),
                            4 => tile_rows::<4>(a, stride, self.inputs, b, out, ldo, panel.width),
                            3 => tile_rows::<3>(a, stride, self.inputs, b, out, ldo, panel.width),
                            2 => tile_rows::<2>(a, stride, self.inputs, b, out, ldo, panel.width),
                            _ => tile_rows::<1>(a, stride, self.inputs, b, out, ldo, panel.width),
                        }
                    }
                }
            }
        });
    }
}

/// An output's first element and row length, shared by the tasks (each writes its own tiles).
#[derive(Clone, Copy)]
struct Target(*mut i32, usize);
// SAFETY: the tasks write disjoint tiles of the outputs (`VnniWeights::gemm`).
unsafe impl Send for Target {}
unsafe impl Sync for Target {}

/// `R` rows of `a` times one panel `b`, into `out` (row length `ldo`), the first `width` columns.
///
/// # Safety
/// The CPU has AVX-512 F, BW and VNNI; `a` holds `R` rows `stride` apart of `inputs` bytes each;
/// `out` is valid for `R` rows of `width` i32 writes.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn tile_rows<const R: usize>(a: &[u8], stride: usize, inputs: usize, b: &[Line], out: *mut i32, ldo: usize, width: usize) {
    debug_assert!(a.len() >= (R - 1) * stride + inputs && b.len() == inputs.div_ceil(4) * 4);
    let a = a.as_ptr();
    let mut acc = [[_mm512_setzero_si512(); 4]; R];
    let whole = inputs / 4;
    let mut lines = b.as_ptr().cast::<__m512i>();
    for step in 0..whole {
        let w = [_mm512_load_si512(lines), _mm512_load_si512(lines.add(1)), _mm512_load_si512(lines.add(2)), _mm512_load_si512(lines.add(3))];
        for (r, acc) in acc.iter_mut().enumerate() {
            let x = _mm512_set1_epi32(a.add(r * stride + step * 4).cast::<i32>().read_unaligned());
            for j in 0..4 {
                acc[j] = _mm512_dpbusd_epi32(acc[j], x, w[j]);
            }
        }
        lines = lines.add(4);
    }
    if !inputs.is_multiple_of(4) {
        // The last, partial step: the missing inputs' weights are zero, their bytes too.
        let w = [_mm512_load_si512(lines), _mm512_load_si512(lines.add(1)), _mm512_load_si512(lines.add(2)), _mm512_load_si512(lines.add(3))];
        for (r, acc) in acc.iter_mut().enumerate() {
            let mut bytes = [0u8; 4];
            for (i, byte) in bytes.iter_mut().enumerate().take(inputs % 4) {
                *byte = *a.add(r * stride + whole * 4 + i);
            }
            let x = _mm512_set1_epi32(i32::from_le_bytes(bytes));
            for j in 0..4 {
                acc[j] = _mm512_dpbusd_epi32(acc[j], x, w[j]);
            }
        }
    }
    for (r, acc) in acc.iter().enumerate() {
        for (j, &sums) in acc.iter().enumerate() {
            let first = j * 16;
            if first >= width {
                break;
            }
            let mask: __mmask16 = if width - first >= 16 { 0xffff } else { (1u16 << (width - first)) - 1 };
            _mm512_mask_storeu_epi32(out.add(r * ldo + first), mask, sums);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reference(a: &[u8], stride: usize, rows: usize, b: &[i8], inputs: usize, outputs: usize) -> Vec<i32> {
        let mut c = vec![0i32; rows * outputs];
        for r in 0..rows {
            for i in 0..inputs {
                let x = i32::from(a[r * stride + i]);
                for o in 0..outputs {
                    c[r * outputs + o] += x * i32::from(b[i * outputs + o]);
                }
            }
        }
        c
    }

    fn bytes(n: usize, seed: u32) -> Vec<u8> {
        let mut s = seed.wrapping_mul(2654435761).wrapping_add(1);
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 17;
                s ^= s << 5;
                s as u8
            })
            .collect()
    }

    #[test]
    fn equals_the_plain_sums_for_every_shape_and_edge() {
        if !available() {
            eprintln!("skipped: no AVX-512 VNNI on this CPU");
            return;
        }
        // Rows past a tile and a task, inputs not a multiple of 4, columns not of 64, extremes.
        for &(rows, inputs, outputs) in &[(1, 4, 16), (7, 13, 70), (97, 384, 64), (200, 37, 129), (13, 768, 192), (5, 3, 1)] {
            let stride = inputs + 5;
            let a = bytes(rows * stride, 1);
            let mut b: Vec<i8> = bytes(inputs * outputs, 2).into_iter().map(|v| v as i8).collect();
            b[0] = -128;
            let second: Vec<i8> = bytes(inputs * 3, 3).into_iter().map(|v| v as i8).collect();
            let packed = VnniWeights::pack(inputs, &[(&b, outputs), (&second, 3)]);
            let mut c = vec![MaybeUninit::new(i32::MIN); rows * outputs];
            let mut d = vec![MaybeUninit::new(i32::MIN); rows * 3];
            packed.gemm(&a, stride, rows, &mut [&mut c, &mut d]);
            // SAFETY: every element was initialised above.
            let c: Vec<i32> = c.into_iter().map(|v| unsafe { v.assume_init() }).collect();
            let d: Vec<i32> = d.into_iter().map(|v| unsafe { v.assume_init() }).collect();
            assert_eq!(c, reference(&a, stride, rows, &b, inputs, outputs), "{rows}×{inputs}×{outputs}");
            assert_eq!(d, reference(&a, stride, rows, &second, inputs, 3), "{rows}×{inputs}×3, second matrix");
        }
    }
}
