//! Dense layers with int8 weights: `y = act(x · Wᵀ + b)` on rten-gemm's u8 × i8 → i32 GEMM.
//!
//! Weights are quantised once, symmetrically per output channel (scale `max|w|/127`, zero point
//! 0). Activations are quantised per row on each call, asymmetrically over `[min(x,0), max(x,0)]`
//! to 8 bits (unsigned, as x86's `vpdpbusd` wants): the GELU output feeding BERT's second FFN
//! matmul is nearly all ≥ −0.17, and a symmetric scheme would waste half of its range. The i32
//! sums are written into the f32 output buffer itself and turned into floats there, with the
//! scales, the bias and the activation in one pass.
//!
//! Without VNNI, rten-gemm's x86 kernel multiplies with `vpmaddubsw`, whose 16-bit pair sums
//! saturate past 32,767; there activations get 7 bits (0..=127), which cannot saturate
//! (127·127·2 < 32,767), at the cost of precision. [`Int8Linear::kernel_name`] says which runs.

use std::mem::MaybeUninit;

use rayon::prelude::*;
use rten_gemm::{GemmExecutor, GemmInputA, GemmInputB, GemmUninitOptions, PackedBMatrix};
use rten_tensor::NdTensorView;

use crate::gelu::gelu_erf;

/// What follows the matmul and bias, fused into the same pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activation {
    None,
    /// BERT's exact GELU.
    GeluErf,
}

/// rten-gemm's executor for this CPU. It is not `Send` (it holds its kernel as a trait object),
/// so each call makes one: a feature lookup and a small allocation, nothing beside a GEMM.
fn executor() -> GemmExecutor<u8, i8, i32> {
    GemmExecutor::default()
}

/// Rows handled by one parallel task in the element-wise passes.
const ROWS_PER_TASK: usize = 16;

/// A dense layer with weights quantised to int8 per output channel.
pub struct Int8Linear {
    /// `(in, out)`, packed for the kernel [`executor`] picks (the same on every call: it
    /// depends only on the CPU).
    weights: PackedBMatrix<i8>,
    /// Per output channel: the weight scale.
    scales: Vec<f32>,
    bias: Vec<f32>,
    /// Per output channel: the sum of its int8 weights, to subtract each row's activation zero
    /// point (`Σ (a − z)·w = Σ a·w − z·Σ w`) in the epilogue. rten-gemm takes per-row zero
    /// points itself, but in 0.25 applies them wrongly past the first row tile (the test
    /// `rows_with_different_zero_points_each_get_their_own` caught it: cosine 0.43 at row 8).
    column_sums: Vec<i32>,
    inputs: usize,
    outputs: usize,
    /// 255, or 127 where the kernel could saturate.
    activation_levels: f32,
}

impl Int8Linear {
    /// Quantises `weight`, `(outputs, inputs)` row-major as in PyTorch's `Linear`.
    pub fn new(weight: &[f32], outputs: usize, inputs: usize, bias: Option<&[f32]>) -> Int8Linear {
        assert_eq!(weight.len(), outputs * inputs, "weight is not {outputs} × {inputs}");
        let executor = executor();
        let scales: Vec<f32> = weight
            .chunks_exact(inputs)
            .map(|row| {
                let max = row.iter().fold(0.0f32, |m, w| m.max(w.abs()));
                if max > 0.0 {
                    max / 127.0
                } else {
                    1.0
                }
            })
            .collect();
        // B is (inputs, outputs): the transposed, quantised weight.
        let mut b = vec![0i8; inputs * outputs];
        for (o, (row, scale)) in weight.chunks_exact(inputs).zip(&scales).enumerate() {
            for (i, w) in row.iter().enumerate() {
                b[i * outputs + o] = (w / scale).round().clamp(-127.0, 127.0) as i8;
            }
        }
        let mut column_sums = vec![0i32; outputs];
        for row in b.chunks_exact(outputs) {
            for (s, &w) in column_sums.iter_mut().zip(row) {
                *s += i32::from(w);
            }
        }
        let weights = executor.prepack_b(NdTensorView::from_data([inputs, outputs], b.as_slice()));
        let bias = match bias {
            Some(b) => {
                assert_eq!(b.len(), outputs, "bias is not {outputs} long");
                b.to_vec()
            }
            None => vec![0.0; outputs],
        };
        let activation_levels = if executor.may_saturate() { 127.0 } else { 255.0 };
        Int8Linear { weights, scales, bias, column_sums, inputs, outputs, activation_levels }
    }

