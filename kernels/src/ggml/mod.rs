//! The local LLM's products on GGML weight blocks, as the GGUF file holds them: one row of
//! activations (the decoding step, which reads every weight once per new token) against the
//! 32-element formats (Q4_0, Q5_0, Q8_0: [`gemv`]) and the k-quants (Q4_K, Q6_K: [`gemv_k`]), a
//! prompt's rows on AVX-512 VNNI panels ([`gemm`], [`gemm_k`]), and everything else on register
//! tiles ([`tiles`], [`tiles_k`]). The 32-element formats are described first.
//!
//! The weights stay in the GGUF file's own block bytes (`d` as f16, then the codes); the
//! activations come as GGML Q8_0 blocks (34 bytes: `d` as f16, 32 signed codes), quantised by
//! the caller. Candle's one-row paths either chain one column's adds (`vec_dot`) or spend a second
//! `vpdpbusd` per weight block on the `-128 · Σw` that makes signed activations unsigned; here the
//! weights are the unsigned side (Q4_0's and Q5_0's codes are unsigned before their offset of 8
//! or 16; Q8_0's are shifted by 128 with one xor), so the offset becomes `-offset · Σa`, one
//! value per *activation* block, computed once per call and shared by every column. A block's
//! product is then one `vpdpbusd` seeded with that sum (or `maddubs` and `madd` on AVX2), a
//! conversion and an FMA; Q5_0's fifth bits are one masked add (AVX-512 BW) instead of a shuffle,
//! a compare and two logic ops. What made the difference, though, is the prefetch: each pass
//! fetches the next pass's rows, which are too short a stream (a few hundred bytes) for the
//! hardware's prefetcher; without it every kernel here waited on memory half the time.
//!
//! Exact where it matters: each block's integer sums per lane are the ones candle's AVX2 dot
//! products and the tiles make (`Σ a·w` over the same four products), and the float steps
//! (`fma(d_a · d_w, sum, acc)` per block, then the same horizontal add) come in the same order, so
//! the one-row results are bit for bit those of the tiles and of candle's `vec_dot` (tests check
//! against a plain loop; the integration tests against candle's kernels), and the LLM's greedy
//! answers do not change. [`gemm_k`] sums in another order (per sub-block) and says so.
//!
//! Dispatch is here: [`GemvKernel::detect`] picks AVX-512 VNNI or AVX2 once per process; off x86_64
//! every function returns `false` and the caller's own kernel runs. What the one-row kernels and
//! the panels leave (2-31 rows, and a prompt on a CPU without AVX-512 VNNI) runs on the register
//! tiles of [`tiles`] ([`TileKernel::detect`] picks theirs).

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

use rayon::prelude::*;

mod tiles;

pub use tiles::{tiles, tiles_k, tiles_k_with, tiles_with, TileKernel};

/// A GGML weight block format this module reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockFormat {
    /// 16 bytes of 4-bit codes, value `q - 8`.
    Q4_0,
    /// 4 bytes of fifth bits and 16 bytes of 4-bit codes, value `q - 16`.
    Q5_0,
    /// 32 signed bytes.
    Q8_0,
}

/// Elements per block, in every format here.
pub const BLOCK: usize = 32;
/// Bytes of one Q8_0 activation block.
pub const Q8_0_BYTES: usize = 34;

impl BlockFormat {
    /// Bytes of one weight block.
    pub const fn bytes(self) -> usize {
        match self {
            BlockFormat::Q4_0 => 18,
            BlockFormat::Q5_0 => 22,
            BlockFormat::Q8_0 => 34,
        }
    }

    /// What is subtracted from the unsigned codes this module multiplies.
    const fn offset(self) -> i32 {
        match self {
            BlockFormat::Q4_0 => 8,
            BlockFormat::Q5_0 => 16,
            BlockFormat::Q8_0 => 128,
        }
    }

    /// Block `b`'s 32 values as signed integers (the plain reference; tests).
    pub fn decode(self, block: &[u8]) -> [i32; BLOCK] {
        let mut out = [0i32; BLOCK];
        match self {
            BlockFormat::Q4_0 => {
                for j in 0..16 {
                    out[j] = i32::from(block[2 + j] & 0x0F) - 8;
                    out[j + 16] = i32::from(block[2 + j] >> 4) - 8;
                }
            }
            BlockFormat::Q5_0 => {
                let qh = u32::from_le_bytes([block[2], block[3], block[4], block[5]]);
                for j in 0..16 {
                    let high = |bit: usize| (((qh >> bit) & 1) << 4) as i32;
                    out[j] = (i32::from(block[6 + j] & 0x0F) | high(j)) - 16;
                    out[j + 16] = (i32::from(block[6 + j] >> 4) | high(j + 16)) - 16;
                }
            }
            BlockFormat::Q8_0 => {
                for (o, &q) in out.iter_mut().zip(&block[2..34]) {
                    *o = i32::from(q as i8);
                }
            }
        }
        out
    }
}

/// The instructions [`gemv`] runs on: AVX-512 VNNI (one `vpdpbusd` per block and row) where the
/// CPU has it, AVX2 (`maddubs` and `madd`, ragbox's x86_64 baseline) elsewhere. Both make the
/// same integer sums per lane, so their results are the same bit for bit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GemvKernel {
    Avx512Vnni,
    Avx2,
}

impl GemvKernel {
    /// The best kernel this CPU runs, or `None` off x86_64 or without AVX2.
    /// (Looked up once per process: every product of every decoding step asks.)
    pub fn detect() -> Option<GemvKernel> {
        static BEST: std::sync::OnceLock<Option<GemvKernel>> = std::sync::OnceLock::new();
        *BEST.get_or_init(|| GemvKernel::available().into_iter().next())
    }

    /// Whether this CPU runs `self` (without the list [`GemvKernel::available`] allocates).
    fn runs_here(self) -> bool {
        match GemvKernel::detect() {
            Some(GemvKernel::Avx512Vnni) => true,
            Some(GemvKernel::Avx2) => self == GemvKernel::Avx2,
            None => false,
        }
    }

    /// Every kernel this CPU runs, best first.
    pub fn available() -> Vec<GemvKernel> {
        #[cfg(target_arch = "x86_64")]
        {
            let base = is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") && is_x86_feature_detected!("f16c");
            let vnni = base
                && is_x86_feature_detected!("avx512f")
                && is_x86_feature_detected!("avx512bw")
                && is_x86_feature_detected!("avx512vl")
                && is_x86_feature_detected!("avx512vnni");
            [(GemvKernel::Avx512Vnni, vnni), (GemvKernel::Avx2, base)].into_iter().filter(|(_, ok)| *ok).map(|(k, _)| k).collect()
        }
        #[cfg(not(target_arch = "x86_64"))]
        Vec::new()
    }

    /// For `ragbox doctor`.
    pub fn name(self) -> &'static str {
        match self {
            GemvKernel::Avx512Vnni => "ragbox avx512-vnni",
            GemvKernel::Avx2 => "ragbox avx2",
        }
    }
}

/// Weight rows per parallel task: small enough that a 896-row matrix still feeds two cores,
/// large enough that rayon's per-task cost is a few percent of a task.
const TASK_ROWS: usize = 64;

/// `dst[r] = Σ_b weight block (r, b) · activation block b` for `dst.len()` weight rows of
/// `k_blocks` blocks each (`weights`: the rows' blocks one after another, as a GGUF tensor
/// holds them; `activations`: `k_blocks` Q8_0 blocks, codes in [-127, 127] as GGML's quantiser
/// makes them), on the best kernel this CPU runs.
/// Returns `false`, touching nothing, where it runs none (off x86_64).
///
/// # Panics
/// When the slices' lengths do not match `k_blocks` and `dst.len()`.
pub fn gemv(format: BlockFormat, k_blocks: usize, activations: &[u8], weights: &[u8], dst: &mut [f32]) -> bool {
    match GemvKernel::detect() {
        Some(kernel) => {
            gemv_with(kernel, format, k_blocks, activations, weights, dst);
            true
        }
        None => false,
    }
}

