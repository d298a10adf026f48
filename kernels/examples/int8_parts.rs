//! Times one int8 dense layer of BERT size on rten-gemm's kernel and on ours (the fastest this CPU
//! has), each split into its parts:
//! `cargo run -p ragbox-kernels --example int8_parts -- [ROWS IN OUT]` (the dev profile builds this
//! crate optimised).
use std::time::Instant;

use ragbox_kernels::{Activation, Int8Linear, Kernel};

fn main() {
    let args: Vec<usize> = std::env::args().skip(1).map(|a| a.parse().expect("numbers")).collect();
    let (rows, inputs, outputs) = match args[..] {
        [r, i, o] => (r, i, o),
        _ => (2048, 384, 1536),
    };
    let w: Vec<f32> = (0..inputs * outputs).map(|i| ((i * 7919) % 1000) as f32 / 1000.0 - 0.5).collect();
    let x: Vec<f32> = (0..rows * inputs).map(|i| ((i * 104729) % 1000) as f32 / 500.0 - 1.0).collect();
    let mut y = vec![0f32; rows * outputs];
    for kernel in [Kernel::Portable, Kernel::Fastest] {
        let layer = Int8Linear::on(kernel, &w, outputs, inputs, None);
        for act in [Activation::None, Activation::GeluErf] {
            layer.forward(&x, rows, &mut y, act);
            let runs = 20;
            let t = Instant::now();
            for _ in 0..runs {
                layer.forward(&x, rows, &mut y, act);
            }
            let s = t.elapsed().as_secs_f64() / runs as f64;
            let gmacs = (rows * inputs * outputs) as f64 / s / 1e9;
            println!("{rows}×{inputs}×{outputs} {act:?}: {:.2} ms, {gmacs:.1} GMAC/s ({})", s * 1e3, layer.kernel_name());
        }
        ragbox_kernels::profile_parts(&layer, &x, rows, &mut y);
    }
}
