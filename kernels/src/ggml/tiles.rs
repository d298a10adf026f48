//! A few rows of activations against GGML weight blocks in register tiles: what runs where the
//! other kernels of [`super`] do not, that is 2 to 31 rows (sequences decoding together, a short
//! prompt) on every CPU, and a prompt's rows on a CPU without AVX-512 VNNI (whose panels,
//! [`super::gemm`], need it). The tiles read the GGUF's block bytes (through candle's matmul hook,
//! patches/README.md) and give the same results as candle's own kernels, bit for bit.
//!
//! Each parallel task owns a block of [`COLUMNS`] weight rows (small enough to stay in the core's
//! L2 cache) and runs every activation row against them, so the weights are read from memory once
//! per call rather than once per row. Inside a block, a tile of `RM` activation rows × `RN`
//! weight rows decodes each weight block once for its `RM` rows and loads each activation block
//! once for its `RN` weight rows:
//! - the 32-element formats (Q4_0, Q5_0, Q8_0, Q8_0 activations; [`tiles`]): AVX2's `sign` trick
//!   and two multiply-adds per block product (4 × 3 tiles), or one `vpdpbusd` with the
//!   activations shifted to unsigned bytes and each weight block's `-128 · Σw` as the seed (AVX-512
//!   VNNI: 8 × 3, 32 registers; AVX-VNNI: 4 × 3);
//! - the k-quants (Q4_K, Q6_K, Q8_K activations; [`tiles_k`]): each 256-element block unpacked
//!   once into eight 32-code chunks with their sub-block scales, the offset (Q4_K's minimums,
//!   Q6_K's -32) applied through the activation block's partial sums; `vpdpwssd` with VNNI (8 × 2
//!   or 4 × 2), `madd` and `add` without (4 × 2). A weight block is taken chunk by chunk for all
//!   the tile's rows, so its codes and scales are read once per tile and the tile's integer sums
//!   stay in registers (before, row by row, each row read the block again and the sums and
//!   weights spilled: on a Zen 1 the 1.5B model's prompt went from 17.1 to 20.3 tokens/s, the
//!   sums unchanged bit for bit).
//!
//! On AVX2 without VNNI, where a whole prompt runs here, a task with at least [`DECODE_ONCE_ROWS`]
//! rows first decodes its weight rows once (Q4_0 and Q5_0 into Q8_0 blocks, the k-quants into
//! their unpacked form) and the tiles read that back. On a Zen 1 a prompt's products (128 rows
//! against every layer, `examples/decode_step.rs --rows 128`) took 15% less time: 32-element
//! formats 2,092 → 1,824 ms, k-quants 677 → 552 ms; other tile shapes on the decoded blocks
//! (4 × 2, 3 × 3, 2 × 4, 6 × 2) did not beat 4 × 3.
//!
//! Per cell, the float steps are candle's one-row dot products' for Q4_0, Q5_0 and Q8_0 (bit for
//! bit, so also [`super::gemv`]'s), and within ~1e-6 relative of them for the k-quants (the offset
//! is a second FMA per block).

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

use rayon::prelude::*;

#[cfg(target_arch = "x86_64")]
use super::{f16_to_f32, hsum, nibbles, q4k_scales_and_mins, q6k_codes, scale_shuffle, scale_shuffle_k4};
use super::{BlockFormat, KFormat, SendPtr, Q8_0_BYTES, Q8_K_BYTES};

/// Weight rows per parallel task: 24 rows of the 0.5B model's widest matrices (4,864 inputs of
/// Q4_K) are 66 KB, which stay in L2 while every activation row passes.
const COLUMNS: usize = 24;

/// The instructions the tiles run on, best first: AVX-512 VNNI, AVX-VNNI, AVX2 (with FMA and
/// F16C: ragbox's x86_64 baseline).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TileKernel {
    Avx512Vnni,
    AvxVnni,
    Avx2,
}

impl TileKernel {
    /// The best kernel this CPU runs, or `None` off x86_64 or without AVX2, FMA and F16C (looked up
    /// once per process).
    pub fn detect() -> Option<TileKernel> {
        TileKernel::supported().first().copied()
    }

    /// Every kernel this CPU runs, best first.
    pub fn available() -> Vec<TileKernel> {
        TileKernel::supported().to_vec()
    }

