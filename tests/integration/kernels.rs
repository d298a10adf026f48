//! The LLM's quantised products on ragbox's kernels (`ragbox_kernels::ggml`, reached through
//! candle's matmul hook: patches/README.md) against candle's own references: a quantised matmul
//! must give what a plain f32 matmul of the same (dequantised) weights gives, for one row
//! (decoding), a few rows and many (a prompt), for every quantisation the LLM files use; and each
//! of ragbox's kernels gives candle's per-cell dot product (`vec_dot`) to float rounding, or bit
//! for bit where the float steps are the same.

use candle_core::quantized::{GgmlDType, QMatMul, QTensor};
use candle_core::{Device, Module, Tensor};

fn check(dtype: GgmlDType, k: usize, n: usize, m: usize) {
    // What `ragbox ask` runs: candle's QMatMul with ragbox's hook installed.
    ragbox_core::generate::kernels::install();
    let dev = Device::Cpu;
    let w = Tensor::randn(0f32, 1.0, (n, k), &dev).expect("weights");
    let q = QTensor::quantize(&w, dtype).expect("quantise");
    let dequantised = q.dequantize(&dev).expect("dequantise");
    let mm = QMatMul::from_qtensor(q).expect("qmatmul");
    let x = Tensor::randn(0f32, 1.0, (m, k), &dev).expect("activations");
    let got: Vec<f32> = mm.forward(&x).expect("forward").flatten_all().unwrap().to_vec1().unwrap();
    let want: Vec<f32> = x.matmul(&dequantised.t().unwrap()).unwrap().flatten_all().unwrap().to_vec1().unwrap();
    assert_eq!(got.len(), m * n);
    // The activations are quantised to 8 bits per row, so results differ from f32 by about
    // 1% of a dot product's scale (sqrt(k) for unit normals); a wrong kernel is off by far more.
    let scale = (k as f32).sqrt();
    let worst = got.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
    assert!(worst < 0.05 * scale, "{dtype:?} {m}x{k} @ {k}x{n}: max |error| {worst} (scale {scale})");
}

#[test]
fn quantised_matmul_matches_f32_for_one_row_and_a_prompt() {
    for dtype in [GgmlDType::Q5_0, GgmlDType::Q8_0, GgmlDType::Q4_0, GgmlDType::Q4K, GgmlDType::Q6K] {
        // Qwen2.5-0.5B's shapes: 896 wide (not a multiple of 256: k-quants need 256).
        let k = if matches!(dtype, GgmlDType::Q4K | GgmlDType::Q6K) { 1024 } else { 896 };
        // 43 columns fill neither the 3-wide Q0 tiles nor the 2-wide k-quant tiles.
        for (m, n) in [(1, 40), (3, 40), (70, 40), (70, 43)] {
            check(dtype, k, n, m);
        }
    }
}

/// ragbox's kernels on every variant this CPU runs, against candle's one-row dot product on the
/// same quantised blocks: the integer sums are the same, so only the order of the float additions
/// may differ.
#[cfg(target_feature = "avx2")]
mod tiles {
    use candle_core::quantized::k_quants::{BlockQ4K, BlockQ4_0, BlockQ5_0, BlockQ6K, BlockQ8K, BlockQ8_0};
    use candle_core::quantized::GgmlType;
    use ragbox_kernels::ggml::{BlockFormat, KFormat, TileKernel};

    fn values(n: usize) -> Vec<f32> {
        candle_core::Tensor::randn(0f32, 1.0, n, &candle_core::Device::Cpu).unwrap().to_vec1().unwrap()
    }

    fn blocks<T: GgmlType>(x: &[f32], rows: usize) -> Vec<T> {
        let k = x.len() / rows;
        let mut out = vec![T::zeros(); x.len() / T::BLCK_SIZE];
        for (src, dst) in x.chunks(k).zip(out.chunks_mut(k / T::BLCK_SIZE)) {
            T::from_float(src, dst);
        }
        out
    }

    fn bytes<T>(blocks: &[T]) -> &[u8] {
        // SAFETY: GGML blocks are plain repr(C) data.
        unsafe { std::slice::from_raw_parts(blocks.as_ptr() as *const u8, std::mem::size_of_val(blocks)) }
    }