/// [`gemv`] on a given kernel (tests and benchmarks compare them).
///
/// # Panics
/// As [`gemv`], and when this CPU does not run `kernel` ([`GemvKernel::available`]).
#[doc(hidden)]
pub fn gemv_with(kernel: GemvKernel, format: BlockFormat, k_blocks: usize, activations: &[u8], weights: &[u8], dst: &mut [f32]) {
    assert_eq!(activations.len(), k_blocks * Q8_0_BYTES, "activations: {k_blocks} Q8_0 blocks");
    assert_eq!(weights.len(), dst.len() * k_blocks * format.bytes(), "weights: {} rows of {k_blocks} blocks", dst.len());
    assert!(kernel.runs_here(), "this CPU does not run {kernel:?}");
    #[cfg(target_arch = "x86_64")]
    {
        let prepared = Prepared::new(kernel, format, k_blocks, activations);
        let row_bytes = k_blocks * format.bytes();
        dst.par_chunks_mut(TASK_ROWS).zip(weights.par_chunks(TASK_ROWS * row_bytes)).for_each(|(dst, weights)| {
            // SAFETY: the CPU runs `kernel` (asserted); `weights` holds `dst.len()` rows.
            unsafe {
                match (kernel, format) {
                    (GemvKernel::Avx512Vnni, BlockFormat::Q4_0) => rows::<VNNI, 0>(&prepared, weights, dst),
                    (GemvKernel::Avx512Vnni, BlockFormat::Q5_0) => rows::<VNNI, 1>(&prepared, weights, dst),
                    (GemvKernel::Avx512Vnni, BlockFormat::Q8_0) => rows::<VNNI, 2>(&prepared, weights, dst),
                    (GemvKernel::Avx2, BlockFormat::Q4_0) => rows::<AVX2, 0>(&prepared, weights, dst),
                    (GemvKernel::Avx2, BlockFormat::Q5_0) => rows::<AVX2, 1>(&prepared, weights, dst),
                    (GemvKernel::Avx2, BlockFormat::Q8_0) => rows::<AVX2, 2>(&prepared, weights, dst),
                }
            }
        });
    }
}

/// A GGML k-quant weight format (256-element blocks, Q8_K activations) this module reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KFormat {
    /// `d`, `dmin` (f16), 12 bytes of 6-bit scales and minimums, 128 bytes of 4-bit codes.
    Q4K,
    /// 128 bytes of low 4 bits, 64 of high 2 bits, 16 signed scales, `d` (f16).
    Q6K,
}

/// Elements per k-quant block.
pub const K_BLOCK: usize = 256;
/// Bytes of one Q8_K activation block (`d` as f32, 256 codes, 16 partial sums as i16).
pub const Q8_K_BYTES: usize = 292;

impl KFormat {
    /// Bytes of one weight block.
    pub const fn bytes(self) -> usize {
        match self {
            KFormat::Q4K => 144,
            KFormat::Q6K => 210,
        }
    }
}

/// [`gemv`] for the k-quants: `dst[r] = Σ_b weight block (r, b) · activation block b`, each row
/// by GGML's (and candle's) AVX2 dot product, bit for bit, with the next row's block fetched into
/// the cache while a block is multiplied (without it the dot products wait on memory). Returns
/// `false`, touching nothing, off x86_64 (AVX2 is ragbox's x86_64 baseline).
///
/// # Panics
/// When the slices' lengths do not match `k_blocks` and `dst.len()`.
pub fn gemv_k(format: KFormat, k_blocks: usize, activations: &[u8], weights: &[u8], dst: &mut [f32]) -> bool {
    assert_eq!(activations.len(), k_blocks * Q8_K_BYTES, "activations: {k_blocks} Q8_K blocks");
    assert_eq!(weights.len(), dst.len() * k_blocks * format.bytes(), "weights: {} rows of {k_blocks} blocks", dst.len());
    #[cfg(target_arch = "x86_64")]
    {
        // AVX2, FMA and F16C: the base every `GemvKernel` needs.
        if GemvKernel::detect().is_none() {
            return false;
        }
        let row_bytes = k_blocks * format.bytes();
        dst.par_chunks_mut(TASK_ROWS).zip(weights.par_chunks(TASK_ROWS * row_bytes)).for_each(|(dst, weights)| {
            for (r, out) in dst.iter_mut().enumerate() {
                let row = &weights[r * row_bytes..(r + 1) * row_bytes];
                let next = weights.as_ptr().wrapping_add((r + 1) * row_bytes);
                // SAFETY: the CPU has AVX2, FMA and F16C (checked above); `row` holds `k_blocks`
                // blocks and `activations` as many Q8_K blocks (asserted).
                *out = unsafe {
                    match format {
                        KFormat::Q4K => k_row::<0>(row, activations, next),
                        KFormat::Q6K => k_row::<1>(row, activations, next),
                    }
                };
            }
        });
        true
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// One k-quant row's dot product (`FORMAT` 0: Q4_K, 1: Q6_K), prefetching the row at `next`
/// (it may lie past the weights: a prefetch never faults).
///
/// # Safety
/// AVX2, FMA, F16C; `row` and `activations` hold the same number of blocks.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn k_row<const FORMAT: u8>(row: &[u8], activations: &[u8], next: *const u8) -> f32 {
    let format = [KFormat::Q4K, KFormat::Q6K][FORMAT as usize];
    let block_bytes = format.bytes();
    let lines = block_bytes.div_ceil(64);
    let mut state = if FORMAT == 0 { KSums::q4k() } else { KSums::q6k() };
    for (b, (x, y)) in row.chunks_exact(block_bytes).zip(activations.chunks_exact(Q8_K_BYTES)).enumerate() {
        for line in 0..lines {
            _mm_prefetch::<_MM_HINT_T0>(next.wrapping_add(b * block_bytes + line * 64) as *const i8);
        }
        if FORMAT == 0 {
            state.q4k_block(x, y);
        } else {
            state.q6k_block(x, y);
        }
    }
    state.total()
}

/// Many rows of activations (a prompt) against a 32-element format's weights, on AVX-512 VNNI:
/// `dst[r·n + c] = Σ_b weight block (c, b) · activation block (r, b)` for `m` rows of `k_blocks`
/// Q8_0 blocks and `n = dst.len() / m` weight rows. Each task repacks 32 weight rows into panels
/// of unsigned codes in the order the register tile reads them (per block: 8 steps of 4 inputs ×
/// 32 columns, the columns' scales as a vector) and runs every row against them in 6 × 32 tiles:
/// per block and row 16 `vpdpbusd` seeded with the row's offset term, then one conversion, one
/// multiply and one FMA per 16 columns. Each block's integer sum is exact and the float steps
/// are those of candle's panels (patches/README.md, candle item 6), whose results these are bit
/// for bit. Returns `false`, touching nothing, where the CPU lacks AVX-512 VNNI or
/// `m < GEMM_MIN_ROWS` (repacking every weight costs more than a few rows save).
///
/// # Panics
/// When the slices' lengths do not match `m`, `k_blocks` and `dst.len()`.
pub fn gemm(format: BlockFormat, m: usize, k_blocks: usize, activations: &[u8], weights: &[u8], dst: &mut [f32]) -> bool {
    let Some(n) = panel_columns(m, k_blocks, (activations, Q8_0_BYTES), (weights, format.bytes()), dst) else {
        return false;
    };
    #[cfg(target_arch = "x86_64")]
    {
        let rows = Prepared::new(GemvKernel::Avx512Vnni, format, m * k_blocks, activations);
        let out = SendPtr(dst.as_mut_ptr());
        let row_bytes = k_blocks * format.bytes();
        (0..n.div_ceil(PANEL)).into_par_iter().for_each(|panel| {
            let cols = panel * PANEL..((panel + 1) * PANEL).min(n);
            let packed = Q0Panel::new(format, k_blocks, &weights[cols.start * row_bytes..cols.end * row_bytes]);
            // SAFETY: the CPU has AVX-512 VNNI (checked above); this task alone writes columns
            // `cols` of `dst`, which holds `m × n` values.
            unsafe { q0_panel(&packed, &rows, m, k_blocks, cols, n, out.get()) };
        });
        true
    }
    #[cfg(not(target_arch = "x86_64"))]
    unreachable!("GemvKernel::detect is None off x86_64")
}

/// 32 weight rows of a 32-element format repacked for [`q0_panel`]: per block, 8 steps of 4
/// inputs × 32 columns of unsigned codes (two 64-byte registers a step), and the columns' scales.
#[cfg(target_arch = "x86_64")]
struct Q0Panel {
    codes: Vec<u8>,
    scales: Vec<f32>,
}

#[cfg(target_arch = "x86_64")]
impl Q0Panel {
    /// `weights`: up to 32 rows of `k_blocks` blocks (missing columns are zeros).
    fn new(format: BlockFormat, k_blocks: usize, weights: &[u8]) -> Q0Panel {
        let mut codes = vec![0u8; k_blocks * BLOCK * PANEL];
        let mut scales = vec![0f32; k_blocks * PANEL];
        let row_bytes = k_blocks * format.bytes();
        for (c, row) in weights.chunks_exact(row_bytes).enumerate() {
            for (b, block) in row.chunks_exact(format.bytes()).enumerate() {
                // SAFETY: `gemm` runs only where the CPU has AVX-512 VNNI (and so BW and VL);
                // the block holds `format.bytes()` bytes, starting with its f16 scale.
                let (unsigned, scale) = unsafe { (unsigned_codes(format, block.as_ptr()), f16_to_f32(block)) };
                // Inputs 4s..4s+4 of the block are step s of column c.
                for (s, four) in unsigned.chunks_exact(4).enumerate() {
                    let at = ((b * BLOCK / 4 + s) * PANEL + c) * 4;
                    codes[at..at + 4].copy_from_slice(four);
                }
                scales[b * PANEL + c] = scale;
            }
        }
        Q0Panel { codes, scales }
    }
}

/// A 32-element block's codes as the unsigned bytes `value + offset` (what `columns_vnni`
/// multiplies), decoded with the same instructions.
///
/// # Safety
/// AVX-512 BW and VL; `block` points at a whole block of `format`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl")]
unsafe fn unsigned_codes(format: BlockFormat, block: *const u8) -> [u8; BLOCK] {
    let low4 = _mm256_set1_epi8(0x0F);
    let w = match format {
        BlockFormat::Q4_0 => nibbles(block.add(2), low4),
        BlockFormat::Q5_0 => {
            let high = _cvtu32_mask32(std::ptr::read_unaligned(block.add(2) as *const u32));
            let w = nibbles(block.add(6), low4);
            _mm256_mask_add_epi8(w, high, w, _mm256_set1_epi8(16))
        }
        BlockFormat::Q8_0 => _mm256_xor_si256(_mm256_loadu_si256(block.add(2) as *const __m256i), _mm256_set1_epi8(-128)),
    };
    let mut out = [0u8; BLOCK];
    _mm256_storeu_si256(out.as_mut_ptr() as *mut __m256i, w);
    out
}

/// Every activation row against one [`Q0Panel`], 6 rows at a time, into columns `cols` of the
/// `n`-wide `dst`.
///
/// # Safety
/// AVX-512 VNNI; `rows` holds `m × k_blocks` blocks; `dst` holds `m` rows of `n`, columns `cols`
/// this caller's alone.
#[cfg(target_arch = "x86_64")]
unsafe fn q0_panel(panel: &Q0Panel, rows: &Prepared, m: usize, k_blocks: usize, cols: std::ops::Range<usize>, n: usize, dst: *mut f32) {
    let mut row = 0;
    while row < m {
        let count = (m - row).min(6);
        let sums = match count {
            6 => q0_tile::<6>(panel, rows, k_blocks, row),
            _ => {
                let mut out = [[0f32; PANEL]; 6];
                for i in 0..count {
                    out[i] = q0_tile::<1>(panel, rows, k_blocks, row + i)[0];
                }
                out
            }
        };
        for (i, sums) in sums.iter().take(count).enumerate() {
            for (j, c) in cols.clone().enumerate() {
                *dst.add((row + i) * n + c) = sums[j];
            }
        }
        row += count;
    }
}

/// `R` rows from `row0` against the panel's 32 columns (candle's `panel_tile`, with the offset
/// term seeded per row instead of per column: the same integer sums).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn q0_tile<const R: usize>(panel: &Q0Panel, rows: &Prepared, k_blocks: usize, row0: usize) -> [[f32; PANEL]; R] {
    let mut acc = [[_mm512_setzero_ps(); 2]; R];
    let w = panel.codes.as_ptr();
    for b in 0..k_blocks {
        let mut sums = [[_mm512_setzero_si512(); 2]; R];
        for (i, sums) in sums.iter_mut().enumerate() {
            // The lanes' seeds together: a panel's lane sums a column's whole block.
            let seed: i32 = rows.blocks.get_unchecked((row0 + i) * k_blocks + b).seed.iter().sum();
            *sums = [_mm512_set1_epi32(seed); 2];
        }
        for s in 0..8 {
            let w0 = _mm512_loadu_si512(w.add((b * 8 + s) * 128) as *const _);
            let w1 = _mm512_loadu_si512(w.add((b * 8 + s) * 128 + 64) as *const _);
            for (i, sums) in sums.iter_mut().enumerate() {
                let a = rows.blocks.get_unchecked((row0 + i) * k_blocks + b).codes.as_ptr();
                let x = _mm512_set1_epi32(std::ptr::read_unaligned(a.add(4 * s) as *const i32));
                sums[0] = _mm512_dpbusd_epi32(sums[0], w0, x);
                sums[1] = _mm512_dpbusd_epi32(sums[1], w1, x);
            }
        }
        let d = [_mm512_loadu_ps(panel.scales.as_ptr().add(b * PANEL)), _mm512_loadu_ps(panel.scales.as_ptr().add(b * PANEL + 16))];
        for (i, (acc, sums)) in acc.iter_mut().zip(&sums).enumerate() {
            let da = _mm512_set1_ps(*rows.scales.get_unchecked((row0 + i) * k_blocks + b));
            for h in 0..2 {
                acc[h] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums[h]), _mm512_mul_ps(da, d[h]), acc[h]);
            }
        }
    }
    let mut out = [[0f32; PANEL]; R];
    for (out, acc) in out.iter_mut().zip(&acc) {
        _mm512_storeu_ps(out.as_mut_ptr(), acc[0]);
        _mm512_storeu_ps(out.as_mut_ptr().add(16), acc[1]);
    }
    out
}

