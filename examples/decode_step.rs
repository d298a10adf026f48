//! One decoding step's quantised matmuls (one activation row against every weight of
//! Qwen2.5-Coder-0.5B's Q4_K_M file: 24 layers of Q5_0 q/k/o and gate/up, Q8_0 v, Q4_K and Q6_K
//! down, the 151,936-row Q8_0 output), each layer's weights distinct so that they come from memory
//! as in a real step, timed on candle's `QMatMul` (as mistralrs calls it), on ragbox's kernels
//! (`ragbox_kernels::ggml`, every kernel this CPU runs) and on `QMatMul` through ragbox's hook,
//! with the results compared bit for bit.
//!
//! ```text
//! cargo build --offline --workspace --features testing --example decode_step
//! RAYON_NUM_THREADS=2 target/debug/examples/decode_step [--steps 60] [--rows 1]
//! ```
//!
//! `--rows N` times a prompt's products instead: N rows against every layer's weights (the output
//! table, which a prompt applies to its last row alone, left out), on candle's `QMatMul`, on
//! `ggml::gemm` and `gemm_k` (N ≥ 32, AVX-512 VNNI) or on each `ggml::tiles` kernel this CPU runs
//! (fewer rows, or any CPU), and through the hook.
//!
//! The weights are random (about 420 MB of them); only the shapes and formats are the model's.

use std::sync::Arc;
use std::time::Instant;

use candle_core::quantized::k_quants::{BlockQ8K, BlockQ8_0, GgmlType};
use candle_core::quantized::{GgmlDType, QMatMul, QTensor};
use candle_core::{Device, Module, Tensor};
use ragbox_kernels::ggml::{gemm, gemm_k, gemv_k, gemv_with, tiles_k_with, tiles_with, BlockFormat, GemvKernel, KFormat, TileKernel};

/// A weight matrix of `n` rows of `k` inputs, quantised by candle.
struct Weights {
    k: usize,
    n: usize,
    dtype: GgmlDType,
    tensor: Arc<QTensor>,
    matmul: QMatMul,
}

fn values(count: usize, rng: &mut fastrand::Rng) -> Vec<f32> {
    (0..count).map(|_| rng.f32() * 2.0 - 1.0).collect()
}

fn weights(dtype: GgmlDType, k: usize, n: usize, seed: &mut fastrand::Rng) -> Weights {
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
    /// `ragbox_kernels::ggml::tiles` and `tiles_k` called directly, on one kernel.
    Tiles(TileKernel),
    /// candle's `QMatMul` with ragbox's hook installed (what `ragbox ask` runs).
    Hook,
}

/// The rows `x_values` (each `INPUTS` wide; the first `w.k` of each used; `x` holds them as
/// contiguous tensors of 896 and of `INPUTS` columns) times `w`, into `dst`.
fn product(path: Path, w: &Weights, x: &[Tensor; 2], x_values: &[f32], dst: &mut Vec<f32>) {
    let rows = x_values.len() / INPUTS;
    if let Path::Tiles(kernel) = path {
        dst.resize(rows * w.n, 0.0);
        let data = w.tensor.data().expect("the weights' bytes");
        match w.dtype {
            GgmlDType::Q4K | GgmlDType::Q6K => {
                let format = if w.dtype == GgmlDType::Q4K { KFormat::Q4K } else { KFormat::Q6K };
                let mut lhs = vec![BlockQ8K::zeros(); rows * w.k / 256];
                for (row, blocks) in x_values.chunks(INPUTS).zip(lhs.chunks_mut(w.k / 256)) {
                    BlockQ8K::from_float(&row[..w.k], blocks);
                }
                tiles_k_with(kernel, format, rows, w.k / 256, bytes(&lhs), &data, dst);
            }
            dtype => {
                let format = match dtype {
                    GgmlDType::Q4_0 => BlockFormat::Q4_0,
                    GgmlDType::Q5_0 => BlockFormat::Q5_0,
                    GgmlDType::Q8_0 => BlockFormat::Q8_0,
                    other => panic!("no ragbox kernel for {other:?}"),
                };
                let mut lhs = vec![BlockQ8_0::zeros(); rows * w.k / 32];
                for (row, blocks) in x_values.chunks(INPUTS).zip(lhs.chunks_mut(w.k / 32)) {
                    BlockQ8_0::from_float(&row[..w.k], blocks);
                }
                tiles_with(kernel, format, rows, w.k / 32, bytes(&lhs), &data, dst);
            }
        }
        return;
    }
    if let Path::Ragbox(kernel) = path {
        dst.resize(rows * w.n, 0.0);
        let data = w.tensor.data().expect("the weights' bytes");
        let format = match w.dtype {
            GgmlDType::Q4_0 => Some(BlockFormat::Q4_0),
            GgmlDType::Q5_0 => Some(BlockFormat::Q5_0),
            GgmlDType::Q8_0 => Some(BlockFormat::Q8_0),
            _ => None,
        };
        if let Some(format) = format {
            let mut lhs = vec![BlockQ8_0::zeros(); rows * w.k / 32];
            for (row, blocks) in x_values.chunks(INPUTS).zip(lhs.chunks_mut(w.k / 32)) {
                BlockQ8_0::from_float(&row[..w.k], blocks);
            }
            if rows == 1 {
                gemv_with(kernel, format, w.k / 32, bytes(&lhs), &data, dst);
            } else {
                assert!(gemm(format, rows, w.k / 32, bytes(&lhs), &data, dst), "gemm runs on AVX-512 VNNI only");
            }
            return;
        }
        let format = match w.dtype {
            GgmlDType::Q4K => KFormat::Q4K,
            GgmlDType::Q6K => KFormat::Q6K,
            other => panic!("no ragbox kernel for {other:?}"),
        };
        let mut lhs = vec![BlockQ8K::zeros(); rows * w.k / 256];
        for (row, blocks) in x_values.chunks(INPUTS).zip(lhs.chunks_mut(w.k / 256)) {
            BlockQ8K::from_float(&row[..w.k], blocks);
        }
        if rows == 1 {
            assert!(gemv_k(format, w.k / 256, bytes(&lhs), &data, dst));
        } else {
            assert!(gemm_k(format, rows, w.k / 256, bytes(&lhs), &data, dst), "gemm_k runs on AVX-512 VNNI only");
        }
        return;
    }
    let x = &x[usize::from(w.k == INPUTS)];
    *dst = w.matmul.forward(x).expect("candle's matmul").flatten_all().expect("flat").to_vec1().expect("values");
}