    /// [`TileKernel::available`], looked up once per process (every product of a few rows asks).
    fn supported() -> &'static [TileKernel] {
        static SUPPORTED: std::sync::OnceLock<Vec<TileKernel>> = std::sync::OnceLock::new();
        SUPPORTED.get_or_init(TileKernel::lookup)
    }

    fn lookup() -> Vec<TileKernel> {
        #[cfg(target_arch = "x86_64")]
        {
            let base = is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") && is_x86_feature_detected!("f16c");
            let avx512_vnni = base && is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512vl") && is_x86_feature_detected!("avx512vnni");
            let avx_vnni = base && is_x86_feature_detected!("avxvnni");
            [(TileKernel::Avx512Vnni, avx512_vnni), (TileKernel::AvxVnni, avx_vnni), (TileKernel::Avx2, base)]
                .into_iter()
                .filter(|(_, ok)| *ok)
                .map(|(k, _)| k)
                .collect()
        }
        #[cfg(not(target_arch = "x86_64"))]
        Vec::new()
    }

    /// For `ragbox doctor`.
    pub fn name(self) -> &'static str {
        match self {
            TileKernel::Avx512Vnni => "ragbox avx512-vnni tiles",
            TileKernel::AvxVnni => "ragbox avx-vnni tiles",
            TileKernel::Avx2 => "ragbox avx2 tiles",
        }
    }
}

/// `dst[r·n + c] = Σ_b weight block (c, b) · activation block (r, b)` for `m` rows of `k_blocks`
/// Q8_0 activation blocks against `n = dst.len() / m` weight rows of a 32-element format, on the
/// best [`TileKernel`] this CPU runs. Returns `false`, touching nothing, where it runs none.
///
/// # Panics
/// When the slices' lengths do not match `m`, `k_blocks` and `dst.len()`.
pub fn tiles(format: BlockFormat, m: usize, k_blocks: usize, activations: &[u8], weights: &[u8], dst: &mut [f32]) -> bool {
    TileKernel::detect().map(|kernel| tiles_with(kernel, format, m, k_blocks, activations, weights, dst)).is_some()
}

/// [`tiles`] for the k-quants: Q8_K activation blocks against Q4_K or Q6_K weight rows.
///
/// # Panics
/// As [`tiles`].
pub fn tiles_k(format: KFormat, m: usize, k_blocks: usize, activations: &[u8], weights: &[u8], dst: &mut [f32]) -> bool {
    TileKernel::detect().map(|kernel| tiles_k_with(kernel, format, m, k_blocks, activations, weights, dst)).is_some()
}

/// [`tiles`] on a given kernel (tests and benchmarks compare them).
///
/// # Panics
/// As [`tiles`], and when this CPU does not run `kernel` ([`TileKernel::available`]).
#[doc(hidden)]
pub fn tiles_with(kernel: TileKernel, format: BlockFormat, m: usize, k_blocks: usize, activations: &[u8], weights: &[u8], dst: &mut [f32]) {
    let product = Product::new(kernel, m, k_blocks, (activations, Q8_0_BYTES), (weights, format.bytes()), dst);
    #[cfg(target_arch = "x86_64")]
    product.run(|cols| {
        // SAFETY: the CPU runs `kernel` (`Product::new` asserts it); the operands' sizes are
        // checked there; each task writes its own columns.
        unsafe {
            match (kernel, format) {
                (TileKernel::Avx512Vnni, BlockFormat::Q4_0) => q0_avx512_vnni::<0>(&product, cols),
                (TileKernel::Avx512Vnni, BlockFormat::Q5_0) => q0_avx512_vnni::<1>(&product, cols),
                (TileKernel::Avx512Vnni, BlockFormat::Q8_0) => q0_avx512_vnni::<2>(&product, cols),
                (TileKernel::AvxVnni, BlockFormat::Q4_0) => q0_avx_vnni::<0>(&product, cols),
                (TileKernel::AvxVnni, BlockFormat::Q5_0) => q0_avx_vnni::<1>(&product, cols),
                (TileKernel::AvxVnni, BlockFormat::Q8_0) => q0_avx_vnni::<2>(&product, cols),
                (TileKernel::Avx2, BlockFormat::Q8_0) => q0_avx2::<2>(&product, cols),
                // Decoded once per task into Q8_0 blocks (the same codes and scales) where
                // several tiles of rows will read them, instead of once per tile.
                (TileKernel::Avx2, BlockFormat::Q4_0) if m >= DECODE_ONCE_ROWS => q0_avx2_decoded::<0>(&product, cols),
                (TileKernel::Avx2, BlockFormat::Q5_0) if m >= DECODE_ONCE_ROWS => q0_avx2_decoded::<1>(&product, cols),
                (TileKernel::Avx2, BlockFormat::Q4_0) => q0_avx2::<0>(&product, cols),
                (TileKernel::Avx2, BlockFormat::Q5_0) => q0_avx2::<1>(&product, cols),
            }
        }
    });
}

