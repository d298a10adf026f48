//! One decoding step's quantised matmuls (one activation row against every weight of
//! Qwen2.5-Coder-0.5B's Q4_K_M file: 24 layers of Q5_0 q/k/o and gate/up, Q8_0 v, Q4_K and Q6_K
//! down, the 151,936-row Q8_0 output), each layer's weights distinct so that they come from memory
//! as in a real step, timed on candle's `QMatMul` (as mistralrs calls it), on ragbox's kernels
//! (`ragbox_kernels::ggml`, every kernel this CPU runs) and on `QMatMul` through ragbox's hook,
//! with the results compared bit for bit.
//!
//! ```text
//! cargo build --offline --example decode_step
//! RAYON_NUM_THREADS=2 target/debug/examples/decode_step
//! ```
//!
//! The weights are random (about 420 MB of them); only the shapes and formats are the model's.

use std::sync::Arc;
use std::time::Instant;

use candle_core::quantized::k_quants::{BlockQ8K, BlockQ8_0, GgmlType};
use candle_core::quantized::{GgmlDType, QMatMul, QTensor};
use candle_core::{Device, Module, Tensor};
use ragbox_kernels::ggml::{gemv_k, gemv_with, BlockFormat, GemvKernel, KFormat};

/// A weight matrix of `n` rows of `k` inputs, quantised by candle.
struct Weights {
    k: usize,
    n: usize,
    dtype: GgmlDType,
    tensor: Arc<QTensor>,
    matmul: QMatMul,
}

