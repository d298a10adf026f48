//! Dense layers with int8 weights: `y = act(x · Wᵀ + b)` on a u8 × i8 → i32 GEMM.
//!
//! Weights are quantised once, symmetrically per output channel (scale `max|w|/127`, zero point
//! 0). Activations are quantised per row on each call, asymmetrically over `[min(x,0), max(x,0)]`
//! to 8 bits (unsigned, as x86's `vpdpbusd` wants): the GELU output feeding BERT's second FFN
//! matmul is nearly all ≥ −0.17, and a symmetric scheme would waste half of its range. The i32
//! sums are written into the f32 output buffer itself and turned into floats there, with the
//! scales, the bias and the activation in one pass.
//!
//! Outliers are taken out of the int8 product, as LLM.int8() does, but per row (so a text's
//! vector does not depend on what it is batched with): an input value over
//! [`OUTLIER_THRESHOLD`] in magnitude is zeroed before its row is quantised, and its share,
//! `x[r, c] · W[c, ·]`, added in f32 in the epilogue from a 16-bit copy of the weights
//! (quantised per input column). nomic-embed's residual stream carries two or three such
//! channels (|x| of 20 to 40 against a median of 0.05 to 0.4, in every row): with one scale per
//! row they left every other value a handful of codes, and the embeddings at cosine 0.990 to the
//! reference (docs/BENCHMARKS.md has the figures with them taken out).
//!
//! The GEMM is our AVX-512 VNNI tile (`vnni.rs`) or, on x86 without it, our AVX2 tile
//! (`avx2.rs`, 16-bit products); elsewhere rten-gemm's kernel for the CPU. Where that kernel
//! multiplies with `vpmaddubsw` (rten-gemm's x86 one, [`Kernel::Portable`]), its 16-bit pair
//! sums saturate past 32,767, so activations get 7 bits (0..=127), which cannot saturate
//! (127·127·2 < 32,767), at the cost of precision. [`Int8Linear::kernel_name`] says which runs.

use std::mem::MaybeUninit;

use rayon::prelude::*;
use rten_gemm::{GemmExecutor, GemmInputA, GemmInputB, GemmUninitOptions, PackedBMatrix};
use rten_tensor::NdTensorView;

use crate::gelu::gelu_erf;
#[cfg(target_arch = "x86_64")]
use crate::{avx2::Avx2, panels::PackedWeights, panels::Tile, vnni::Vnni};

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

/// An input value larger than this in magnitude is an outlier: set aside from its row's int8
/// product.
pub const OUTLIER_THRESHOLD: f32 = 6.0;

/// At most this many outliers (the largest) are set aside per row.
const MAX_OUTLIERS: usize = 16;

/// Rows handled by one parallel task in the element-wise passes.
const ROWS_PER_TASK: usize = 16;

/// A dense layer with weights quantised to int8 per output channel.
pub struct Int8Linear {
    /// The packed codes, and their rounding residual if kept ([`Int8Linear::with_weight_residual`]).
    gemm: Gemm,
    /// The residual matrix's column sums, if it is kept.
    residual_column_sums: Option<Vec<i32>>,
    /// The `(in, out)` weights again in 16 bits, scaled per input (row `c` times
    /// `outlier_scales[c]`), for the outliers' products in the epilogue.
    outlier_weights: Vec<i16>,
    outlier_scales: Vec<f32>,
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
    /// One activation scale per row with outliers set aside (false), or one per sequence with
    /// none, as an onnxruntime export expects ([`Int8Linear::with_sequence_scale`]).
    sequence_scale: bool,
}

/// Which GEMM runs, with the weights packed for it (`(in, out)` codes).
enum Gemm {
    /// Our AVX-512 VNNI tile (`vnni.rs`): the residual, if kept, is the pack's second matrix.
    #[cfg(target_arch = "x86_64")]
    Vnni(PackedWeights<Vnni>),
    /// Our AVX2 tile (`avx2.rs`), on x86 without VNNI: 16-bit products, so 8-bit activations.
    #[cfg(target_arch = "x86_64")]
    Avx2(PackedWeights<Avx2>),
    /// rten-gemm's kernel for this CPU (the same on every call: it depends only on the CPU).
    Rten { weights: PackedBMatrix<i8>, residual: Option<PackedBMatrix<i8>> },
}

/// Which GEMM a layer runs: the fastest this CPU has, or rten-gemm's portable kernels (for
/// comparing the two; `examples/int8_parts.rs`, the tests).
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kernel {
    Fastest,
    Portable,
}

impl Gemm {
    /// `weight` (`(outputs, inputs)`) as int8 codes per output channel (`scales`), and, if
    /// `residual`, the codes' rounding residual as a second matrix; with each matrix's column
    /// sums.
    fn pack(kernel: Kernel, weight: &[f32], scales: &[f32], inputs: usize, residual: bool) -> (Gemm, Vec<i32>, Option<Vec<i32>>) {
        let b = transposed_codes(weight, inputs, |o, w| w / scales[o]);
        let residual = residual.then(|| transposed_codes(weight, inputs, |o, w| (w / scales[o] - code(w / scales[o])) * RESIDUAL_LEVELS));
        Gemm::pack_codes(kernel, b, residual, inputs, scales.len())
    }