/// [`tiles_k`] on a given kernel.
///
/// # Panics
/// As [`tiles_with`].
#[doc(hidden)]
pub fn tiles_k_with(kernel: TileKernel, format: KFormat, m: usize, k_blocks: usize, activations: &[u8], weights: &[u8], dst: &mut [f32]) {
    let product = Product::new(kernel, m, k_blocks, (activations, Q8_K_BYTES), (weights, format.bytes()), dst);
    #[cfg(target_arch = "x86_64")]
    product.run(|cols| {
        // SAFETY: as in `tiles_with`.
        unsafe {
            match (kernel, format) {
                (TileKernel::Avx512Vnni, KFormat::Q4K) => k_avx512_vnni::<0>(&product, cols),
                (TileKernel::Avx512Vnni, KFormat::Q6K) => k_avx512_vnni::<1>(&product, cols),
                (TileKernel::AvxVnni, KFormat::Q4K) => k_avx_vnni::<0>(&product, cols),
                (TileKernel::AvxVnni, KFormat::Q6K) => k_avx_vnni::<1>(&product, cols),
                // Unpacked once per task where several tiles of rows will read the blocks.
                (TileKernel::Avx2, KFormat::Q4K) if m >= DECODE_ONCE_ROWS => k_avx2_decoded::<0>(&product, cols),
                (TileKernel::Avx2, KFormat::Q6K) if m >= DECODE_ONCE_ROWS => k_avx2_decoded::<1>(&product, cols),
                (TileKernel::Avx2, KFormat::Q4K) => k_avx2::<0>(&product, cols),
                (TileKernel::Avx2, KFormat::Q6K) => k_avx2::<1>(&product, cols),
            }
        }
    });
}

/// One call's operands: `m` activation rows of `k_blocks` blocks, `n` weight rows, the output.
struct Product<'a> {
    m: usize,
    k_blocks: usize,
    n: usize,
    /// The activation blocks' bytes, and bytes per block.
    lhs: &'a [u8],
    lhs_block: usize,
    /// The weight blocks' bytes, and bytes per block.
    rhs: &'a [u8],
    rhs_block: usize,
    /// The weight row `rhs` starts with (0, or a task's first column when it holds that task's
    /// rows alone, [`Product::with_weights`]).
    rhs_first: usize,
    dst: SendPtr,
}

impl<'a> Product<'a> {
    /// Checks the sizes and the kernel, panicking as [`tiles_with`] says.
    fn new(kernel: TileKernel, m: usize, k_blocks: usize, lhs: (&'a [u8], usize), rhs: (&'a [u8], usize), dst: &'a mut [f32]) -> Product<'a> {
        assert!(TileKernel::supported().contains(&kernel), "this CPU does not run {kernel:?}");
        assert_eq!(lhs.0.len(), m * k_blocks * lhs.1, "activations: {m} rows of {k_blocks} blocks");
        let n = dst.len() / m.max(1);
        assert_eq!(dst.len(), m * n, "dst: {m} rows");
        assert_eq!(rhs.0.len(), n * k_blocks * rhs.1, "weights: {n} rows of {k_blocks} blocks");
        Product { m, k_blocks, n, lhs: lhs.0, lhs_block: lhs.1, rhs: rhs.0, rhs_block: rhs.1, rhs_first: 0, dst: SendPtr(dst.as_mut_ptr()) }
    }

    /// This product with the weight rows from `first` on read from `rhs` (blocks of `rhs_block`
    /// bytes) instead.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    fn with_weights<'b>(&self, rhs: &'b [u8], rhs_block: usize, first: usize) -> Product<'b>
    where
        'a: 'b,
    {
        Product { rhs, rhs_block, rhs_first: first, ..*self }
    }

    /// `task(columns)` for each block of [`COLUMNS`] weight rows, in parallel.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    fn run(&self, task: impl Fn(std::ops::Range<usize>) + Sync) {
        (0..self.n.div_ceil(COLUMNS)).into_par_iter().for_each(|block| task(block * COLUMNS..((block + 1) * COLUMNS).min(self.n)));
    }