    /// The GEMM kernel that runs (rten-gemm's name, e.g. `avx512-int8`), and whether activations
    /// get 8 bits or, on a kernel that could saturate, 7.
    pub fn kernel_name(&self) -> String {
        let bits = if self.activation_levels > 127.0 { 8 } else { 7 };
        format!("{} (u{bits} activations)", executor().kernel_name())
    }

    /// Input and output widths.
    pub fn shape(&self) -> (usize, usize) {
        (self.inputs, self.outputs)
    }

    /// `x`: `rows × inputs` row-major; `y`: `rows × outputs`, overwritten.
    pub fn forward(&self, x: &[f32], rows: usize, y: &mut [f32], activation: Activation) {
        // SAFETY: an initialised slice seen as possibly uninitialised; `forward_uninit` only writes.
        let y = unsafe { std::slice::from_raw_parts_mut(y.as_mut_ptr().cast::<MaybeUninit<f32>>(), y.len()) };
        self.forward_uninit(x, rows, y, activation);
    }

    /// [`Int8Linear::forward`] into a new vector, with no zeroing pass first.
    pub fn forward_to_vec(&self, x: &[f32], rows: usize, activation: Activation) -> Vec<f32> {
        let len = rows * self.outputs;
        let mut y = Vec::with_capacity(len);
        self.forward_uninit(x, rows, &mut y.spare_capacity_mut()[..len], activation);
        // SAFETY: `forward_uninit` wrote all `len` values.
        unsafe { y.set_len(len) };
        y
    }

    /// Writes every element of `y` (`rows × outputs`).
    fn forward_uninit(&self, x: &[f32], rows: usize, y: &mut [MaybeUninit<f32>], activation: Activation) {
        assert_eq!(x.len(), rows * self.inputs, "input is not {rows} × {}", self.inputs);
        assert_eq!(y.len(), rows * self.outputs, "output is not {rows} × {}", self.outputs);
        if rows == 0 {
            return;
        }
        let (quantised, scales, zeros) = self.quantise_rows(x, rows);
        // SAFETY: MaybeUninit<i32> and MaybeUninit<f32> have the same size and alignment.
        let sums = unsafe { std::slice::from_raw_parts_mut(y.as_mut_ptr().cast::<MaybeUninit<i32>>(), y.len()) };
        self.gemm(&quantised, rows, sums);
        // SAFETY: the GEMM wrote every element, as an i32 sum the epilogue reads back by its bits.
        let y = unsafe { std::slice::from_raw_parts_mut(y.as_mut_ptr().cast::<f32>(), y.len()) };
        self.dequantise_rows(y, &scales, &zeros, activation);
    }

    /// The i32 sums of the quantised rows (their codes, zero points not yet subtracted) times the
    /// weights.
    fn gemm(&self, quantised: &[u8], rows: usize, sums: &mut [MaybeUninit<i32>]) {
        executor()
            .gemm_uninit(
                sums,
                GemmInputA::Unpacked(NdTensorView::from_data([rows, self.inputs], quantised)),
                GemmInputB::Packed(&self.weights),
                GemmUninitOptions::default(),
            )
            .expect("int8 GEMM shapes were checked by the caller");
    }