    /// [`Gemm::pack`] from codes already made: `b` and `residual` are `(inputs, outputs)`.
    fn pack_codes(kernel: Kernel, b: Vec<i8>, residual: Option<Vec<i8>>, inputs: usize, outputs: usize) -> (Gemm, Vec<i32>, Option<Vec<i32>>) {
        let sums = (column_sums(&b, outputs), residual.as_deref().map(|r| column_sums(r, outputs)));
        #[cfg(target_arch = "x86_64")]
        if kernel == Kernel::Fastest && (Vnni::available() || Avx2::available()) {
            let mut parts = vec![(b.as_slice(), outputs)];
            parts.extend(residual.as_deref().map(|r| (r, outputs)));
            let gemm = if Vnni::available() { Gemm::Vnni(PackedWeights::pack(inputs, &parts)) } else { Gemm::Avx2(PackedWeights::pack(inputs, &parts)) };
            return (gemm, sums.0, sums.1);
        }
        let pack = |b: &[i8]| executor().prepack_b(NdTensorView::from_data([inputs, outputs], b));
        (Gemm::Rten { weights: pack(&b), residual: residual.as_deref().map(pack) }, sums.0, sums.1)
    }

    fn kernel(&self) -> Kernel {
        match self {
            #[cfg(target_arch = "x86_64")]
            Gemm::Vnni(_) | Gemm::Avx2(_) => Kernel::Fastest,
            Gemm::Rten { .. } => Kernel::Portable,
        }
    }

    fn name(&self) -> String {
        match self {
            #[cfg(target_arch = "x86_64")]
            Gemm::Vnni(_) => Vnni::NAME.to_string(),
            #[cfg(target_arch = "x86_64")]
            Gemm::Avx2(_) => Avx2::NAME.to_string(),
            Gemm::Rten { .. } => executor().kernel_name().to_string(),
        }
    }

    /// Whether the kernel's 16-bit pair sums could saturate on 8-bit activations.
    fn may_saturate(&self) -> bool {
        matches!(self, Gemm::Rten { .. }) && executor().may_saturate()
    }

    /// The i32 sums of the quantised rows (`rows × inputs` codes, zero points not yet
    /// subtracted) times the weights, and if kept, times the residual into `residual_sums`.
    fn run(&self, codes: &[u8], rows: usize, inputs: usize, sums: &mut [MaybeUninit<i32>], residual_sums: Option<&mut [MaybeUninit<i32>]>) {
        match self {
            #[cfg(target_arch = "x86_64")]
            Gemm::Vnni(packed) => match residual_sums {
                Some(r) => packed.gemm(codes, inputs, rows, &mut [sums, r]),
                None => packed.gemm(codes, inputs, rows, &mut [sums]),
            },
            #[cfg(target_arch = "x86_64")]
            Gemm::Avx2(packed) => {
                let codes: Vec<u16> = codes.iter().map(|&c| u16::from(c)).collect();
                match residual_sums {
                    Some(r) => packed.gemm(&codes, inputs, rows, &mut [sums, r]),
                    None => packed.gemm(&codes, inputs, rows, &mut [sums]),
                }
            }
            Gemm::Rten { weights, residual } => {
                let gemm = |weights: &PackedBMatrix<i8>, sums: &mut [MaybeUninit<i32>]| {
                    executor()
                        .gemm_uninit(
                            sums,
                            GemmInputA::Unpacked(NdTensorView::from_data([rows, inputs], codes)),
                            GemmInputB::Packed(weights),
                            GemmUninitOptions::default(),
                        )
                        .expect("int8 GEMM shapes were checked by the caller");
                };
                gemm(weights, sums);
                if let (Some(weights), Some(sums)) = (residual, residual_sums) {
                    gemm(weights, sums);
                }
            }
        }
    }
}

/// A weight's int8 code at scale 1.
fn code(w: f32) -> f32 {
    w.round().clamp(-127.0, 127.0)
}

impl Int8Linear {
    /// Quantises `weight`, `(outputs, inputs)` row-major as in PyTorch's `Linear`.
    pub fn new(weight: &[f32], outputs: usize, inputs: usize, bias: Option<&[f32]>) -> Int8Linear {
        Int8Linear::on(Kernel::Fastest, weight, outputs, inputs, bias)
    }

    /// [`Int8Linear::new`] on the GEMM `kernel` names.
    #[doc(hidden)]
    pub fn on(kernel: Kernel, weight: &[f32], outputs: usize, inputs: usize, bias: Option<&[f32]>) -> Int8Linear {
        assert_eq!(weight.len(), outputs * inputs, "weight is not {outputs} × {inputs}");
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
        let (gemm, column_sums, _) = Gemm::pack(kernel, weight, &scales, inputs, false);
        Int8Linear::assemble(gemm, column_sums, weight, scales, bias)
    }

    /// The layer around a packed GEMM: `weight` (`(outputs, inputs)` f32) feeds only the
    /// outliers' 16-bit side path.
    fn assemble(gemm: Gemm, column_sums: Vec<i32>, weight: &[f32], scales: Vec<f32>, bias: Option<&[f32]>) -> Int8Linear {
        let (outputs, inputs) = (scales.len(), weight.len() / scales.len());
        let (outlier_weights, outlier_scales) = weights_by_input(weight, outputs, inputs);
        let bias = match bias {
            Some(b) => {
                assert_eq!(b.len(), outputs, "bias is not {outputs} long");
                b.to_vec()
            }
            None => vec![0.0; outputs],
        };
        let activation_levels = if gemm.may_saturate() { 127.0 } else { 255.0 };
        Int8Linear {
            gemm,
            residual_column_sums: None,
            outlier_weights,
            outlier_scales,
            scales,
            bias,
            column_sums,
            inputs,
            outputs,
            activation_levels,
            sequence_scale: false,
        }
    }