    /// Activation block `b` of row `r`.
    #[inline(always)]
    unsafe fn activation(&self, r: usize, b: usize) -> *const u8 {
        self.lhs.as_ptr().add((r * self.k_blocks + b) * self.lhs_block)
    }

    /// Weight block `b` of weight row `c`.
    #[inline(always)]
    unsafe fn weight(&self, c: usize, b: usize) -> *const u8 {
        self.rhs.as_ptr().add(((c - self.rhs_first) * self.k_blocks + b) * self.rhs_block)
    }

    /// A tile's sums into the output, each horizontal sum in candle's order.
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn store<const RM: usize, const RN: usize>(&self, acc: &[[__m256; RN]; RM], row0: usize, col0: usize) {
        for (i, acc) in acc.iter().enumerate() {
            for (j, acc) in acc.iter().enumerate() {
                *self.dst.get().add((row0 + i) * self.n + col0 + j) = hsum(*acc);
            }
        }
    }
}

/// The loops around a tile function `$tile::<FORMAT, RM, RN>(product, row, col)`: full tiles, then
/// the right-hand columns and bottom rows that fill none, over every row and the columns `$cols`.
#[cfg(target_arch = "x86_64")]
macro_rules! drive_tiles {
    ($tile:ident, $rm:literal, $rn:literal, $p:ident, $cols:ident) => {{
        const RM: usize = $rm;
        const RN: usize = $rn;
        let full_cols = $cols.start + ($cols.len() / RN) * RN;
        let full_rows = ($p.m / RM) * RM;
        for row in (0..full_rows).step_by(RM) {
            for col in ($cols.start..full_cols).step_by(RN) {
                $tile::<FORMAT, RM, RN>($p, row, col);
            }
            for col in full_cols..$cols.end {
                $tile::<FORMAT, RM, 1>($p, row, col);
            }
        }
        for row in full_rows..$p.m {
            for col in ($cols.start..full_cols).step_by(RN) {
                $tile::<FORMAT, 1, RN>($p, row, col);
            }
            for col in full_cols..$cols.end {
                $tile::<FORMAT, 1, 1>($p, row, col);
            }
        }
    }};
}

/// A 32-element weight block (`FORMAT` 0, 1, 2: Q4_0, Q5_0, Q8_0) as 32 signed bytes, and its
/// scale.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn decode_q0<const FORMAT: u8>(block: *const u8) -> (__m256i, f32) {
    let low4 = _mm256_set1_epi8(0x0F);
    let d = f16_to_f32(std::slice::from_raw_parts(block, 2));
    let codes = match FORMAT {
        0 => _mm256_sub_epi8(nibbles(block.add(2), low4), _mm256_set1_epi8(8)),
        1 => {
            // 0xF0 where the fifth bit is clear: the code minus 16 in two's complement.
            let qh = std::ptr::read_unaligned(block.add(2) as *const u32) as i32;
            let spread = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0);
            let bit = _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe);
            let set = _mm256_cmpeq_epi8(_mm256_or_si256(_mm256_shuffle_epi8(_mm256_set1_epi32(qh), spread), bit), _mm256_set1_epi64x(-1));
            _mm256_or_si256(nibbles(block.add(6), low4), _mm256_andnot_si256(set, _mm256_set1_epi8(0xF0u8 as i8)))
        }
        _ => _mm256_loadu_si256(block.add(2) as *const __m256i),
    };
    (codes, d)
}