/// Rows from which [`gemm`] and [`gemm_k`] pay for repacking the weights (the panels are made once per call
/// and serve every row; below this, the register tiles of [`tiles`] and [`tiles_k`]).
pub const GEMM_MIN_ROWS: usize = 32;

/// The checks [`gemm`] and [`gemm_k`] share: the slices' lengths against `m` rows of `k_blocks`
/// activation blocks (`activations`, bytes a block) and the weight rows (`weights`, bytes a
/// block) that `dst` implies, panicking on a mismatch; then `Some(n)`, the weight rows, when the
/// panels take the product (at least [`GEMM_MIN_ROWS`] rows on AVX-512 VNNI), else `None`.
fn panel_columns(m: usize, k_blocks: usize, activations: (&[u8], usize), weights: (&[u8], usize), dst: &[f32]) -> Option<usize> {
    assert_eq!(activations.0.len(), m * k_blocks * activations.1, "activations: {m} rows of {k_blocks} blocks");
    let n = dst.len() / m.max(1);
    assert_eq!(dst.len(), m * n, "dst: {m} rows");
    assert_eq!(weights.0.len(), n * k_blocks * weights.1, "weights: {n} rows of {k_blocks} blocks");
    (m >= GEMM_MIN_ROWS && GemvKernel::detect() == Some(GemvKernel::Avx512Vnni)).then_some(n)
}

/// Columns per panel of [`gemm_k`]: two 16-lane registers.
const PANEL: usize = 32;

/// Activation rows per register tile of [`gemm_k`]: 4 rows × 2 halves of integer sums and as
/// many float sums, 2 weight registers and a broadcast (23 of the 32 registers).
const TILE_ROWS: usize = 4;

/// Many rows of activations (a prompt) against k-quant weights, on AVX-512 VNNI: `dst[r·n + c] =
/// Σ_b weight block (c, b) · activation block (r, b)` for `m` activation rows of `k_blocks` Q8_K
/// blocks and `n = dst.len() / m` weight rows. Each task repacks 32 weight rows into panels in
/// the order the register tile reads them (per sub-block: steps of 4 inputs × 32 columns of
/// unsigned codes, with each column's sub-block scale and offset as floats) and runs every
/// activation row against them: a sub-block's products are `vpdpbusd`s, its scale and its offset
/// (Q4_K's minimum, Q6_K's −32) are applied in floats with the activations' sub-block sums.
/// The sums round differently from the k-quant tiles (one float step per sub-block instead of one
/// per block): ~1e-6 relative. Returns `false`, touching nothing, where the CPU lacks AVX-512
/// VNNI or `m < GEMM_MIN_ROWS`.
///
/// # Panics
/// When the slices' lengths do not match `m`, `k_blocks` and `dst.len()`.
pub fn gemm_k(format: KFormat, m: usize, k_blocks: usize, activations: &[u8], weights: &[u8], dst: &mut [f32]) -> bool {
    let Some(n) = panel_columns(m, k_blocks, (activations, Q8_K_BYTES), (weights, format.bytes()), dst) else {
        return false;
    };
    #[cfg(target_arch = "x86_64")]
    {
        let rows = KRows::new(format, m, k_blocks, activations);
        let out = SendPtr(dst.as_mut_ptr());
        let row_bytes = k_blocks * format.bytes();
        (0..n.div_ceil(PANEL)).into_par_iter().for_each(|panel| {
            let cols = panel * PANEL..((panel + 1) * PANEL).min(n);
            let packed = KPanel::new(format, k_blocks, &weights[cols.start * row_bytes..cols.end * row_bytes]);
            // SAFETY: the CPU has AVX-512 VNNI (checked above); this task alone writes columns
            // `cols` of `dst`, which holds `m × n` values.
            unsafe { k_panel(&packed, &rows, cols, n, out.get()) };
        });
        true
    }
    #[cfg(not(target_arch = "x86_64"))]
    unreachable!("GemvKernel::detect is None off x86_64")
}

