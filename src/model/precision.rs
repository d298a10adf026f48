//! Numeric precision of the encoders' dense layers (`embed.precision`), and which kernel runs.
//!
//! `f32` is the reference (candle's f32 GEMM, checked against the Python models to cosine 0.9999).
//! `int8` quantises the weights of every dense layer at load and the activations per row on each
//! call (`ragbox_kernels::Int8Linear` on rten-gemm: AVX-512 VNNI, AVX2, Arm dot-product kernels
//! picked at run time). `auto`, the default, is int8 where the CPU multiplies int8 without
//! saturation (VNNI, Arm dot product) and the model runs on the CPU, else f32: docs/BENCHMARKS.md
//! holds the measurements and the quality gate that chose it.

use candle_core::Device;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// What the user asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    /// int8 where it is exact enough and fast (VNNI-class CPU), else f32.
    #[default]
    Auto,
    /// f32 throughout: the reference.
    F32,
    /// int8 weights and activations in the dense layers, i32 sums (CPU only).
    Int8,
}

impl Precision {
    /// The precision that runs on `device`: never `Auto`. int8 asked for on a GPU is an error
    /// that says what to do.
    pub fn resolve(self, device: &Device) -> Result<Precision> {
        match self {
            Precision::F32 => Ok(Precision::F32),
            Precision::Int8 if !device.is_cpu() => Err(Error::Invalid(
                "embed.precision = \"int8\" runs on the CPU only; set it to \"f32\" or \"auto\" to use the GPU".into(),
            )),
            Precision::Int8 => Ok(Precision::Int8),
            Precision::Auto if device.is_cpu() && !int8_kernel().saturates => Ok(Precision::Int8),
            Precision::Auto => Ok(Precision::F32),
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
}

/// The int8 kernel this CPU gets.
#[derive(Debug, Clone, Serialize)]
pub struct Int8Kernel {
    /// e.g. `avx512-int8 (u8 activations)`.
    pub name: String,
    /// True where pair sums can saturate (x86 without VNNI): activations then get 7 bits, and
    /// `auto` keeps f32.
    pub saturates: bool,
}

/// Asks rten-gemm which int8 kernel it picks on this CPU.
pub fn int8_kernel() -> Int8Kernel {
    let probe = ragbox_kernels::Int8Linear::new(&[0.0], 1, 1, None);
    Int8Kernel {
        name: probe.kernel_name(),
        saturates: probe.saturates(),
    }
}

/// What `doctor` says runs for `precision` on `device`.
pub fn describe(precision: Precision, device: &Device) -> String {
    match precision.resolve(device) {
        Ok(Precision::Int8) => format!(
            "int8 ({}) [asked: {}]",
            int8_kernel().name,
            precision.as_str()
        ),
        Ok(_) if device.is_cpu() => format!("f32 (candle gemm) [asked: {}]", precision.as_str()),
        Ok(_) => format!("f32 ({device:?}) [asked: {}]", precision.as_str()),
        Err(e) => format!("error: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_resolves_to_a_concrete_precision_and_follows_the_kernel() {
        let resolved = Precision::Auto.resolve(&Device::Cpu).unwrap();
        assert_ne!(resolved, Precision::Auto);
        assert_eq!(resolved == Precision::Int8, !int8_kernel().saturates);
        assert_eq!(
            Precision::F32.resolve(&Device::Cpu).unwrap(),
            Precision::F32
        );
        assert_eq!(
            Precision::Int8.resolve(&Device::Cpu).unwrap(),
            Precision::Int8
        );
        assert!(describe(Precision::Auto, &Device::Cpu).contains("[asked: auto]"));
    }

    #[test]
    fn config_names_round_trip() {
        for p in [Precision::Auto, Precision::F32, Precision::Int8] {
            let json = serde_json::to_string(&p).unwrap();
            assert_eq!(json, format!("\"{}\"", p.as_str()));
            assert_eq!(serde_json::from_str::<Precision>(&json).unwrap(), p);
        }
    }
}