/// An AVX2 tile of the 32-element formats: per block product `|w| · (a with w's sign)` in
/// `maddubs`, pairs summed by `madd`, one FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q0_tile_avx2<const FORMAT: u8, const RM: usize, const RN: usize>(p: &Product, row0: usize, col0: usize) {
    let ones = _mm256_set1_epi16(1);
    let mut acc = [[_mm256_setzero_ps(); RN]; RM];
    for b in 0..p.k_blocks {
        let mut wx = [_mm256_setzero_si256(); RN];
        let mut wabs = [_mm256_setzero_si256(); RN];
        let mut wd = [0f32; RN];
        for j in 0..RN {
            let (x, d) = decode_q0::<FORMAT>(p.weight(col0 + j, b));
            wx[j] = x;
            wabs[j] = _mm256_sign_epi8(x, x);
            wd[j] = d;
        }
        for (i, acc) in acc.iter_mut().enumerate() {
            let a = p.activation(row0 + i, b);
            let y = _mm256_loadu_si256(a.add(2) as *const __m256i);
            let ad = f16_to_f32(std::slice::from_raw_parts(a, 2));
            for j in 0..RN {
                let sy = _mm256_sign_epi8(y, wx[j]);
                let q = _mm256_cvtepi32_ps(_mm256_madd_epi16(ones, _mm256_maddubs_epi16(wabs[j], sy)));
                acc[j] = _mm256_fmadd_ps(_mm256_set1_ps(ad * wd[j]), q, acc[j]);
            }
        }
    }
    p.store(&acc, row0, col0);
}

/// The AVX2 tiles, 4 × 3, over the columns `cols`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q0_avx2<const FORMAT: u8>(p: &Product, cols: std::ops::Range<usize>) {
    drive_tiles!(q0_tile_avx2, 4, 3, p, cols);
}

/// Rows from which [`q0_avx2_decoded`] pays: two tiles of rows read each decoded block.
const DECODE_ONCE_ROWS: usize = 8;

/// [`q0_avx2`] for Q4_0 or Q5_0 (`FORMAT` 0, 1) with the weight rows `cols` decoded first into
/// Q8_0 blocks: each block's f16 scale as it is and its 32 codes less the format's offset, so the
/// Q8_0 tiles' sums are the same bit for bit. A Q5_0 block's decoding (a shuffle, a compare and
/// three logic ops) then happens once per call, not once per tile of 4 rows, and the tiles
/// hold one register less of work per column.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q0_avx2_decoded<const FORMAT: u8>(p: &Product, cols: std::ops::Range<usize>) {
    let mut decoded = vec![0u8; cols.len() * p.k_blocks * Q8_0_BYTES];
    for (i, c) in cols.clone().enumerate() {
        for b in 0..p.k_blocks {
            let block = p.weight(c, b);
            let (codes, _) = decode_q0::<FORMAT>(block);
            let out = decoded.as_mut_ptr().add((i * p.k_blocks + b) * Q8_0_BYTES);
            std::ptr::copy_nonoverlapping(block, out, 2);
            _mm256_storeu_si256(out.add(2) as *mut __m256i, codes);
        }
    }
    q0_avx2::<2>(&p.with_weights(&decoded, Q8_0_BYTES, cols.start), cols);
}

/// The 32-element formats' tiles with VNNI's `vpdpbusd` (`$dpbusd`), compiled with `$features`:
/// the signed activations shifted into unsigned bytes (`a + 128`, one xor per block and row), and
/// each weight block's `-128 · Σw` as the sum's seed.
#[cfg(target_arch = "x86_64")]
macro_rules! q0_vnni {
    ($drive:ident, $tile:ident, $features:literal, $dpbusd:ident, $rm:literal, $rn:literal) => {
        #[target_feature(enable = $features)]
        unsafe fn $tile<const FORMAT: u8, const RM: usize, const RN: usize>(p: &Product, row0: usize, col0: usize) {
            let shift = _mm256_set1_epi8(-128i8);
            let zero = _mm256_setzero_si256();
            let mut acc = [[_mm256_setzero_ps(); RN]; RM];
            for b in 0..p.k_blocks {
                let mut wx = [zero; RN];
                let mut start = [zero; RN];
                let mut wd = [0f32; RN];
                for j in 0..RN {
                    let (x, d) = decode_q0::<FORMAT>(p.weight(col0 + j, b));
                    wx[j] = x;
                    start[j] = _mm256_sub_epi32(zero, $dpbusd(zero, shift, x));
                    wd[j] = d;
                }
                for (i, acc) in acc.iter_mut().enumerate() {
                    let a = p.activation(row0 + i, b);
                    let y = _mm256_xor_si256(_mm256_loadu_si256(a.add(2) as *const __m256i), shift);
                    let ad = f16_to_f32(std::slice::from_raw_parts(a, 2));
                    for j in 0..RN {
                        let dot = $dpbusd(start[j], y, wx[j]);
                        acc[j] = _mm256_fmadd_ps(_mm256_set1_ps(ad * wd[j]), _mm256_cvtepi32_ps(dot), acc[j]);
                    }
                }
            }
            p.store(&acc, row0, col0);
        }

        #[target_feature(enable = $features)]
        unsafe fn $drive<const FORMAT: u8>(p: &Product, cols: std::ops::Range<usize>) {
            drive_tiles!($tile, $rm, $rn, p, cols);
        }
    };
}

