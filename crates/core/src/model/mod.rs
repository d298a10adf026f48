//! Models on disk: the manifest, the models folder and its verification, device choice, tokenizer
//! and weight loading, and the three ways models arrive (fetch script, import, pull).
//!
//! May import `types` and `error` only.

pub mod attention;
pub mod batch;
pub mod bert;
pub mod checksum;
pub mod cpu;
pub mod cpu_tensor;
pub mod dense;
pub mod device;
pub mod gguf;
pub mod import;
pub mod int8;
pub mod manifest;
pub mod nomic;
pub mod onnx;
pub mod precision;
pub mod pull;
pub mod store;
pub mod tokenizer;

pub use device::{device, DeviceChoice};
pub use precision::Precision;
pub use manifest::{Architecture, Manifest, ModelFile, ModelSpec, Pooling};
pub use store::ModelStore;
pub use tokenizer::{TextTokenizer, Tokens};