fn values(count: usize, seed: &mut u64) -> Vec<f32> {
    (0..count)
        .map(|_| {
            *seed ^= *seed << 13;
            *seed ^= *seed >> 7;
            *seed ^= *seed << 17;
            (*seed >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        })
        .collect()
}

fn weights(dtype: GgmlDType, k: usize, n: usize, seed: &mut u64) -> Weights {
    let dense = Tensor::from_vec(values(k * n, seed), (n, k), &Device::Cpu).expect("a tensor");
    let tensor = Arc::new(QTensor::quantize(&dense, dtype).expect("quantised"));
    let matmul = QMatMul::from_arc(tensor.clone()).expect("a QMatMul");
    Weights { k, n, dtype, tensor, matmul }
}

fn bytes<T>(blocks: &[T]) -> &[u8] {
    // SAFETY: GGML blocks are plain repr(C) data.
    unsafe { std::slice::from_raw_parts(blocks.as_ptr() as *const u8, std::mem::size_of_val(blocks)) }
}

/// Which path a product takes.
#[derive(Clone, Copy, PartialEq)]
enum Path {
    /// candle's `QMatMul`, as mistralrs calls it, before the hook is installed.
    Candle,
    /// `ragbox_kernels::ggml` called directly, on one kernel.
    Ragbox(GemvKernel),
    /// candle's `QMatMul` with ragbox's hook installed (what `ragbox ask` runs).
    Hook,
}

fn product(path: Path, w: &Weights, x: &Tensor, x_values: &[f32], dst: &mut Vec<f32>) {
    let x_values = &x_values[..w.k];
    if let Path::Ragbox(kernel) = path {
        dst.resize(w.n, 0.0);
        let data = w.tensor.data().expect("the weights' bytes");
        let format = match w.dtype {
            GgmlDType::Q4_0 => Some(BlockFormat::Q4_0),
            GgmlDType::Q5_0 => Some(BlockFormat::Q5_0),
            GgmlDType::Q8_0 => Some(BlockFormat::Q8_0),
            _ => None,
        };
        if let Some(format) = format {
            let mut lhs = vec![BlockQ8_0::zeros(); w.k / 32];
            BlockQ8_0::from_float(x_values, &mut lhs);
            gemv_with(kernel, format, w.k / 32, bytes(&lhs), &data, dst);
            return;
        }
        let format = match w.dtype {
            GgmlDType::Q4K => KFormat::Q4K,
            GgmlDType::Q6K => KFormat::Q6K,
            other => panic!("no ragbox kernel for {other:?}"),
        };
        let mut lhs = vec![BlockQ8K::zeros(); w.k / 256];
        BlockQ8K::from_float(x_values, &mut lhs);
        assert!(gemv_k(format, w.k / 256, bytes(&lhs), &data, dst));
        return;
    }
    let x = x.narrow(1, 0, w.k).expect("the row's inputs");
    *dst = w.matmul.forward(&x).expect("candle's matmul").flatten_all().expect("flat").to_vec1().expect("values");
}

struct Model {
    q: Vec<Weights>,
    k: Vec<Weights>,
    v: Vec<Weights>,
    o: Vec<Weights>,
    gate: Vec<Weights>,
    up: Vec<Weights>,
    down6: Vec<Weights>,
    down4: Vec<Weights>,
    output: Weights,
}

/// One step: (32-element formats, k-quants, output) in seconds, and the output's values.
fn step(model: &Model, path: Path, x: &Tensor, xv: &[f32], dst: &mut Vec<f32>) -> [f64; 3] {
    let t0 = Instant::now();
    for l in 0..model.q.len() {
        product(path, &model.q[l], x, xv, dst);
        product(path, &model.k[l], x, xv, dst);
        product(path, &model.v[l], x, xv, dst);
        product(path, &model.o[l], x, xv, dst);
        product(path, &model.gate[l], x, xv, dst);
        product(path, &model.up[l], x, xv, dst);
    }
    let t1 = Instant::now();
    for l in 0..model.down6.len() {
        product(path, &model.down6[l], x, xv, dst);
        product(path, &model.down4[l], x, xv, dst);
    }
    let t2 = Instant::now();
    product(path, &model.output, x, xv, dst);
    let t3 = Instant::now();
    [(t1 - t0).as_secs_f64(), (t2 - t1).as_secs_f64(), (t3 - t2).as_secs_f64()]
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let steps: usize = args.iter().position(|a| a == "--steps").and_then(|i| args.get(i + 1)).and_then(|s| s.parse().ok()).unwrap_or(60);
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let layers = 24;
    eprintln!("making random weights of the 0.5B model's shapes ...");
    let model = Model {
        q: (0..layers).map(|_| weights(GgmlDType::Q5_0, 896, 896, &mut seed)).collect(),
        k: (0..layers).map(|_| weights(GgmlDType::Q5_0, 896, 128, &mut seed)).collect(),
        v: (0..layers).map(|_| weights(GgmlDType::Q8_0, 896, 128, &mut seed)).collect(),
        o: (0..layers).map(|_| weights(GgmlDType::Q5_0, 896, 896, &mut seed)).collect(),
        gate: (0..layers).map(|_| weights(GgmlDType::Q5_0, 896, 4864, &mut seed)).collect(),
        up: (0..layers).map(|_| weights(GgmlDType::Q5_0, 896, 4864, &mut seed)).collect(),
        down6: (0..layers / 2).map(|_| weights(GgmlDType::Q6K, 4864, 896, &mut seed)).collect(),
        down4: (0..layers / 2).map(|_| weights(GgmlDType::Q4K, 4864, 896, &mut seed)).collect(),
        output: weights(GgmlDType::Q8_0, 896, 151_936, &mut seed),
    };
    let xv = values(4864, &mut seed);
    let x = Tensor::from_vec(xv.clone(), (1, 4864), &Device::Cpu).expect("a tensor");
    let mut paths = vec![Path::Candle];
    paths.extend(GemvKernel::available().into_iter().map(Path::Ragbox));
    paths.push(Path::Hook);
    let mut reference = Vec::new();
    println!("| path ({} rayon threads) | 32-element formats, ms | k-quants, ms | output, ms | step, ms | output bit-identical |", rayon::current_num_threads());
    println!("|---|---|---|---|---|---|");
    for path in paths {
        if path == Path::Hook {
            ragbox::generate::kernels::install();
        }
        let mut dst = Vec::new();
        let mut total = [0f64; 3];
        for s in 0..steps + 3 {
            let t = step(&model, path, &x, &xv, &mut dst);
            if s >= 3 {
                for (total, t) in total.iter_mut().zip(t) {
                    *total += t;
                }
            }
        }
        let same = if path == Path::Candle {
            reference = dst.clone();
            "(reference)".to_string()
        } else {
            let same = dst.iter().zip(&reference).filter(|(a, b)| a.to_bits() == b.to_bits()).count();
            format!("{same}/{}", dst.len())
        };
        let ms = |t: f64| t / steps as f64 * 1e3;
        let name = match path {
            Path::Candle => "candle's QMatMul (patched: one-row tiles, vec_dot)".to_string(),
            Path::Ragbox(kernel) => format!("{} (k-quants: ragbox avx2), called directly", kernel.name()),
            Path::Hook => "candle's QMatMul through ragbox's hook (what `ragbox ask` runs)".to_string(),
        };
        println!("| {name} | {:.2} | {:.2} | {:.2} | {:.2} | {same} |", ms(total[0]), ms(total[1]), ms(total[2]), ms(total.iter().sum()));
    }
}