#[cfg(target_arch = "x86_64")]
q0_vnni!(q0_avx512_vnni, q0_tile_avx512_vnni, "avx2,fma,f16c,avx512f,avx512vl,avx512vnni", _mm256_dpbusd_epi32, 8, 3);
#[cfg(target_arch = "x86_64")]
q0_vnni!(q0_avx_vnni, q0_tile_avx_vnni, "avx2,fma,f16c,avxvnni", _mm256_dpbusd_avx_epi32, 4, 3);

/// A k-quant weight block unpacked for the tiles: eight chunks of 32 unsigned codes, each with its
/// sub-block scales as 16-bit lanes lined up with `maddubs`'s pair sums, and the block's offset
/// term as a weight on the activation block's 16 partial sums: the block's product is
/// `d · Σ_c madd(scale_c, maddubs(q_c, a_c)) + offset_scale · madd(offset, bsums)`, both times the
/// activation block's scale.
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy)]
struct KDecoded {
    q: [__m256i; 8],
    scales: [__m256i; 8],
    offset: __m256i,
    d: f32,
    offset_scale: f32,
}

/// A block [`decode_k`] unpacked before, read back (`block` points at a [`KDecoded`]).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn read_decoded_k<const FORMAT: u8>(block: *const u8) -> KDecoded {
    block.cast::<KDecoded>().read()
}

/// A Q4_K (`FORMAT` 0) or Q6_K (1) weight block unpacked.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn decode_k<const FORMAT: u8>(block: *const u8) -> KDecoded {
    let x = std::slice::from_raw_parts(block, [KFormat::Q4K, KFormat::Q6K][FORMAT as usize].bytes());
    let m4 = _mm256_set1_epi8(0xF);
    let mut q = [_mm256_setzero_si256(); 8];
    let mut scales = [_mm256_setzero_si256(); 8];
    if FORMAT == 0 {
        // Codes 0..=15 with a 6-bit scale and a 6-bit minimum per 32 elements: `w = d·scale·q −
        // dmin·min`, so the offset is `−dmin · Σ min_s · (the activations' sum over sub-block s)`.
        // Bytes 0..8: the eight scales; 8..16: the eight minimums.
        let mut bytes = [0u8; 16];
        for (out, word) in bytes.chunks_exact_mut(4).zip(q4k_scales_and_mins(x)) {
            out.copy_from_slice(&word.to_le_bytes());
        }
        let sc128 = _mm256_extracti128_si256(_mm256_cvtepu8_epi16(_mm_loadu_si128(bytes.as_ptr() as *const __m128i)), 0);
        let scales16 = _mm256_insertf128_si256(_mm256_castsi128_si256(sc128), sc128, 1);
        let mut mins = [0i16; 16];
        for (s, m) in bytes[8..16].iter().enumerate() {
            mins[2 * s] = i16::from(*m);
            mins[2 * s + 1] = i16::from(*m);
        }
        for j in 0..4 {
            let bits = _mm256_loadu_si256(x.as_ptr().add(16 + 32 * j) as *const __m256i);
            q[2 * j] = _mm256_and_si256(bits, m4);
            q[2 * j + 1] = _mm256_and_si256(_mm256_srli_epi16(bits, 4), m4);
            scales[2 * j] = _mm256_shuffle_epi8(scales16, scale_shuffle_k4(2 * j));
            scales[2 * j + 1] = _mm256_shuffle_epi8(scales16, scale_shuffle_k4(2 * j + 1));
        }
        KDecoded {
            q,
            scales,
            offset: _mm256_loadu_si256(mins.as_ptr() as *const __m256i),
            d: f16_to_f32(x),
            offset_scale: -f16_to_f32(&x[2..]),
        }
    } else {
        // Codes 0..=63 standing for `q − 32`, with a signed 8-bit scale per 16 elements, so the
        // offset is `−32·d · Σ scale_k · (the activations' sum over group k)`.
        let scales128 = _mm_loadu_si128(x.as_ptr().add(192) as *const __m128i);
        for j in 0..2 {
            q[4 * j..4 * j + 4].copy_from_slice(&q6k_codes(x, j));
            for k in 0..4 {
                let is = 4 * j + k;
                scales[is] = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(scales128, scale_shuffle(is)));
            }
        }
        let d = f16_to_f32(&x[208..]);
        KDecoded { q, scales, offset: _mm256_cvtepi8_epi16(scales128), d, offset_scale: -32.0 * d }
    }
}