    /// Every row of sums in place: `act((sum − z·Σw) · a · wⱼ + bⱼ)`.
    fn dequantise_rows(&self, y: &mut [f32], a_scales: &[f32], a_zeros: &[u8], activation: Activation) {
        y.par_chunks_mut(self.outputs * ROWS_PER_TASK).enumerate().for_each(|(task, block)| {
            for (r, row) in block.chunks_exact_mut(self.outputs).enumerate() {
                let a = Row { scale: a_scales[task * ROWS_PER_TASK + r], zero: i32::from(a_zeros[task * ROWS_PER_TASK + r]) };
                match activation {
                    Activation::None => dequantise(row, a, self, |v| v),
                    Activation::GeluErf => dequantise(row, a, self, gelu_erf),
                }
            }
        });
    }

    /// Each row to `u8` over `[min(x,0), max(x,0)]`: the codes, and per row the scale and the
    /// code of zero.
    fn quantise_rows(&self, x: &[f32], rows: usize) -> (Vec<u8>, Vec<f32>, Vec<u8>) {
        let levels = self.activation_levels;
        let mut codes = vec![0u8; x.len()];
        let mut scales = vec![0f32; rows];
        let mut zeros = vec![0u8; rows];
        codes
            .par_chunks_mut(self.inputs * ROWS_PER_TASK)
            .zip(scales.par_chunks_mut(ROWS_PER_TASK))
            .zip(zeros.par_chunks_mut(ROWS_PER_TASK))
            .zip(x.par_chunks(self.inputs * ROWS_PER_TASK))
            .for_each(|(((codes, scales), zeros), x)| {
                for (((codes, scale), zero), x) in
                    codes.chunks_exact_mut(self.inputs).zip(scales.iter_mut()).zip(zeros.iter_mut()).zip(x.chunks_exact(self.inputs))
                {
                    let (lo, hi) = range_with_zero(x);
                    let s = if hi > lo { (hi - lo) / levels } else { 1.0 };
                    let z = (-lo / s).round_ties_even().clamp(0.0, levels);
                    let inv = 1.0 / s;
                    for (c, &v) in codes.iter_mut().zip(x) {
                        let q = (v * inv + z).round_ties_even();
                        // `!(q >= 0)` also sends NaN (a NaN or infinite input) to code 0.
                        let q = if !(q >= 0.0) {
                            0.0
                        } else if q > levels {
                            levels
                        } else {
                            q
                        };
                        // SAFETY: `q` is within 0..=255 here. The unchecked cast is what lets the
                        // compiler vectorise this loop (`as` saturates, element by element).
                        *c = unsafe { q.to_int_unchecked::<i32>() } as u8;
                    }
                    *scale = s;
                    *zero = z as u8;
                }
            });
        (codes, scales, zeros)
    }
}

/// Times the three parts of [`Int8Linear::forward`] (quantise, GEMM, dequantise with GELU) and
/// prints them: for `examples/int8_parts.rs`.
#[doc(hidden)]
pub fn profile_parts(layer: &Int8Linear, x: &[f32], rows: usize, y: &mut [f32]) {
    let t = std::time::Instant::now();
    let (q, scales, zeros) = layer.quantise_rows(x, rows);
    let t_q = t.elapsed();
    // SAFETY: as in `forward_uninit`.
    let sums = unsafe { std::slice::from_raw_parts_mut(y.as_mut_ptr().cast::<MaybeUninit<i32>>(), y.len()) };
    let t = std::time::Instant::now();
    layer.gemm(&q, rows, sums);
    let t_g = t.elapsed();
    let t = std::time::Instant::now();
    layer.dequantise_rows(y, &scales, &zeros, Activation::GeluErf);
    println!("quantise {t_q:?}, gemm {t_g:?}, dequantise+gelu {:?}", t.elapsed());
}

