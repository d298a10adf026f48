use super::k_quants::{
    BlockQ2K, BlockQ3K, BlockQ4K, BlockQ4_0, BlockQ5K, BlockQ5_0, BlockQ6K, BlockQ8K, BlockQ8_0,
    QK8_0, QK_K,
};
use byteorder::{ByteOrder, LittleEndian};
use half::f16;

#[cfg(target_arch = "x86")]
use core::arch::x86::*;
#[cfg(target_arch = "x86_64")]
use core::arch::x86_64::*;

#[inline(always)]
pub(crate) unsafe fn sum_i16_pairs_float(x: __m256i) -> __m256 {
    let ones = _mm256_set1_epi16(1);
    let summed_pairs = _mm256_madd_epi16(ones, x);
    _mm256_cvtepi32_ps(summed_pairs)
}

#[inline(always)]
pub(crate) unsafe fn mul_sum_us8_pairs_float(ax: __m256i, sy: __m256i) -> __m256 {
    let dot = _mm256_maddubs_epi16(ax, sy);
    sum_i16_pairs_float(dot)
}

#[inline(always)]
pub(crate) unsafe fn hsum_float_8(x: __m256) -> f32 {
    let res = _mm256_extractf128_ps(x, 1);
    let res = _mm_add_ps(res, _mm256_castps256_ps128(x));
    let res = _mm_add_ps(res, _mm_movehl_ps(res, res));
    let res = _mm_add_ss(res, _mm_movehdup_ps(res));
    _mm_cvtss_f32(res)
}

#[inline(always)]
pub(crate) unsafe fn bytes_from_nibbles_32(rsi: *const u8) -> __m256i {
    let tmp = _mm_loadu_si128(rsi as *const __m128i);
    let bytes = _mm256_insertf128_si256::<1>(_mm256_castsi128_si256(tmp), _mm_srli_epi16(tmp, 4));
    let low_mask = _mm256_set1_epi8(0xF);
    _mm256_and_si256(low_mask, bytes)
}

#[inline(always)]
pub(crate) unsafe fn mul_sum_i8_pairs_float(x: __m256i, y: __m256i) -> __m256 {
    let ax = _mm256_sign_epi8(x, x);
    let sy = _mm256_sign_epi8(y, x);
    mul_sum_us8_pairs_float(ax, sy)
}

#[inline(always)]
pub(crate) fn vec_dot_q4_0_q8_0(n: usize, xs: &[BlockQ4_0], ys: &[BlockQ8_0]) -> f32 {
    debug_assert!(
        n.is_multiple_of(QK8_0),
        "vec_dot_q4_0_q8_0: {n} is not divisible by {QK8_0}"
    );
    unsafe {
        let mut acc = _mm256_setzero_ps();
        for (x, y) in xs.iter().zip(ys.iter()) {
            let d = _mm256_set1_ps(f16::to_f32(x.d) * f16::to_f32(y.d));
            let bx = bytes_from_nibbles_32(x.qs.as_ptr());
            let off = _mm256_set1_epi8(8);
            let bx = _mm256_sub_epi8(bx, off);
            let by = _mm256_loadu_si256(y.qs.as_ptr() as *const __m256i);
            let q = mul_sum_i8_pairs_float(bx, by);
            acc = _mm256_fmadd_ps(d, q, acc);
        }
        hsum_float_8(acc)
    }
}

/// ragbox patch: 32 bits to 32 bytes, 0xFF where the bit is set (ggml's `bytes_from_bits_32`).
#[inline(always)]
unsafe fn bytes_from_bits_32(x: *const u8) -> __m256i {
    let x32 = u32::from_le_bytes(*(x as *const [u8; 4]));
    let shuf_mask = _mm256_set_epi64x(
        0x0303030303030303,
        0x0202020202020202,
        0x0101010101010101,
        0x0000000000000000,
    );
    let bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(x32 as i32), shuf_mask);
    let bit_mask = _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe);
    let bytes = _mm256_or_si256(bytes, bit_mask);
    _mm256_cmpeq_epi8(bytes, _mm256_set1_epi64x(-1))
}

/// ragbox patch: the AVX2 Q5_0 x Q8_0 dot product (ggml's `ggml_vec_dot_q5_0_q8_0`); candle
/// 0.10.2 has only the scalar loop, and Q5_0 is most of a Qwen2.5-0.5B Q4_K_M file.
#[inline(always)]
pub(crate) fn vec_dot_q5_0_q8_0(n: usize, xs: &[BlockQ5_0], ys: &[BlockQ8_0]) -> f32 {
    debug_assert!(
        n.is_multiple_of(QK8_0),
        "vec_dot_q5_0_q8_0: {n} is not divisible by {QK8_0}"
    );
    unsafe {
        let mut acc = _mm256_setzero_ps();
        for (x, y) in xs.iter().zip(ys.iter()) {
            let d = _mm256_set1_ps(f16::to_f32(x.d) * f16::to_f32(y.d));
            let qx = bytes_from_nibbles_32(x.qs.as_ptr());
            let bxhi = bytes_from_bits_32(x.qh.as_ptr());
            let bxhi = _mm256_andnot_si256(bxhi, _mm256_set1_epi8(0xF0u8 as i8));
            let qx = _mm256_or_si256(qx, bxhi);
            let qy = _mm256_loadu_si256(y.qs.as_ptr() as *const __m256i);
            let q = mul_sum_i8_pairs_float(qx, qy);
            acc = _mm256_fmadd_ps(d, q, acc);
        }
        hsum_float_8(acc)
    }
}

#[inline(always)]
pub(crate) fn vec_dot_q8_0_q8_0(n: usize, xs: &[BlockQ8_0], ys: &[BlockQ8_0]) -> f32 {
    debug_assert!(
        n.is_multiple_of(QK8_0),
        "vec_dot_q8_0_q8_0: {n} is not divisible by {QK8_0}"
    );
    unsafe {
        let mut acc = _mm256_setzero_ps();
        for (x, y) in xs.iter().zip(ys.iter()) {
            let d = _mm256_set1_ps(f16::to_f32(x.d) * f16::to_f32(y.d));
            let bx = _mm256_loadu_si256(x.qs.as_ptr() as *const __m256i);
            let by = _mm256_loadu_si256(y.qs.as_ptr() as *const __m256i);
            let q = mul_sum_i8_pairs_float(bx, by);
            acc = _mm256_fmadd_ps(d, q, acc);
        }
        hsum_float_8(acc)
    }
}

#[inline(always)]
unsafe fn get_scale_shuffle(i: usize) -> __m128i {
    const K_SHUFFLE: [u8; 128] = [
        0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3,
        3, 3, 4, 4, 4, 4, 4, 4, 4, 4, 5, 5, 5, 5, 5, 5, 5, 5, 6, 6, 6, 6, 6, 6, 6, 6, 7, 7, 7, 7,
        7, 7, 7, 7, 8, 8, 8, 8, 8, 8, 8, 8, 9, 9, 9, 9, 9, 9, 9, 9, 10, 10, 10, 10, 10, 10, 10, 10,
        11, 11, 11, 11, 11, 11, 11, 11, 12, 12, 12, 12, 12, 12, 12, 12, 13, 13, 13, 13, 13, 13, 13,
        13, 14, 14, 14, 14, 14, 14, 14, 14, 15, 15, 15, 15, 15, 15, 15, 15,
    ];
    _mm_loadu_si128((K_SHUFFLE.as_ptr() as *const __m128i).add(i))
}

#[inline(always)]
unsafe fn get_scale_shuffle_k4(i: usize) -> __m256i {
    const K_SHUFFLE: [u8; 256] = [
        0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1,
        0, 1, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3,
        2, 3, 2, 3, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5,
        4, 5, 4, 5, 4, 5, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7,
        6, 7, 6, 7, 6, 7, 6, 7, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9,
        8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 10, 11, 10, 11, 10, 11, 10, 11, 10, 11, 10, 11, 10, 11, 10,
        11, 10, 11, 10, 11, 10, 11, 10, 11, 10, 11, 10, 11, 10, 11, 10, 11, 12, 13, 12, 13, 12, 13,
        12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 12,
        13, 12, 13, 14, 15, 14, 15, 14, 15, 14, 15, 14, 15, 14, 15, 14, 15, 14, 15, 14, 15, 14, 15,
        14, 15, 14, 15, 14, 15, 14, 15, 14, 15, 14, 15,
    ];
    _mm256_loadu_si256((K_SHUFFLE.as_ptr() as *const __m256i).add(i))
}

