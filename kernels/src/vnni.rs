//! A u8 × i8 → i32 GEMM tile for CPUs with AVX-512 VNNI: one `vpdpbusd` is 64 multiply-adds, and
//! a register tile of 6 activation rows × 64 weight columns keeps 24 of them in flight for every
//! 4 weight loads and 6 broadcasts.
//!
//! rten-gemm's VNNI kernel reaches 90-120 GMAC/s on two Zen 4 cores for BERT's shapes, about a
//! third of what the instruction allows; what this one does differently (the packing and the
//! driver are `panels.rs`): no packing pass over the activations (`pack_a` was 7-10% of an int8
//! embedding), the weights packed at load in the tile's order, and a layer's weights and their
//! rounding residual served by one pass over the activations.

use std::arch::x86_64::*;

use crate::panels::Tile;

/// The AVX-512 VNNI tile: 6 rows × 64 columns, 4 inputs per step.
pub(crate) struct Vnni;

impl Tile for Vnni {
    type Code = u8;
    const PANEL: usize = 64;
    const STEP: usize = 4;
    const ROWS: usize = 6;
    const NAME: &'static str = "ragbox avx512-vnni 6x64";

    fn available() -> bool {
        is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512bw") && is_x86_feature_detected!("avx512vnni")
    }

    unsafe fn rows<const R: usize>(a: &[u8], stride: usize, inputs: usize, b: &[i8], out: *mut i32, ldo: usize, width: usize) {
        tile_rows::<R>(a, stride, inputs, b, out, ldo, width)
    }
}

/// `R` rows of `a` times one panel `b`, into `out` (row length `ldo`), the first `width` columns.
///
/// # Safety
/// The CPU has AVX-512 F, BW and VNNI; `a` holds `R` rows `stride` apart of `inputs` bytes each;
/// `out` is valid for `R` rows of `width` i32 writes.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn tile_rows<const R: usize>(a: &[u8], stride: usize, inputs: usize, b: &[i8], out: *mut i32, ldo: usize, width: usize) {
    debug_assert!(a.len() >= (R - 1) * stride + inputs && b.len() == inputs.div_ceil(4) * 256);
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
    #[test]
    fn equals_the_plain_sums_for_every_shape_and_edge() {
        crate::panels::tests::equals_the_plain_sums::<super::Vnni>(|a| a.to_vec());
    }
}