/// The widest input of the model's matrices (`ffn_down`'s).
const INPUTS: usize = 4864;

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
fn step(model: &Model, path: Path, x: &[Tensor; 2], xv: &[f32], dst: &mut Vec<f32>) -> [f64; 3] {
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
    if xv.len() == INPUTS {
        // The output table is applied to the last row alone (a prompt's logits are the last token's).
        product(path, &model.output, x, xv, dst);
    }
    let t3 = Instant::now();
    [(t1 - t0).as_secs_f64(), (t2 - t1).as_secs_f64(), (t3 - t2).as_secs_f64()]
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let flag = |name: &str, default: usize| -> usize { args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).and_then(|s| s.parse().ok()).unwrap_or(default) };
    let steps = flag("--steps", 60);
    let rows = flag("--rows", 1);
    let mut seed = fastrand::Rng::with_seed(0x9e37_79b9_7f4a_7c15);
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
    let xv = values(rows * INPUTS, &mut seed);
    let wide = Tensor::from_vec(xv.clone(), (rows, INPUTS), &Device::Cpu).expect("a tensor");
    let x = [wide.narrow(1, 0, 896).and_then(|t| t.contiguous()).expect("the first 896 inputs"), wide];
    let mut paths = vec![Path::Candle];
    if rows == 1 {
        paths.extend(GemvKernel::available().into_iter().map(Path::Ragbox));
    } else {
        if rows >= ragbox_kernels::ggml::GEMM_MIN_ROWS && GemvKernel::detect() == Some(GemvKernel::Avx512Vnni) {
            paths.push(Path::Ragbox(GemvKernel::Avx512Vnni));
        }
        paths.extend(TileKernel::available().into_iter().map(Path::Tiles));
    }
    paths.push(Path::Hook);
    let mut reference = Vec::new();
    println!(
        "| path ({} rayon threads, {rows} row{}) | 32-element formats, ms | k-quants, ms | output, ms | step, ms | last product against candle's |",
        rayon::current_num_threads(),
        if rows == 1 { "" } else { "s" }
    );
    println!("|---|---|---|---|---|---|");
    for path in paths {
        if path == Path::Hook {
            ragbox_core::generate::kernels::install();
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
            let worst = dst.iter().zip(&reference).map(|(a, b)| (a - b).abs() / b.abs().max(1.0)).fold(0f32, f32::max);
            format!("{same}/{} bit-identical, worst relative difference {worst:.1e}", dst.len())
        };
        let ms = |t: f64| t / steps as f64 * 1e3;
        let name = match path {
            Path::Candle => "candle's QMatMul without the hook (upstream's vec_dot per row and column)".to_string(),
            Path::Ragbox(kernel) if rows == 1 => format!("{} (k-quants: ragbox avx2), called directly", kernel.name()),
            Path::Ragbox(_) => "ragbox gemm and gemm_k (avx512-vnni), called directly (the activations quantised here, at opt-level 0)".to_string(),
            Path::Tiles(kernel) => format!("{}, called directly (the activations quantised here, at opt-level 0)", kernel.name()),
            Path::Hook => "candle's QMatMul through ragbox's hook (what `ragbox ask` runs)".to_string(),
        };
        println!("| {name} | {:.2} | {:.2} | {:.2} | {:.2} | {same} |", ms(total[0]), ms(total[1]), ms(total[2]), ms(total.iter().sum()));
    }
}