#[inline(always)]
unsafe fn get_scale_shuffle_q3k(i: usize) -> __m256i {
    const K_SHUFFLE: [u8; 128] = [
        0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3,
        2, 3, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7,
        6, 7, 6, 7, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 10, 11, 10, 11, 10, 11, 10, 11,
        10, 11, 10, 11, 10, 11, 10, 11, 12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 12,
        13, 14, 15, 14, 15, 14, 15, 14, 15, 14, 15, 14, 15, 14, 15, 14, 15,
    ];
    _mm256_loadu_si256((K_SHUFFLE.as_ptr() as *const __m256i).add(i))
}

#[inline(always)]
pub(crate) fn vec_dot_q6k_q8k(n: usize, xs: &[BlockQ6K], ys: &[BlockQ8K]) -> f32 {
    debug_assert!(
        n.is_multiple_of(QK_K),
        "vec_dot_q6k_8k: {n} is not divisible by {QK_K}"
    );

    unsafe {
        let m4 = _mm256_set1_epi8(0xF);
        let m2 = _mm256_set1_epi8(3);
        let m32s = _mm256_set1_epi8(32);
        let mut acc = _mm256_setzero_ps();
        for (x, y) in xs.iter().zip(ys.iter()) {
            let d = y.d * x.d.to_f32();
            let mut q4 = x.ql.as_ptr();
            let mut qh = x.qh.as_ptr();
            let mut q8 = y.qs.as_ptr();

            let scales = _mm_loadu_si128(x.scales.as_ptr() as *const __m128i);
            let mut sumi = _mm256_setzero_si256();

            for j in 0..QK_K / 128 {
                let is = j * 4;
                let scale_0 = _mm_shuffle_epi8(scales, get_scale_shuffle(is));
                let scale_1 = _mm_shuffle_epi8(scales, get_scale_shuffle(is + 1));
                let scale_2 = _mm_shuffle_epi8(scales, get_scale_shuffle(is + 2));
                let scale_3 = _mm_shuffle_epi8(scales, get_scale_shuffle(is + 3));

                let q4bits1 = _mm256_loadu_si256(q4 as *const __m256i);
                q4 = q4.add(32);
                let q4bits2 = _mm256_loadu_si256(q4 as *const __m256i);
                q4 = q4.add(32);
                let q4bits_h = _mm256_loadu_si256(qh as *const __m256i);
                qh = qh.add(32);

                let q4h_0 = _mm256_slli_epi16(_mm256_and_si256(q4bits_h, m2), 4);
                let q4h_1 =
                    _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(q4bits_h, 2), m2), 4);
                let q4h_2 =
                    _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(q4bits_h, 4), m2), 4);
                let q4h_3 =
                    _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(q4bits_h, 6), m2), 4);

                let q4_0 = _mm256_or_si256(_mm256_and_si256(q4bits1, m4), q4h_0);
                let q4_1 = _mm256_or_si256(_mm256_and_si256(q4bits2, m4), q4h_1);
                let q4_2 =
                    _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q4bits1, 4), m4), q4h_2);
                let q4_3 =
                    _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q4bits2, 4), m4), q4h_3);

                let q8_0 = _mm256_loadu_si256(q8 as *const __m256i);
                q8 = q8.add(32);
                let q8_1 = _mm256_loadu_si256(q8 as *const __m256i);
                q8 = q8.add(32);
                let q8_2 = _mm256_loadu_si256(q8 as *const __m256i);
                q8 = q8.add(32);
                let q8_3 = _mm256_loadu_si256(q8 as *const __m256i);
                q8 = q8.add(32);

                let q8s_0 = _mm256_maddubs_epi16(m32s, q8_0);
                let q8s_1 = _mm256_maddubs_epi16(m32s, q8_1);
                let q8s_2 = _mm256_maddubs_epi16(m32s, q8_2);
                let q8s_3 = _mm256_maddubs_epi16(m32s, q8_3);

                let p16_0 = _mm256_maddubs_epi16(q4_0, q8_0);
                let p16_1 = _mm256_maddubs_epi16(q4_1, q8_1);
                let p16_2 = _mm256_maddubs_epi16(q4_2, q8_2);
                let p16_3 = _mm256_maddubs_epi16(q4_3, q8_3);

                let p16_0 = _mm256_sub_epi16(p16_0, q8s_0);
                let p16_1 = _mm256_sub_epi16(p16_1, q8s_1);
                let p16_2 = _mm256_sub_epi16(p16_2, q8s_2);
                let p16_3 = _mm256_sub_epi16(p16_3, q8s_3);

                let p16_0 = _mm256_madd_epi16(_mm256_cvtepi8_epi16(scale_0), p16_0);
                let p16_1 = _mm256_madd_epi16(_mm256_cvtepi8_epi16(scale_1), p16_1);
                let p16_2 = _mm256_madd_epi16(_mm256_cvtepi8_epi16(scale_2), p16_2);
                let p16_3 = _mm256_madd_epi16(_mm256_cvtepi8_epi16(scale_3), p16_3);

                sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(p16_0, p16_1));
                sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(p16_2, p16_3));
            }
            acc = _mm256_fmadd_ps(_mm256_broadcast_ss(&d), _mm256_cvtepi32_ps(sumi), acc);
        }
        hsum_float_8(acc)
    }
}

#[inline(always)]
unsafe fn mm256_set_m128i(a: __m128i, b: __m128i) -> __m256i {
    _mm256_insertf128_si256(_mm256_castsi128_si256(b), a, 1)
}

#[inline(always)]
pub(crate) fn vec_dot_q2k_q8k(n: usize, xs: &[BlockQ2K], ys: &[BlockQ8K]) -> f32 {
    debug_assert!(
        n.is_multiple_of(QK_K),
        "vec_dot_q2k_q8k: {n} is not divisible by {QK_K}"
    );

    unsafe {
        let m3 = _mm256_set1_epi8(3);
        let m4 = _mm_set1_epi8(0xF);

        let mut acc = _mm256_setzero_ps();

        for (x, y) in xs.iter().zip(ys.iter()) {
            let d = y.d * x.d.to_f32();
            let dmin = -y.d * x.dmin.to_f32();

            let mut q2 = x.qs.as_ptr();
            let mut q8 = y.qs.as_ptr();

            let mins_and_scales = _mm_loadu_si128(x.scales.as_ptr() as *const __m128i);
            let scales8 = _mm_and_si128(mins_and_scales, m4);
            let mins8 = _mm_and_si128(_mm_srli_epi16(mins_and_scales, 4), m4);
            let mins = _mm256_cvtepi8_epi16(mins8);
            let prod =
                _mm256_madd_epi16(mins, _mm256_loadu_si256(y.bsums.as_ptr() as *const __m256i));

            acc = _mm256_fmadd_ps(_mm256_broadcast_ss(&dmin), _mm256_cvtepi32_ps(prod), acc);

            let all_scales = _mm256_cvtepi8_epi16(scales8);
            let l_scales = _mm256_extracti128_si256(all_scales, 0);
            let h_scales = _mm256_extracti128_si256(all_scales, 1);
            let scales = [
                mm256_set_m128i(l_scales, l_scales),
                mm256_set_m128i(h_scales, h_scales),
            ];

            let mut sumi = _mm256_setzero_si256();

            for scale in scales {
                let q2bits = _mm256_loadu_si256(q2 as *const __m256i);
                q2 = q2.add(32);

                let q8_0 = _mm256_loadu_si256(q8 as *const __m256i);
                q8 = q8.add(32);
                let q8_1 = _mm256_loadu_si256(q8 as *const __m256i);
                q8 = q8.add(32);
                let q8_2 = _mm256_loadu_si256(q8 as *const __m256i);
                q8 = q8.add(32);
                let q8_3 = _mm256_loadu_si256(q8 as *const __m256i);
                q8 = q8.add(32);

                let q2_0 = _mm256_and_si256(q2bits, m3);
                let q2_1 = _mm256_and_si256(_mm256_srli_epi16(q2bits, 2), m3);
                let q2_2 = _mm256_and_si256(_mm256_srli_epi16(q2bits, 4), m3);
                let q2_3 = _mm256_and_si256(_mm256_srli_epi16(q2bits, 6), m3);

                let p0 = _mm256_maddubs_epi16(q2_0, q8_0);
                let p1 = _mm256_maddubs_epi16(q2_1, q8_1);
                let p2 = _mm256_maddubs_epi16(q2_2, q8_2);
                let p3 = _mm256_maddubs_epi16(q2_3, q8_3);

                let p0 =
                    _mm256_madd_epi16(_mm256_shuffle_epi8(scale, get_scale_shuffle_q3k(0)), p0);
                let p1 =
                    _mm256_madd_epi16(_mm256_shuffle_epi8(scale, get_scale_shuffle_q3k(1)), p1);
                let p2 =
                    _mm256_madd_epi16(_mm256_shuffle_epi8(scale, get_scale_shuffle_q3k(2)), p2);
                let p3 =
                    _mm256_madd_epi16(_mm256_shuffle_epi8(scale, get_scale_shuffle_q3k(3)), p3);

                let p0 = _mm256_add_epi32(p0, p1);
                let p2 = _mm256_add_epi32(p2, p3);

                sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(p0, p2));
            }
            acc = _mm256_fmadd_ps(_mm256_broadcast_ss(&d), _mm256_cvtepi32_ps(sumi), acc);
        }

        hsum_float_8(acc)
    }
}