/// A pointer the parallel tasks share; each writes only its own columns.
#[derive(Clone, Copy)]
struct SendPtr(*mut f32);
// SAFETY: the tasks write disjoint cells (their columns) and the caller waits for all of them.
unsafe impl Send for SendPtr {}
unsafe impl Sync for SendPtr {}

impl SendPtr {
    fn get(self) -> *mut f32 {
        self.0
    }
}

/// The prompt's Q8_K rows as [`k_panel`] reads them: codes where they lie, and per row and block
/// the scale and each sub-block's sum times the scale (the offset's weight).
#[cfg(target_arch = "x86_64")]
struct KRows<'a> {
    activations: &'a [u8],
    k_blocks: usize,
    /// Elements per sub-block: 32 (Q4_K) or 16 (Q6_K).
    sub: usize,
    /// `[row][block]`: the block's scale.
    scale: Vec<f32>,
    /// `[row][block][sub-block]`: scale × sum of the sub-block's codes.
    scaled_sums: Vec<f32>,
}

#[cfg(target_arch = "x86_64")]
impl<'a> KRows<'a> {
    fn new(format: KFormat, m: usize, k_blocks: usize, activations: &'a [u8]) -> KRows<'a> {
        let sub = if format == KFormat::Q4K { 32 } else { 16 };
        let subs = K_BLOCK / sub;
        let mut scale = Vec::with_capacity(m * k_blocks);
        let mut scaled_sums = Vec::with_capacity(m * k_blocks * subs);
        for block in activations.chunks_exact(Q8_K_BYTES) {
            let d = f32::from_le_bytes([block[0], block[1], block[2], block[3]]);
            scale.push(d);
            let bsum = |i: usize| i32::from(i16::from_le_bytes([block[260 + 2 * i], block[261 + 2 * i]]));
            for s in 0..subs {
                let sum = if sub == 32 { bsum(2 * s) + bsum(2 * s + 1) } else { bsum(s) };
                scaled_sums.push(d * sum as f32);
            }
        }
        KRows { activations, k_blocks, sub, scale, scaled_sums }
    }
}

/// 32 weight rows of one k-quant tensor, repacked for [`k_panel`]: per block and sub-block, the
/// unsigned codes in steps of 4 inputs × 32 columns (128 bytes a step), and each column's
/// sub-block scale and offset as floats (`value = scale · code − offset`).
#[cfg(target_arch = "x86_64")]
struct KPanel {
    codes: Vec<u8>,
    scales: Vec<f32>,
    offsets: Vec<f32>,
}

#[cfg(target_arch = "x86_64")]
impl KPanel {
    /// `weights`: up to 32 rows of `k_blocks` blocks (missing columns are zeros).
    fn new(format: KFormat, k_blocks: usize, weights: &[u8]) -> KPanel {
        let sub = if format == KFormat::Q4K { 32 } else { 16 };
        let subs = K_BLOCK / sub;
        let mut codes = vec![0u8; k_blocks * K_BLOCK * PANEL];
        let mut scales = vec![0f32; k_blocks * subs * PANEL];
        let mut offsets = vec![0f32; k_blocks * subs * PANEL];
        let row_bytes = k_blocks * format.bytes();
        for (c, row) in weights.chunks_exact(row_bytes).enumerate() {
            for (b, block) in row.chunks_exact(format.bytes()).enumerate() {
                let (values, sc, off) = k_block_codes(format, block);
                for (e, &q) in values.iter().enumerate() {
                    // Element e is input (e % 4) of step e / 4 of the block.
                    codes[((b * K_BLOCK + e) / 4 * PANEL + c) * 4 + e % 4] = q;
                }
                for s in 0..subs {
                    scales[(b * subs + s) * PANEL + c] = sc[s];
                    offsets[(b * subs + s) * PANEL + c] = off[s];
                }
            }
        }
        KPanel { codes, scales, offsets }
    }
}

/// A k-quant block's 256 unsigned codes and, per sub-block, its scale and offset in floats:
/// Q4_K `d·sc_s · q − dmin·m_s` (8 sub-blocks of 32), Q6_K `d·sc_s · q − 32·d·sc_s` (16 of 16).
#[cfg(target_arch = "x86_64")]
fn k_block_codes(format: KFormat, x: &[u8]) -> ([u8; K_BLOCK], [f32; 16], [f32; 16]) {
    let mut codes = [0u8; K_BLOCK];
    let mut scales = [0f32; 16];
    let mut offsets = [0f32; 16];
    // SAFETY: the blocks hold their f16 scales at these offsets; F16C is in the AVX-512 kernel's
    // feature set (checked by `gemm_k`).
    let half = |at: usize| unsafe { half_at(x, at) };
    match format {
        KFormat::Q4K => {
            let (d, dmin) = (half(0), half(2));
            let q = &x[4..16];
            let scale_min = |j: usize| -> (u8, u8) {
                if j < 4 {
                    (q[j] & 63, q[j + 4] & 63)
                } else {
                    ((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4), (q[j + 4] >> 4) | ((q[j] >> 6) << 4))
                }
            };
            for s in 0..8 {
                let (sc, m) = scale_min(s);
                scales[s] = d * f32::from(sc);
                offsets[s] = dmin * f32::from(m);
            }
            for j in 0..4 {
                for l in 0..32 {
                    let byte = x[16 + 32 * j + l];
                    codes[64 * j + l] = byte & 0xF;
                    codes[64 * j + 32 + l] = byte >> 4;
                }
            }
        }
        KFormat::Q6K => {
            let d = half(208);
            for s in 0..16 {
                scales[s] = d * f32::from(x[192 + s] as i8);
                offsets[s] = 32.0 * scales[s];
            }
            for n in 0..2 {
                let (ql, qh) = (&x[64 * n..], &x[128 + 32 * n..]);
                for l in 0..32 {
                    codes[128 * n + l] = (ql[l] & 0xF) | ((qh[l] & 3) << 4);
                    codes[128 * n + l + 32] = (ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4);
                    codes[128 * n + l + 64] = (ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4);
                    codes[128 * n + l + 96] = (ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4);
                }
            }
        }
    }
    (codes, scales, offsets)
}

/// Every activation row against one panel, `TILE_ROWS` rows at a time, into columns `cols` of
/// the `n`-wide `dst`.
///
/// # Safety
/// AVX-512 VNNI; `dst` holds `rows.scale.len() / rows.k_blocks` rows of `n`, columns `cols` this
/// caller's alone.
#[cfg(target_arch = "x86_64")]
unsafe fn k_panel(panel: &KPanel, rows: &KRows, cols: std::ops::Range<usize>, n: usize, dst: *mut f32) {
    let m = rows.scale.len() / rows.k_blocks;
    let mut row = 0;
    while row < m {
        let count = (m - row).min(TILE_ROWS);
        let sums = match count {
            4 => k_tile::<4>(panel, rows, row),
            3 => pad(k_tile::<3>(panel, rows, row)),
            2 => pad(k_tile::<2>(panel, rows, row)),
            _ => pad(k_tile::<1>(panel, rows, row)),
        };
        for (i, sums) in sums.iter().take(count).enumerate() {
            for (j, c) in cols.clone().enumerate() {
                *dst.add((row + i) * n + c) = sums[j];
            }
        }
        row += count;
    }
}

/// A smaller tile's rows in a `TILE_ROWS` array.
fn pad<const R: usize>(sums: [[f32; PANEL]; R]) -> [[f32; PANEL]; TILE_ROWS] {
    let mut out = [[0f32; PANEL]; TILE_ROWS];
    out[..R].copy_from_slice(&sums);
    out
}

/// `R` activation rows from `row0` against the panel's 32 columns.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn k_tile<const R: usize>(panel: &KPanel, rows: &KRows, row0: usize) -> [[f32; PANEL]; R] {
    let sub = rows.sub;
    let subs = K_BLOCK / sub;
    let steps = sub / 4;
    let mut acc = [[_mm512_setzero_ps(); 2]; R];
    for b in 0..rows.k_blocks {
        let block = |i: usize| rows.activations.as_ptr().add(((row0 + i) * rows.k_blocks + b) * Q8_K_BYTES + 4);
        for s in 0..subs {
            let mut int = [[_mm512_setzero_si512(); 2]; R];
            let codes = panel.codes.as_ptr().add((b * K_BLOCK + s * sub) * PANEL);
            for t in 0..steps {
                let w0 = _mm512_loadu_si512(codes.add(t * 4 * PANEL) as *const _);
                let w1 = _mm512_loadu_si512(codes.add(t * 4 * PANEL + 64) as *const _);
                for (i, int) in int.iter_mut().enumerate() {
                    let a = _mm512_set1_epi32(std::ptr::read_unaligned(block(i).add(s * sub + 4 * t) as *const i32));
                    int[0] = _mm512_dpbusd_epi32(int[0], w0, a);
                    int[1] = _mm512_dpbusd_epi32(int[1], w1, a);
                }
            }
            let at = (b * subs + s) * PANEL;
            let scale = [_mm512_loadu_ps(panel.scales.as_ptr().add(at)), _mm512_loadu_ps(panel.scales.as_ptr().add(at + 16))];
            let offset = [_mm512_loadu_ps(panel.offsets.as_ptr().add(at)), _mm512_loadu_ps(panel.offsets.as_ptr().add(at + 16))];
            for (i, (acc, int)) in acc.iter_mut().zip(&int).enumerate() {
                let r = (row0 + i) * rows.k_blocks + b;
                let d = _mm512_set1_ps(rows.scale[r]);
                let sum = _mm512_set1_ps(rows.scaled_sums[r * subs + s]);
                for h in 0..2 {
                    acc[h] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(int[h]), _mm512_mul_ps(scale[h], d), acc[h]);
                    acc[h] = _mm512_fnmadd_ps(offset[h], sum, acc[h]);
                }
            }
        }
    }
    let mut out = [[0f32; PANEL]; R];
    for (out, acc) in out.iter_mut().zip(&acc) {
        _mm512_storeu_ps(out.as_mut_ptr(), acc[0]);
        _mm512_storeu_ps(out.as_mut_ptr().add(16), acc[1]);
    }
    out
}