    /// A layer whose weights arrive already quantised, as an int8 model file stores them (an
    /// onnxruntime dynamic-quantisation export): `codes` is `(inputs, outputs)` row-major (the
    /// layout of `x · W`), weight `w[i][o] = scales[o] · codes[i][o]`, zero point 0. The codes
    /// are packed as they are, with no round trip through f32.
    pub fn from_codes(codes: &[i8], inputs: usize, outputs: usize, scales: &[f32], bias: Option<&[f32]>) -> Int8Linear {
        Int8Linear::from_codes_on(Kernel::Fastest, codes, inputs, outputs, scales, bias)
    }

    /// [`Int8Linear::from_codes`] on the GEMM `kernel` names.
    #[doc(hidden)]
    pub fn from_codes_on(kernel: Kernel, codes: &[i8], inputs: usize, outputs: usize, scales: &[f32], bias: Option<&[f32]>) -> Int8Linear {
        assert_eq!(codes.len(), outputs * inputs, "codes are not {inputs} × {outputs}");
        assert_eq!(scales.len(), outputs, "scales are not {outputs} long");
        // The f32 weights, `(outputs, inputs)`, only for the outliers' 16-bit side path.
        let mut weight = vec![0f32; outputs * inputs];
        for (i, row) in codes.chunks_exact(outputs).enumerate() {
            for (o, (&c, &s)) in row.iter().zip(scales).enumerate() {
                weight[o * inputs + i] = f32::from(c) * s;
            }
        }
        let (gemm, column_sums, _) = Gemm::pack_codes(kernel, codes.to_vec(), None, inputs, outputs);
        Int8Linear::assemble(gemm, column_sums, &weight, scales.to_vec(), bias)
    }

    /// Adds a second int8 matrix holding what the first one's rounding left of `weight` (the
    /// same `(outputs, inputs)` it was made from): `W ≈ s·(q + q₂/254)`, about 15 bits per weight
    /// for twice this layer's multiply-adds (in the same pass over the activations on the VNNI
    /// kernel). For the layers whose 8-bit weights cost the most (BERT's FFN output,
    /// `model::bert`).
    pub fn with_weight_residual(mut self, weight: &[f32]) -> Int8Linear {
        assert_eq!(weight.len(), self.outputs * self.inputs, "weight is not {} × {}", self.outputs, self.inputs);
        let (gemm, _, residual_column_sums) = Gemm::pack(self.gemm.kernel(), weight, &self.scales, self.inputs, true);
        self.gemm = gemm;
        self.residual_column_sums = residual_column_sums;
        self
    }

    /// Activations quantised as onnxruntime's `DynamicQuantizeLinear` does for the model files
    /// [`Int8Linear::from_codes`] reads: one scale and zero point over a whole sequence's rows
    /// (its tensor, when it runs one pair at a time), no outliers set aside. A model quantised by
    /// that exporter was checked against those activations, and its logits then agree with
    /// onnxruntime's (`l12_cross_encoder_agrees_with_onnxruntime_on_the_same_int8_file`). The
    /// sequence, not the call, is the unit, so a text's result does not depend on the texts it
    /// is batched with (only, slightly, on the padding rows of its own sequence).
    pub fn with_sequence_scale(mut self) -> Int8Linear {
        self.sequence_scale = true;
        self
    }

    /// The GEMM kernel that runs (ours, or rten-gemm's name, e.g. `x86_64-u8i8i32-avx512`), and
    /// whether activations get 8 bits or, on a kernel that could saturate, 7.
    pub fn kernel_name(&self) -> String {
        let bits = if self.activation_levels > 127.0 { 8 } else { 7 };
        format!("{} (u{bits} activations)", self.gemm.name())
    }

    /// Input and output widths.
    pub fn shape(&self) -> (usize, usize) {
        (self.inputs, self.outputs)
    }

    /// `x`: `rows × inputs` row-major, one sequence; `y`: `rows × outputs`, overwritten.
    pub fn forward(&self, x: &[f32], rows: usize, y: &mut [f32], activation: Activation) {
        // SAFETY: an initialised slice seen as possibly uninitialised; `forward_uninit` only writes.
        let y = unsafe { std::slice::from_raw_parts_mut(y.as_mut_ptr().cast::<MaybeUninit<f32>>(), y.len()) };
        self.forward_uninit(x, rows, rows, y, activation);
    }

    /// [`Int8Linear::forward`] into a new vector, with no zeroing pass first.
    pub fn forward_to_vec(&self, x: &[f32], rows: usize, activation: Activation) -> Vec<f32> {
        self.forward_sequences(x, rows, rows, activation)
    }

    /// [`Int8Linear::forward_to_vec`] on `rows` that are sequences of `sequence_rows` rows each
    /// (what a sequence scale is taken over, [`Int8Linear::with_sequence_scale`]).
    pub fn forward_sequences(&self, x: &[f32], rows: usize, sequence_rows: usize, activation: Activation) -> Vec<f32> {
        let len = rows * self.outputs;
        let mut y = Vec::with_capacity(len);
        self.forward_uninit(x, rows, sequence_rows, &mut y.spare_capacity_mut()[..len], activation);
        // SAFETY: `forward_uninit` wrote all `len` values.
        unsafe { y.set_len(len) };
        y
    }