#[inline(always)]
pub(crate) fn vec_dot_q3k_q8k(n: usize, xs: &[BlockQ3K], ys: &[BlockQ8K]) -> f32 {
    debug_assert!(
        n.is_multiple_of(QK_K),
        "vec_dot_q3k_q8k: {n} is not divisible by {QK_K}"
    );

    const KMASK1: u32 = 0x03030303;
    const KMASK2: u32 = 0x0f0f0f0f;

    let mut aux = [0u32; 3];

    unsafe {
        let m3 = _mm256_set1_epi8(3);
        let mone = _mm256_set1_epi8(1);
        let m32 = _mm_set1_epi8(32);

        let mut acc = _mm256_setzero_ps();
        for (x, y) in xs.iter().zip(ys.iter()) {
            let d = y.d * x.d.to_f32();

            let mut q3 = x.qs.as_ptr();
            let mut q8 = y.qs.as_ptr();

            LittleEndian::read_u32_into(&x.scales, &mut aux);
            let scales128 = _mm_set_epi32(
                (((aux[1] >> 4) & KMASK2) | (((aux[2] >> 6) & KMASK1) << 4)) as i32,
                (((aux[0] >> 4) & KMASK2) | (((aux[2] >> 4) & KMASK1) << 4)) as i32,
                ((aux[1] & KMASK2) | (((aux[2] >> 2) & KMASK1) << 4)) as i32,
                ((aux[0] & KMASK2) | (((aux[2]) & KMASK1) << 4)) as i32,
            );
            let scales128 = _mm_sub_epi8(scales128, m32);
            let all_scales = _mm256_cvtepi8_epi16(scales128);
            let l_scales = _mm256_extracti128_si256(all_scales, 0);
            let h_scales = _mm256_extracti128_si256(all_scales, 1);
            let scales = [
                mm256_set_m128i(l_scales, l_scales),
                mm256_set_m128i(h_scales, h_scales),
            ];

            // high bit
            let hbits = _mm256_loadu_si256(x.hmask.as_ptr() as *const __m256i);

            let mut sumi = _mm256_setzero_si256();

            for (j, scale) in scales.iter().enumerate() {
                // load low 2 bits
                let q3bits = _mm256_loadu_si256(q3 as *const __m256i);
                q3 = q3.add(32);

                // Prepare low and high bits
                // We hardcode the shifts here to avoid loading them into a separate register
                let q3l_0 = _mm256_and_si256(q3bits, m3);
                let q3h_0 = if j == 0 {
                    _mm256_srli_epi16(_mm256_andnot_si256(hbits, _mm256_slli_epi16(mone, 0)), 0)
                } else {
                    _mm256_srli_epi16(_mm256_andnot_si256(hbits, _mm256_slli_epi16(mone, 4)), 4)
                };
                let q3h_0 = _mm256_slli_epi16(q3h_0, 2);

                let q3l_1 = _mm256_and_si256(_mm256_srli_epi16(q3bits, 2), m3);
                let q3h_1 = if j == 0 {
                    _mm256_srli_epi16(_mm256_andnot_si256(hbits, _mm256_slli_epi16(mone, 1)), 1)
                } else {
                    _mm256_srli_epi16(_mm256_andnot_si256(hbits, _mm256_slli_epi16(mone, 5)), 5)
                };
                let q3h_1 = _mm256_slli_epi16(q3h_1, 2);

                let q3l_2 = _mm256_and_si256(_mm256_srli_epi16(q3bits, 4), m3);
                let q3h_2 = if j == 0 {
                    _mm256_srli_epi16(_mm256_andnot_si256(hbits, _mm256_slli_epi16(mone, 2)), 2)
                } else {
                    _mm256_srli_epi16(_mm256_andnot_si256(hbits, _mm256_slli_epi16(mone, 6)), 6)
                };
                let q3h_2 = _mm256_slli_epi16(q3h_2, 2);

                let q3l_3 = _mm256_and_si256(_mm256_srli_epi16(q3bits, 6), m3);
                let q3h_3 = if j == 0 {
                    _mm256_srli_epi16(_mm256_andnot_si256(hbits, _mm256_slli_epi16(mone, 3)), 3)
                } else {
                    _mm256_srli_epi16(_mm256_andnot_si256(hbits, _mm256_slli_epi16(mone, 7)), 7)
                };
                let q3h_3 = _mm256_slli_epi16(q3h_3, 2);

                // load Q8 quants
                let q8_0 = _mm256_loadu_si256(q8 as *const __m256i);
                q8 = q8.add(32);
                let q8_1 = _mm256_loadu_si256(q8 as *const __m256i);
                q8 = q8.add(32);
                let q8_2 = _mm256_loadu_si256(q8 as *const __m256i);
                q8 = q8.add(32);
                let q8_3 = _mm256_loadu_si256(q8 as *const __m256i);
                q8 = q8.add(32);

                // Dot product: we multiply the 2 low bits and 1 high bit part separately, so we
                // can use _mm256_maddubs_epi16, and then subtract. The high bit part has the 2
                // already subtracted (and so, it is zero if the high bit was not set, and 2 if the
                // high bit was set)
                let q8s_0 = _mm256_maddubs_epi16(q3h_0, q8_0);
                let q8s_1 = _mm256_maddubs_epi16(q3h_1, q8_1);
                let q8s_2 = _mm256_maddubs_epi16(q3h_2, q8_2);
                let q8s_3 = _mm256_maddubs_epi16(q3h_3, q8_3);

                let p16_0 = _mm256_maddubs_epi16(q3l_0, q8_0);
                let p16_1 = _mm256_maddubs_epi16(q3l_1, q8_1);
                let p16_2 = _mm256_maddubs_epi16(q3l_2, q8_2);
                let p16_3 = _mm256_maddubs_epi16(q3l_3, q8_3);

                let p16_0 = _mm256_sub_epi16(p16_0, q8s_0);
                let p16_1 = _mm256_sub_epi16(p16_1, q8s_1);
                let p16_2 = _mm256_sub_epi16(p16_2, q8s_2);
                let p16_3 = _mm256_sub_epi16(p16_3, q8s_3);

                // multiply with scales
                let p16_0 =
                    _mm256_madd_epi16(_mm256_shuffle_epi8(*scale, get_scale_shuffle_q3k(0)), p16_0);
                let p16_1 =
                    _mm256_madd_epi16(_mm256_shuffle_epi8(*scale, get_scale_shuffle_q3k(1)), p16_1);
                let p16_2 =
                    _mm256_madd_epi16(_mm256_shuffle_epi8(*scale, get_scale_shuffle_q3k(2)), p16_2);
                let p16_3 =
                    _mm256_madd_epi16(_mm256_shuffle_epi8(*scale, get_scale_shuffle_q3k(3)), p16_3);

                // accumulate
                let p16_0 = _mm256_add_epi32(p16_0, p16_1);
                let p16_2 = _mm256_add_epi32(p16_2, p16_3);
                sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(p16_0, p16_2));
            }

            // multiply with block scale and accumulate
            acc = _mm256_fmadd_ps(_mm256_broadcast_ss(&d), _mm256_cvtepi32_ps(sumi), acc);
        }
        hsum_float_8(acc)
    }
}