/// The running sums of one k-quant row, kept as candle's `vec_dot_q4k_q8k` and
/// `vec_dot_q6k_q8k` keep them (ports of ggml's AVX2 code), so the result is theirs bit for bit.
#[cfg(target_arch = "x86_64")]
struct KSums {
    acc: __m256,
    acc_m: __m128,
}

#[cfg(target_arch = "x86_64")]
impl KSums {
    #[inline(always)]
    unsafe fn q4k() -> KSums {
        KSums { acc: _mm256_setzero_ps(), acc_m: _mm_setzero_ps() }
    }

    #[inline(always)]
    unsafe fn q6k() -> KSums {
        KSums::q4k()
    }

    /// A Q4_K block `x` times a Q8_K block `y`.
    #[inline(always)]
    unsafe fn q4k_block(&mut self, x: &[u8], y: &[u8]) {
        let m4 = _mm256_set1_epi8(0xF);
        let yd = f32::from_le_bytes([y[0], y[1], y[2], y[3]]);
        let d = yd * half_at(x, 0);
        let dmin = -yd * half_at(x, 2);
        let utmp = q4k_scales_and_mins(x);
        let mins_and_scales = _mm256_cvtepu8_epi16(_mm_set_epi32(utmp[3] as i32, utmp[2] as i32, utmp[1] as i32, utmp[0] as i32));
        let q8sums = _mm256_loadu_si256(y.as_ptr().add(260) as *const __m256i);
        let q8s = _mm_hadd_epi16(_mm256_extracti128_si256(q8sums, 0), _mm256_extracti128_si256(q8sums, 1));
        let prod = _mm_madd_epi16(_mm256_extracti128_si256(mins_and_scales, 1), q8s);
        self.acc_m = _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(prod), self.acc_m);
        let sc128 = _mm256_extracti128_si256(mins_and_scales, 0);
        let scales = _mm256_insertf128_si256(_mm256_castsi128_si256(sc128), sc128, 1);
        let mut sumi = _mm256_setzero_si256();
        let q4 = x.as_ptr().add(16);
        let q8 = y.as_ptr().add(4);
        for j in 0..4 {
            let scale_l = _mm256_shuffle_epi8(scales, scale_shuffle_k4(2 * j));
            let scale_h = _mm256_shuffle_epi8(scales, scale_shuffle_k4(2 * j + 1));
            let q4bits = _mm256_loadu_si256(q4.add(32 * j) as *const __m256i);
            let q4l = _mm256_and_si256(q4bits, m4);
            let q4h = _mm256_and_si256(_mm256_srli_epi16(q4bits, 4), m4);
            let q8l = _mm256_loadu_si256(q8.add(64 * j) as *const __m256i);
            let p16l = _mm256_madd_epi16(scale_l, _mm256_maddubs_epi16(q4l, q8l));
            sumi = _mm256_add_epi32(sumi, p16l);
            let q8h = _mm256_loadu_si256(q8.add(64 * j + 32) as *const __m256i);
            let p16h = _mm256_madd_epi16(scale_h, _mm256_maddubs_epi16(q4h, q8h));
            sumi = _mm256_add_epi32(sumi, p16h);
        }
        self.acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), self.acc);
    }

    /// A Q6_K block `x` times a Q8_K block `y`.
    #[inline(always)]
    unsafe fn q6k_block(&mut self, x: &[u8], y: &[u8]) {
        let m32s = _mm256_set1_epi8(32);
        let yd = f32::from_le_bytes([y[0], y[1], y[2], y[3]]);
        let d = yd * half_at(x, 208);
        let scales = _mm_loadu_si128(x.as_ptr().add(192) as *const __m128i);
        let mut sumi = _mm256_setzero_si256();
        for j in 0..2 {
            let is = j * 4;
            let scale = |i: usize| _mm256_cvtepi8_epi16(_mm_shuffle_epi8(scales, scale_shuffle(is + i)));
            let [q4_0, q4_1, q4_2, q4_3] = q6k_codes(x, j);
            let q8 = |i: usize| _mm256_loadu_si256(y.as_ptr().add(4 + 128 * j + 32 * i) as *const __m256i);
            let (q8_0, q8_1, q8_2, q8_3) = (q8(0), q8(1), q8(2), q8(3));
            let p16_0 = _mm256_sub_epi16(_mm256_maddubs_epi16(q4_0, q8_0), _mm256_maddubs_epi16(m32s, q8_0));
            let p16_1 = _mm256_sub_epi16(_mm256_maddubs_epi16(q4_1, q8_1), _mm256_maddubs_epi16(m32s, q8_1));
            let p16_2 = _mm256_sub_epi16(_mm256_maddubs_epi16(q4_2, q8_2), _mm256_maddubs_epi16(m32s, q8_2));
            let p16_3 = _mm256_sub_epi16(_mm256_maddubs_epi16(q4_3, q8_3), _mm256_maddubs_epi16(m32s, q8_3));
            let p16_0 = _mm256_madd_epi16(scale(0), p16_0);
            let p16_1 = _mm256_madd_epi16(scale(1), p16_1);
            let p16_2 = _mm256_madd_epi16(scale(2), p16_2);
            let p16_3 = _mm256_madd_epi16(scale(3), p16_3);
            sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(p16_0, p16_1));
            sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(p16_2, p16_3));
        }
        self.acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), self.acc);
    }

    /// The row's result, summed in candle's order (Q6_K's `acc_m` stays zero and adds nothing).
    #[inline(always)]
    unsafe fn total(self) -> f32 {
        let acc_m = _mm_add_ps(self.acc_m, _mm_movehl_ps(self.acc_m, self.acc_m));
        let acc_m = _mm_add_ss(acc_m, _mm_movehdup_ps(acc_m));
        hsum(self.acc) + _mm_cvtss_f32(acc_m)
    }
}

/// Half `j` (0 or 1) of a Q6_K block's 6-bit codes (0..=63, standing for `q − 32`) as four
/// 32-byte registers, in ggml's order (`ql`'s low nibbles of bytes 0-31, of 32-63, then their high
/// nibbles, each with its two bits of `qh`).
///
/// # Safety
/// AVX2; `x` is a whole Q6_K block.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn q6k_codes(x: &[u8], j: usize) -> [__m256i; 4] {
    let (m4, m2) = (_mm256_set1_epi8(0xF), _mm256_set1_epi8(3));
    let lo1 = _mm256_loadu_si256(x.as_ptr().add(64 * j) as *const __m256i);
    let lo2 = _mm256_loadu_si256(x.as_ptr().add(64 * j + 32) as *const __m256i);
    let hi = _mm256_loadu_si256(x.as_ptr().add(128 + 32 * j) as *const __m256i);
    let high = |shift: i32| _mm256_slli_epi16(_mm256_and_si256(_mm256_srl_epi16(hi, _mm_cvtsi32_si128(shift)), m2), 4);
    [
        _mm256_or_si256(_mm256_and_si256(lo1, m4), high(0)),
        _mm256_or_si256(_mm256_and_si256(lo2, m4), high(2)),
        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(lo1, 4), m4), high(4)),
        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(lo2, 4), m4), high(6)),
    ]
}

