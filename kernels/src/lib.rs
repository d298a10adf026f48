//! ragbox's CPU kernels for quantised encoder inference: int8 dense layers, the encoders'
//! attention in one pass, and the element-wise work around them (GELU, the masked softmax,
//! SwiGLU's gate) vectorised; and for the local LLM, products on GGML's weight blocks (`ggml`:
//! every product of the formats the models use, one row, a few or a prompt's), which candle
//! hands over through its matmul hook; and the OCR recognizer's best class per time step
//! (`best_per_row`).
//!
//! A separate crate for one reason: ragbox's tuned dev profile (the one tests and the README's
//! first command build) compiles every dependency at opt-level 3 and ragbox itself at 0 to keep
//! builds short; the per-element loops here (quantising activations, the dequantising epilogue
//! with GELU) must be vectorised or they undo what int8 gains: even at opt-level 3, overflow
//! checks alone kept the GELU pass scalar (31 ms instead of 3.7 ms for a 2048×1536 output), so
//! this crate is built without them in dev too (Cargo.toml). The rest of ragbox sits on the
//! floors above (docs/ARCHITECTURE.md). The int8 matrix multiplication is our own AVX-512 VNNI
//! tile where the CPU has it (`vnni.rs`: 2.6-3.4x rten-gemm's kernel on BERT's shapes), our AVX2
//! tile on other x86 CPUs (`avx2.rs`: 16-bit products, so the activations keep 8 bits where
//! rten-gemm's AVX2 kernel keeps 7), and rten-gemm, a maintained int8 GEMM with Arm
//! dot-product/i8mm and generic kernels chosen at run time, everywhere else.
//!
//! ```
//! use ragbox_kernels::{Activation, Int8Linear};
//! // y = x · Wᵀ + b for a (2 × 3) input and a (4 out × 3 in) weight.
//! let w = [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0];
//! let layer = Int8Linear::new(&w, 4, 3, Some(&[0.0, 0.0, 0.0, 1.0]));
//! let mut y = vec![0.0; 8];
//! layer.forward(&[1.0, 2.0, 3.0, -1.0, 0.5, 0.25], 2, &mut y, Activation::None);
//! assert!((y[3] - 7.0).abs() < 0.05 && (y[4] + 1.0).abs() < 0.02);
//! ```

mod argmax;
mod attention;
#[cfg(target_arch = "x86_64")]
mod avx2;
mod gelu;
pub mod ggml;
mod int8;
#[cfg(target_arch = "x86_64")]
mod panels;
mod softmax;
mod swiglu;
#[cfg(target_arch = "x86_64")]
mod vnni;

#[cfg(test)]
mod testing {
    /// Seeded values in [-1, 1): the kernels' tests' inputs.
    pub(crate) fn values(n: usize, seed: u64) -> Vec<f32> {
        let mut rng = fastrand::Rng::with_seed(seed);
        (0..n).map(|_| rng.f32() * 2.0 - 1.0).collect()
    }
}

pub use argmax::best_per_row;
pub use attention::attention;
pub use int8::{profile_parts, Activation, Int8Linear, Kernel};
pub use swiglu::swiglu;