#[inline(always)]
pub(crate) fn vec_dot_q4k_q8k(n: usize, xs: &[BlockQ4K], ys: &[BlockQ8K]) -> f32 {
    debug_assert!(
        n.is_multiple_of(QK_K),
        "vec_dot_q4k_q8k: {n} is not divisible by {QK_K}"
    );
    let mut utmp = [0u32; 4];
    const KMASK1: u32 = 0x3f3f3f3f;
    const KMASK2: u32 = 0x0f0f0f0f;
    const KMASK3: u32 = 0x03030303;

    unsafe {
        let m4 = _mm256_set1_epi8(0xF);

        let mut acc = _mm256_setzero_ps();
        let mut acc_m = _mm_setzero_ps();

        for (x, y) in xs.iter().zip(ys.iter()) {
            let d = y.d * x.d.to_f32();
            let dmin = -y.d * x.dmin.to_f32();

            LittleEndian::read_u32_into(&x.scales, &mut utmp[0..3]);

            utmp[3] = ((utmp[2] >> 4) & KMASK2) | (((utmp[1] >> 6) & KMASK3) << 4);
            let uaux = utmp[1] & KMASK1;
            utmp[1] = (utmp[2] & KMASK2) | (((utmp[0] >> 6) & KMASK3) << 4);
            utmp[2] = uaux;
            utmp[0] &= KMASK1;

            let mut q4 = x.qs.as_ptr();
            let mut q8 = y.qs.as_ptr();

            let mins_and_scales = _mm256_cvtepu8_epi16(_mm_set_epi32(
                utmp[3] as i32,
                utmp[2] as i32,
                utmp[1] as i32,
                utmp[0] as i32,
            ));

            let q8sums = _mm256_loadu_si256(y.bsums.as_ptr() as *const __m256i);
            let q8s = _mm_hadd_epi16(
                _mm256_extracti128_si256(q8sums, 0),
                _mm256_extracti128_si256(q8sums, 1),
            );
            let prod = _mm_madd_epi16(_mm256_extracti128_si256(mins_and_scales, 1), q8s);
            acc_m = _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(prod), acc_m);

            let sc128 = _mm256_extracti128_si256(mins_and_scales, 0);
            let scales = mm256_set_m128i(sc128, sc128);

            let mut sumi = _mm256_setzero_si256();

            for j in 0..QK_K / 64 {
                let scale_l = _mm256_shuffle_epi8(scales, get_scale_shuffle_k4(2 * j));
                let scale_h = _mm256_shuffle_epi8(scales, get_scale_shuffle_k4(2 * j + 1));

                let q4bits = _mm256_loadu_si256(q4 as *const __m256i);
                q4 = q4.add(32);
                let q4l = _mm256_and_si256(q4bits, m4);
                let q4h = _mm256_and_si256(_mm256_srli_epi16(q4bits, 4), m4);

                let q8l = _mm256_loadu_si256(q8 as *const __m256i);
                q8 = q8.add(32);
                let p16l = _mm256_maddubs_epi16(q4l, q8l);
                let p16l = _mm256_madd_epi16(scale_l, p16l);
                sumi = _mm256_add_epi32(sumi, p16l);

                let q8h = _mm256_loadu_si256(q8 as *const __m256i);
                q8 = q8.add(32);
                let p16h = _mm256_maddubs_epi16(q4h, q8h);
                let p16h = _mm256_madd_epi16(scale_h, p16h);
                sumi = _mm256_add_epi32(sumi, p16h);
            }

            let vd = _mm256_set1_ps(d);
            acc = _mm256_fmadd_ps(vd, _mm256_cvtepi32_ps(sumi), acc);
        }

        let acc_m = _mm_add_ps(acc_m, _mm_movehl_ps(acc_m, acc_m));
        let acc_m = _mm_add_ss(acc_m, _mm_movehdup_ps(acc_m));

        hsum_float_8(acc) + _mm_cvtss_f32(acc_m)
    }
}

#[inline(always)]
pub(crate) fn vec_dot_q5k_q8k(n: usize, xs: &[BlockQ5K], ys: &[BlockQ8K]) -> f32 {
    debug_assert!(
        n.is_multiple_of(QK_K),
        "vec_dot_q5k_q8k: {n} is not divisible by {QK_K}"
    );
    let mut utmp = [0u32; 4];
    const KMASK1: u32 = 0x3f3f3f3f;
    const KMASK2: u32 = 0x0f0f0f0f;
    const KMASK3: u32 = 0x03030303;

    unsafe {
        let m4 = _mm256_set1_epi8(0xF);
        let mzero = _mm_setzero_si128();
        let mone = _mm256_set1_epi8(1);

        let mut acc = _mm256_setzero_ps();
        let mut summs = 0.0;

        for (x, y) in xs.iter().zip(ys.iter()) {
            let d = y.d * x.d.to_f32();
            let dmin = -y.d * x.dmin.to_f32();

            LittleEndian::read_u32_into(&x.scales, &mut utmp[0..3]);

            utmp[3] = ((utmp[2] >> 4) & KMASK2) | (((utmp[1] >> 6) & KMASK3) << 4);
            let uaux = utmp[1] & KMASK1;
            utmp[1] = (utmp[2] & KMASK2) | (((utmp[0] >> 6) & KMASK3) << 4);
            utmp[2] = uaux;
            utmp[0] &= KMASK1;

            let mut q5 = x.qs.as_ptr();
            let mut q8 = y.qs.as_ptr();

            let mins_and_scales = _mm256_cvtepu8_epi16(_mm_set_epi32(
                utmp[3] as i32,
                utmp[2] as i32,
                utmp[1] as i32,
                utmp[0] as i32,
            ));

            let q8sums = _mm256_loadu_si256(y.bsums.as_ptr() as *const __m256i);
            let q8s = _mm_hadd_epi16(
                _mm256_extracti128_si256(q8sums, 0),
                _mm256_extracti128_si256(q8sums, 1),
            );
            let prod = _mm_madd_epi16(_mm256_extracti128_si256(mins_and_scales, 1), q8s);
            let hsum = _mm_hadd_epi32(_mm_hadd_epi32(prod, mzero), mzero);
            summs += dmin * _mm_extract_epi32(hsum, 0) as f32;

            let sc128 = _mm256_extracti128_si256(mins_and_scales, 0);
            let scales = mm256_set_m128i(sc128, sc128);

            let hbits = _mm256_loadu_si256(x.qh.as_ptr() as *const __m256i);
            let mut hmask = mone;

            let mut sumi = _mm256_setzero_si256();

            for j in 0..QK_K / 64 {
                let scale_0 = _mm256_shuffle_epi8(scales, get_scale_shuffle_k4(2 * j));
                let scale_1 = _mm256_shuffle_epi8(scales, get_scale_shuffle_k4(2 * j + 1));

                let q5bits = _mm256_loadu_si256(q5 as *const __m256i);
                q5 = q5.add(32);

                //Similar to q3k we hardcode the shifts here to avoid loading them into a separate register
                let q5l_0 = _mm256_and_si256(q5bits, m4);
                let q5l_0_shift_input = _mm256_and_si256(hbits, hmask);
                let q5l_0_right_shift = match j {
                    0 => _mm256_srli_epi16(q5l_0_shift_input, 0),
                    1 => _mm256_srli_epi16(q5l_0_shift_input, 2),
                    2 => _mm256_srli_epi16(q5l_0_shift_input, 4),
                    3 => _mm256_srli_epi16(q5l_0_shift_input, 6),
                    _ => unreachable!(),
                };
                let q5h_0 = _mm256_slli_epi16(q5l_0_right_shift, 4);
                let q5_0 = _mm256_add_epi8(q5l_0, q5h_0);
                hmask = _mm256_slli_epi16(hmask, 1);

                let q5l_1 = _mm256_and_si256(_mm256_srli_epi16(q5bits, 4), m4);
                let q5l_1_shift_input = _mm256_and_si256(hbits, hmask);
                let q5l_1_right_shift = match j {
                    0 => _mm256_srli_epi16(q5l_1_shift_input, 1),
                    1 => _mm256_srli_epi16(q5l_1_shift_input, 3),
                    2 => _mm256_srli_epi16(q5l_1_shift_input, 5),
                    3 => _mm256_srli_epi16(q5l_1_shift_input, 7),
                    _ => unreachable!(),
                };

                let q5h_1 = _mm256_slli_epi16(q5l_1_right_shift, 4);
                let q5_1 = _mm256_add_epi8(q5l_1, q5h_1);
                hmask = _mm256_slli_epi16(hmask, 1);

                let q8_0 = _mm256_loadu_si256(q8 as *const __m256i);
                q8 = q8.add(32);
                let q8_1 = _mm256_loadu_si256(q8 as *const __m256i);
                q8 = q8.add(32);

                let p16_0 = _mm256_maddubs_epi16(q5_0, q8_0);
                let p16_1 = _mm256_maddubs_epi16(q5_1, q8_1);

                let p16_0 = _mm256_madd_epi16(scale_0, p16_0);
                let p16_1 = _mm256_madd_epi16(scale_1, p16_1);

                sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(p16_0, p16_1));
            }
            let vd = _mm256_set1_ps(d);
            acc = _mm256_fmadd_ps(vd, _mm256_cvtepi32_ps(sumi), acc);
        }
        hsum_float_8(acc) + summs
    }
}

