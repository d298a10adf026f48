//! The local LLM's quantised matmuls routed to ragbox's own kernels (`ragbox_kernels::ggml`)
//! through candle's one hook (`k_quants::set_matmul_hook`, patches/README.md): candle quantises
//! the activations and hands over the GGML block bytes, and every product of the formats the
//! models use (Q4_0, Q5_0, Q8_0, Q4_K, Q6_K) runs here: decoding's one row on the one-row kernels,
//! a prompt's rows on the AVX-512 VNNI panels where the CPU has them, and everything else (2-31
//! rows, prompts on other CPUs) on the register tiles. Other formats, and CPUs without AVX2, stay
//! with candle's own loops.

use candle_core::quantized::k_quants;
use candle_core::quantized::GgmlDType;
use ragbox_kernels::ggml::{self, BlockFormat, KFormat};

/// Installs the hook, once per process (later calls change nothing).
pub fn install() {
    k_quants::set_matmul_hook(matmul);
}

/// What the LLM's products run on on this CPU, for `doctor`: prompts, then decoding's one row.
pub fn describe() -> String {
    let tiles = match ggml::TileKernel::detect() {
        Some(kernel) => kernel.name().to_string(),
        None => "candle's own loops".to_string(),
    };
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

/// The 32-element formats and the k-quants, by candle's dtype.
enum Format {
    Q0(BlockFormat),
    K(KFormat),
}

impl Format {
    fn of(dtype: GgmlDType) -> Option<Format> {
        Some(match dtype {
            GgmlDType::Q4_0 => Format::Q0(BlockFormat::Q4_0),
            GgmlDType::Q5_0 => Format::Q0(BlockFormat::Q5_0),
            GgmlDType::Q8_0 => Format::Q0(BlockFormat::Q8_0),
            GgmlDType::Q4K => Format::K(KFormat::Q4K),
            GgmlDType::Q6K => Format::K(KFormat::Q6K),
            _ => return None,
        })
    }
}

/// The hook: one activation row (decoding) on `ggml::gemv` / `gemv_k`; 32 rows or more on
/// `ggml::gemm` / `gemm_k` where the CPU has AVX-512 VNNI; any other number of rows on
/// `ggml::tiles` / `tiles_k`. Declines (candle runs) other formats and CPUs without AVX2.
fn matmul(dtype: GgmlDType, (m, k, n): (usize, usize, usize), lhs: &[u8], rhs: &[u8], dst: &mut [f32]) -> bool {
    let Some(format) = Format::of(dtype) else {
        return false;
    };
    // Operands of another size than the shape says (nothing candle makes) stay with candle,
    // rather than reaching the kernels' assertions.
    if m == 0 || !k.is_multiple_of(dtype.block_size()) || dst.len() < m * n {
        return false;
    }
    let k_blocks = k / dtype.block_size();
    let activation_bytes = if matches!(format, Format::K(_)) { ggml::Q8_K_BYTES } else { ggml::Q8_0_BYTES };
    if lhs.len() != m * k_blocks * activation_bytes || rhs.len() != n * k_blocks * dtype.type_size() {
        return false;
    }
    let dst = &mut dst[..m * n];
    match format {
        Format::Q0(f) if m == 1 => ggml::gemv(f, k_blocks, lhs, rhs, dst),
        Format::K(f) if m == 1 => ggml::gemv_k(f, k_blocks, lhs, rhs, dst),
        Format::Q0(f) => ggml::gemm(f, m, k_blocks, lhs, rhs, dst) || ggml::tiles(f, m, k_blocks, lhs, rhs, dst),
        Format::K(f) => ggml::gemm_k(f, m, k_blocks, lhs, rhs, dst) || ggml::tiles_k(f, m, k_blocks, lhs, rhs, dst),
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

    /// One row and two rows of Q5_0 agree with candle's own per-column dot product (`vec_dot`);
    /// operands of the wrong size are left to candle. Bit-for-bit agreement with candle's dot
    /// products is checked in tests/integration/kernels.rs.
    #[test]
    fn the_hook_takes_one_and_two_rows_of_a_32_element_format_and_agrees_with_candle() {
        let (k, n) = (896, 200);
        let values = |count: usize, seed: u32| -> Vec<f32> {
            (0..count).map(|i| ((i as u32).wrapping_mul(2654435761) ^ seed) % 2001).map(|v| v as f32 / 1000.0 - 1.0).collect()
        };
        let mut weights = vec![BlockQ5_0::zeros(); k * n / 32];
        BlockQ5_0::from_float(&values(k * n, 7), &mut weights);
        let mut lhs = vec![BlockQ8_0::zeros(); 2 * k / 32];
        for (row, blocks) in lhs.chunks_mut(k / 32).enumerate() {
            BlockQ8_0::from_float(&values(k, 3 + row as u32), blocks);
        }
        let one_row = &lhs[..k / 32];
        assert!(!super::matmul(GgmlDType::Q5_0, (1, k, n + 1), bytes(one_row), bytes(&weights), &mut vec![0.0; n + 1]), "too few weights stay with candle");
        for m in [1, 2] {
            let mut ours = vec![f32::NAN; m * n];
            if !super::matmul(GgmlDType::Q5_0, (m, k, n), bytes(&lhs[..m * k / 32]), bytes(&weights), &mut ours) {
                assert!(ragbox_kernels::ggml::TileKernel::detect().is_none(), "declined on a CPU that runs the kernels");
                return;
            }
            for r in 0..m {
                for c in 0..n {
                    let candle = BlockQ5_0::vec_dot(k, &weights[c * k / 32..(c + 1) * k / 32], &lhs[r * k / 32..(r + 1) * k / 32]);
                    let ours = ours[r * n + c];
                    assert!((ours - candle).abs() <= 1e-4 * candle.abs().max(1.0), "{m} rows, [{r}, {c}]: {ours} vs candle's {candle}");
                }
            }
        }
    }
}
