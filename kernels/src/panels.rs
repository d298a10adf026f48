//! Int8 weights packed once, at load, in the order a register tile reads them, and the driver
//! that runs the tile over row blocks × panels in parallel tasks: what our two x86 GEMMs share
//! (AVX-512 VNNI in `vnni.rs`, AVX2 in `avx2.rs`; they differ only in the tile).
//!
//! A panel is [`Tile::PANEL`] columns (fewer at a matrix's end) of one matrix, stored as a run of
//! steps; a step holds [`Tile::STEP`] consecutive inputs of each of the panel's columns, column
//! after column (byte `j·STEP + i` is input `i` of column `j`), the last step zero-padded. That is
//! the layout of both `vpdpbusd` (4 inputs per 32-bit lane) and `vpmaddwd` after sign-extending
//! 16 bytes (2 inputs per lane). The activation rows are read where they lie: each step takes
//! 4 bytes of a row (4 u8 codes, or 2 u16). Several weight matrices that share the activations
//! (a layer's weights and their rounding residual) are panels of one packed set, so one pass
//! over the activations serves both.
//!
//! Exact: integer sums, the same as any other order of adding them (the tests check every tile
//! against a plain loop).

use std::marker::PhantomData;
use std::mem::MaybeUninit;

use rayon::prelude::*;

/// Rows per parallel task.
const TASK_ROWS: usize = 96;

/// A register tile of u8 activations × i8 weights → i32 sums.
pub(crate) trait Tile {
    /// One activation code as the tile reads it (`u8`, or `u16` where the tile multiplies 16-bit
    /// pairs).
    type Code: Copy + Send + Sync;
    /// Columns per panel.
    const PANEL: usize;
    /// Inputs per step.
    const STEP: usize;
    /// Activation rows per tile.
    const ROWS: usize;
    /// How `ragbox doctor` names the kernel.
    const NAME: &'static str;

    /// Whether this CPU runs the tile.
    fn available() -> bool;

    /// `R` (1..=[`Tile::ROWS`], at most [`MAX_TILE_ROWS`]) rows of `a` (`stride` codes apart,
    /// `inputs` each) times one panel `b` (`steps · STEP · PANEL` bytes), into the first `width`
    /// columns of `out` (row length `ldo`).
    ///
    /// # Safety
    /// [`Tile::available`] holds; `a` holds the rows; `out` is valid for `R` rows of `width`
    /// i32 writes `ldo` apart.
    unsafe fn rows<const R: usize>(a: &[Self::Code], stride: usize, inputs: usize, b: &[i8], out: *mut i32, ldo: usize, width: usize);
}

/// The most rows a tile may have ([`PackedWeights::gemm`] dispatches 1 to 6).
const MAX_TILE_ROWS: usize = 6;

/// 64 bytes on a cache line, so that a panel's steps start aligned.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([i8; 64]);

/// One or more int8 weight matrices with the same number of inputs, packed for tile `T`.
pub(crate) struct PackedWeights<T> {
    inputs: usize,
    steps: usize,
    /// The output columns of each matrix.
    parts: Vec<usize>,
    panels: Vec<Panel>,
    /// Every panel's steps, panel after panel, each panel starting on a line.
    lines: Vec<Line>,
    /// Lines per panel.
    panel_lines: usize,
    tile: PhantomData<fn() -> T>,
}

/// [`Tile::PANEL`] (or, at a matrix's end, fewer) columns of one matrix.
#[derive(Clone, Copy)]
struct Panel {
    part: usize,
    column: usize,
    width: usize,
}

impl<T: Tile> PackedWeights<T> {
    /// Packs `parts`, each `(inputs, outputs_i)` row-major (input-major, as a GEMM's B).
    pub(crate) fn pack(inputs: usize, parts: &[(&[i8], usize)]) -> PackedWeights<T> {
        let steps = inputs.div_ceil(T::STEP);
        let mut panels = Vec::new();
        for (part, &(b, outputs)) in parts.iter().enumerate() {
            assert_eq!(b.len(), inputs * outputs, "weights are not {inputs} × {outputs}");
            for column in (0..outputs).step_by(T::PANEL) {
                panels.push(Panel { part, column, width: T::PANEL.min(outputs - column) });
            }
        }
        let step_bytes = T::STEP * T::PANEL;
        let panel_lines = (steps * step_bytes).div_ceil(64);
        let mut lines = vec![Line([0; 64]); panels.len() * panel_lines];
        for (p, panel) in panels.iter().enumerate() {
            let (b, outputs) = parts[panel.part];
            let bytes = lines_as_bytes_mut(&mut lines[p * panel_lines..(p + 1) * panel_lines]);
            for input in 0..inputs {
                let (step, within) = (input / T::STEP, input % T::STEP);
                for j in 0..panel.width {
                    bytes[step * step_bytes + j * T::STEP + within] = b[input * outputs + panel.column + j];
                }
            }
        }
        PackedWeights { inputs, steps, parts: parts.iter().map(|&(_, n)| n).collect(), panels, lines, panel_lines, tile: PhantomData }
    }