/// The smallest and largest of `x` and 0, in 16 lanes so the compiler vectorises it (`f32::min`
/// has NaN rules that keep a fold scalar).
#[inline(always)]
fn range_with_zero(x: &[f32]) -> (f32, f32) {
    let (mut lo, mut hi) = ([0f32; 16], [0f32; 16]);
    let chunks = x.chunks_exact(16);
    let tail = chunks.remainder();
    for chunk in chunks {
        for j in 0..16 {
            lo[j] = if chunk[j] < lo[j] { chunk[j] } else { lo[j] };
            hi[j] = if chunk[j] > hi[j] { chunk[j] } else { hi[j] };
        }
    }
    let lo = lo.iter().chain(tail).fold(0f32, |m, &v| if v < m { v } else { m });
    let hi = hi.iter().chain(tail).fold(0f32, |m, &v| if v > m { v } else { m });
    (lo, hi)
}

/// One activation row's quantisation.
#[derive(Clone, Copy)]
struct Row {
    scale: f32,
    zero: i32,
}

/// One output row in place: i32 sums (stored in the f32 slots) → `act((sum − z·Σwⱼ) · a · wⱼ + bⱼ)`.
#[inline(always)]
fn dequantise(row: &mut [f32], a: Row, layer: &Int8Linear, act: impl Fn(f32) -> f32) {
    for (((v, &w), &b), &col) in row.iter_mut().zip(&layer.scales).zip(&layer.bias).zip(&layer.column_sums) {
        let sum = v.to_bits() as i32 - a.zero * col;
        *v = act(sum as f32 * (a.scale * w) + b);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small deterministic generator (xorshift), values in [-1, 1).
    fn values(n: usize, seed: u64) -> Vec<f32> {
        let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                (s >> 40) as f32 / (1u64 << 23) as f32 - 1.0
            })
            .collect()
    }

    fn reference(x: &[f32], w: &[f32], bias: &[f32], rows: usize, inputs: usize, outputs: usize) -> Vec<f32> {
        let mut y = vec![0.0; rows * outputs];
        for r in 0..rows {
            for o in 0..outputs {
                let dot: f64 = (0..inputs).map(|i| f64::from(x[r * inputs + i]) * f64::from(w[o * inputs + i])).sum();
                y[r * outputs + o] = dot as f32 + bias[o];
            }
        }
        y
    }

    fn cosine(a: &[f32], b: &[f32]) -> f64 {
        let dot: f64 = a.iter().zip(b).map(|(x, y)| f64::from(*x) * f64::from(*y)).sum();
        let na: f64 = a.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
        let nb: f64 = b.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
        dot / (na * nb)
    }

    #[test]
    fn matches_the_f32_product_within_quantisation_error() {
        // Odd sizes: rows and columns that fill no kernel tile exactly.
        for (rows, inputs, outputs) in [(1, 384, 1152), (37, 384, 384), (130, 1536, 384), (5, 7, 3), (15, 32, 48), (15, 5, 48)] {
            let x = values(rows * inputs, 1);
            let w = values(outputs * inputs, 2);
            let bias = values(outputs, 3);
            let layer = Int8Linear::new(&w, outputs, inputs, Some(&bias));
            let mut y = vec![f32::NAN; rows * outputs];
            layer.forward(&x, rows, &mut y, Activation::None);
            let want = reference(&x, &w, &bias, rows, inputs, outputs);
            for r in 0..rows {
                let row = r * outputs..(r + 1) * outputs;
                let c = cosine(&y[row.clone()], &want[row]);
                assert!(c > 0.999, "{rows}×{inputs}×{outputs} row {r}: cosine {c}");
            }
            // The error is what 8-bit codes allow: each term is off by at most half a step of
            // each factor, so the sum by at most ~ inputs · (Δa·|w| + Δw·|a|) / 2 with all ≤ 1.
            let bound = inputs as f32 * (2.0 / 255.0 + 1.0 / 127.0) / 2.0;
            let worst = y.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
            assert!(worst < bound, "{rows}×{inputs}×{outputs}: worst error {worst} (bound {bound})");
        }
    }

    #[test]
    fn rows_with_different_zero_points_each_get_their_own() {
        // Rows all ≥ 0 (zero at code 0), all ≤ 0 (code 255) and mixed, interleaved, in numbers
        // that fill and overrun the kernel's row tiles.
        for (rows, inputs, outputs) in [(2, 384, 64), (7, 384, 64), (33, 384, 64), (15, 32, 48), (15, 7, 5)] {
            let base = values(rows * inputs, 11);
            let x: Vec<f32> = base
                .iter()
                .enumerate()
                .map(|(i, v)| match (i / inputs) % 3 {
                    0 => v.abs() * 3.0,
                    1 => -v.abs() * 0.5,
                    _ => *v,
                })
                .collect();
            let w = values(outputs * inputs, 12);
            let layer = Int8Linear::new(&w, outputs, inputs, None);
            let y = layer.forward_to_vec(&x, rows, Activation::None);
            let want = reference(&x, &w, &vec![0.0; outputs], rows, inputs, outputs);
            for r in 0..rows {
                let row = r * outputs..(r + 1) * outputs;
                let c = cosine(&y[row.clone()], &want[row]);
                assert!(c > 0.999, "{rows} rows, row {r}: cosine {c}");
            }
        }
    }

    #[test]
    fn exact_when_values_sit_on_the_grid() {
        // Weights of ±1/0 and activations in steps of the row's scale quantise without loss, so
        // the result must be exact: this checks the zero points and the scale bookkeeping.
        let (rows, inputs, outputs) = (9, 64, 48);
        let w: Vec<f32> = (0..outputs * inputs).map(|i| [1.0, 0.0, -1.0][i % 3]).collect();
        // Every row spans [-63.5, 64] in steps of 0.5: scale 0.5, zero at code 127.
        let x: Vec<f32> = (0..rows * inputs)
            .map(|i| match i % inputs {
                0 => -63.5,
                1 => 64.0,
                _ => ((i * 7 % 256) as f32 - 127.0) * 0.5,
            })
            .collect();
        let layer = Int8Linear::new(&w, outputs, inputs, None);
        if layer.activation_levels < 255.0 {
            return; // a 7-bit kernel cannot hold these codes exactly
        }
        let mut y = vec![0.0; rows * outputs];
        layer.forward(&x, rows, &mut y, Activation::None);
        let want = reference(&x, &w, &vec![0.0; outputs], rows, inputs, outputs);
        for (a, b) in y.iter().zip(&want) {
            assert!((a - b).abs() <= 1e-3 * b.abs().max(1.0), "{a} vs {b}");
        }
    }

    #[test]
    fn the_activation_is_applied_after_the_bias() {
        let (rows, inputs, outputs) = (4, 32, 16);
        let x = values(rows * inputs, 4);
        let w = values(outputs * inputs, 5);
        let bias = values(outputs, 6);
        let layer = Int8Linear::new(&w, outputs, inputs, Some(&bias));
        let (mut plain, mut gelu) = (vec![0.0; rows * outputs], vec![0.0; rows * outputs]);
        layer.forward(&x, rows, &mut plain, Activation::None);
        layer.forward(&x, rows, &mut gelu, Activation::GeluErf);
        for (p, g) in plain.iter().zip(&gelu) {
            assert_eq!(*g, gelu_erf(*p));
        }
    }

    #[test]
    fn non_finite_inputs_give_defined_codes() {
        let layer = Int8Linear::new(&values(8 * 3, 9), 8, 3, None);
        let mut y = vec![0.0; 16];
        layer.forward(&[f32::NAN, 1.0, 2.0, f32::INFINITY, -1.0, 0.5], 2, &mut y, Activation::None);
        assert!(y[..8].iter().all(|v| v.is_finite()), "{y:?}");
    }

    #[test]
    fn zero_rows_and_zero_weights_are_fine() {
        let layer = Int8Linear::new(&[0.0; 12], 4, 3, None);
        let mut y = vec![1.0; 8];
        layer.forward(&[0.0; 6], 2, &mut y, Activation::None);
        assert_eq!(y, vec![0.0; 8]);
        layer.forward(&[], 0, &mut [], Activation::None);
        assert!(!layer.kernel_name().is_empty());
    }
}