#[inline(always)]
pub(crate) fn vec_dot_q8k_q8k(n: usize, xs: &[BlockQ8K], ys: &[BlockQ8K]) -> f32 {
    debug_assert!(
        n.is_multiple_of(QK_K),
        "vec_dot_q8k_8k: {n} is not divisible by {QK_K}"
    );
    unsafe {
        let mut acc = _mm256_setzero_ps();
        for (xs, ys) in xs.iter().zip(ys.iter()) {
            let mut sumi = _mm256_setzero_si256();
            let x_qs = xs.qs.as_ptr();
            let y_qs = ys.qs.as_ptr();
            for j in (0..QK_K).step_by(32) {
                let xs = _mm256_loadu_si256(x_qs.add(j) as *const __m256i);
                let ys = _mm256_loadu_si256(y_qs.add(j) as *const __m256i);

                let xs0 = _mm256_cvtepi8_epi16(_mm256_extracti128_si256(xs, 0));
                let ys0 = _mm256_cvtepi8_epi16(_mm256_extracti128_si256(ys, 0));
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(xs0, ys0));

                let xs1 = _mm256_cvtepi8_epi16(_mm256_extracti128_si256(xs, 1));
                let ys1 = _mm256_cvtepi8_epi16(_mm256_extracti128_si256(ys, 1));
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(xs1, ys1));
            }
            let d = _mm256_set1_ps(xs.d * ys.d);
            acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(sumi), acc);
        }
        hsum_float_8(acc)
    }
}

/// ragbox patch: a weight block of the 32-element "type 0" formats as 32 signed bytes and its
/// scale. One decode serves every activation row of a tile.
pub trait Q0Block: Sync {
    /// # Safety
    /// Needs AVX2 (this module is compiled only with it).
    unsafe fn decode(&self) -> (__m256i, f32);
}

impl Q0Block for BlockQ5_0 {
    #[inline(always)]
    unsafe fn decode(&self) -> (__m256i, f32) {
        let qx = bytes_from_nibbles_32(self.qs.as_ptr());
        let bxhi = bytes_from_bits_32(self.qh.as_ptr());
        let bxhi = _mm256_andnot_si256(bxhi, _mm256_set1_epi8(0xF0u8 as i8));
        (_mm256_or_si256(qx, bxhi), f16::to_f32(self.d))
    }
}

impl Q0Block for BlockQ8_0 {
    #[inline(always)]
    unsafe fn decode(&self) -> (__m256i, f32) {
        (_mm256_loadu_si256(self.qs.as_ptr() as *const __m256i), f16::to_f32(self.d))
    }
}

impl Q0Block for BlockQ4_0 {
    #[inline(always)]
    unsafe fn decode(&self) -> (__m256i, f32) {
        let bx = bytes_from_nibbles_32(self.qs.as_ptr());
        (_mm256_sub_epi8(bx, _mm256_set1_epi8(8)), f16::to_f32(self.d))
    }
}

/// ragbox patch: `RM` activation rows x `RN` weight columns of the output, over all of k. Each
/// weight block is decoded once for the `RM` rows (upstream decodes it once per dot product),
/// and each activation block is loaded once for the `RN` columns.
#[inline(always)]
unsafe fn q0_tile<W: Q0Block, const RM: usize, const RN: usize>(
    k_blocks: usize,
    lhs: &[BlockQ8_0],
    rhs: &[W],
    row0: usize,
    col0: usize,
    n: usize,
    dst: *mut f32,
) {
    let mut acc = [[_mm256_setzero_ps(); RN]; RM];
    for b in 0..k_blocks {
        let mut wx = [_mm256_setzero_si256(); RN];
        let mut wabs = [_mm256_setzero_si256(); RN];
        let mut wd = [0f32; RN];
        for j in 0..RN {
            let (x, d) = rhs.get_unchecked((col0 + j) * k_blocks + b).decode();
            wx[j] = x;
            wabs[j] = _mm256_sign_epi8(x, x);
            wd[j] = d;
        }
        for i in 0..RM {
            let a = lhs.get_unchecked((row0 + i) * k_blocks + b);
            let y = _mm256_loadu_si256(a.qs.as_ptr() as *const __m256i);
            let ad = f16::to_f32(a.d);
            for j in 0..RN {
                let sy = _mm256_sign_epi8(y, wx[j]);
                let q = mul_sum_us8_pairs_float(wabs[j], sy);
                acc[i][j] = _mm256_fmadd_ps(_mm256_set1_ps(ad * wd[j]), q, acc[i][j]);
            }
        }
    }
    store_tile(&acc, row0, col0, n, dst);
}

/// ragbox patch: the loops around a tile function `$tile::<W, RM, RN>` (full tiles, then the
/// right-hand columns and bottom rows that fill none) over rows `0..m` and columns `cols`.
macro_rules! drive_tiles {
    ($tile:ident, $rm:literal, $rn:literal, $m:ident, $k_blocks:ident, $n:ident, $lhs:ident, $rhs:ident, $cols:ident, $dst:ident) => {{
        const RM: usize = $rm;
        const RN: usize = $rn;
        let full_cols = $cols.start + ($cols.len() / RN) * RN;
        let full_rows = ($m / RM) * RM;
        for row in (0..full_rows).step_by(RM) {
            for col in ($cols.start..full_cols).step_by(RN) {
                $tile::<W, RM, RN>($k_blocks, $lhs, $rhs, row, col, $n, $dst);
            }
            for col in full_cols..$cols.end {
                $tile::<W, RM, 1>($k_blocks, $lhs, $rhs, row, col, $n, $dst);
            }
        }
        for row in full_rows..$m {
            for col in ($cols.start..full_cols).step_by(RN) {
                $tile::<W, 1, RN>($k_blocks, $lhs, $rhs, row, col, $n, $dst);
            }
            for col in full_cols..$cols.end {
                $tile::<W, 1, 1>($k_blocks, $lhs, $rhs, row, col, $n, $dst);
            }
        }
    }};
}