/// `acc + madd(a, b)`: VNNI's `vpdpwssd` without VNNI.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn dpwssd_avx2(acc: __m256i, a: __m256i, b: __m256i) -> __m256i {
    _mm256_add_epi32(acc, _mm256_madd_epi16(a, b))
}

/// The k-quants' tiles with `$dpwssd` (VNNI's `vpdpwssd`, or [`dpwssd_avx2`]), compiled with
/// `$features`, reading each weight block with `$load` ([`decode_k`], or [`read_decoded_k`]).
#[cfg(target_arch = "x86_64")]
macro_rules! k_tiles {
    ($drive:ident, $tile:ident, $features:literal, $dpwssd:ident, $rm:literal, $rn:literal, $load:ident) => {
        #[target_feature(enable = $features)]
        unsafe fn $tile<const FORMAT: u8, const RM: usize, const RN: usize>(p: &Product, row0: usize, col0: usize) {
            let mut acc = [[_mm256_setzero_ps(); RN]; RM];
            for b in 0..p.k_blocks {
                // A loop, not `array::from_fn`: a closure would not inherit this function's
                // target features (candle's perf showed the decode left out of line).
                let mut w = [$load::<FORMAT>(p.weight(col0, b)); RN];
                for (j, w) in w.iter_mut().enumerate().skip(1) {
                    *w = $load::<FORMAT>(p.weight(col0 + j, b));
                }
                // Chunk by chunk: a chunk's codes and scales are read once for every row of the
                // tile, and the tile's integer sums stay in registers; each sum still adds the
                // chunks in order, so the sums are those of a row-by-row loop.
                let mut sums = [[_mm256_setzero_si256(); RN]; RM];
                for c in 0..8 {
                    let mut q = [w[0].q[c]; RN];
                    let mut scales = [w[0].scales[c]; RN];
                    for j in 1..RN {
                        q[j] = w[j].q[c];
                        scales[j] = w[j].scales[c];
                    }
                    for (i, sums) in sums.iter_mut().enumerate() {
                        let y = _mm256_loadu_si256(p.activation(row0 + i, b).add(4 + 32 * c) as *const __m256i);
                        for j in 0..RN {
                            sums[j] = $dpwssd(sums[j], scales[j], _mm256_maddubs_epi16(q[j], y));
                        }
                    }
                }
                for (i, acc) in acc.iter_mut().enumerate() {
                    let a = p.activation(row0 + i, b);
                    let ad = f32::from_le_bytes(*(a as *const [u8; 4]));
                    let bsums = _mm256_loadu_si256(a.add(260) as *const __m256i);
                    for j in 0..RN {
                        let offset = _mm256_madd_epi16(w[j].offset, bsums);
                        acc[j] = _mm256_fmadd_ps(_mm256_set1_ps(ad * w[j].d), _mm256_cvtepi32_ps(sums[i][j]), acc[j]);
                        acc[j] = _mm256_fmadd_ps(_mm256_set1_ps(ad * w[j].offset_scale), _mm256_cvtepi32_ps(offset), acc[j]);
                    }
                }
            }
            p.store(&acc, row0, col0);
        }

        #[target_feature(enable = $features)]
        unsafe fn $drive<const FORMAT: u8>(p: &Product, cols: std::ops::Range<usize>) {
            drive_tiles!($tile, $rm, $rn, p, cols);
        }
    };
}

#[cfg(target_arch = "x86_64")]
k_tiles!(k_avx512_vnni, k_tile_avx512_vnni, "avx2,fma,f16c,avx512f,avx512vl,avx512vnni", _mm256_dpwssd_epi32, 8, 2, decode_k);
#[cfg(target_arch = "x86_64")]
k_tiles!(k_avx_vnni, k_tile_avx_vnni, "avx2,fma,f16c,avxvnni", _mm256_dpwssd_avx_epi32, 4, 2, decode_k);
#[cfg(target_arch = "x86_64")]
k_tiles!(k_avx2, k_tile_avx2, "avx2,fma,f16c", dpwssd_avx2, 4, 2, decode_k);
#[cfg(target_arch = "x86_64")]
k_tiles!(k_avx2_unpacked, k_tile_avx2_unpacked, "avx2,fma,f16c", dpwssd_avx2, 4, 2, read_decoded_k);