    /// Writes every element of `y` (`rows × outputs`).
    fn forward_uninit(&self, x: &[f32], rows: usize, sequence_rows: usize, y: &mut [MaybeUninit<f32>], activation: Activation) {
        assert_eq!(x.len(), rows * self.inputs, "input is not {rows} × {}", self.inputs);
        assert_eq!(y.len(), rows * self.outputs, "output is not {rows} × {}", self.outputs);
        if rows == 0 {
            return;
        }
        assert!(sequence_rows > 0 && rows % sequence_rows == 0, "{rows} rows are not sequences of {sequence_rows}");
        let quantised = if self.sequence_scale { self.quantise_sequences(x, rows, sequence_rows) } else { self.quantise_rows(x, rows) };
        // SAFETY: MaybeUninit<i32> and MaybeUninit<f32> have the same size and alignment.
        let sums = unsafe { std::slice::from_raw_parts_mut(y.as_mut_ptr().cast::<MaybeUninit<i32>>(), y.len()) };
        let mut residual_sums = self.residual_column_sums.as_ref().map(|_| Vec::with_capacity(rows * self.outputs));
        let spare = residual_sums.as_mut().map(|r: &mut Vec<i32>| &mut r.spare_capacity_mut()[..rows * self.outputs]);
        self.gemm.run(&quantised.codes, rows, self.inputs, sums, spare);
        if let Some(r) = residual_sums.as_mut() {
            // SAFETY: the GEMM wrote every element.
            unsafe { r.set_len(rows * self.outputs) };
        }
        // SAFETY: the GEMM wrote every element, as an i32 sum the epilogue reads back by its bits.
        let y = unsafe { std::slice::from_raw_parts_mut(y.as_mut_ptr().cast::<f32>(), y.len()) };
        self.dequantise_rows(y, x, &quantised, residual_sums.as_deref(), activation);
    }

    /// Every row of sums in place: `act((sum − z·Σw) · a · wⱼ + bⱼ)`, with the residual
    /// matrix's sums and the row's outliers' share (from `x`) added before the activation.
    fn dequantise_rows(&self, y: &mut [f32], x: &[f32], q: &Quantised, residual_sums: Option<&[i32]>, activation: Activation) {
        y.par_chunks_mut(self.outputs * ROWS_PER_TASK).enumerate().for_each(|(task, block)| {
            let mut extra = Vec::new();
            for (r, row) in block.chunks_exact_mut(self.outputs).enumerate() {
                let index = task * ROWS_PER_TASK + r;
                let a = Row { scale: q.scales[index], zero: i32::from(q.zeros[index]) };
                let outliers = q.outliers[index].columns();
                if outliers.is_empty() && residual_sums.is_none() {
                    match activation {
                        Activation::None => dequantise(row, a, self, |v| v),
                        Activation::GeluErf => dequantise(row, a, self, gelu_erf),
                    }
                    continue;
                }
                extra.clear();
                extra.resize(self.outputs, 0f32);
                if let (Some(sums), Some(residual_column_sums)) = (residual_sums, &self.residual_column_sums) {
                    let sums = &sums[index * self.outputs..(index + 1) * self.outputs];
                    // In the main matrix's units: its scale and the row's are applied below.
                    for ((e, &sum), (&col, &w)) in extra.iter_mut().zip(sums).zip(residual_column_sums.iter().zip(&self.scales)) {
                        *e = (sum - a.zero * col) as f32 * (a.scale * w / RESIDUAL_LEVELS);
                    }
                }
                for &c in outliers {
                    let c = c as usize;
                    let xc = x[index * self.inputs + c] * self.outlier_scales[c];
                    for (e, &w) in extra.iter_mut().zip(&self.outlier_weights[c * self.outputs..(c + 1) * self.outputs]) {
                        *e += xc * f32::from(w);
                    }
                }
                match activation {
                    Activation::None => dequantise_with(row, a, self, &extra, |v| v),
                    Activation::GeluErf => dequantise_with(row, a, self, &extra, gelu_erf),
                }
            }
        });
    }

    /// Each row to `u8` over `[min(x,0), max(x,0)]` once its outliers are set aside (zeroed):
    /// the codes, and per row the scale, the code of zero and the outliers.
    fn quantise_rows(&self, x: &[f32], rows: usize) -> Quantised {
        let levels = self.activation_levels;
        let mut codes = vec![0u8; x.len()];
        let mut scales = vec![0f32; rows];
        let mut zeros = vec![0u8; rows];
        let mut outliers = vec![RowOutliers::default(); rows];
        codes
            .par_chunks_mut(self.inputs * ROWS_PER_TASK)
            .zip(scales.par_chunks_mut(ROWS_PER_TASK))
            .zip(zeros.par_chunks_mut(ROWS_PER_TASK))
            .zip(outliers.par_chunks_mut(ROWS_PER_TASK))
            .zip(x.par_chunks(self.inputs * ROWS_PER_TASK))
            .for_each(|((((codes, scales), zeros), outliers), x)| {
                let mut inliers = Vec::new();
                for ((((codes, scale), zero), found), x) in codes
                    .chunks_exact_mut(self.inputs)
                    .zip(scales.iter_mut())
                    .zip(zeros.iter_mut())
                    .zip(outliers.iter_mut())
                    .zip(x.chunks_exact(self.inputs))
                {
                    *found = RowOutliers::find(x);
                    let x = if found.columns().is_empty() {
                        x
                    } else {
                        inliers.clear();
                        inliers.extend_from_slice(x);
                        for &c in found.columns() {
                            inliers[c as usize] = 0.0;
                        }
                        &inliers[..]
                    };
                    let (lo, hi) = range_with_zero(x);
                    let (s, z) = quantisation(lo, hi, levels);
                    quantise_to(codes, x, s, z, levels);
                    *scale = s;
                    *zero = z as u8;
                }
            });
        Quantised { codes, scales, zeros, outliers }
    }

