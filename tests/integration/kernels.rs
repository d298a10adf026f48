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
        // 43 columns fill neither the 4-wide (AVX-512 VNNI) nor the 3-wide tiles (AVX2, AVX-VNNI).
        for (m, n) in [(1, 40), (3, 40), (70, 40), (70, 43)] {
            check(dtype, k, n, m);
        }
    }
}
