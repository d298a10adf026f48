//! The model manifest: every model ragbox knows, its files and their pinned checksums.
//!
//! The manifest (`models/manifest.toml`) is compiled into the binary, so the checksums a model is
//! verified against cannot be changed by editing the models folder.

use std::sync::OnceLock;

use serde::Deserialize;

use crate::error::{Error, Result};
use crate::types::ModelRole;

/// The manifest text, as shipped in `models/manifest.toml`.
pub const MANIFEST_TOML: &str = include_str!("../../../../models/manifest.toml");

/// Network architecture, which picks the loading code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Architecture {
    /// BERT encoder in safetensors (MiniLM and friends).
    Bert,
    /// nomic-bert encoder in GGUF.
    NomicBert,
    /// BERT + pooler + one-logit classifier head in safetensors.
    BertCrossEncoder,
    /// Qwen2 decoder in GGUF.
    Qwen2,
    /// Llama decoder in GGUF.
    Llama,
    /// PP-OCR text detector and line recognizer in rten's format, with the recognizer's
    /// character dictionary.
    PpOcr,
}

/// How token states become one vector.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Pooling {
    /// Mean over the attention mask.
    Mean,
    /// The first ([CLS]) token.
    Cls,
}

/// One file of a model, pinned.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelFile {
    /// File name inside the hub snapshot.
    pub name: String,
    /// Hub repository holding the file when it is not the model's own.
    pub repo: Option<String>,
    /// sha256 of the file, hex.
    pub sha256: Option<String>,
    /// Size in bytes.
    pub size: Option<u64>,
    /// The hub's git blob id (`git hash-object`), when no sha256 is known.
    pub git_blob_sha1: Option<String>,
    /// How `scripts/setup/fetch-models.sh` carves the file out of PyPI wheels (not used by ragbox).
    pub pypi: Option<toml::Value>,
}

/// One model the manifest knows.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelSpec {
    /// Short name used on the command line and stamped into indexes.
    pub name: String,
    /// What it is for.
    pub role: ModelRole,
    /// Which loading code applies.
    pub architecture: Architecture,
    /// Hub repository (the folder name in the hub cache layout).
    pub repo: String,
    /// Embedding dimensions (embedders only).
    pub dims: Option<usize>,
    /// Pooling (embedders only).
    pub pooling: Option<Pooling>,
    /// Prepended to queries.
    #[serde(default)]
    pub query_prefix: String,
    /// Prepended to passages.
    #[serde(default)]
    pub passage_prefix: String,
    /// Longest input in tokens; longer inputs are truncated and reported.
    pub max_tokens: usize,
    /// Attention heads, for a model file whose weights do not say (an ONNX export).
    pub attention_heads: Option<usize>,
    /// The precision `embed.precision = "auto"` runs this encoder at on the CPU: the fastest that
    /// passed the golden quality gate (tests/integration/golden.rs checks the claim both ways).
    /// None: f32.
    pub auto_precision: Option<crate::model::Precision>,
    /// Whether `scripts/setup/fetch-models.sh` fetches it with no arguments.
    #[serde(default)]
    pub default_fetch: bool,
    /// The files, each pinned.
    pub files: Vec<ModelFile>,
}

impl ModelSpec {
    /// The file with this name, if the model has one.
    pub fn file(&self, name: &str) -> Option<&ModelFile> {
        self.files.iter().find(|f| f.name == name)
    }

    /// The first file whose name ends with `suffix` (e.g. ".gguf").
    pub fn file_ending(&self, suffix: &str) -> Option<&ModelFile> {
        self.files.iter().find(|f| f.name.ends_with(suffix))
    }

    /// The hub repository a file lives in.
    pub fn repo_of<'a>(&'a self, file: &'a ModelFile) -> &'a str {
        file.repo.as_deref().unwrap_or(&self.repo)
    }

    /// Whether any file can come from PyPI through the fetch script.
    pub fn fetchable(&self) -> bool {
        self.files.iter().all(|f| f.pypi.is_some())
    }

    /// The command that puts this model in place, for error messages.
    pub fn fix_command(&self) -> String {
        if self.fetchable() {
            format!("scripts/setup/fetch-models.sh {}", self.name)
        } else {
            format!("ragbox models pull {0}`, or offline `ragbox models import DIR --model {0}", self.name)
        }
    }
}

/// The parsed manifest.
#[derive(Debug, Clone, Deserialize)]
pub struct Manifest {
    /// Every model, in manifest order.
    #[serde(rename = "model")]
    pub models: Vec<ModelSpec>,
    /// Wheel pins for the fetch script (not used by ragbox).
    #[serde(rename = "wheel", default)]
    pub wheels: Vec<toml::Value>,
}

impl Manifest {
    /// Parses a manifest.
    pub fn parse(text: &str) -> Result<Manifest> {
        let m: Manifest =
            toml::from_str(text).map_err(|e| Error::Config(format!("model manifest: {e}")))?;
        for spec in &m.models {
            for f in &spec.files {
                if f.sha256.is_none() && f.git_blob_sha1.is_none() {
                    return Err(Error::Config(format!(
                        "model manifest: {}/{} has no checksum",
                        spec.name, f.name
                    )));
                }
            }
        }
        Ok(m)
    }

    /// The manifest compiled into this binary.
    pub fn builtin() -> &'static Manifest {
        static M: OnceLock<Manifest> = OnceLock::new();
        M.get_or_init(|| Manifest::parse(MANIFEST_TOML).expect("the shipped manifest parses (tested)"))
    }

    /// The model with this name; the error lists the known names.
    pub fn get(&self, name: &str) -> Result<&ModelSpec> {
        self.models.iter().find(|m| m.name == name).ok_or_else(|| Error::UnknownModel {
            name: name.to_string(),
            known: self.models.iter().map(|m| m.name.clone()).collect(),
        })
    }

    /// Models of one role.
    pub fn by_role(&self, role: ModelRole) -> impl Iterator<Item = &ModelSpec> {
        self.models.iter().filter(move |m| m.role == role)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shipped_manifest_parses_and_pins_every_file() {
        let m = Manifest::builtin();
        assert!(m.get("all-minilm-l6-v2").is_ok());
        for spec in &m.models {
            for f in &spec.files {
                if let Some(h) = &f.sha256 {
                    assert_eq!(h.len(), 64, "{}/{}: sha256 must be 64 hex digits", spec.name, f.name);
                    assert!(h.chars().all(|c| c.is_ascii_hexdigit()), "{}/{}", spec.name, f.name);
                }
            }
            if spec.role == ModelRole::Embed {
                assert!(spec.dims.is_some() && spec.pooling.is_some(), "{}", spec.name);
            }
        }
    }

    #[test]
    fn unknown_model_names_the_known_ones() {
        let err = Manifest::builtin().get("gpt-17").unwrap_err().to_string();
        assert!(err.contains("all-minilm-l6-v2") && err.contains("nomic-embed-text-v1.5"), "{err}");
    }
}