    /// Each sequence of `sequence_rows` rows to `u8` over `[min(x,0), max(x,0)]` of all its
    /// values, as `DynamicQuantizeLinear` does (scale `(max − min)/255`, zero point and codes
    /// rounded half to even), no outliers set aside.
    fn quantise_sequences(&self, x: &[f32], rows: usize, sequence_rows: usize) -> Quantised {
        let levels = self.activation_levels;
        let mut codes = vec![0u8; x.len()];
        let mut scales = vec![0f32; rows];
        let mut zeros = vec![0u8; rows];
        let width = sequence_rows * self.inputs;
        let task = self.inputs * ROWS_PER_TASK;
        for (((codes, scales), zeros), x) in codes.chunks_mut(width).zip(scales.chunks_mut(sequence_rows)).zip(zeros.chunks_mut(sequence_rows)).zip(x.chunks(width)) {
            let (lo, hi) = x.par_chunks(task).map(range_with_zero).reduce(|| (0.0, 0.0), |a, b| (a.0.min(b.0), a.1.max(b.1)));
            let (s, z) = quantisation(lo, hi, levels);
            codes.par_chunks_mut(task).zip(x.par_chunks(task)).for_each(|(codes, x)| quantise_to(codes, x, s, z, levels));
            scales.fill(s);
            zeros.fill(z as u8);
        }
        Quantised { codes, scales, zeros, outliers: vec![RowOutliers::default(); rows] }
    }
}

/// The scale and the code of zero for values over `[lo, hi]` (which holds 0) in `levels + 1` steps.
fn quantisation(lo: f32, hi: f32, levels: f32) -> (f32, f32) {
    let s = if hi > lo { (hi - lo) / levels } else { 1.0 };
    (s, (-lo / s).round_ties_even().clamp(0.0, levels))
}

/// `x` to codes at scale `s` with zero at code `z`: NaN and −∞ get code 0, +∞ the top code.
fn quantise_to(codes: &mut [u8], x: &[f32], s: f32, z: f32, levels: f32) {
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
        // SAFETY: `q` is within 0..=255 here. The unchecked cast is what lets the compiler
        // vectorise this loop (`as` saturates, element by element).
        *c = unsafe { q.to_int_unchecked::<i32>() } as u8;
    }
}

/// The residual matrix's codes are the first rounding's error times this (|error| ≤ ½ code).
const RESIDUAL_LEVELS: f32 = 254.0;

/// `weight` (`(outputs, inputs)` row-major) transposed to `(inputs, outputs)` int8 codes,
/// `code_of(o, w)` rounded and clamped to ±127.
fn transposed_codes(weight: &[f32], inputs: usize, code_of: impl Fn(usize, f32) -> f32) -> Vec<i8> {
    let outputs = weight.len() / inputs;
    let mut b = vec![0i8; inputs * outputs];
    for (o, row) in weight.chunks_exact(inputs).enumerate() {
        for (i, &w) in row.iter().enumerate() {
            b[i * outputs + o] = code(code_of(o, w)) as i8;
        }
    }
    b
}

/// Per output channel, the sum of its codes in `(inputs, outputs)` `b`.
fn column_sums(b: &[i8], outputs: usize) -> Vec<i32> {
    let mut sums = vec![0i32; outputs];
    for row in b.chunks_exact(outputs) {
        for (s, &w) in sums.iter_mut().zip(row) {
            *s += i32::from(w);
        }
    }
    sums
}

/// Quantised activation rows: codes, per row the scale, the code of zero and the outliers set
/// aside.
struct Quantised {
    codes: Vec<u8>,
    scales: Vec<f32>,
    zeros: Vec<u8>,
    outliers: Vec<RowOutliers>,
}

/// One row's outliers: the columns of its finite values over [`OUTLIER_THRESHOLD`] in
/// magnitude, at most [`MAX_OUTLIERS`] (the largest), in column order. (Non-finite values stay
/// in the int8 product, which gives them defined codes.)
#[derive(Clone, Copy, Default)]
struct RowOutliers {
    len: u8,
    columns: [u32; MAX_OUTLIERS],
}

impl RowOutliers {
    fn find(row: &[f32]) -> RowOutliers {
        let mut found = RowOutliers::default();
        if largest_finite(row) <= OUTLIER_THRESHOLD {
            return found;
        }
        let mut candidates: Vec<(f32, u32)> =
            row.iter().enumerate().filter(|(_, v)| v.is_finite() && v.abs() > OUTLIER_THRESHOLD).map(|(c, v)| (v.abs(), c as u32)).collect();
        if candidates.len() > MAX_OUTLIERS {
            candidates.sort_by(|a, b| b.0.total_cmp(&a.0));
            candidates.truncate(MAX_OUTLIERS);
        }
        candidates.sort_by_key(|&(_, c)| c);
        for (slot, (_, c)) in found.columns.iter_mut().zip(&candidates) {
            *slot = *c;
        }
        found.len = candidates.len() as u8;
        found
    }