/// ragbox patch: a tile's sums into `dst`.
#[inline(always)]
unsafe fn store_tile<const RM: usize, const RN: usize>(acc: &[[__m256; RN]; RM], row0: usize, col0: usize, n: usize, dst: *mut f32) {
    for i in 0..RM {
        for j in 0..RN {
            *dst.add((row0 + i) * n + col0 + j) = hsum_float_8(acc[i][j]);
        }
    }
}

/// ragbox patch: `$matmul`, the whole product for a weight block trait and activation block type,
/// in `$rm x $rn` tiles of `$tile`, compiled with `$features`.
macro_rules! tile_matmul {
    ($matmul:ident, $tile:ident, $features:literal, $block:ident, $lhs:ident, $rm:literal, $rn:literal) => {
        #[target_feature(enable = $features)]
        unsafe fn $matmul<W: $block>(
            m: usize,
            k_blocks: usize,
            n: usize,
            lhs: &[$lhs],
            rhs: &[W],
            cols: std::ops::Range<usize>,
            dst: *mut f32,
        ) {
            drive_tiles!($tile, $rm, $rn, m, k_blocks, n, lhs, rhs, cols, dst);
        }
    };
}

/// ragbox patch: the same tiles with VNNI's `vpdpbusd` (u8 x i8 products summed in fours into
/// i32), for the CPUs that have it: AVX-512 VNNI (with 32 vector registers, 8 x 3 tiles: 24
/// accumulators; measured 6% faster than 4 x 4) or AVX-VNNI (16 registers, 4 x 3 tiles). The signed activations are shifted into unsigned
/// bytes (`a + 128`, an xor per block and row), and each weight block's `-128 · Σw` starts the
/// sum, so a product costs one `vpdpbusd`, a conversion and an FMA (AVX2 needs a sign, two
/// multiply-adds, a conversion and an FMA).
macro_rules! q0_vnni {
    ($matmul:ident, $tile:ident, $features:literal, $dpbusd:ident, $rm:literal, $rn:literal) => {
        #[target_feature(enable = $features)]
        unsafe fn $tile<W: Q0Block, const RM: usize, const RN: usize>(
            k_blocks: usize,
            lhs: &[BlockQ8_0],
            rhs: &[W],
            row0: usize,
            col0: usize,
            n: usize,
            dst: *mut f32,
        ) {
            let shift = _mm256_set1_epi8(-128i8);
            let zero = _mm256_setzero_si256();
            let mut acc = [[_mm256_setzero_ps(); RN]; RM];
            for b in 0..k_blocks {
                let mut wx = [zero; RN];
                let mut start = [zero; RN];
                let mut wd = [0f32; RN];
                for j in 0..RN {
                    let (x, d) = rhs.get_unchecked((col0 + j) * k_blocks + b).decode();
                    wx[j] = x;
                    start[j] = _mm256_sub_epi32(zero, $dpbusd(zero, shift, x));
                    wd[j] = d;
                }
                for i in 0..RM {
                    let a = lhs.get_unchecked((row0 + i) * k_blocks + b);
                    let y = _mm256_xor_si256(_mm256_loadu_si256(a.qs.as_ptr() as *const __m256i), shift);
                    let ad = f16::to_f32(a.d);
                    for j in 0..RN {
                        let dot = $dpbusd(start[j], y, wx[j]);
                        acc[i][j] = _mm256_fmadd_ps(_mm256_set1_ps(ad * wd[j]), _mm256_cvtepi32_ps(dot), acc[i][j]);
                    }
                }
            }
            store_tile(&acc, row0, col0, n, dst);
        }

        tile_matmul!($matmul, $tile, $features, Q0Block, BlockQ8_0, $rm, $rn);
    };
}

q0_vnni!(matmul_q0_avx512_vnni, q0_tile_avx512_vnni, "avx512f,avx512vl,avx512vnni", _mm256_dpbusd_epi32, 8, 3);
q0_vnni!(matmul_q0_avx_vnni, q0_tile_avx_vnni, "avxvnni", _mm256_dpbusd_avx_epi32, 4, 3);

/// ragbox patch: the tile kernels [`matmul_q0`] and [`matmul_k`] can run on; `detect` picks the best.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Q0Kernel {
    Avx512Vnni,
    AvxVnni,
    Avx2,
}

impl Q0Kernel {
    /// The best kernel this CPU can run (std caches the feature lookups; nothing is allocated).
    pub fn detect() -> Q0Kernel {
        [Q0Kernel::Avx512Vnni, Q0Kernel::AvxVnni].into_iter().find(|k| k.supported()).unwrap_or(Q0Kernel::Avx2)
    }

    /// Every kernel this CPU can run, best first.
    pub fn available() -> Vec<Q0Kernel> {
        [Q0Kernel::Avx512Vnni, Q0Kernel::AvxVnni, Q0Kernel::Avx2].into_iter().filter(|k| k.supported()).collect()
    }

    /// Whether this CPU has the kernel's instructions (AVX2 is the build's baseline).
    fn supported(self) -> bool {
        match self {
            Q0Kernel::Avx512Vnni => std::is_x86_feature_detected!("avx512vnni") && std::is_x86_feature_detected!("avx512vl"),
            Q0Kernel::AvxVnni => std::is_x86_feature_detected!("avxvnni"),
            Q0Kernel::Avx2 => true,
        }
    }

    /// For `ragbox doctor`.
    pub fn name(self) -> &'static str {
        match self {
            Q0Kernel::Avx512Vnni => "avx512-vnni",
            Q0Kernel::AvxVnni => "avx-vnni",
            Q0Kernel::Avx2 => "avx2",
        }
    }
}

/// ragbox patch: `dst[m x n] = lhs[m x k] . rhs[n x k]^T` for a Q0 weight type and Q8_0
/// activations, in tiles of `kernel` (`Q0Kernel::detect()`; tests run each one this CPU has,
/// `tests/integration/kernels.rs`); `cols` is the range of weight columns this call owns.
///
/// # Safety
/// `lhs` holds m * k_blocks blocks, `rhs` n * k_blocks, `dst` m * n cells, no other thread writes
/// the cells of columns `cols`, and the CPU has `kernel`'s instructions ([`Q0Kernel::available`]).
#[doc(hidden)]
#[allow(clippy::too_many_arguments)]
pub unsafe fn matmul_q0<W: Q0Block>(
    kernel: Q0Kernel,
    m: usize,
    k_blocks: usize,
    n: usize,
    lhs: &[BlockQ8_0],
    rhs: &[W],
    cols: std::ops::Range<usize>,
    dst: *mut f32,
) {
    match kernel {
        Q0Kernel::Avx512Vnni => matmul_q0_avx512_vnni(m, k_blocks, n, lhs, rhs, cols, dst),
        Q0Kernel::AvxVnni => matmul_q0_avx_vnni(m, k_blocks, n, lhs, rhs, cols, dst),
        Q0Kernel::Avx2 => matmul_q0_avx2(m, k_blocks, n, lhs, rhs, cols, dst),
    }
}

/// ragbox patch: the AVX2 tiles, 4 x 3.
unsafe fn matmul_q0_avx2<W: Q0Block>(
    m: usize,
    k_blocks: usize,
    n: usize,
    lhs: &[BlockQ8_0],
    rhs: &[W],
    cols: std::ops::Range<usize>,
    dst: *mut f32,
) {
    drive_tiles!(q0_tile, 4, 3, m, k_blocks, n, lhs, rhs, cols, dst);
}

/// ragbox patch: a 256-element k-quant weight block (Q4K, Q6K) unpacked for [`matmul_k`]: eight
/// chunks of 32 unsigned codes, each with its sub-block scales as 16-bit lanes lined up with
/// `maddubs`'s pair sums, and the block's offset term as a weight on the activation block's 16
/// partial sums (`bsums`): the block's dot product is
/// `d · Σ_c madd(scale_c, maddubs(q_c, a_c)) + offset_scale · madd(offset, bsums)`, both times
/// the activation block's scale.
pub struct KDecoded {
    q: [__m256i; 8],
    scales: [__m256i; 8],
    offset: __m256i,
    d: f32,
    offset_scale: f32,
}