    /// `outputs[i]` (`rows × outputs_i`, row-major) = the i32 sums of `a` (`rows × inputs` codes,
    /// rows `stride` codes apart) times matrix `i`. Every element is written.
    ///
    /// Panics unless the CPU runs the tile ([`Tile::available`]).
    pub(crate) fn gemm(&self, a: &[T::Code], stride: usize, rows: usize, outputs: &mut [&mut [MaybeUninit<i32>]]) {
        assert!(T::available(), "this CPU cannot run {}", T::NAME);
        assert!(T::ROWS <= MAX_TILE_ROWS, "{} has more rows than the dispatch", T::NAME);
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
        let panel_bytes = self.steps * T::STEP * T::PANEL;
        (0..row_blocks * groups).into_par_iter().for_each(|task| {
            let (block, group) = (task / groups, task % groups);
            let first_row = block * TASK_ROWS;
            let block_rows = TASK_ROWS.min(rows - first_row);
            for p in group * per_group..((group + 1) * per_group).min(self.panels.len()) {
                let panel = self.panels[p];
                let Target(out, ldo) = targets[panel.part];
                let b = &lines_as_bytes(&self.lines[p * self.panel_lines..(p + 1) * self.panel_lines])[..panel_bytes];
                for tile in (0..block_rows).step_by(T::ROWS) {
                    let row = first_row + tile;
                    // SAFETY: the CPU runs the tile (checked above); `a` holds the tile's rows
                    // (checked above); the tile writes rows `row..` of `out`, columns
                    // `panel.column..+width`, inside the output checked above, and no other task
                    // writes them.
                    unsafe {
                        let (a, out, width) = (&a[row * stride..], out.add(row * ldo + panel.column), panel.width);
                        match T::ROWS.min(block_rows - tile) {
                            6 => T::rows::<6>(a, stride, self.inputs, b, out, ldo, width),
                            5 => T::rows::<5>(a, stride, self.inputs, b, out, ldo, width),
                            4 => T::rows::<4>(a, stride, self.inputs, b, out, ldo, width),
                            3 => T::rows::<3>(a, stride, self.inputs, b, out, ldo, width),
                            2 => T::rows::<2>(a, stride, self.inputs, b, out, ldo, width),
                            _ => T::rows::<1>(a, stride, self.inputs, b, out, ldo, width),
                        }
                    }
                }
            }
        });
    }
}

fn lines_as_bytes(lines: &[Line]) -> &[i8] {
    // SAFETY: `Line` is 64 `i8`s with no padding.
    unsafe { std::slice::from_raw_parts(lines.as_ptr().cast::<i8>(), lines.len() * 64) }
}

fn lines_as_bytes_mut(lines: &mut [Line]) -> &mut [i8] {
    // SAFETY: as in `lines_as_bytes`, borrowed mutably.
    unsafe { std::slice::from_raw_parts_mut(lines.as_mut_ptr().cast::<i8>(), lines.len() * 64) }
}

/// An output's first element and row length, shared by the tasks (each writes its own tiles).
#[derive(Clone, Copy)]
struct Target(*mut i32, usize);
// SAFETY: the tasks write disjoint tiles of the outputs (`PackedWeights::gemm`).
unsafe impl Send for Target {}
unsafe impl Sync for Target {}

#[cfg(test)]
pub(crate) mod tests {
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
        let mut rng = fastrand::Rng::with_seed(u64::from(seed));
        (0..n).map(|_| rng.u8(..)).collect()
    }

    /// Tile `T` equals the plain sums for rows past a tile and a task, inputs not a multiple of a
    /// step, columns not of a panel, and the extremes (codes 255 times −128 saturate 16-bit pair
    /// sums); `widen` turns the u8 codes into the tile's.
    pub(crate) fn equals_the_plain_sums<T: Tile>(widen: impl Fn(&[u8]) -> Vec<T::Code>) {
        if !T::available() {
            eprintln!("skipped: this CPU cannot run {}", T::NAME);
            return;
        }
        for &(rows, inputs, outputs) in &[(1, 4, 16), (7, 13, 70), (97, 384, 64), (200, 37, 129), (13, 768, 192), (5, 3, 1)] {
            let stride = inputs + 5;
            let mut a = bytes(rows * stride, 1);
            a[..inputs].fill(255);
            let mut b: Vec<i8> = bytes(inputs * outputs, 2).into_iter().map(|v| v as i8).collect();
            b[0] = -128;
            b[outputs] = -128;
            let second: Vec<i8> = bytes(inputs * 3, 3).into_iter().map(|v| v as i8).collect();
            let packed = PackedWeights::<T>::pack(inputs, &[(&b, outputs), (&second, 3)]);
            let mut c = vec![MaybeUninit::new(i32::MIN); rows * outputs];
            let mut d = vec![MaybeUninit::new(i32::MIN); rows * 3];
            packed.gemm(&widen(&a), stride, rows, &mut [&mut c, &mut d]);
            // SAFETY: every element was initialised above.
            let c: Vec<i32> = c.into_iter().map(|v| unsafe { v.assume_init() }).collect();
            let d: Vec<i32> = d.into_iter().map(|v| unsafe { v.assume_init() }).collect();
            assert_eq!(c, reference(&a, stride, rows, &b, inputs, outputs), "{} {rows}×{inputs}×{outputs}", T::NAME);
            assert_eq!(d, reference(&a, stride, rows, &second, inputs, 3), "{} {rows}×{inputs}×3, second matrix", T::NAME);
        }
    }
}