    fn columns(&self) -> &[u32] {
        &self.columns[..usize::from(self.len)]
    }
}

/// The largest finite |x| of a row, in 16 lanes so the compiler vectorises it.
#[inline(always)]
fn largest_finite(x: &[f32]) -> f32 {
    let mut m = [0f32; 16];
    let chunks = x.chunks_exact(16);
    let tail = chunks.remainder();
    for chunk in chunks {
        for j in 0..16 {
            let v = if chunk[j].is_finite() { chunk[j].abs() } else { 0.0 };
            m[j] = if v > m[j] { v } else { m[j] };
        }
    }
    m.iter().chain(tail.iter().map(|v| if v.is_finite() { v } else { &0.0 })).fold(0f32, |m, &v| if v.abs() > m { v.abs() } else { m })
}

/// `weight` (`(outputs, inputs)` row-major) as `(inputs, outputs)` 16-bit codes with one scale
/// per input (`max|w|/32767` over its outputs).
fn weights_by_input(weight: &[f32], outputs: usize, inputs: usize) -> (Vec<i16>, Vec<f32>) {
    let mut scales = vec![0f32; inputs];
    for row in weight.chunks_exact(inputs) {
        for (s, w) in scales.iter_mut().zip(row) {
            *s = s.max(w.abs());
        }
    }
    for s in &mut scales {
        *s = if *s > 0.0 { *s / 32767.0 } else { 1.0 };
    }
    let mut codes = vec![0i16; inputs * outputs];
    for (o, row) in weight.chunks_exact(inputs).enumerate() {
        for (i, (w, s)) in row.iter().zip(&scales).enumerate() {
            codes[i * outputs + o] = (w / s).round().clamp(-32767.0, 32767.0) as i16;
        }
    }
    (codes, scales)
}

