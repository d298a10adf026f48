//! Device choice, made once: CPU by default, CUDA or Metal when compiled in and asked for.

use candle_core::Device;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// Which device the user asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum DeviceChoice {
    /// The CPU (default; what CI proves).
    #[default]
    Cpu,
    /// A GPU if one was compiled in and is present, else the CPU.
    Auto,
    /// CUDA device 0 (needs `--features cuda`).
    Cuda,
    /// The Metal device (needs `--features metal`).
    Metal,
}

/// Opens the device for `choice`.
pub fn device(choice: DeviceChoice) -> Result<Device> {
    match choice {
        DeviceChoice::Cpu => Ok(Device::Cpu),
        DeviceChoice::Cuda if !cfg!(feature = "cuda") => Err(Error::NotCompiled("cuda")),
        DeviceChoice::Metal if !cfg!(feature = "metal") => Err(Error::NotCompiled("metal")),
        DeviceChoice::Cuda => Ok(Device::new_cuda(0)?),
        DeviceChoice::Metal => Ok(Device::new_metal(0)?),
        DeviceChoice::Auto => {
            if cfg!(feature = "cuda") {
                if let Ok(d) = Device::new_cuda(0) {
                    return Ok(d);
                }
            }
            if cfg!(feature = "metal") {
                if let Ok(d) = Device::new_metal(0) {
                    return Ok(d);
                }
            }
            Ok(Device::Cpu)
        }
    }
}

/// A short human name for a device.
pub fn describe(device: &Device) -> String {
    match device {
        Device::Cpu => format!("cpu ({} threads)", candle_core::utils::get_num_threads()),
        Device::Cuda(_) => "cuda:0".to_string(),
        Device::Metal(_) => "metal:0".to_string(),
    }
}

/// Compiled-in acceleration features.
pub fn compiled_features() -> Vec<&'static str> {
    let mut f = vec!["cpu"];
    if cfg!(feature = "cuda") {
        f.push("cuda");
    }
    if cfg!(feature = "metal") {
        f.push("metal");
    }
    if cfg!(feature = "llm") {
        f.push("llm");
    }
    if cfg!(feature = "claude") {
        f.push("claude");
    }
    f
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_always_opens_and_missing_backends_say_how_to_build() {
        assert!(device(DeviceChoice::Cpu).unwrap().is_cpu());
        if !cfg!(feature = "cuda") {
            let e = device(DeviceChoice::Cuda).unwrap_err().to_string();
            assert!(e.contains("--features cuda"), "{e}");
        }
    }
}
