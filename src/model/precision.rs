//! Numeric precision of the encoders' dense layers (`embed.precision`), and which kernel runs.
//!
//! `f32` (the default) is the reference: candle's f32 GEMM, checked against the Python models to
//! cosine 0.9999. `int8` quantises every dense layer's weights at load (per output channel) and
//! the activations per row on each call (`ragbox_kernels::Int8Linear` on rten-gemm: AVX-512 VNNI,
//! AVX2, Arm dot-product kernels picked at run time): about twice as fast on this project's CPU,
//! but it does not pass the quality gate (golden cosine >= 0.999 per text: worst 0.996 on MiniLM),
//! so it is opt-in. docs/BENCHMARKS.md holds the measurements.

use candle_core::Device;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// What the user asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    /// f32 throughout: the reference.
    #[default]
    F32,
    /// int8 weights and activations in the dense layers, i32 sums (CPU only).
    Int8,
}

impl Precision {
    /// Checks that `device` can run this precision; int8 asked for on a GPU is an error that says
    /// what to do.
    pub fn resolve(self, device: &Device) -> Result<Precision> {
        match self {
            Precision::Int8 if !device.is_cpu() => Err(Error::Invalid(
                "embed.precision = \"int8\" runs on the CPU only; set it to \"f32\" to use the GPU".into(),
            )),
            p => Ok(p),
        }
    }

    /// The name used in config and reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Precision::F32 => "f32",
            Precision::Int8 => "int8",
        }
    }

    /// The identity of the vectors `model` makes at this precision, as stamped on an index and
    /// keyed in the embedding cache: the bare name for f32 (what every index before int8 holds),
    /// `name@int8` otherwise, so that vectors of two precisions never mix in one index.
    pub fn vector_identity(self, model: &str) -> String {
        match self {
            Precision::F32 => model.to_string(),
            p => format!("{model}@{}", p.as_str()),
        }
    }

    /// Splits a vector identity (or a model name given as `name@precision`) into the model name
    /// and the precision it names, if any.
    pub fn split_identity(name: &str) -> Result<(&str, Option<Precision>)> {
        match name.split_once('@') {
            None => Ok((name, None)),
            Some((model, "f32")) => Ok((model, Some(Precision::F32))),
            Some((model, "int8")) => Ok((model, Some(Precision::Int8))),
            Some((_, other)) => Err(Error::Invalid(format!("`{name}`: unknown precision `{other}` after `@` (use f32 or int8)"))),
        }
    }
}

/// The int8 kernel rten-gemm picks on this CPU, e.g. `x86_64-u8i8i32-avx512 (u8 activations)`
/// (7-bit activations where its pair sums could saturate: x86 without VNNI).
pub fn int8_kernel_name() -> String {
    ragbox_kernels::Int8Linear::new(&[0.0], 1, 1, None).kernel_name()
}

/// What `doctor` and `bench` say runs for `precision` on `device`.
pub fn describe(precision: Precision, device: &Device) -> String {
    match precision.resolve(device) {
        Ok(Precision::Int8) => format!("int8 ({})", int8_kernel_name()),
        Ok(_) if device.is_cpu() => "f32 (candle gemm)".to_string(),
        Ok(_) => format!("f32 ({device:?})"),
        Err(e) => format!("error: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cpu_runs_both_and_doctor_names_the_int8_kernel() {
        assert_eq!(Precision::default(), Precision::F32);
        assert_eq!(Precision::F32.resolve(&Device::Cpu).unwrap(), Precision::F32);
        assert_eq!(Precision::Int8.resolve(&Device::Cpu).unwrap(), Precision::Int8);
        let int8 = describe(Precision::Int8, &Device::Cpu);
        assert!(int8.starts_with("int8 (") && int8.contains(&int8_kernel_name()), "{int8}");
        assert_eq!(describe(Precision::F32, &Device::Cpu), "f32 (candle gemm)");
    }

    #[test]
    fn config_names_round_trip() {
        for p in [Precision::F32, Precision::Int8] {
            let json = serde_json::to_string(&p).unwrap();
            assert_eq!(json, format!("\"{}\"", p.as_str()));
            assert_eq!(serde_json::from_str::<Precision>(&json).unwrap(), p);
        }
        assert!(serde_json::from_str::<Precision>("\"bf16\"").is_err());
    }

    #[test]
    fn vector_identities_keep_f32_names_and_mark_int8() {
        assert_eq!(Precision::F32.vector_identity("all-minilm-l6-v2"), "all-minilm-l6-v2");
        assert_eq!(Precision::Int8.vector_identity("all-minilm-l6-v2"), "all-minilm-l6-v2@int8");
        for p in [Precision::F32, Precision::Int8] {
            let id = format!("m@{}", p.as_str());
            assert_eq!(Precision::split_identity(&id).unwrap(), ("m", Some(p)));
        }
        assert_eq!(Precision::split_identity("nomic-embed-text-v1.5").unwrap(), ("nomic-embed-text-v1.5", None));
        let err = Precision::split_identity("m@bf16").unwrap_err().to_string();
        assert!(err.contains("f32 or int8"), "{err}");
    }
}
