//! A u8 × i8 → i32 GEMM tile for x86 CPUs with AVX2 but no AVX-512 VNNI, that keeps all 8 bits
//! of the activations.
//!
//! AVX2's byte multiply-add, `vpmaddubsw`, adds its u8 × i8 pairs into saturating 16 bits
//! (255 · 127 · 2 > 32,767), so rten-gemm's AVX2 kernel is fed 7-bit activations, and on them
//! MiniLM and nomic-embed fell below the int8 quality gate (worst cosine 0.99808 and 0.99770
//! against 0.999) and the L-12 cross-encoder's logits drifted from onnxruntime's (worst 2.48)
//! on a first-generation EPYC. This tile widens both sides to 16 bits first, as onnxruntime's
//! MLAS does on AVX2: the activations once per call (u16 codes, `Int8Linear`), the weights per
//! step (`vpmovsxbw` of 16 bytes: 8 columns × 2 inputs), and multiplies with `vpmaddwd`,
//! whose pair sums are 32-bit and exact. A register tile of 6 rows × 16 columns keeps 12 sums
//! in flight for 2 weight registers and one broadcast.

use std::arch::x86_64::*;

use crate::panels::Tile;

/// The AVX2 tile: 6 rows × 16 columns, 2 inputs per step, activations as u16.
pub(crate) struct Avx2;

impl Tile for Avx2 {
    type Code = u16;
    const PANEL: usize = 16;
    const STEP: usize = 2;
    const ROWS: usize = 6;
    const NAME: &'static str = "ragbox avx2 6x16 (16-bit products)";

    fn available() -> bool {
        is_x86_feature_detected!("avx2")
    }

    unsafe fn rows<const R: usize>(a: &[u16], stride: usize, inputs: usize, b: &[i8], out: *mut i32, ldo: usize, width: usize) {
        tile_rows::<R>(a, stride, inputs, b, out, ldo, width)
    }
}

/// `R` rows of `a` times one panel `b`, into `out` (row length `ldo`), the first `width` columns.
///
/// # Safety
/// The CPU has AVX2; `a` holds `R` rows `stride` apart of `inputs` codes each, every code at
/// most 255; `b` is the panel's `inputs.div_ceil(2)` steps of 32 bytes; `out` is valid for `R`
/// rows of `width` i32 writes.
#[target_feature(enable = "avx2")]
unsafe fn tile_rows<const R: usize>(a: &[u16], stride: usize, inputs: usize, b: &[i8], out: *mut i32, ldo: usize, width: usize) {
    debug_assert!(a.len() >= (R - 1) * stride + inputs && b.len() == inputs.div_ceil(2) * 32);
    let a = a.as_ptr();
    let mut acc = [[_mm256_setzero_si256(); 2]; R];
    let whole = inputs / 2;
    let mut steps = b.as_ptr();
    for step in 0..whole {
        let w = [_mm256_cvtepi8_epi16(_mm_loadu_si128(steps.cast())), _mm256_cvtepi8_epi16(_mm_loadu_si128(steps.add(16).cast()))];
        for (r, acc) in acc.iter_mut().enumerate() {
            // Two u16 codes, one 32-bit lane: the pair each column's two weights multiply.
            let x = _mm256_set1_epi32(a.add(r * stride + step * 2).cast::<i32>().read_unaligned());
            for j in 0..2 {
                acc[j] = _mm256_add_epi32(acc[j], _mm256_madd_epi16(x, w[j]));
            }
        }
        steps = steps.add(32);
    }
    if !inputs.is_multiple_of(2) {
        // The last, partial step: the missing input's weights are zero, its code too.
        let w = [_mm256_cvtepi8_epi16(_mm_loadu_si128(steps.cast())), _mm256_cvtepi8_epi16(_mm_loadu_si128(steps.add(16).cast()))];
        for (r, acc) in acc.iter_mut().enumerate() {
            let x = _mm256_set1_epi32(i32::from(*a.add(r * stride + whole * 2)));
            for j in 0..2 {
                acc[j] = _mm256_add_epi32(acc[j], _mm256_madd_epi16(x, w[j]));
            }
        }
    }
    for (r, acc) in acc.iter().enumerate() {
        for (j, &sums) in acc.iter().enumerate() {
            let first = j * 8;
            if first >= width {
                break;
            }
            let dst = out.add(r * ldo + first);
            if width - first >= 8 {
                _mm256_storeu_si256(dst.cast(), sums);
            } else {
                let mut lanes = [0i32; 8];
                _mm256_storeu_si256(lanes.as_mut_ptr().cast(), sums);
                std::ptr::copy_nonoverlapping(lanes.as_ptr(), dst, width - first);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn equals_the_plain_sums_for_every_shape_and_edge() {
        crate::panels::tests::equals_the_plain_sums::<super::Avx2>(|a| a.iter().map(|&c| u16::from(c)).collect());
    }
}
