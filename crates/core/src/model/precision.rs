//! Numeric precision of the encoders' dense layers (`embed.precision`), and which kernel runs.
//!
//! `f32` is the reference: candle's f32 GEMM, checked against the Python models to cosine
//! 0.9999. `int8` quantises every dense layer's weights at load (per output channel) and the
//! activations per row on each call, outliers set aside (`ragbox_kernels::Int8Linear`: our
//! AVX-512 VNNI tile where the CPU has it, rten-gemm's AVX2, Arm dot-product or generic kernels
//! elsewhere, picked at run time), with attention in one fused pass: about five times as fast as
//! f32 on this project's CPU. `auto` (the default) runs each model at the precision its
//! manifest entry names (`auto_precision`): the fastest one that passed the golden quality gate
//! (cosine >= 0.999 per text to the reference; tests/integration/golden.rs checks each claim both
//! ways), and f32 for the rest and on a GPU. Measured: nomic-embed int8 worst 0.9994, MiniLM 0.9992
//! (both pass; the cross-encoder's stand-in does not). docs/BENCHMARKS.md holds the measurements.

use candle_core::Device;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// What the user asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    /// Per model: the precision its manifest entry says passed the quality gate, on the CPU;
    /// f32 otherwise.
    #[default]
    Auto,
    /// f32 throughout: the reference.
    F32,
    /// int8 weights and activations in the dense layers, i32 sums (CPU only).
    Int8,
}

impl Precision {
    /// The precision a model runs at on `device`: `auto` becomes `gated` (the model's manifest
    /// `auto_precision`) on the CPU and f32 elsewhere; int8 asked for on a GPU is an error that
    /// says what to do. Never returns `Auto`.
    pub fn resolve(self, device: &Device, gated: Option<Precision>) -> Result<Precision> {
        match self {
            Precision::Int8 if !device.is_cpu() => Err(Error::Invalid(
                "embed.precision = \"int8\" runs on the CPU only; set it to \"f32\" or \"auto\" to use the GPU".into(),
            )),
            Precision::Auto if device.is_cpu() => Ok(match gated {
                Some(Precision::Int8) => Precision::Int8,
                _ => Precision::F32,
            }),
            Precision::Auto => Ok(Precision::F32),
            p => Ok(p),
        }
    }

    /// The name used in config and reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Precision::Auto => "auto",
            Precision::F32 => "f32",
            Precision::Int8 => "int8",
        }
    }

    /// The identity of the vectors `model` makes at this (resolved) precision, as stamped on an
    /// index and keyed in the embedding cache: the bare name for f32 (what every index before
    /// int8 holds), `name@int8` otherwise, so that vectors of two precisions never mix in one
    /// index.
    pub fn vector_identity(self, model: &str) -> String {
        match self {
            Precision::F32 | Precision::Auto => model.to_string(),
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

/// The int8 GEMM that runs on this CPU: ours on x86 (`ragbox avx512-vnni 6x64 (u8
/// activations)`, or the AVX2 tile without VNNI), or rten-gemm's name for its kernel elsewhere.
pub fn int8_kernel_name() -> String {
    ragbox_kernels::Int8Linear::new(&[0.0], 1, 1, None).kernel_name()
}

/// What `doctor` and `bench` say runs for `precision` on `device`.
pub fn describe(precision: Precision, device: &Device) -> String {
    match precision {
        Precision::Auto if device.is_cpu() => format!(
            "auto: {} for models that passed the quality gate at int8, {} for the rest",
            describe(Precision::Int8, device),
            describe(Precision::F32, device)
        ),
        _ => match precision.resolve(device, None) {
            Ok(Precision::Int8) => format!("int8 ({})", int8_kernel_name()),
            Ok(_) if device.is_cpu() => "f32 (candle gemm)".to_string(),
            Ok(_) => format!("f32 ({device:?})"),
            Err(e) => format!("error: {e}"),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cpu_runs_both_and_auto_follows_the_models_gate() {
        assert_eq!(Precision::default(), Precision::Auto);
        for gated in [None, Some(Precision::F32), Some(Precision::Int8)] {
            assert_eq!(Precision::F32.resolve(&Device::Cpu, gated).unwrap(), Precision::F32);
            assert_eq!(Precision::Int8.resolve(&Device::Cpu, gated).unwrap(), Precision::Int8);
        }
        assert_eq!(Precision::Auto.resolve(&Device::Cpu, Some(Precision::Int8)).unwrap(), Precision::Int8);
        assert_eq!(Precision::Auto.resolve(&Device::Cpu, None).unwrap(), Precision::F32);
        let int8 = describe(Precision::Int8, &Device::Cpu);
        assert!(int8.starts_with("int8 (") && int8.contains(&int8_kernel_name()), "{int8}");
        assert_eq!(describe(Precision::F32, &Device::Cpu), "f32 (candle gemm)");
        let auto = describe(Precision::Auto, &Device::Cpu);
        assert!(auto.starts_with("auto: ") && auto.contains(&int8) && auto.contains("f32 (candle gemm)"), "{auto}");
    }

    #[test]
    fn config_names_round_trip() {
        for p in [Precision::Auto, Precision::F32, Precision::Int8] {
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