    /// `run(kernel, activations, weights, dst)` for each tile kernel, compared with `W::vec_dot` per cell.
    fn agree<W: GgmlType>(k: usize, m: usize, n: usize, run: impl Fn(TileKernel, &[u8], &[u8], &mut [f32])) {
        let lhs: Vec<W::VecDotType> = blocks(&values(m * k), m);
        let rhs: Vec<W> = blocks(&values(n * k), n);
        let kb = k / W::BLCK_SIZE;
        let kernels = TileKernel::available();
        assert_eq!(kernels.last(), Some(&TileKernel::Avx2), "AVX2 is the build's baseline");
        for kernel in kernels {
            let mut got = vec![f32::NAN; m * n];
            run(kernel, bytes(&lhs), bytes(&rhs), &mut got);
            for r in 0..m {
                for c in 0..n {
                    let want = W::vec_dot(k, &rhs[c * kb..(c + 1) * kb], &lhs[r * kb..(r + 1) * kb]);
                    let g = got[r * n + c];
                    assert!((g - want).abs() <= 1e-4 * want.abs().max(1.0), "{:?} {:?} row {r} col {c}: {g} vs {want}", W::DTYPE, kernel);
                }
            }
        }
    }

    fn q0<W: GgmlType<VecDotType = BlockQ8_0>>(format: BlockFormat, k: usize, m: usize, n: usize) {
        agree::<W>(k, m, n, |kernel, a, w, dst| ragbox_kernels::ggml::tiles_with(kernel, format, m, k / 32, a, w, dst));
    }

    fn kq<W: GgmlType<VecDotType = BlockQ8K>>(format: KFormat, k: usize, m: usize, n: usize) {
        agree::<W>(k, m, n, |kernel, a, w, dst| ragbox_kernels::ggml::tiles_k_with(kernel, format, m, k / 256, a, w, dst));
    }

    /// `ragbox_kernels::ggml::gemv` (decoding's one row), on each of its kernels this CPU runs,
    /// gives candle's `vec_dot` bit for bit where candle's is the AVX2 dot product (Q4_0, Q8_0:
    /// the same integer sums per lane and the same float steps), and to rounding for Q5_0 (candle
    /// 0.10.2 has only a scalar loop for it). (The tiles give `gemv`'s results bit for bit: the
    /// kernels crate's unit tests; and candle's former tiles' bit for bit: checked at commit
    /// 2090518, when the tiles moved out of the candle patch.)
    fn gemv_matches_vec_dot<W: GgmlType<VecDotType = BlockQ8_0>>(format: BlockFormat, k: usize, n: usize) {
        use ragbox_kernels::ggml::{gemv_with, GemvKernel};
        let lhs: Vec<BlockQ8_0> = blocks(&values(k), 1);
        let rhs: Vec<W> = blocks(&values(n * k), n);
        let kb = k / 32;
        assert!(GemvKernel::available().contains(&GemvKernel::Avx2), "AVX2 is the build's baseline");
        for kernel in GemvKernel::available() {
            let mut ours = vec![f32::NAN; n];
            gemv_with(kernel, format, kb, bytes(&lhs), bytes(&rhs), &mut ours);
            for (c, ours) in ours.iter().enumerate() {
                let candle = W::vec_dot(k, &rhs[c * kb..(c + 1) * kb], &lhs);
                if format == BlockFormat::Q5_0 {
                    assert!((ours - candle).abs() <= 1e-4 * candle.abs().max(1.0), "{format:?} column {c}: {kernel:?} {ours} vs candle's {candle}");
                } else {
                    assert_eq!(ours.to_bits(), candle.to_bits(), "{format:?} column {c}: {kernel:?} {ours} vs candle's {candle}");
                }
            }
        }
    }

    /// `ragbox_kernels::ggml::gemv_k` gives candle's `vec_dot` (ggml's AVX2 k-quant dot
    /// product, which it ports) bit for bit.
    fn gemv_k_matches_vec_dot<W: GgmlType<VecDotType = BlockQ8K>>(format: KFormat, k: usize, n: usize) {
        let lhs: Vec<BlockQ8K> = blocks(&values(k), 1);
        let rhs: Vec<W> = blocks(&values(n * k), n);
        let kb = k / 256;
        let mut ours = vec![f32::NAN; n];
        let done = ragbox_kernels::ggml::gemv_k(format, kb, bytes(&lhs), bytes(&rhs), &mut ours);
        assert!(done, "AVX2 is the build's baseline");
        for (c, ours) in ours.iter().enumerate() {
            let candle = W::vec_dot(k, &rhs[c * kb..(c + 1) * kb], &lhs);
            assert_eq!(ours.to_bits(), candle.to_bits(), "{format:?} column {c}: {ours} vs candle's {candle}");
        }
    }