/// A Q4_K block's twelve bytes of 6-bit scales and minimums unpacked as ggml does (`utmp`): the
/// eight scales in bytes 0..8, the eight minimums in bytes 8..16 (little-endian words).
#[inline(always)]
fn q4k_scales_and_mins(x: &[u8]) -> [u32; 4] {
    const KMASK1: u32 = 0x3f3f3f3f;
    const KMASK2: u32 = 0x0f0f0f0f;
    const KMASK3: u32 = 0x03030303;
    let word = |i: usize| u32::from_le_bytes([x[4 + 4 * i], x[5 + 4 * i], x[6 + 4 * i], x[7 + 4 * i]]);
    let mut utmp = [word(0), word(1), word(2), 0];
    utmp[3] = ((utmp[2] >> 4) & KMASK2) | (((utmp[1] >> 6) & KMASK3) << 4);
    let uaux = utmp[1] & KMASK1;
    utmp[1] = (utmp[2] & KMASK2) | (((utmp[0] >> 6) & KMASK3) << 4);
    utmp[2] = uaux;
    utmp[0] &= KMASK1;
    utmp
}

/// The f16 at byte `at` of a block, as f32.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn half_at(block: &[u8], at: usize) -> f32 {
    f16_to_f32(&block[at..])
}

/// Q6_K's shuffle that spreads scale `i`'s two bytes over a 128-bit lane (ggml's `get_scale_shuffle`).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn scale_shuffle(i: usize) -> __m128i {
    let v = (2 * i) as i8;
    _mm_set_epi8(v + 1, v + 1, v + 1, v + 1, v + 1, v + 1, v + 1, v + 1, v, v, v, v, v, v, v, v)
}

/// Q4_K's shuffle that repeats 16-bit scale `i` over a register (ggml's `get_scale_shuffle_k4`).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn scale_shuffle_k4(i: usize) -> __m256i {
    let pair = (((2 * i + 1) as i16) << 8) | (2 * i) as i16;
    _mm256_set1_epi16(pair)
}

/// One activation block as the loop reads it: its codes and the offset term that seeds each
/// weight block's sum (`-offset · Σ a` over each lane's four codes).
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy)]
#[repr(C, align(32))]
struct ActivationBlock {
    codes: [i8; BLOCK],
    seed: [i32; 8],
}

#[cfg(target_arch = "x86_64")]
struct Prepared {
    blocks: Vec<ActivationBlock>,
    scales: Vec<f32>,
}

#[cfg(target_arch = "x86_64")]
impl Prepared {
    /// Each activation block's codes, scale and seed: `-offset · (the lane's four codes' sum)`,
    /// which turns the unsigned codes' sum into the weights' (zero for Q8_0 on AVX2, whose
    /// signed weights go through `sign` instead).
    fn new(kernel: GemvKernel, format: BlockFormat, k_blocks: usize, activations: &[u8]) -> Prepared {
        let offset = if kernel == GemvKernel::Avx2 && format == BlockFormat::Q8_0 { 0 } else { format.offset() };
        let mut blocks = Vec::with_capacity(k_blocks);
        let mut scales = Vec::with_capacity(k_blocks);
        for block in activations.chunks_exact(Q8_0_BYTES) {
            let mut prepared = ActivationBlock { codes: [0; BLOCK], seed: [0; 8] };
            for (code, &byte) in prepared.codes.iter_mut().zip(&block[2..]) {
                *code = byte as i8;
            }
            for (seed, four) in prepared.seed.iter_mut().zip(prepared.codes.chunks_exact(4)) {
                *seed = -offset * four.iter().map(|&c| i32::from(c)).sum::<i32>();
            }
            blocks.push(prepared);
            // SAFETY: the block has its two scale bytes; F16C is part of every kernel here.
            scales.push(unsafe { f16_to_f32(block) });
        }
        Prepared { blocks, scales }
    }
}

/// The f16 at the start of a block, as f32 (F16C: exact).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn f16_to_f32(block: &[u8]) -> f32 {
    let bits = u16::from_le_bytes([*block.get_unchecked(0), *block.get_unchecked(1)]);
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(bits))))
}

/// Columns one pass of the inner loop keeps in flight.
const COLUMNS: usize = 4;

/// [`rows`]'s kernels, as consts.
const VNNI: u8 = 0;
const AVX2: u8 = 1;

/// `dst.len()` rows of `weights` against the prepared activations, `COLUMNS` at a time, on
/// kernel `KERNEL` ([`VNNI`], [`AVX2`]); `FORMAT` 0, 1, 2 for Q4_0, Q5_0, Q8_0 (consts so that
/// each loop is compiled on its own).
///
/// # Safety
/// The CPU runs the kernel; `weights` holds `dst.len()` rows of `prepared.blocks.len()` blocks.
#[cfg(target_arch = "x86_64")]
unsafe fn rows<const KERNEL: u8, const FORMAT: u8>(prepared: &Prepared, weights: &[u8], dst: &mut [f32]) {
    let row_bytes = prepared.blocks.len() * [18usize, 22, 34][FORMAT as usize];
    let pass = |row: usize, out: &mut [f32]| {
        let first = weights.as_ptr().add(row * row_bytes);
        match (KERNEL, out.len()) {
            (VNNI, COLUMNS) => out.copy_from_slice(&columns_vnni::<FORMAT, COLUMNS>(prepared, first, row_bytes)),
            (VNNI, _) => out[0] = columns_vnni::<FORMAT, 1>(prepared, first, row_bytes)[0],
            (_, COLUMNS) => out.copy_from_slice(&columns_avx2::<FORMAT, COLUMNS>(prepared, first, row_bytes)),
            _ => out[0] = columns_avx2::<FORMAT, 1>(prepared, first, row_bytes)[0],
        }
    };
    let mut row = 0;
    while row + COLUMNS <= dst.len() {
        pass(row, &mut dst[row..row + COLUMNS]);
        row += COLUMNS;
    }
    while row < dst.len() {
        pass(row, &mut dst[row..row + 1]);
        row += 1;
    }
}

/// The loop both kernels share: `N` consecutive weight rows (from `first`, `row_bytes` apart)
/// against the activations, each block's integer sums by `$dot(seed, block, codes)`, and the
/// next pass's rows prefetched while this one runs (a row is a few hundred bytes, too short a
/// stream for the hardware's prefetcher to run ahead of: without it the loop waited on memory
/// half the time).
macro_rules! columns_loop {
    ($prepared:ident, $first:ident, $row_bytes:ident, $format:ident, $n:ident, $dot:expr) => {{
        let block_bytes = [18usize, 22, 34][$format as usize];
        let mut acc = [_mm256_setzero_ps(); $n];
        let pass = $n * $row_bytes;
        let lines = pass.div_ceil($prepared.blocks.len()).div_ceil(64);
        let next = $first.wrapping_add(pass);
        for (b, (a, &ad)) in $prepared.blocks.iter().zip(&$prepared.scales).enumerate() {
            for line in 0..lines {
                _mm_prefetch::<_MM_HINT_T0>(next.wrapping_add((b * lines + line) * 64) as *const i8);
            }
            let codes = _mm256_load_si256(a.codes.as_ptr() as *const __m256i);
            let seed = _mm256_load_si256(a.seed.as_ptr() as *const __m256i);
            for (j, acc) in acc.iter_mut().enumerate() {
                let block = $first.add(j * $row_bytes + b * block_bytes);
                let wd = _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(std::ptr::read_unaligned(block as *const u16)))));
                let dot = $dot(seed, block, codes);
                *acc = _mm256_fmadd_ps(_mm256_set1_ps(ad * wd), _mm256_cvtepi32_ps(dot), *acc);
            }
        }
        let mut out = [0f32; $n];
        for (o, acc) in out.iter_mut().zip(acc) {
            *o = hsum(acc);
        }
        out
    }};
}

