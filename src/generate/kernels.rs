//! The local LLM's quantised matmuls routed to ragbox's own kernels (`ragbox_kernels::ggml`)
//! through candle's one hook (`k_quants::set_matmul_hook`, patches/README.md): candle quantises
//! the activations and hands over the GGML block bytes. Decoding's one row (Q4_0, Q5_0, Q8_0,
//! Q4_K, Q6_K) runs on our kernels, and so do a prompt's rows where the CPU has AVX-512 VNNI;
//! 2-31 rows (several sequences decoding together) and prompts on other CPUs stay with candle's
//! tiles (patches/README.md, items 3-5: the part of the patch still to move).

use candle_core::quantized::k_quants;
use candle_core::quantized::GgmlDType;
use ragbox_kernels::ggml::{self, BlockFormat, KFormat};

/// Installs the hook, once per process (later calls change nothing).
pub fn install() {
    k_quants::set_matmul_hook(matmul);
}

/// What the LLM's products run on on this CPU, for `doctor`: prompts, then decoding's one row.
pub fn describe() -> String {
    #[cfg(target_feature = "avx2")]
    let tiles = format!("candle's {} tiles", candle_core::quantized::avx::Q0Kernel::detect().name());
    #[cfg(not(target_feature = "avx2"))]
    let tiles = "candle's scalar loops".to_string();
    let prompts = match ggml::GemvKernel::detect() {
        Some(ggml::GemvKernel::Avx512Vnni) => format!("ragbox avx512-vnni panels from {} rows, {tiles} below", ggml::GEMM_MIN_ROWS),
        _ => tiles,
    };
    let one_row = match ggml::GemvKernel::detect() {
        Some(kernel) => format!("{} (Q4_0, Q5_0, Q8_0), ragbox avx2 (Q4_K, Q6_K), next rows prefetched", kernel.name()),
        None => "candle's dot products".to_string(),
    };
    format!("quantised weights in memory; prompts: {prompts}; one row: {one_row}")
}

/// The hook: one activation row (decoding) against Q4_0, Q5_0 or Q8_0 weights (`ggml::gemv`) or
/// Q4_K or Q6_K weights (`ggml::gemv_k`); a prompt's rows against any of them (`ggml::gemm`,
/// `ggml::gemm_k`: AVX-512 VNNI, 32 rows or more).
fn matmul(dtype: GgmlDType, (m, k, n): (usize, usize, usize), lhs: &[u8], rhs: &[u8], dst: &mut [f32]) -> bool {
    // Operands of another size than the shape says (nothing candle makes) stay with candle,
    // rather than reaching the kernels' assertions.
    if !k.is_multiple_of(dtype.block_size()) || dst.len() < m * n {
        return false;
    }
    let k_blocks = k / dtype.block_size();
    let activation_bytes = if matches!(dtype, GgmlDType::Q4K | GgmlDType::Q6K) { ggml::Q8_K_BYTES } else { ggml::Q8_0_BYTES };
    if lhs.len() != m * k_blocks * activation_bytes || rhs.len() != n * k_blocks * dtype.type_size() {
        return false;
    }
    if m >= ggml::GEMM_MIN_ROWS {
        let dst = &mut dst[..m * n];
        return match dtype {
            GgmlDType::Q4_0 => ggml::gemm(BlockFormat::Q4_0, m, k_blocks, lhs, rhs, dst),
            GgmlDType::Q5_0 => ggml::gemm(BlockFormat::Q5_0, m, k_blocks, lhs, rhs, dst),
            GgmlDType::Q8_0 => ggml::gemm(BlockFormat::Q8_0, m, k_blocks, lhs, rhs, dst),
            GgmlDType::Q4K => ggml::gemm_k(KFormat::Q4K, m, k_blocks, lhs, rhs, dst),
            GgmlDType::Q6K => ggml::gemm_k(KFormat::Q6K, m, k_blocks, lhs, rhs, dst),
            _ => false,
        };
    }
    if m != 1 {
        return false;
    }
    let dst = &mut dst[..n];
    match dtype {
        GgmlDType::Q4_0 => ggml::gemv(BlockFormat::Q4_0, k_blocks, lhs, rhs, dst),
        GgmlDType::Q5_0 => ggml::gemv(BlockFormat::Q5_0, k_blocks, lhs, rhs, dst),
        GgmlDType::Q8_0 => ggml::gemv(BlockFormat::Q8_0, k_blocks, lhs, rhs, dst),
        GgmlDType::Q4K => ggml::gemv_k(KFormat::Q4K, k_blocks, lhs, rhs, dst),
        GgmlDType::Q6K => ggml::gemv_k(KFormat::Q6K, k_blocks, lhs, rhs, dst),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use candle_core::quantized::k_quants::{BlockQ5_0, BlockQ8_0, GgmlType};
    use candle_core::quantized::GgmlDType;

    fn bytes<T>(blocks: &[T]) -> &[u8] {
        // SAFETY: GGML blocks are plain repr(C) data.
        unsafe { std::slice::from_raw_parts(blocks.as_ptr() as *const u8, std::mem::size_of_val(blocks)) }
    }

    /// One row of Q5_0 agrees with candle's own per-column dot product (`vec_dot`, which the
    /// hook never replaces); 2 rows (fewer than a prompt's 32) and operands of the wrong size are
    /// left to candle. Bit-for-bit agreement with candle's one-row tiles and dot products is
    /// checked in tests/integration/kernels.rs.
    #[test]
    fn the_hook_takes_one_row_of_a_32_element_format_and_agrees_with_candle() {
        let (k, n) = (896, 200);
        let values = |count: usize, seed: u32| -> Vec<f32> {
            (0..count).map(|i| ((i as u32).wrapping_mul(2654435761) ^ seed) % 2001).map(|v| v as f32 / 1000.0 - 1.0).collect()
        };
        let mut weights = vec![BlockQ5_0::zeros(); k * n / 32];
        BlockQ5_0::from_float(&values(k * n, 7), &mut weights);
        let mut lhs = vec![BlockQ8_0::zeros(); k / 32];
        BlockQ8_0::from_float(&values(k, 3), &mut lhs);
        let mut ours = vec![f32::NAN; n];
        assert!(!super::matmul(GgmlDType::Q5_0, (2, k, n / 2), bytes(&lhs), bytes(&weights), &mut ours), "two rows stay with candle");
        assert!(!super::matmul(GgmlDType::Q5_0, (1, k, n + 1), bytes(&lhs), bytes(&weights), &mut vec![0.0; n + 1]), "too few weights stay with candle");
        if !super::matmul(GgmlDType::Q5_0, (1, k, n), bytes(&lhs), bytes(&weights), &mut ours) {
            assert!(ragbox_kernels::ggml::GemvKernel::detect().is_none(), "declined on a CPU that runs the kernel");
            return;
        }
        for (c, ours) in ours.iter().enumerate() {
            let candle = BlockQ5_0::vec_dot(k, &weights[c * k / 32..(c + 1) * k / 32], &lhs);
            assert!((ours - candle).abs() <= 1e-4 * candle.abs().max(1.0), "column {c}: {ours} vs candle's {candle}");
        }
    }
}