    /// A prompt kernel of `ragbox_kernels::ggml` (`run(m, k_blocks, activations, weights, dst)`,
    /// which says whether it ran) against candle's per-cell dot product, within float rounding.
    fn prompt_matches_vec_dot<W: GgmlType>(m: usize, k: usize, n: usize, run: impl Fn(usize, usize, &[u8], &[u8], &mut [f32]) -> bool) {
        let lhs: Vec<W::VecDotType> = blocks(&values(m * k), m);
        let rhs: Vec<W> = blocks(&values(n * k), n);
        let kb = k / W::BLCK_SIZE;
        let mut ours = vec![f32::NAN; m * n];
        if !run(m, kb, bytes(&lhs), bytes(&rhs), &mut ours) {
            assert_ne!(ragbox_kernels::ggml::GemvKernel::detect(), Some(ragbox_kernels::ggml::GemvKernel::Avx512Vnni), "declined on a CPU that runs it");
            return;
        }
        for r in 0..m {
            for c in 0..n {
                let want = W::vec_dot(k, &rhs[c * kb..(c + 1) * kb], &lhs[r * kb..(r + 1) * kb]);
                let got = ours[r * n + c];
                assert!((got - want).abs() <= 1e-4 * want.abs().max(1.0), "{:?} [{r}, {c}]: {got} vs candle's {want}", W::DTYPE);
            }
        }
    }

    /// `gemm_k` (a prompt's rows against k-quant weights) sums per sub-block, candle per block.
    fn gemm_k_matches_vec_dot<W: GgmlType<VecDotType = BlockQ8K>>(format: KFormat, m: usize, k: usize, n: usize) {
        prompt_matches_vec_dot::<W>(m, k, n, |m, kb, a, w, dst| ragbox_kernels::ggml::gemm_k(format, m, kb, a, w, dst));
    }

    #[test]
    fn the_k_quant_prompt_kernel_matches_candles_dot_products() {
        // A tile's rows and a remainder; a whole panel and a part of one.
        for (m, k, n) in [(33, 1024, 40), (64, 256, 32)] {
            gemm_k_matches_vec_dot::<BlockQ4K>(KFormat::Q4K, m, k, n);
            gemm_k_matches_vec_dot::<BlockQ6K>(KFormat::Q6K, m, k, n);
        }
    }

    #[test]
    fn the_k_quant_one_row_kernel_gives_candles_dot_products_bit_for_bit() {
        for (k, n) in [(256, 1), (4864, 133), (1536, 70)] {
            gemv_k_matches_vec_dot::<BlockQ4K>(KFormat::Q4K, k, n);
            gemv_k_matches_vec_dot::<BlockQ6K>(KFormat::Q6K, k, n);
        }
    }

    #[test]
    fn the_one_row_kernel_gives_candles_dot_products() {
        // Fewer rows than one pass, a task's worth and a remainder, the 0.5B model's widths.
        for (k, n) in [(896, 3), (896, 133), (4864, 70)] {
            gemv_matches_vec_dot::<BlockQ4_0>(BlockFormat::Q4_0, k, n);
            gemv_matches_vec_dot::<BlockQ5_0>(BlockFormat::Q5_0, k, n);
            gemv_matches_vec_dot::<BlockQ8_0>(BlockFormat::Q8_0, k, n);
        }
    }

    /// `gemm` (a prompt's rows of a 32-element format). Until this stop candle's own AVX-512 VNNI
    /// panels did this product, and this test checked `gemm` against them bit for bit, at commit
    /// 0b2915d; the panels have left the patch since.
    fn gemm_matches_vec_dot<W: GgmlType<VecDotType = BlockQ8_0>>(format: BlockFormat, m: usize, k: usize, n: usize) {
        prompt_matches_vec_dot::<W>(m, k, n, |m, kb, a, w, dst| ragbox_kernels::ggml::gemm(format, m, kb, a, w, dst));
    }

    #[test]
    fn the_prompt_kernel_matches_candles_dot_products() {
        // A 6-row tile and a remainder; a whole panel, a part of one, and both.
        for (m, n) in [(32, 70), (45, 32)] {
            gemm_matches_vec_dot::<BlockQ4_0>(BlockFormat::Q4_0, m, 896, n);
            gemm_matches_vec_dot::<BlockQ5_0>(BlockFormat::Q5_0, m, 896, n);
            gemm_matches_vec_dot::<BlockQ8_0>(BlockFormat::Q8_0, m, 896, n);
        }
    }

    #[test]
    fn every_tile_kernel_this_cpu_runs_matches_the_one_row_dot_product() {
        // Rows and columns that fill the 8 x 3, 8 x 2, 4 x 3 and 4 x 2 tiles and leave remainders,
        // and more columns than one task's block.
        for (m, n) in [(9, 11), (4, 12), (1, 5), (31, 50)] {
            q0::<BlockQ4_0>(BlockFormat::Q4_0, 896, m, n);
            q0::<BlockQ5_0>(BlockFormat::Q5_0, 896, m, n);
            q0::<BlockQ8_0>(BlockFormat::Q8_0, 896, m, n);
            kq::<BlockQ4K>(KFormat::Q4K, 1024, m, n);
            kq::<BlockQ6K>(KFormat::Q6K, 1024, m, n);
        }
    }
}