/// ragbox patch: a k-quant weight block type [`matmul_k`] takes.
pub trait KBlock: Sync {
    /// # Safety
    /// Needs AVX2 (this module is compiled only with it).
    unsafe fn decode(&self) -> KDecoded;
}

impl KBlock for BlockQ4K {
    /// Codes 0..=15 with a 6-bit scale and a 6-bit minimum per 32 elements:
    /// `w = d·scale·q − dmin·min`, so the offset is `−dmin · Σ min_s · (sum of the activations
    /// of sub-block s)`, and `bsums` holds those sums in halves of 16.
    #[inline(always)]
    unsafe fn decode(&self) -> KDecoded {
        const KMASK1: u32 = 0x3f3f3f3f;
        const KMASK2: u32 = 0x0f0f0f0f;
        const KMASK3: u32 = 0x03030303;
        let mut utmp = [0u32; 4];
        LittleEndian::read_u32_into(&self.scales, &mut utmp[0..3]);
        utmp[3] = ((utmp[2] >> 4) & KMASK2) | (((utmp[1] >> 6) & KMASK3) << 4);
        let uaux = utmp[1] & KMASK1;
        utmp[1] = (utmp[2] & KMASK2) | (((utmp[0] >> 6) & KMASK3) << 4);
        utmp[2] = uaux;
        utmp[0] &= KMASK1;
        // Bytes 0..8: the eight scales; 8..16: the eight minimums.
        let bytes: [u8; 16] = std::mem::transmute(utmp);
        let sc128 = _mm256_extracti128_si256(_mm256_cvtepu8_epi16(_mm_loadu_si128(bytes.as_ptr() as *const __m128i)), 0);
        let scales16 = mm256_set_m128i(sc128, sc128);
        let mut mins = [0i16; 16];
        for (s, m) in bytes[8..16].iter().enumerate() {
            mins[2 * s] = i16::from(*m);
            mins[2 * s + 1] = i16::from(*m);
        }
        let m4 = _mm256_set1_epi8(0xF);
        let mut q = [_mm256_setzero_si256(); 8];
        let mut scales = [_mm256_setzero_si256(); 8];
        for j in 0..4 {
            let bits = _mm256_loadu_si256(self.qs.as_ptr().add(32 * j) as *const __m256i);
            q[2 * j] = _mm256_and_si256(bits, m4);
            q[2 * j + 1] = _mm256_and_si256(_mm256_srli_epi16(bits, 4), m4);
            scales[2 * j] = _mm256_shuffle_epi8(scales16, get_scale_shuffle_k4(2 * j));
            scales[2 * j + 1] = _mm256_shuffle_epi8(scales16, get_scale_shuffle_k4(2 * j + 1));
        }
        KDecoded {
            q,
            scales,
            offset: _mm256_loadu_si256(mins.as_ptr() as *const __m256i),
            d: self.d.to_f32(),
            offset_scale: -self.dmin.to_f32(),
        }
    }
}

impl KBlock for BlockQ6K {
    /// Codes 0..=63 standing for `q − 32`, with a signed 8-bit scale per 16 elements, so the
    /// offset is `−32·d · Σ scale_k · (sum of the activations of group k)`.
    #[inline(always)]
    unsafe fn decode(&self) -> KDecoded {
        let m4 = _mm256_set1_epi8(0xF);
        let m2 = _mm256_set1_epi8(3);
        let scales128 = _mm_loadu_si128(self.scales.as_ptr() as *const __m128i);
        let mut q = [_mm256_setzero_si256(); 8];
        let mut scales = [_mm256_setzero_si256(); 8];
        for j in 0..2 {
            let lo1 = _mm256_loadu_si256(self.ql.as_ptr().add(64 * j) as *const __m256i);
            let lo2 = _mm256_loadu_si256(self.ql.as_ptr().add(64 * j + 32) as *const __m256i);
            let hi = _mm256_loadu_si256(self.qh.as_ptr().add(32 * j) as *const __m256i);
            let h0 = _mm256_slli_epi16(_mm256_and_si256(hi, m2), 4);
            let h1 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hi, 2), m2), 4);
            let h2 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hi, 4), m2), 4);
            let h3 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hi, 6), m2), 4);
            q[4 * j] = _mm256_or_si256(_mm256_and_si256(lo1, m4), h0);
            q[4 * j + 1] = _mm256_or_si256(_mm256_and_si256(lo2, m4), h1);
            q[4 * j + 2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(lo1, 4), m4), h2);
            q[4 * j + 3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(lo2, 4), m4), h3);
            for k in 0..4 {
                let is = 4 * j + k;
                scales[is] = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(scales128, get_scale_shuffle(is)));
            }
        }
        let d = self.d.to_f32();
        KDecoded { q, scales, offset: _mm256_cvtepi8_epi16(scales128), d, offset_scale: -32.0 * d }
    }
}

/// `acc + madd(a, b)`: VNNI's `vpdpwssd` without VNNI.
#[inline(always)]
unsafe fn dpwssd_avx2(acc: __m256i, a: __m256i, b: __m256i) -> __m256i {
    _mm256_add_epi32(acc, _mm256_madd_epi16(a, b))
}

/// ragbox patch: `RM x RN` tiles for the k-quants, as [`q0_vnni`] does for the 32-element
/// formats: each weight block is unpacked once for `RM` activation rows (8 with AVX-512 VNNI:
/// measured 5% faster than 4) (candle's one-row dot
/// product unpacks it for every row), with `vpdpwssd` where the CPU has VNNI.
macro_rules! k_tiles {
    ($matmul:ident, $tile:ident, $features:literal, $dpwssd:ident, $rm:literal, $rn:literal) => {
        #[target_feature(enable = $features)]
        unsafe fn $tile<W: KBlock, const RM: usize, const RN: usize>(
            k_blocks: usize,
            lhs: &[BlockQ8K],
            rhs: &[W],
            row0: usize,
            col0: usize,
            n: usize,
            dst: *mut f32,
        ) {
            let mut acc = [[_mm256_setzero_ps(); RN]; RM];
            for b in 0..k_blocks {
                // A loop, not `array::from_fn`: a closure would not inherit this function's
                // target features, and perf showed the decode left out of line.
                // SAFETY: KDecoded is vectors and floats, for which all-zero bits are valid.
                let mut w: [KDecoded; RN] = std::mem::zeroed();
                for j in 0..RN {
                    w[j] = rhs.get_unchecked((col0 + j) * k_blocks + b).decode();
                }
                for i in 0..RM {
                    let a = lhs.get_unchecked((row0 + i) * k_blocks + b);
                    let bsums = _mm256_loadu_si256(a.bsums.as_ptr() as *const __m256i);
                    let mut sums = [_mm256_setzero_si256(); RN];
                    for c in 0..8 {
                        let y = _mm256_loadu_si256(a.qs.as_ptr().add(32 * c) as *const __m256i);
                        for j in 0..RN {
                            sums[j] = $dpwssd(sums[j], w[j].scales[c], _mm256_maddubs_epi16(w[j].q[c], y));
                        }
                    }
                    for j in 0..RN {
                        let offset = _mm256_madd_epi16(w[j].offset, bsums);
                        acc[i][j] = _mm256_fmadd_ps(_mm256_set1_ps(a.d * w[j].d), _mm256_cvtepi32_ps(sums[j]), acc[i][j]);
                        acc[i][j] = _mm256_fmadd_ps(_mm256_set1_ps(a.d * w[j].offset_scale), _mm256_cvtepi32_ps(offset), acc[i][j]);
                    }
                }
            }
            store_tile(&acc, row0, col0, n, dst);
        }

        tile_matmul!($matmul, $tile, $features, KBlock, BlockQ8K, $rm, $rn);
    };
}