/// `N` rows on AVX-512 VNNI: the weights' unsigned codes (Q8_0's shifted by 128 with an xor) times
/// the signed activations in one `vpdpbusd` seeded with the offset term; Q5_0's fifth bits are a
/// masked add.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,avx512f,avx512bw,avx512vl,avx512vnni,f16c")]
unsafe fn columns_vnni<const FORMAT: u8, const N: usize>(prepared: &Prepared, first: *const u8, row_bytes: usize) -> [f32; N] {
    let low4 = _mm256_set1_epi8(0x0F);
    let sixteen = _mm256_set1_epi8(16);
    let flip = _mm256_set1_epi8(-128);
    columns_loop!(prepared, first, row_bytes, FORMAT, N, |seed, block: *const u8, codes| {
        let w = match FORMAT {
            0 => nibbles(block.add(2), low4),
            1 => {
                let high = _cvtu32_mask32(std::ptr::read_unaligned(block.add(2) as *const u32));
                let w = nibbles(block.add(6), low4);
                _mm256_mask_add_epi8(w, high, w, sixteen)
            }
            _ => _mm256_xor_si256(_mm256_loadu_si256(block.add(2) as *const __m256i), flip),
        };
        _mm256_dpbusd_epi32(seed, w, codes)
    })
}

/// `N` rows on AVX2: `maddubs` (unsigned codes × signed activations in pairs, which cannot
/// saturate for 4- and 5-bit codes) and `madd` with ones make the lanes' sums of four; Q8_0's
/// signed weights take candle's `sign` trick (|w| × a with w's sign) and no seed, which, like
/// candle's and ggml's AVX2 code, needs Q8_0 codes in [-127, 127] (GGML's quantiser never writes
/// -128).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn columns_avx2<const FORMAT: u8, const N: usize>(prepared: &Prepared, first: *const u8, row_bytes: usize) -> [f32; N] {
    let low4 = _mm256_set1_epi8(0x0F);
    let sixteen = _mm256_set1_epi8(16);
    let ones = _mm256_set1_epi16(1);
    // Byte i of the 32-bit `qh` picked into byte i (ggml's `bytes_from_bits_32`).
    let spread = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0);
    let bit = _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe);
    columns_loop!(prepared, first, row_bytes, FORMAT, N, |seed, block: *const u8, codes| {
        let pairs = match FORMAT {
            0 => _mm256_maddubs_epi16(nibbles(block.add(2), low4), codes),
            1 => {
                let qh = std::ptr::read_unaligned(block.add(2) as *const u32) as i32;
                let set = _mm256_cmpeq_epi8(_mm256_or_si256(_mm256_shuffle_epi8(_mm256_set1_epi32(qh), spread), bit), _mm256_set1_epi64x(-1));
                let w = _mm256_or_si256(nibbles(block.add(6), low4), _mm256_and_si256(set, sixteen));
                _mm256_maddubs_epi16(w, codes)
            }
            _ => {
                let w = _mm256_loadu_si256(block.add(2) as *const __m256i);
                _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(codes, w))
            }
        };
        _mm256_add_epi32(seed, _mm256_madd_epi16(pairs, ones))
    })
}

/// 16 bytes of 4-bit codes as 32 bytes: low nibbles first, then high ones (GGML's order).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn nibbles(qs: *const u8, low4: __m256i) -> __m256i {
    let bytes = _mm_loadu_si128(qs as *const __m128i);
    let both = _mm256_inserti128_si256(_mm256_castsi128_si256(bytes), _mm_srli_epi16(bytes, 4), 1);
    _mm256_and_si256(both, low4)
}