/// Times the three parts of [`Int8Linear::forward`] (quantise, GEMM, dequantise with GELU) and
/// prints them: for `examples/int8_parts.rs`.
#[doc(hidden)]
pub fn profile_parts(layer: &Int8Linear, x: &[f32], rows: usize, y: &mut [f32]) {
    let t = std::time::Instant::now();
    let q = layer.quantise_rows(x, rows);
    let t_q = t.elapsed();
    // SAFETY: as in `forward_uninit`.
    let sums = unsafe { std::slice::from_raw_parts_mut(y.as_mut_ptr().cast::<MaybeUninit<i32>>(), y.len()) };
    let t = std::time::Instant::now();
    layer.gemm.run(&q.codes, rows, layer.inputs, sums, None);
    let t_g = t.elapsed();
    let t = std::time::Instant::now();
    layer.dequantise_rows(y, x, &q, None, Activation::GeluErf);
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

/// [`dequantise`] with the outliers' products added: `act((sum − z·Σwⱼ) · a · wⱼ + bⱼ + extraⱼ)`.
#[inline(always)]
fn dequantise_with(row: &mut [f32], a: Row, layer: &Int8Linear, extra: &[f32], act: impl Fn(f32) -> f32) {
    for ((((v, &w), &b), &col), &e) in row.iter_mut().zip(&layer.scales).zip(&layer.bias).zip(&layer.column_sums).zip(extra) {
        let sum = v.to_bits() as i32 - a.zero * col;
        *v = act(sum as f32 * (a.scale * w) + b + e);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::values;

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

    /// Rows spanning [-3.97, 4] in steps of 1/32, so each quantises exactly (scale 1/32, zero at
    /// code 127), none large enough to be an outlier.
    fn on_the_grid(rows: usize, inputs: usize) -> Vec<f32> {
        (0..rows * inputs)
            .map(|i| match i % inputs {
                0 => -127.0 / 32.0,
                1 => 4.0,
                _ => ((i * 7 % 256) as f32 - 127.0) / 32.0,
            })
            .collect()
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
    fn codes_from_a_model_file_are_used_as_they_are() {
        // Activations on their row's grid and weights that are codes times a per-channel scale:
        // the product is exact up to f32 rounding, on both kernels, with the codes' -127 and 127.
        let (rows, inputs, outputs) = (19, 64, 40);
        let x = on_the_grid(rows, inputs);
        let codes: Vec<i8> = (0..inputs * outputs).map(|i| ((i * 37 % 255) as i32 - 127) as i8).collect();
        let scales: Vec<f32> = (0..outputs).map(|o| 0.001 * (o + 1) as f32).collect();
        let bias = values(outputs, 4);
        let mut w = vec![0f32; outputs * inputs];
        for i in 0..inputs {
            for o in 0..outputs {
                w[o * inputs + i] = f32::from(codes[i * outputs + o]) * scales[o];
            }
        }
        let want = reference(&x, &w, &bias, rows, inputs, outputs);
        for kernel in [Kernel::Fastest, Kernel::Portable] {
            let layer = Int8Linear::from_codes_on(kernel, &codes, inputs, outputs, &scales, Some(&bias));
            assert_eq!(layer.shape(), (inputs, outputs));
            let y = layer.forward_to_vec(&x, rows, Activation::None);
            let worst = y.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
            // 7-bit activations (rten-gemm on x86 without VNNI) halve the grid: allow its step.
            let bound = if layer.kernel_name().contains("u7") { 0.5 } else { 1e-3 };
            assert!(worst < bound, "{kernel:?}: worst error {worst}");
        }
    }

    #[test]
    fn a_sequence_scale_is_one_dynamic_quantisation_per_sequence() {
        // onnxruntime's DynamicQuantizeLinear written out: one scale and zero point over all of a
        // sequence's values, codes rounded half to even; the int8 product then exact in i32.
        let (inputs, outputs, sequence_rows, sequences) = (48, 24, 7, 3);
        let rows = sequence_rows * sequences;
        let mut x = values(rows * inputs, 31);
        // A large value in the second sequence only: its scale, not the others'.
        x[sequence_rows * inputs + 5] = 9.5;
        let codes: Vec<i8> = (0..inputs * outputs).map(|i| ((i * 53 % 255) as i32 - 127) as i8).collect();
        let scales: Vec<f32> = (0..outputs).map(|o| 0.002 * (o + 1) as f32).collect();
        let bias = values(outputs, 32);
        let layer = Int8Linear::from_codes(&codes, inputs, outputs, &scales, Some(&bias)).with_sequence_scale();
        let y = layer.forward_sequences(&x, rows, sequence_rows, Activation::None);
        let mut want = vec![0f32; rows * outputs];
        for (q, xs) in x.chunks(sequence_rows * inputs).enumerate() {
            let (lo, hi) = (xs.iter().fold(0f32, |m, &v| m.min(v)), xs.iter().fold(0f32, |m, &v| m.max(v)));
            let scale = (hi - lo) / 255.0;
            let zero = (-lo / scale).round_ties_even().clamp(0.0, 255.0);
            for r in 0..sequence_rows {
                let row = &xs[r * inputs..(r + 1) * inputs];
                for o in 0..outputs {
                    let dot: i32 = row
                        .iter()
                        .map(|&v| ((v / scale).round_ties_even() + zero).clamp(0.0, 255.0) as i32 - zero as i32)
                        .zip((0..inputs).map(|i| i32::from(codes[i * outputs + o])))
                        .map(|(a, w)| a * w)
                        .sum();
                    want[(q * sequence_rows + r) * outputs + o] = dot as f32 * scale * scales[o] + bias[o];
                }
            }
        }
        let worst = y.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
        if !layer.kernel_name().contains("u7") {
            assert!(worst < 1e-3, "worst difference from DynamicQuantizeLinear {worst}");
        }
        // Each sequence as if it ran alone: the batch does not change it.
        for q in 0..sequences {
            let alone = layer.forward_to_vec(&x[q * sequence_rows * inputs..(q + 1) * sequence_rows * inputs], sequence_rows, Activation::None);
            assert_eq!(alone, y[q * sequence_rows * outputs..(q + 1) * sequence_rows * outputs], "sequence {q}");
        }
    }

    #[test]
    fn outliers_are_taken_out_of_the_int8_product() {
        // Values in [-0.2, 0.2] but for two columns at 20 to 40 in every row, as nomic's residual
        // stream carries: with one scale per row the rest would be a few codes wide.
        let (rows, inputs, outputs) = (20, 768, 96);
        let mut x: Vec<f32> = values(rows * inputs, 21).iter().map(|v| v * 0.2).collect();
        for (r, row) in x.chunks_exact_mut(inputs).enumerate() {
            row[2] = if r % 2 == 0 { 30.0 } else { -25.0 };
            row[338] = 20.0 + r as f32;
        }
        assert_eq!(RowOutliers::find(&x[..inputs]).columns(), &[2, 338]);
        let w = values(outputs * inputs, 22);
        let bias = values(outputs, 23);
        let layer = Int8Linear::new(&w, outputs, inputs, Some(&bias));
        let want = reference(&x, &w, &bias, rows, inputs, outputs);
        // The error against the size of the other columns' share (the outliers' own share is
        // large: it would hide the damage from a plain cosine).
        let mut inliers = x.clone();
        for row in inliers.chunks_exact_mut(inputs) {
            (row[2], row[338]) = (0.0, 0.0);
        }
        let signal = reference(&inliers, &w, &vec![0.0; outputs], rows, inputs, outputs);
        let relative_error = |y: &[f32]| {
            let err: f64 = y.iter().zip(&want).map(|(a, b)| f64::from(a - b).powi(2)).sum();
            (err / signal.iter().map(|v| f64::from(*v).powi(2)).sum::<f64>()).sqrt()
        };
        let y = layer.forward_to_vec(&x, rows, Activation::None);
        let taken_out = relative_error(&y);
        assert!(taken_out < 0.01, "relative error {taken_out} with the outliers taken out");
        let gelu = layer.forward_to_vec(&x, rows, Activation::GeluErf);
        assert!(gelu.iter().zip(&y).all(|(g, v)| *g == gelu_erf(*v)), "the outliers' share goes in before the activation");
        // A row alone gets what it gets in the batch.
        assert_eq!(layer.forward_to_vec(&x[inputs..2 * inputs], 1, Activation::None), y[outputs..2 * outputs]);
        // The same rows quantised whole (nothing set aside) is what this fixes.
        let whole = {
            let mut plain = layer.quantise_rows(&x, rows);
            plain.outliers.fill(RowOutliers::default());
            // Quantise every value, outliers included, by the row's full range.
            for ((codes, row), (scale, zero)) in plain.codes.chunks_exact_mut(inputs).zip(x.chunks_exact(inputs)).zip(plain.scales.iter_mut().zip(plain.zeros.iter_mut())) {
                let (lo, hi) = range_with_zero(row);
                *scale = (hi - lo) / layer.activation_levels;
                *zero = (-lo / *scale).round_ties_even() as u8;
                for (c, v) in codes.iter_mut().zip(row) {
                    *c = (v / *scale + f32::from(*zero)).round_ties_even().clamp(0.0, layer.activation_levels) as u8;
                }
            }
            let mut whole = vec![0f32; rows * outputs];
            // SAFETY: as in `forward_uninit`.
            let sums = unsafe { std::slice::from_raw_parts_mut(whole.as_mut_ptr().cast::<MaybeUninit<i32>>(), whole.len()) };
            layer.gemm.run(&plain.codes, rows, inputs, sums, None);
            layer.dequantise_rows(&mut whole, &x, &plain, None, Activation::None);
            whole
        };
        let kept_in = relative_error(&whole);
        assert!(kept_in > 5.0 * taken_out, "relative error {kept_in} kept in, {taken_out} taken out");
    }

    #[test]
    fn the_weight_residual_leaves_only_the_activations_rounding() {
        // Activations on their row's grid, so all the error is the weights'.
        let (rows, inputs, outputs) = (9, 384, 40);
        let x = on_the_grid(rows, inputs);
        let w = values(outputs * inputs, 31);
        let bias = values(outputs, 32);
        let want = reference(&x, &w, &bias, rows, inputs, outputs);
        let worst = |layer: &Int8Linear| {
            let y = layer.forward_to_vec(&x, rows, Activation::None);
            y.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max)
        };
        let plain = Int8Linear::new(&w, outputs, inputs, Some(&bias));
        if plain.activation_levels < 255.0 {
            return; // a 7-bit kernel cannot hold these codes exactly
        }
        let (eight, fifteen) = (worst(&plain), worst(&plain.with_weight_residual(&w)));
        assert!(fifteen * 50.0 < eight, "worst error {fifteen} with the residual, {eight} without");
        let gelu = Int8Linear::new(&w, outputs, inputs, Some(&bias)).with_weight_residual(&w);
        let (y, g) = (gelu.forward_to_vec(&x, rows, Activation::None), gelu.forward_to_vec(&x, rows, Activation::GeluErf));
        assert!(y.iter().zip(&g).all(|(v, g)| *g == gelu_erf(*v)));
    }

    #[test]
    fn our_tiles_and_rten_gemm_give_the_same_outputs() {
        // Both sum the same integer products exactly, so with 8-bit activations on both the
        // outputs agree to the bit: residual matrix, outliers and GELU included. (Our tiles alone
        // are checked against plain sums in `panels::tests`, on every CPU that runs them.)
        for (rows, inputs, outputs) in [(1, 384, 1536), (15, 768, 96), (100, 1536, 384), (7, 13, 70)] {
            let mut x = values(rows * inputs, 41);
            x[inputs / 2] = 30.0;
            let w = values(outputs * inputs, 42);
            let bias = values(outputs, 43);
            let fast = Int8Linear::on(Kernel::Fastest, &w, outputs, inputs, Some(&bias)).with_weight_residual(&w);
            let portable = Int8Linear::on(Kernel::Portable, &w, outputs, inputs, Some(&bias)).with_weight_residual(&w);
            if fast.activation_levels != portable.activation_levels {
                return; // rten-gemm's 7-bit kernel on this CPU: not the same codes
            }
            assert_eq!(fast.forward_to_vec(&x, rows, Activation::GeluErf), portable.forward_to_vec(&x, rows, Activation::GeluErf), "{rows}×{inputs}×{outputs}");
            let plain = Int8Linear::on(Kernel::Fastest, &w, outputs, inputs, None);
            let plain_portable = Int8Linear::on(Kernel::Portable, &w, outputs, inputs, None);
            assert_eq!(plain.forward_to_vec(&x, rows, Activation::None), plain_portable.forward_to_vec(&x, rows, Activation::None));
        }
    }

    #[test]
    fn on_x86_with_avx2_the_activations_keep_eight_bits() {
        #[cfg(target_arch = "x86_64")]
        if is_x86_feature_detected!("avx2") {
            let layer = Int8Linear::new(&values(64 * 32, 5), 64, 32, None);
            assert_eq!(layer.activation_levels, 255.0, "{}", layer.kernel_name());
            assert!(layer.kernel_name().starts_with("ragbox "), "{}", layer.kernel_name());
        }
    }

    #[test]
    fn at_most_the_largest_outliers_of_a_row_are_taken() {
        let row: Vec<f32> = (0..64).map(|c| if c < 40 { 7.0 + c as f32 } else { 0.5 }).collect();
        assert_eq!(RowOutliers::find(&row).columns(), (40 - MAX_OUTLIERS as u32..40).collect::<Vec<_>>());
        assert_eq!(RowOutliers::find(&[f32::NAN, 1.0, -6.0, 6.5, f32::INFINITY, -7.0]).columns(), &[3, 5]);
        assert!(RowOutliers::find(&[0.1; 40]).columns().is_empty());
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
        let x = on_the_grid(rows, inputs);
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
