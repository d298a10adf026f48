//! The patched candle-core kernels (patches/README.md) against candle's own reference: a
//! quantised matmul must give what a plain f32 matmul of the same (dequantised) weights gives, for
//! one row (decoding) and for many (a prompt, the cache-blocked path), for every quantisation the
//! LLM files use.

use candle_core::quantized::{GgmlDType, QMatMul, QTensor};
use candle_core::{Device, Module, Tensor};

fn check(dtype: GgmlDType, k: usize, n: usize, m: usize) {
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

/// Every tile kernel this CPU can run (AVX-512 VNNI, AVX-VNNI, AVX2: the matmul above takes only
/// the best), against candle's one-row dot product on the same quantised blocks: the integer sums
/// are the same, so only the order of the float additions may differ.
#[cfg(target_feature = "avx2")]
mod tiles {
    use candle_core::quantized::avx::{matmul_k, matmul_q0, KBlock, Q0Block, Q0Kernel};
    use candle_core::quantized::k_quants::{BlockQ4K, BlockQ4_0, BlockQ5_0, BlockQ6K, BlockQ8K, BlockQ8_0};
    use candle_core::quantized::GgmlType;

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

    /// `run(kernel, lhs, rhs, dst)` for each kernel, compared with `W::vec_dot` per cell.
    fn agree<W: GgmlType>(k: usize, m: usize, n: usize, run: impl Fn(Q0Kernel, &[W::VecDotType], &[W], &mut [f32])) {
        let lhs: Vec<W::VecDotType> = blocks(&values(m * k), m);
        let rhs: Vec<W> = blocks(&values(n * k), n);
        let kb = k / W::BLCK_SIZE;
        let kernels = Q0Kernel::available();
        assert_eq!(kernels.last(), Some(&Q0Kernel::Avx2), "AVX2 is the build's baseline");
        for kernel in kernels {
            let mut got = vec![f32::NAN; m * n];
            run(kernel, &lhs, &rhs, &mut got);
            for r in 0..m {
                for c in 0..n {
                    let want = W::vec_dot(k, &rhs[c * kb..(c + 1) * kb], &lhs[r * kb..(r + 1) * kb]);
                    let g = got[r * n + c];
                    assert!((g - want).abs() <= 1e-4 * want.abs().max(1.0), "{:?} {:?} row {r} col {c}: {g} vs {want}", W::DTYPE, kernel);
                }
            }
        }
    }

    fn q0<W: GgmlType<VecDotType = BlockQ8_0> + Q0Block>(k: usize, m: usize, n: usize) {
        agree::<W>(k, m, n, |kernel, lhs, rhs, dst| unsafe { matmul_q0(kernel, m, k / 32, n, lhs, rhs, 0..n, dst.as_mut_ptr()) });
    }

    fn kq<W: GgmlType<VecDotType = BlockQ8K> + KBlock>(k: usize, m: usize, n: usize) {
        agree::<W>(k, m, n, |kernel, lhs, rhs, dst| unsafe { matmul_k(kernel, m, k / 256, n, lhs, rhs, 0..n, dst.as_mut_ptr()) });
    }

    /// `ragbox_kernels::ggml::gemv` (decoding's one row, through candle's matmul hook), on each
    /// of its kernels this CPU runs, gives each of candle's one-row tiles' results bit for bit:
    /// the same integer sums per lane and the same float steps, so the LLM's greedy answers
    /// cannot change with it.
    fn gemv_matches_the_tile<W: GgmlType<VecDotType = BlockQ8_0> + Q0Block>(format: ragbox_kernels::ggml::BlockFormat, k: usize, n: usize) {
        use ragbox_kernels::ggml::{gemv_with, GemvKernel};
        let lhs: Vec<BlockQ8_0> = blocks(&values(k), 1);
        let rhs: Vec<W> = blocks(&values(n * k), n);
        let bytes = |p: *const u8, len: usize| unsafe { std::slice::from_raw_parts(p, len) };
        let lhs_bytes = bytes(lhs.as_ptr() as *const u8, std::mem::size_of_val(&lhs[..]));
        let rhs_bytes = bytes(rhs.as_ptr() as *const u8, std::mem::size_of_val(&rhs[..]));
        assert!(GemvKernel::available().contains(&GemvKernel::Avx2), "AVX2 is the build's baseline");
        for tile_kernel in Q0Kernel::available() {
            let mut tile = vec![f32::NAN; n];
            // SAFETY: the CPU runs `tile_kernel` (available); sizes as made here.
            unsafe { matmul_q0(tile_kernel, 1, k / 32, n, &lhs, &rhs, 0..n, tile.as_mut_ptr()) };
            for kernel in GemvKernel::available() {
                let mut ours = vec![f32::NAN; n];
                gemv_with(kernel, format, k / 32, lhs_bytes, rhs_bytes, &mut ours);
                for (c, (ours, tile)) in ours.iter().zip(&tile).enumerate() {
                    assert_eq!(ours.to_bits(), tile.to_bits(), "{format:?} column {c}: {kernel:?} {ours} vs {tile_kernel:?} tile's {tile}");
                }
            }
        }
    }

    /// `ragbox_kernels::ggml::gemv_k` gives candle's `vec_dot` (ggml's AVX2 k-quant dot
    /// product, which it ports) bit for bit.
    fn gemv_k_matches_vec_dot<W: GgmlType<VecDotType = BlockQ8K>>(format: ragbox_kernels::ggml::KFormat, k: usize, n: usize) {
        let lhs: Vec<BlockQ8K> = blocks(&values(k), 1);
        let rhs: Vec<W> = blocks(&values(n * k), n);
        let kb = k / 256;
        let bytes = |p: *const u8, len: usize| unsafe { std::slice::from_raw_parts(p, len) };
        let mut ours = vec![f32::NAN; n];
        let done = ragbox_kernels::ggml::gemv_k(
            format,
            kb,
            bytes(lhs.as_ptr() as *const u8, std::mem::size_of_val(&lhs[..])),
            bytes(rhs.as_ptr() as *const u8, std::mem::size_of_val(&rhs[..])),
            &mut ours,
        );
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
        let bytes = |p: *const u8, len: usize| unsafe { std::slice::from_raw_parts(p, len) };
        let mut ours = vec![f32::NAN; m * n];
        let lhs_bytes = bytes(lhs.as_ptr() as *const u8, std::mem::size_of_val(&lhs[..]));
        if !run(m, kb, lhs_bytes, bytes(rhs.as_ptr() as *const u8, std::mem::size_of_val(&rhs[..])), &mut ours) {
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
    fn gemm_k_matches_vec_dot<W: GgmlType<VecDotType = BlockQ8K>>(format: ragbox_kernels::ggml::KFormat, m: usize, k: usize, n: usize) {
        prompt_matches_vec_dot::<W>(m, k, n, |m, kb, a, w, dst| ragbox_kernels::ggml::gemm_k(format, m, kb, a, w, dst));
    }

    #[test]
    fn the_k_quant_prompt_kernel_matches_candles_dot_products() {
        use ragbox_kernels::ggml::KFormat;
        // A tile's rows and a remainder; a whole panel and a part of one.
        for (m, k, n) in [(33, 1024, 40), (64, 256, 32)] {
            gemm_k_matches_vec_dot::<BlockQ4K>(KFormat::Q4K, m, k, n);
            gemm_k_matches_vec_dot::<BlockQ6K>(KFormat::Q6K, m, k, n);
        }
    }

    #[test]
    fn the_k_quant_one_row_kernel_gives_candles_dot_products_bit_for_bit() {
        use ragbox_kernels::ggml::KFormat;
        for (k, n) in [(256, 1), (4864, 133), (1536, 70)] {
            gemv_k_matches_vec_dot::<BlockQ4K>(KFormat::Q4K, k, n);
            gemv_k_matches_vec_dot::<BlockQ6K>(KFormat::Q6K, k, n);
        }
    }

    #[test]
    fn the_one_row_kernel_gives_the_vnni_tiles_results_bit_for_bit() {
        use ragbox_kernels::ggml::BlockFormat;
        // Fewer rows than one pass, a task's worth and a remainder, the 0.5B model's widths.
        for (k, n) in [(896, 3), (896, 133), (4864, 70)] {
            gemv_matches_the_tile::<BlockQ4_0>(BlockFormat::Q4_0, k, n);
            gemv_matches_the_tile::<BlockQ5_0>(BlockFormat::Q5_0, k, n);
            gemv_matches_the_tile::<BlockQ8_0>(BlockFormat::Q8_0, k, n);
        }
    }

    /// `gemm` (a prompt's rows of a 32-element format). Until this stop candle's own AVX-512 VNNI
    /// panels did this product, and this test checked `gemm` against them bit for bit, at commit
    /// 0b2915d; the panels have left the patch since.
    fn gemm_matches_vec_dot<W: GgmlType<VecDotType = BlockQ8_0>>(format: ragbox_kernels::ggml::BlockFormat, m: usize, k: usize, n: usize) {
        prompt_matches_vec_dot::<W>(m, k, n, |m, kb, a, w, dst| ragbox_kernels::ggml::gemm(format, m, kb, a, w, dst));
    }

    #[test]
    fn the_prompt_kernel_matches_candles_dot_products() {
        use ragbox_kernels::ggml::BlockFormat;
        // A 6-row tile and a remainder; a whole panel, a part of one, and both.
        for (m, n) in [(32, 70), (45, 32)] {
            gemm_matches_vec_dot::<BlockQ4_0>(BlockFormat::Q4_0, m, 896, n);
            gemm_matches_vec_dot::<BlockQ5_0>(BlockFormat::Q5_0, m, 896, n);
            gemm_matches_vec_dot::<BlockQ8_0>(BlockFormat::Q8_0, m, 896, n);
        }
    }

    /// TEMPORARY (issue 34's move): ragbox's ported tiles against candle's patched tiles.
    #[test]
    fn ragbox_tiles_give_candles_tiles_results_bit_for_bit() {
        use ragbox_kernels::ggml::{tiles_k_with, tiles_with, BlockFormat, KFormat, TileKernel};
        let bytes = |p: *const u8, len: usize| unsafe { std::slice::from_raw_parts(p, len) };
        let ours = |k: Q0Kernel| match k {
            Q0Kernel::Avx512Vnni => TileKernel::Avx512Vnni,
            Q0Kernel::AvxVnni => TileKernel::AvxVnni,
            Q0Kernel::Avx2 => TileKernel::Avx2,
        };
        fn run_q0<W: GgmlType<VecDotType = BlockQ8_0> + Q0Block>(format: BlockFormat, m: usize, n: usize, ours: &dyn Fn(Q0Kernel) -> TileKernel, bytes: &dyn Fn(*const u8, usize) -> &'static [u8]) {
            let k = 896;
            let lhs: Vec<BlockQ8_0> = blocks(&values(m * k), m);
            let rhs: Vec<W> = blocks(&values(n * k), n);
            for kernel in Q0Kernel::available() {
                let mut theirs = vec![f32::NAN; m * n];
                unsafe { matmul_q0(kernel, m, k / 32, n, &lhs, &rhs, 0..n, theirs.as_mut_ptr()) };
                let mut got = vec![f32::NAN; m * n];
                tiles_with(ours(kernel), format, m, k / 32, bytes(lhs.as_ptr() as *const u8, std::mem::size_of_val(&lhs[..])), bytes(rhs.as_ptr() as *const u8, std::mem::size_of_val(&rhs[..])), &mut got);
                for (i, (g, t)) in got.iter().zip(&theirs).enumerate() {
                    assert_eq!(g.to_bits(), t.to_bits(), "{format:?} {kernel:?} cell {i}: {g} vs {t}");
                }
            }
        }
        fn run_k<W: GgmlType<VecDotType = BlockQ8K> + KBlock>(format: KFormat, m: usize, n: usize, ours: &dyn Fn(Q0Kernel) -> TileKernel, bytes: &dyn Fn(*const u8, usize) -> &'static [u8]) {
            let k = 1024;
            let lhs: Vec<BlockQ8K> = blocks(&values(m * k), m);
            let rhs: Vec<W> = blocks(&values(n * k), n);
            for kernel in Q0Kernel::available() {
                let mut theirs = vec![f32::NAN; m * n];
                unsafe { matmul_k(kernel, m, k / 256, n, &lhs, &rhs, 0..n, theirs.as_mut_ptr()) };
                let mut got = vec![f32::NAN; m * n];
                tiles_k_with(ours(kernel), format, m, k / 256, bytes(lhs.as_ptr() as *const u8, std::mem::size_of_val(&lhs[..])), bytes(rhs.as_ptr() as *const u8, std::mem::size_of_val(&rhs[..])), &mut got);
                for (i, (g, t)) in got.iter().zip(&theirs).enumerate() {
                    assert_eq!(g.to_bits(), t.to_bits(), "{format:?} {kernel:?} cell {i}: {g} vs {t}");
                }
            }
        }
        for (m, n) in [(9, 11), (4, 12), (2, 5), (31, 50), (70, 43)] {
            run_q0::<BlockQ4_0>(BlockFormat::Q4_0, m, n, &ours, &bytes);
            run_q0::<BlockQ5_0>(BlockFormat::Q5_0, m, n, &ours, &bytes);
            run_q0::<BlockQ8_0>(BlockFormat::Q8_0, m, n, &ours, &bytes);
            run_k::<BlockQ4K>(KFormat::Q4K, m, n, &ours, &bytes);
            run_k::<BlockQ6K>(KFormat::Q6K, m, n, &ours, &bytes);
        }
    }

    #[test]
    fn every_tile_kernel_this_cpu_runs_matches_the_one_row_dot_product() {
        // Rows and columns that fill the 8 x 3, 8 x 2, 4 x 3 and 4 x 2 tiles and leave remainders.
        for (m, n) in [(9, 11), (4, 12), (1, 5)] {
            q0::<BlockQ4_0>(896, m, n);
            q0::<BlockQ5_0>(896, m, n);
            q0::<BlockQ8_0>(896, m, n);
            kq::<BlockQ4K>(1024, m, n);
            kq::<BlockQ6K>(1024, m, n);
        }
    }
}
