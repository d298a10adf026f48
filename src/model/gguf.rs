//! Reading GGUF files into candle tensors under the names candle's model code expects.

use std::collections::HashMap;
use std::fs::File;
use std::io::BufReader;
use std::path::Path;

use candle_core::quantized::gguf_file;
use candle_core::{DType, Device, Tensor};

use crate::error::{Error, Result};

/// A GGUF file's metadata and tensors, dequantised.
pub struct GgufTensors {
    /// `general.architecture`.
    pub architecture: String,
    /// Metadata key/values.
    pub metadata: HashMap<String, gguf_file::Value>,
    /// Tensors by their renamed name, in `dtype`.
    pub tensors: HashMap<String, Tensor>,
}

/// Reads a GGUF file whose `general.architecture` must be `expected_arch`, renaming each tensor
/// with `rename` (tensors it maps to `None` are dropped) and converting to `dtype`.
pub fn load_gguf(
    path: &Path,
    expected_arch: &str,
    rename: impl Fn(&str) -> Option<String>,
    dtype: DType,
    device: &Device,
) -> Result<GgufTensors> {
    let format_err = |reason: String| Error::ModelFormat { model: path.display().to_string(), reason };
    let mut reader = BufReader::new(File::open(path).map_err(Error::path(path))?);
    let content = gguf_file::Content::read(&mut reader)
        .map_err(|e| format_err(format!("not a readable GGUF file: {e}")))?;
    let architecture = content
        .metadata
        .get("general.architecture")
        .and_then(|v| v.to_string().ok())
        .cloned()
        .unwrap_or_default();
    if architecture != expected_arch {
        return Err(format_err(format!(
            "GGUF architecture is `{architecture}`, expected `{expected_arch}`: wrong model file"
        )));
    }
    let mut tensors = HashMap::new();
    for name in content.tensor_infos.keys() {
        let Some(new_name) = rename(name) else { continue };
        let q = content.tensor(&mut reader, name, device)?;
        tensors.insert(new_name, q.dequantize(device)?.to_dtype(dtype)?);
    }
    Ok(GgufTensors { architecture, metadata: content.metadata, tensors })
}