/// [`k_avx2`] with the weight rows `cols` unpacked once per call ([`decode_k`] into a buffer the
/// tiles read back) instead of once per tile of 4 rows: the same values, so the same sums.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn k_avx2_decoded<const FORMAT: u8>(p: &Product, cols: std::ops::Range<usize>) {
    let mut unpacked = Vec::with_capacity(cols.len() * p.k_blocks);
    for c in cols.clone() {
        for b in 0..p.k_blocks {
            unpacked.push(decode_k::<FORMAT>(p.weight(c, b)));
        }
    }
    let size = std::mem::size_of::<KDecoded>();
    let bytes = std::slice::from_raw_parts(unpacked.as_ptr().cast::<u8>(), unpacked.len() * size);
    k_avx2_unpacked::<FORMAT>(&p.with_weights(bytes, size, cols.start), cols);
}

#[cfg(test)]
mod tests {
    use super::super::tests::{blocks, k_quant_blocks, k_reference, q8k_blocks};
    use super::*;

    /// Every tile kernel this CPU runs gives the one-row kernel's results ([`super::super::gemv_with`],
    /// candle's one-row dot product bit for bit) for the 32-element formats, bit for bit, on
    /// shapes that fill the 8 × 3 and 4 × 3 tiles and leave remainders of rows and columns.
    #[test]
    fn the_tiles_give_the_one_row_kernels_results_bit_for_bit() {
        let Some(one_row) = super::super::GemvKernel::detect() else { return };
        for format in [BlockFormat::Q4_0, BlockFormat::Q5_0, BlockFormat::Q8_0] {
            // Fewer rows than `DECODE_ONCE_ROWS` and more; (31, 50): three tasks' columns.
            for (m, n) in [(9, 11), (4, 12), (2, 5), (31, 50)] {
                let k_blocks = 28;
                let weights = blocks(format, n * k_blocks, 5);
                let activations = blocks(BlockFormat::Q8_0, m * k_blocks, 9);
                for kernel in TileKernel::available() {
                    let mut got = vec![f32::NAN; m * n];
                    tiles_with(kernel, format, m, k_blocks, &activations, &weights, &mut got);
                    for r in 0..m {
                        let mut want = vec![f32::NAN; n];
                        let row = &activations[r * k_blocks * Q8_0_BYTES..(r + 1) * k_blocks * Q8_0_BYTES];
                        super::super::gemv_with(one_row, format, k_blocks, row, &weights, &mut want);
                        for (c, want) in want.iter().enumerate() {
                            let g = got[r * n + c];
                            assert_eq!(g.to_bits(), want.to_bits(), "{format:?} {kernel:?} [{r}, {c}]: {g} vs {want}");
                        }
                    }
                }
            }
        }
    }

    /// The k-quant tiles on every kernel this CPU runs against GGML's plain dequantisation (the
    /// offset is a second FMA per block, so they round differently from the one-row kernel).
    #[test]
    fn the_k_quant_tiles_match_ggmls_plain_dequantisation() {
        for format in [KFormat::Q4K, KFormat::Q6K] {
            // (9, 30): two tasks' columns, the second one's unpacked rows starting past 0.
            for (m, n) in [(9, 11), (4, 12), (3, 5), (9, 30)] {
                let k_blocks = 4;
                let weights = k_quant_blocks(format, n * k_blocks, 3);
                let activations = q8k_blocks(m * k_blocks, 7);
                for kernel in TileKernel::available() {
                    let mut got = vec![f32::NAN; m * n];
                    tiles_k_with(kernel, format, m, k_blocks, &activations, &weights, &mut got);
                    for r in 0..m {
                        for c in 0..n {
                            let (want, scale) = k_reference(format, k_blocks, &activations, &weights, r, c);
                            let g = got[r * n + c];
                            assert!((f64::from(g) - want).abs() <= 1e-5 * scale.max(1.0), "{format:?} {kernel:?} [{r}, {c}]: {g} vs {want}");
                        }
                    }
                }
            }
        }
    }
}
