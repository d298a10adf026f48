//! Reading GGUF files into candle tensors under the names candle's model code expects.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
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

/// A GGUF file's `general.architecture`, read from the head of its metadata and no further
/// (`None` when the file names none). Loading a chat model reads its metadata once more
/// anyway, and a Qwen2 file's vocabulary is 450,000 values: reading them all only for this key
/// cost the load ~0.2 s. The key is the first one a converter writes; any before it are skipped.
pub fn read_architecture(reader: &mut impl BufRead) -> std::io::Result<Option<String>> {
    let head = GgufHead::read(reader)?;
    for _ in 0..head.kv_count {
        let key = head.string(reader)?;
        let value_type = head.u32(reader)?;
        if key == "general.architecture" && value_type == GGUF_STRING {
            return head.string(reader).map(Some);
        }
        head.skip_value(reader, value_type)?;
    }
    Ok(None)
}

/// GGUF's value type of a string.
const GGUF_STRING: u32 = 8;
/// GGUF's value type of an array.
const GGUF_ARRAY: u32 = 9;

/// The version-dependent widths of a GGUF file's metadata, as its header gives them.
struct GgufHead {
    /// Version 1 writes lengths and counts as u32, later versions as u64.
    wide: bool,
    kv_count: u64,
}

impl GgufHead {
    fn read(reader: &mut impl BufRead) -> std::io::Result<Self> {
        let mut magic = [0u8; 4];
        reader.read_exact(&mut magic)?;
        if &magic != b"GGUF" {
            return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, "no GGUF magic"));
        }
        let mut head = GgufHead { wide: true, kv_count: 0 };
        let version = head.u32(reader)?;
        head.wide = version >= 2;
        let _tensor_count = head.count(reader)?;
        head.kv_count = head.count(reader)?;
        Ok(head)
    }

    fn u32(&self, reader: &mut impl Read) -> std::io::Result<u32> {
        let mut bytes = [0u8; 4];
        reader.read_exact(&mut bytes)?;
        Ok(u32::from_le_bytes(bytes))
    }

    fn count(&self, reader: &mut impl Read) -> std::io::Result<u64> {
        if !self.wide {
            return self.u32(reader).map(u64::from);
        }
        let mut bytes = [0u8; 8];
        reader.read_exact(&mut bytes)?;
        Ok(u64::from_le_bytes(bytes))
    }

    fn string(&self, reader: &mut impl Read) -> std::io::Result<String> {
        let len = self.count(reader)?;
        let mut bytes = Vec::new();
        reader.by_ref().take(len).read_to_end(&mut bytes)?;
        if bytes.len() as u64 != len {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    fn skip(&self, reader: &mut impl Read, len: u64) -> std::io::Result<()> {
        if std::io::copy(&mut reader.by_ref().take(len), &mut std::io::sink())? != len {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        Ok(())
    }

    fn skip_value(&self, reader: &mut impl Read, value_type: u32) -> std::io::Result<()> {
        match value_type {
            GGUF_STRING => {
                let len = self.count(reader)?;
                self.skip(reader, len)
            }
            GGUF_ARRAY => {
                let element_type = self.u32(reader)?;
                let n = self.count(reader)?;
                match scalar_width(element_type) {
                    Some(width) => self.skip(reader, n.saturating_mul(width)),
                    None => (0..n).try_for_each(|_| self.skip_value(reader, element_type)),
                }
            }
            other => match scalar_width(other) {
                Some(width) => self.skip(reader, width),
                None => Err(std::io::Error::new(std::io::ErrorKind::InvalidData, format!("unknown GGUF value type {other}"))),
            },
        }
    }
}

/// The bytes of one GGUF scalar of `value_type`; `None` for strings, arrays and unknown types.
fn scalar_width(value_type: u32) -> Option<u64> {
    match value_type {
        0 | 1 | 7 => Some(1),    // u8, i8, bool
        2 | 3 => Some(2),        // u16, i16
        4 | 5 | 6 => Some(4),    // u32, i32, f32
        10 | 11 | 12 => Some(8), // u64, i64, f64
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A GGUF v3 head with `kvs` (key, type, value bytes) as its metadata.
    fn gguf(kvs: &[(&str, u32, Vec<u8>)]) -> Vec<u8> {
        let mut out = b"GGUF".to_vec();
        out.extend(3u32.to_le_bytes());
        out.extend(0u64.to_le_bytes());
        out.extend((kvs.len() as u64).to_le_bytes());
        for (key, value_type, value) in kvs {
            out.extend((key.len() as u64).to_le_bytes());
            out.extend(key.as_bytes());
            out.extend(value_type.to_le_bytes());
            out.extend(value);
        }
        out
    }

    fn string(s: &str) -> Vec<u8> {
        let mut out = (s.len() as u64).to_le_bytes().to_vec();
        out.extend(s.as_bytes());
        out
    }

    #[test]
    fn the_architecture_is_found_after_keys_of_every_kind() {
        let mut strings = GGUF_STRING.to_le_bytes().to_vec();
        strings.extend(2u64.to_le_bytes());
        strings.extend(string("a"));
        strings.extend(string("bc"));
        let mut floats = 6u32.to_le_bytes().to_vec();
        floats.extend(3u64.to_le_bytes());
        floats.extend([0u8; 12]);
        let file = gguf(&[
            ("general.name", GGUF_STRING, string("tiny")),
            ("tokenizer.ggml.tokens", GGUF_ARRAY, strings),
            ("scores", GGUF_ARRAY, floats),
            ("general.alignment", 4, 32u32.to_le_bytes().to_vec()),
            ("general.architecture", GGUF_STRING, string("qwen2")),
            ("after", 10, 7u64.to_le_bytes().to_vec()),
        ]);
        assert_eq!(read_architecture(&mut &file[..]).unwrap().as_deref(), Some("qwen2"));
    }

    #[test]
    fn a_file_without_the_key_or_cut_short_says_so() {
        let file = gguf(&[("general.name", GGUF_STRING, string("tiny"))]);
        assert_eq!(read_architecture(&mut &file[..]).unwrap(), None);
        let file = gguf(&[("general.architecture", GGUF_STRING, string("qwen2"))]);
        assert!(read_architecture(&mut &file[..file.len() - 2]).is_err());
        assert!(read_architecture(&mut &b"GGML...."[..]).is_err());
    }
}