k_tiles!(matmul_k_avx512_vnni, k_tile_avx512_vnni, "avx512f,avx512vl,avx512vnni", _mm256_dpwssd_epi32, 8, 2);
k_tiles!(matmul_k_avx_vnni, k_tile_avx_vnni, "avxvnni", _mm256_dpwssd_avx_epi32, 4, 2);
k_tiles!(matmul_k_avx2, k_tile_avx2, "avx2", dpwssd_avx2, 4, 2);

/// ragbox patch: `dst[m x n] = lhs[m x k] . rhs[n x k]^T` for a k-quant weight type and Q8K
/// activations, in tiles of `kernel`, as [`matmul_q0`].
///
/// # Safety
/// As [`matmul_q0`].
#[doc(hidden)]
#[allow(clippy::too_many_arguments)]
pub unsafe fn matmul_k<W: KBlock>(
    kernel: Q0Kernel,
    m: usize,
    k_blocks: usize,
    n: usize,
    lhs: &[BlockQ8K],
    rhs: &[W],
    cols: std::ops::Range<usize>,
    dst: *mut f32,
) {
    match kernel {
        Q0Kernel::Avx512Vnni => matmul_k_avx512_vnni(m, k_blocks, n, lhs, rhs, cols, dst),
        Q0Kernel::AvxVnni => matmul_k_avx_vnni(m, k_blocks, n, lhs, rhs, cols, dst),
        Q0Kernel::Avx2 => matmul_k_avx2(m, k_blocks, n, lhs, rhs, cols, dst),
    }
}

/// ragbox patch: activation rows for [`matmul_q0_panels`]: each Q8_0 block's codes shifted to
/// unsigned bytes (`a + 128`, as `vpdpbusd` wants them), rows of `k_blocks · 32` bytes, and the
/// blocks' scales as f32. Made once per matmul and shared by every task.
pub struct ShiftedRows {
    pub codes: Vec<u8>,
    pub scales: Vec<f32>,
}

impl ShiftedRows {
    pub fn new(lhs: &[BlockQ8_0]) -> ShiftedRows {
        let mut codes = Vec::with_capacity(lhs.len() * 32);
        for block in lhs {
            codes.extend(block.qs.iter().map(|&a| (a as u8) ^ 0x80));
        }
        ShiftedRows { codes, scales: lhs.iter().map(|b| f16::to_f32(b.d)).collect() }
    }
}

/// ragbox patch: columns of one [`matmul_q0_panels`] panel (two 16-lane registers).
pub const PANEL_COLS: usize = 32;

/// ragbox patch: fewest activation rows for which `k_quants::matmul` repacks the weights into
/// panels. Eight sequences decoding together (eight rows) ran a step in ~210 ms on the tiles
/// against ~300 ms on the panels, whose repacking of every weight is paid once per call; a prompt
/// (hundreds of rows) amortises it.
pub const PANEL_MIN_ROWS: usize = 32;

/// ragbox patch: `dst[rows × cols]` for a Q0 weight type on AVX-512 VNNI, with the weights of
/// the task's columns (at most [`PANEL_COLS`]) repacked first into the order a register tile
/// reads them: per 32-element block, eight steps of 4 inputs × 32 columns (one `vpdpbusd` per 16
/// columns and row), the columns' scales as a vector and `-128 · Σw` per column (the shifted
/// activations' correction) as the sums' start. A block's 8 × 2 `vpdpbusd` per row are then
/// followed by one conversion, one multiply and one FMA per 16 columns, where the per-pair tiles
/// above spend a conversion, a broadcast and an FMA on every 32 products of one column.
///
/// # Safety
/// AVX-512 F/BW/VNNI; `lhs` made from m · k_blocks blocks; `rhs` holds n · k_blocks blocks; `dst`
/// m · n cells, no other thread writes the cells of columns `cols`, which are at most
/// [`PANEL_COLS`].
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
pub unsafe fn matmul_q0_panels<W: Q0Block>(
    m: usize,
    k_blocks: usize,
    n: usize,
    lhs: &ShiftedRows,
    rhs: &[W],
    cols: std::ops::Range<usize>,
    dst: *mut f32,
) {
    debug_assert!(cols.len() <= PANEL_COLS && lhs.scales.len() == m * k_blocks);
    // Per block: 8 steps × 2 registers of 64 code bytes, then 2 registers of scales and 2 of
    // corrections (as i32 / f32 lanes).
    let mut codes = vec![0i8; k_blocks * 8 * 2 * 64];
    let mut scales = vec![0f32; k_blocks * PANEL_COLS];
    let mut starts = vec![0i32; k_blocks * PANEL_COLS];
    for (j, col) in cols.clone().enumerate() {
        for b in 0..k_blocks {
            let (x, d) = rhs.get_unchecked(col * k_blocks + b).decode();
            let mut w = [0i8; 32];
            _mm256_storeu_si256(w.as_mut_ptr() as *mut __m256i, x);
            let (g, lane) = (j / 16, j % 16);
            for s in 0..8 {
                let at = ((b * 8 + s) * 2 + g) * 64 + lane * 4;
                codes[at..at + 4].copy_from_slice(&w[4 * s..4 * s + 4]);
            }
            scales[b * PANEL_COLS + j] = d;
            starts[b * PANEL_COLS + j] = -128 * w.iter().map(|&v| i32::from(v)).sum::<i32>();
        }
    }
    let width = cols.len();
    let full = (m / 6) * 6;
    for row in (0..full).step_by(6) {
        panel_tile::<6>(k_blocks, lhs, &codes, &scales, &starts, row, cols.start, width, n, dst);
    }
    for row in full..m {
        panel_tile::<1>(k_blocks, lhs, &codes, &scales, &starts, row, cols.start, width, n, dst);
    }
}

/// ragbox patch: `R` rows × one panel, over all of k (see [`matmul_q0_panels`]).
#[allow(clippy::too_many_arguments)]
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn panel_tile<const R: usize>(
    k_blocks: usize,
    lhs: &ShiftedRows,
    codes: &[i8],
    scales: &[f32],
    starts: &[i32],
    row0: usize,
    col0: usize,
    width: usize,
    n: usize,
    dst: *mut f32,
) {
    let mut acc = [[_mm512_setzero_ps(); 2]; R];
    let a = lhs.codes.as_ptr();
    let row_bytes = k_blocks * 32;
    let w = codes.as_ptr() as *const __m512i;
    for b in 0..k_blocks {
        let start = [_mm512_loadu_si512(starts.as_ptr().add(b * PANEL_COLS) as *const __m512i), _mm512_loadu_si512(starts.as_ptr().add(b * PANEL_COLS + 16) as *const __m512i)];
        let mut sums = [start; R];
        for s in 0..8 {
            let w0 = _mm512_loadu_si512(w.add((b * 8 + s) * 2));
            let w1 = _mm512_loadu_si512(w.add((b * 8 + s) * 2 + 1));
            for (r, sums) in sums.iter_mut().enumerate() {
                let x = _mm512_set1_epi32((a.add((row0 + r) * row_bytes + b * 32 + 4 * s) as *const i32).read_unaligned());
                sums[0] = _mm512_dpbusd_epi32(sums[0], x, w0);
                sums[1] = _mm512_dpbusd_epi32(sums[1], x, w1);
            }
        }
        let d = [_mm512_loadu_ps(scales.as_ptr().add(b * PANEL_COLS)), _mm512_loadu_ps(scales.as_ptr().add(b * PANEL_COLS + 16))];
        for (r, (acc, sums)) in acc.iter_mut().zip(&sums).enumerate() {
            let da = _mm512_set1_ps(*lhs.scales.get_unchecked((row0 + r) * k_blocks + b));
            for g in 0..2 {
                acc[g] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums[g]), _mm512_mul_ps(da, d[g]), acc[g]);
            }
        }
    }
    for (r, acc) in acc.iter().enumerate() {
        for (g, &v) in acc.iter().enumerate() {
            let first = 16 * g;
            if first >= width {
                break;
            }
            let mask: __mmask16 = if width - first >= 16 { 0xffff } else { (1u16 << (width - first)) - 1 };
            _mm512_mask_storeu_ps(dst.add((row0 + r) * n + col0 + first), mask, v);
        }
    }
}
