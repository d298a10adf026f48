//! The reader: a small network trained on a cross-encoder's last-layer states to tell whether a unit
//! of a passage (a sentence, a list item with its lead-in, a table row with its header, under its
//! section's name) states the answer to a question. Its output is a probability that the answer
//! step compares with one floor, chosen on held-out questions (`answer::evidence`).
//!
//! Imports `error` and candle. The weights are trained by `scripts/train/reader.py` from the
//! training sets `../shared/DATA.md` describes and the questions under `scripts/train/questions`;
//! they ship in the repository (`models/models--ragbox--reader-ms-marco-minilm-l12-v2-int8`),
//! pinned in the manifest as a file of the cross-encoder they were trained on.
//!
//! The network: `[[CLS] state ‖ mean token state ‖ logit]` → dense → ReLU → dense → sigmoid. The
//! inputs' standardisation is folded into the first layer by the training script.

use std::path::Path;

use candle_core::{DType, Device, Tensor};
use candle_nn::{Linear, Module, VarBuilder};

use crate::error::{Error, Result};

/// The manifest's name for a cross-encoder's reader file.
pub const READER_FILE: &str = "reader.safetensors";

/// The trained head.
pub struct ReaderHead {
    hidden: Linear,
    out: Linear,
}

impl ReaderHead {
    /// Loads a head from `path` (already verified), for the model named `model`.
    pub fn load(path: &Path, model: &str, device: &Device) -> Result<ReaderHead> {
        let bad = |e: candle_core::Error| Error::ModelFormat { model: model.to_string(), reason: format!("{READER_FILE}: {e}") };
        // SAFETY: verified just before; model files are replaced by rename, never edited in place.
        let vb = unsafe { VarBuilder::from_mmaped_safetensors(&[path], DType::F32, device) }.map_err(bad)?;
        let shape = |name: &str| vb.get_unchecked_dtype(name, DType::F32).map(|t| t.dims().to_vec());
        let dims = shape("hidden.weight").map_err(bad)?;
        let [width, inputs] = dims[..] else {
            return Err(Error::ModelFormat { model: model.into(), reason: format!("{READER_FILE}: hidden.weight has shape {dims:?}") });
        };
        let hidden = candle_nn::linear(inputs, width, vb.pp("hidden")).map_err(bad)?;
        let out = candle_nn::linear(width, 1, vb.pp("out")).map_err(bad)?;
        Ok(ReaderHead { hidden, out })
    }

    /// The probability for each row of `states` (`[n, width]`) with its `logits` (`[n, 1]`).
    pub fn probabilities(&self, states: &Tensor, logits: &Tensor) -> Result<Vec<f32>> {
        let x = Tensor::cat(&[states, logits], 1)?;
        let h = self.hidden.forward(&x)?.relu()?;
        let z = self.out.forward(&h)?;
        Ok(candle_nn::ops::sigmoid(&z)?.flatten_all()?.to_vec1::<f32>()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_head_reads_states_and_logits() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(READER_FILE);
        let device = Device::Cpu;
        // Two inputs (one state value and the logit), two hidden units: relu(x0) + relu(logit).
        let tensors = [
            ("hidden.weight", Tensor::new(&[[1f32, 0.0], [0.0, 1.0]], &device).unwrap()),
            ("hidden.bias", Tensor::new(&[0f32, 0.0], &device).unwrap()),
            ("out.weight", Tensor::new(&[[1f32, 1.0]], &device).unwrap()),
            ("out.bias", Tensor::new(&[0f32], &device).unwrap()),
        ];
        candle_core::safetensors::save(&tensors.into_iter().map(|(k, v)| (k.to_string(), v)).collect(), &path).unwrap();
        let head = ReaderHead::load(&path, "test", &device).unwrap();
        let states = Tensor::new(&[[2f32], [-3.0]], &device).unwrap();
        let logits = Tensor::new(&[[1f32], [-1.0]], &device).unwrap();
        let p = head.probabilities(&states, &logits).unwrap();
        let sigmoid = |z: f32| 1.0 / (1.0 + (-z).exp());
        assert!((p[0] - sigmoid(3.0)).abs() < 1e-6 && (p[1] - sigmoid(0.0)).abs() < 1e-6, "{p:?}");
    }
}