/// The eight lanes' sum, added in candle's order (`hsum_float_8`).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn hsum(x: __m256) -> f32 {
    let mut res = _mm256_extractf128_ps(x, 1);
    res = _mm_add_ps(res, _mm256_castps256_ps128(x));
    res = _mm_add_ps(res, _mm_movehl_ps(res, res));
    res = _mm_add_ss(res, _mm_movehdup_ps(res));
    _mm_cvtss_f32(res)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::values;

    /// Random blocks of `format` (random codes, scales in [0.5, 1.5) as f16 bytes).
    /// (Q8_0 codes in [-127, 127], as GGML's quantiser makes them: -128 never occurs.)
    pub(super) fn blocks(format: BlockFormat, count: usize, seed: u64) -> Vec<u8> {
        let noise = values(count * format.bytes(), seed);
        let mut out = Vec::with_capacity(count * format.bytes());
        for block in noise.chunks_exact(format.bytes()) {
            let scale = half_bits(1.0 + block[0] * 0.5);
            out.extend_from_slice(&scale.to_le_bytes());
            if format == BlockFormat::Q8_0 {
                out.extend(block[2..].iter().map(|v| (v * 127.0) as i8 as u8));
            } else {
                out.extend(block[2..].iter().map(|v| ((v + 1.0) * 127.99) as u8));
            }
        }
        out
    }

    /// An f16's bits for a value in [0.5, 1.5] (normal, 10 mantissa bits kept).
    fn half_bits(v: f32) -> u16 {
        let bits = v.to_bits();
        let exponent = ((bits >> 23) & 0xFF) as i32 - 127 + 15;
        ((exponent as u16) << 10) | ((bits >> 13) & 0x3FF) as u16
    }

    fn half_value(block: &[u8]) -> f32 {
        let bits = u16::from_le_bytes([block[0], block[1]]);
        let exponent = ((bits >> 10) & 0x1F) as i32 - 15;
        (1.0 + f32::from(bits & 0x3FF) / 1024.0) * 2f32.powi(exponent)
    }

    #[test]
    fn one_row_products_match_a_plain_loop_in_every_format_on_every_kernel() {
        let kernels = GemvKernel::available();
        #[cfg(target_arch = "x86_64")]
        assert!(kernels.contains(&GemvKernel::Avx2), "AVX2 is the build's baseline");
        for kernel in kernels {
            for format in [BlockFormat::Q4_0, BlockFormat::Q5_0, BlockFormat::Q8_0] {
                for (k_blocks, rows) in [(1, 1), (3, 7), (28, 133), (5, 64 * 3 + 5)] {
                    let weights = blocks(format, k_blocks * rows, 7 + rows as u64);
                    let activations = blocks(BlockFormat::Q8_0, k_blocks, 11 + k_blocks as u64);
                    let mut got = vec![f32::NAN; rows];
                    gemv_with(kernel, format, k_blocks, &activations, &weights, &mut got);
                    for (r, got) in got.iter().enumerate() {
                        let want: f64 = (0..k_blocks)
                            .map(|b| {
                                let w = &weights[(r * k_blocks + b) * format.bytes()..][..format.bytes()];
                                let a = &activations[b * Q8_0_BYTES..][..Q8_0_BYTES];
                                let dot: i32 = format.decode(w).iter().zip(BlockFormat::Q8_0.decode(a)).map(|(w, a)| w * a).sum();
                                f64::from(half_value(w)) * f64::from(half_value(a)) * f64::from(dot)
                            })
                            .sum();
                        assert!((f64::from(*got) - want).abs() <= 1e-4 * want.abs().max(1.0), "{kernel:?} {format:?} {k_blocks}x{rows} row {r}: {got} vs {want}");
                    }
                }
            }
        }
    }

    #[test]
    fn the_kernels_agree_bit_for_bit() {
        let kernels = GemvKernel::available();
        for format in [BlockFormat::Q4_0, BlockFormat::Q5_0, BlockFormat::Q8_0] {
            let (k_blocks, rows) = (28, 150);
            let weights = blocks(format, k_blocks * rows, 21);
            let activations = blocks(BlockFormat::Q8_0, k_blocks, 22);
            let results: Vec<Vec<u32>> = kernels
                .iter()
                .map(|&kernel| {
                    let mut got = vec![f32::NAN; rows];
                    gemv_with(kernel, format, k_blocks, &activations, &weights, &mut got);
                    got.iter().map(|v| v.to_bits()).collect()
                })
                .collect();
            for (kernel, result) in kernels.iter().zip(&results).skip(1) {
                assert_eq!(result, &results[0], "{format:?}: {kernel:?} against {:?}", kernels[0]);
            }
        }
    }

    /// Random Q8_K activation blocks (codes in [-127, 127], their partial sums filled in).
    pub(super) fn q8k_blocks(count: usize, seed: u64) -> Vec<u8> {
        let noise = values(count * K_BLOCK, seed);
        let mut out = Vec::new();
        for (b, codes) in noise.chunks_exact(K_BLOCK).enumerate() {
            out.extend_from_slice(&(0.01 + b as f32 * 0.003).to_le_bytes());
            let codes: Vec<i8> = codes.iter().map(|v| (v * 127.0) as i8).collect();
            out.extend(codes.iter().map(|&c| c as u8));
            for sixteen in codes.chunks(16) {
                out.extend_from_slice(&sixteen.iter().map(|&c| i16::from(c)).sum::<i16>().to_le_bytes());
            }
        }
        out
    }

    /// Random k-quant weight blocks: random bytes with the f16 scales in [0.5, 1.5).
    pub(super) fn k_quant_blocks(format: KFormat, count: usize, seed: u64) -> Vec<u8> {
        let noise = values(count * format.bytes(), seed);
        let mut out: Vec<u8> = noise.iter().map(|v| ((v + 1.0) * 127.99) as u8).collect();
        for block in out.chunks_exact_mut(format.bytes()) {
            let at: &[usize] = if format == KFormat::Q4K { &[0, 2] } else { &[208] };
            for &at in at {
                let scale = half_bits(1.0 + (f32::from(block[at + 1]) / 255.0 - 0.5));
                block[at..at + 2].copy_from_slice(&scale.to_le_bytes());
            }
        }
        out
    }

    /// GGML's plain dequantisation of a k-quant block (`dequantize_row_q4_K`, `_q6_K`).
    fn k_values(format: KFormat, x: &[u8]) -> Vec<f64> {
        let mut y = vec![0f64; K_BLOCK];
        match format {
            KFormat::Q4K => {
                let (d, dmin) = (f64::from(half_value(&x[0..])), f64::from(half_value(&x[2..])));
                let q = &x[4..16];
                let scale_min = |j: usize| -> (f64, f64) {
                    if j < 4 {
                        (f64::from(q[j] & 63), f64::from(q[j + 4] & 63))
                    } else {
                        (f64::from((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4)), f64::from((q[j + 4] >> 4) | ((q[j] >> 6) << 4)))
                    }
                };
                for j in 0..4 {
                    let ((s1, m1), (s2, m2)) = (scale_min(2 * j), scale_min(2 * j + 1));
                    for l in 0..32 {
                        let code = x[16 + 32 * j + l];
                        y[64 * j + l] = d * s1 * f64::from(code & 0xF) - dmin * m1;
                        y[64 * j + 32 + l] = d * s2 * f64::from(code >> 4) - dmin * m2;
                    }
                }
            }
            KFormat::Q6K => {
                let d = f64::from(half_value(&x[208..]));
                for n in 0..2 {
                    let (ql, qh, sc) = (&x[64 * n..], &x[128 + 32 * n..], &x[192 + 8 * n..]);
                    for l in 0..32 {
                        let is = l / 16;
                        let code = |low: u8, shift: u32| f64::from(i32::from(low | (((qh[l] >> shift) & 3) << 4)) - 32);
                        let scale = |i: usize| d * f64::from(sc[i] as i8);
                        y[128 * n + l] = scale(is) * code(ql[l] & 0xF, 0);
                        y[128 * n + l + 32] = scale(is + 2) * code(ql[l + 32] & 0xF, 2);
                        y[128 * n + l + 64] = scale(is + 4) * code(ql[l] >> 4, 4);
                        y[128 * n + l + 96] = scale(is + 6) * code(ql[l + 32] >> 4, 6);
                    }
                }
            }
        }
        y
    }

    /// Cell `[r, c]` of a k-quant product by GGML's plain dequantisation, in f64, and the sum of
    /// its terms' magnitudes (the scale a float result's rounding is measured against).
    pub(super) fn k_reference(format: KFormat, k_blocks: usize, activations: &[u8], weights: &[u8], r: usize, c: usize) -> (f64, f64) {
        let (mut want, mut scale) = (0f64, 0f64);
        for b in 0..k_blocks {
            let w = k_values(format, &weights[(c * k_blocks + b) * format.bytes()..][..format.bytes()]);
            let a = &activations[(r * k_blocks + b) * Q8_K_BYTES..][..Q8_K_BYTES];
            let ad = f64::from(f32::from_le_bytes([a[0], a[1], a[2], a[3]]));
            for (i, w) in w.iter().enumerate() {
                want += w * ad * f64::from(a[4 + i] as i8);
                scale += (w * ad * f64::from(a[4 + i] as i8)).abs();
            }
        }
        (want, scale)
    }

    #[test]
    fn k_quant_rows_match_ggmls_plain_dequantisation() {
        for format in [KFormat::Q4K, KFormat::Q6K] {
            for (k_blocks, rows) in [(1, 1), (3, 70), (19, 9)] {
                let weights = k_quant_blocks(format, k_blocks * rows, 5 + rows as u64);
                let activations = q8k_blocks(k_blocks, 9 + k_blocks as u64);
                let mut got = vec![f32::NAN; rows];
                if !gemv_k(format, k_blocks, &activations, &weights, &mut got) {
                    return;
                }
                for (r, got) in got.iter().enumerate() {
                    let (want, scale) = k_reference(format, k_blocks, &activations, &weights, 0, r);
                    assert!((f64::from(*got) - want).abs() <= 1e-5 * scale.max(1.0), "{format:?} {k_blocks}x{rows} row {r}: {got} vs {want}");
                }
            }
        }
    }

    #[test]
    fn prompt_rows_of_32_element_formats_match_a_plain_loop() {
        if GemvKernel::detect() != Some(GemvKernel::Avx512Vnni) {
            eprintln!("skipped: gemm needs AVX-512 VNNI");
            return;
        }
        for format in [BlockFormat::Q4_0, BlockFormat::Q5_0, BlockFormat::Q8_0] {
            for (m, k_blocks, n) in [(32, 1, 1), (37, 3, 70), (38, 28, 32)] {
                let weights = blocks(format, k_blocks * n, 3 + n as u64);
                let activations = blocks(BlockFormat::Q8_0, m * k_blocks, 4 + m as u64);
                let mut got = vec![f32::NAN; m * n];
                assert!(gemm(format, m, k_blocks, &activations, &weights, &mut got));
                for r in 0..m {
                    for c in 0..n {
                        let terms: Vec<f64> = (0..k_blocks)
                            .map(|b| {
                                let w = &weights[(c * k_blocks + b) * format.bytes()..][..format.bytes()];
                                let a = &activations[(r * k_blocks + b) * Q8_0_BYTES..][..Q8_0_BYTES];
                                let dot: i32 = format.decode(w).iter().zip(BlockFormat::Q8_0.decode(a)).map(|(w, a)| w * a).sum();
                                f64::from(half_value(w)) * f64::from(half_value(a)) * f64::from(dot)
                            })
                            .collect();
                        let (want, scale) = (terms.iter().sum::<f64>(), terms.iter().map(|t| t.abs()).sum::<f64>());
                        let got = got[r * n + c];
                        assert!((f64::from(got) - want).abs() <= 1e-6 * scale.max(1.0), "{format:?} {m}x{k_blocks}x{n} [{r}, {c}]: {got} vs {want}");
                    }
                }
            }
        }
    }

    #[test]
    fn prompt_rows_of_k_quants_match_ggmls_plain_dequantisation() {
        if GemvKernel::detect() != Some(GemvKernel::Avx512Vnni) {
            eprintln!("skipped: gemm_k needs AVX-512 VNNI");
            return;
        }
        for format in [KFormat::Q4K, KFormat::Q6K] {
            for (m, k_blocks, n) in [(32, 1, 1), (37, 3, 70), (33, 2, 32)] {
                let weights = k_quant_blocks(format, k_blocks * n, 5 + n as u64);
                let activations = q8k_blocks(m * k_blocks, 9 + m as u64);
                let mut got = vec![f32::NAN; m * n];
                assert!(gemm_k(format, m, k_blocks, &activations, &weights, &mut got));
                for r in 0..m {
                    for c in 0..n {
                        let (want, scale) = k_reference(format, k_blocks, &activations, &weights, r, c);
                        let got = got[r * n + c];
                        assert!((f64::from(got) - want).abs() <= 1e-5 * scale.max(1.0), "{format:?} {m}x{k_blocks}x{n} [{r}, {c}]: {got} vs {want}");
                    }
                }
            }
        }
        let mut few = vec![0f32; 31];
        assert!(!gemm_k(KFormat::Q4K, 31, 1, &q8k_blocks(31, 1), &k_quant_blocks(KFormat::Q4K, 1, 2), &mut few), "fewer rows stay with candle");
    }

    #[test]
    fn a_row_of_zero_activations_gives_zero() {
        let weights = blocks(BlockFormat::Q5_0, 4 * 9, 3);
        let mut activations = vec![0u8; 4 * Q8_0_BYTES];
        for block in activations.chunks_exact_mut(Q8_0_BYTES) {
            block[..2].copy_from_slice(&half_bits(1.0).to_le_bytes());
        }
        let mut got = vec![f32::NAN; 9];
        assert!(gemv(BlockFormat::Q5_0, 4, &activations, &weights, &mut got));
        assert_eq!(got, vec![0.0; 9]);
    }
}
