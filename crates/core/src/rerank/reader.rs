//! The reader: a small network over a cross-encoder's states, trained to tell whether a unit of a
//! passage (a sentence, a list item with its lead-in, a table row with its header, under its
//! section's name) states the answer to a question. Its output is a probability that the answer
//! step compares with one floor, chosen on held-out questions (`answer::evidence`).
//!
//! Imports `model` and `error`, and candle. The shipped weights are trained by
//! `scripts/train/reader.py` from the training sets `../shared/DATA.md` describes and the questions
//! under `scripts/train/questions`; they ship in the repository
//! (`models/models--ragbox--reader-ms-marco-minilm-l12-v2-int8`), pinned in the manifest as a file
//! of the cross-encoder they were trained on.
//!
//! The head: `[[CLS] state ‖ mean token state ‖ the cross-encoder's own logit]` → dense → ReLU →
//! dense → sigmoid, the inputs' standardisation folded into its first layer by the training
//! script. The shipped file reads the body's last states. A file may also hold the reader's own
//! copies of the body's top layers (`encoder.layer.N.…`, under their places in the body, dense
//! weights as int8 codes with one scale per output row; `scripts/train/reader_layers.py`), which
//! read the body's states from the first of them on and give the head its states.

use std::collections::HashMap;
use std::path::Path;

use candle_core::{DType, Device, Tensor};
use candle_nn::{Linear, Module, VarBuilder};
use candle_transformers::models::bert::Config;

use crate::error::{Error, Result};
use crate::model::bert::BertLayers;
use crate::model::Precision;

/// The manifest's name for a cross-encoder's reader file.
pub const READER_FILE: &str = "reader.safetensors";

/// The trained reader.
pub struct Reader {
    /// Its own top layers and the body's layer they start at.
    layers: Option<(usize, BertLayers)>,
    hidden: Linear,
    out: Linear,
}

impl Reader {
    /// Loads a reader from `path` (already verified), for the model named `model`, whose body's
    /// shape is `cfg`; its layers run at `precision`, as the body's (int8 on a CPU: at f32 the two
    /// layers would cost more than the body's twelve).
    pub fn load(path: &Path, model: &str, cfg: &Config, precision: Precision, device: &Device) -> Result<Reader> {
        let bad = |e: candle_core::Error| Error::ModelFormat { model: model.to_string(), reason: format!("{READER_FILE}: {e}") };
        let vb = VarBuilder::from_tensors(dequantised(candle_core::safetensors::load(path, device).map_err(bad)?).map_err(bad)?, DType::F32, device);
        let shape = |name: &str| vb.get_unchecked_dtype(name, DType::F32).map(|t| t.dims().to_vec());
        let dims = shape("hidden.weight").map_err(bad)?;
        let [width, inputs] = dims[..] else {
            return Err(Error::ModelFormat { model: model.into(), reason: format!("{READER_FILE}: hidden.weight has shape {dims:?}") });
        };
        let first = (0..cfg.num_hidden_layers).find(|i| vb.contains_tensor(&format!("encoder.layer.{i}.output.dense.weight")));
        let layers = match first {
            Some(first) => {
                let stack = BertLayers::load(vb.pp("encoder").pp("layer"), cfg, first..cfg.num_hidden_layers, precision, None).map_err(bad)?;
                Some((first, stack))
            }
            None => None,
        };
        let hidden = candle_nn::linear(inputs, width, vb.pp("hidden")).map_err(bad)?;
        let out = candle_nn::linear(width, 1, vb.pp("out")).map_err(bad)?;
        Ok(Reader { layers, hidden, out })
    }

    /// The body's layer whose input the reader's own layers take (`None`: it reads the last
    /// layer's output).
    pub fn tap(&self) -> Option<usize> {
        self.layers.as_ref().map(|(first, _)| *first)
    }

    /// The probability for each row of a batch: `tapped` the states entering [`Reader::tap`]'s
    /// layer (`[n, tokens, hidden]`; the body's last states for a head-only reader), `mask` the
    /// batch's 0/1 mask (`[n, tokens]`), `logits` the cross-encoder's (`[n, 1]`).
    pub fn probabilities(&self, tapped: &Tensor, mask: &Tensor, logits: &Tensor) -> Result<Vec<f32>> {
        let states = match &self.layers {
            Some((_, stack)) => stack.forward(&tapped.to_dtype(DType::F32)?, mask)?,
            None => tapped.clone(),
        };
        let x = Tensor::cat(&[&pooled(&states, mask)?, logits], 1)?;
        let h = self.hidden.forward(&x)?.relu()?;
        let z = self.out.forward(&h)?;
        Ok(candle_nn::ops::sigmoid(&z)?.flatten_all()?.to_vec1::<f32>()?)
    }
}

/// A file's tensors at f32, each int8 weight (`X.weight_codes`, u8 codes offset by 128, with one
/// scale per output row in `X.weight_scales`) dequantised into `X.weight`.
fn dequantised(tensors: HashMap<String, Tensor>) -> candle_core::Result<HashMap<String, Tensor>> {
    let mut out = HashMap::new();
    for (name, t) in &tensors {
        if let Some(base) = name.strip_suffix("_codes") {
            let Some(scales) = tensors.get(&format!("{base}_scales")) else {
                candle_core::bail!("{name} has no {base}_scales");
            };
            let codes = (t.to_dtype(DType::F32)? - 128.0)?;
            out.insert(base.to_string(), codes.broadcast_mul(&scales.to_dtype(DType::F32)?.unsqueeze(1)?)?);
        } else if !name.ends_with("_scales") {
            out.insert(name.clone(), t.to_dtype(DType::F32)?);
        }
    }
    Ok(out)
}

/// What the head reads of a batch's token states (`[n, 2 × hidden]`): the [CLS] state, then the
/// token states' mean over the mask.
pub fn pooled(states: &Tensor, mask: &Tensor) -> Result<Tensor> {
    let states = states.to_dtype(DType::F32)?;
    let cls = states.narrow(1, 0, 1)?.squeeze(1)?;
    let mask = mask.to_dtype(DType::F32)?.unsqueeze(2)?;
    let mean = states.broadcast_mul(&mask)?.sum(1)?.broadcast_div(&mask.sum(1)?)?;
    Ok(Tensor::cat(&[&cls, &mean], 1)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn save(path: &Path, tensors: Vec<(String, Tensor)>) {
        candle_core::safetensors::save(&tensors.into_iter().collect(), path).unwrap();
    }

    /// relu(cls) + relu(logit) over one-wide states: `[cls, mean, logit]` in.
    fn head(device: &Device) -> Vec<(String, Tensor)> {
        vec![
            ("hidden.weight".into(), Tensor::new(&[[1f32, 0.0, 0.0], [0.0, 0.0, 1.0]], device).unwrap()),
            ("hidden.bias".into(), Tensor::new(&[0f32, 0.0], device).unwrap()),
            ("out.weight".into(), Tensor::new(&[[1f32, 1.0]], device).unwrap()),
            ("out.bias".into(), Tensor::new(&[0f32], device).unwrap()),
        ]
    }

    fn config(hidden: usize, layers: usize) -> Config {
        serde_json::from_value(serde_json::json!({
            "vocab_size": 10, "hidden_size": hidden, "num_hidden_layers": layers, "num_attention_heads": 1,
            "intermediate_size": 2 * hidden, "hidden_act": "gelu", "max_position_embeddings": 16, "type_vocab_size": 2,
            "layer_norm_eps": 1e-12, "pad_token_id": 0, "hidden_dropout_prob": 0.0, "initializer_range": 0.02,
        }))
        .unwrap()
    }

    fn sigmoid(z: f32) -> f32 {
        1.0 / (1.0 + (-z).exp())
    }

    #[test]
    fn int8_weights_are_dequantised_row_by_row() {
        let device = Device::Cpu;
        let tensors = HashMap::from([
            ("l.weight_codes".to_string(), Tensor::new(&[[129u8, 126], [128, 255]], &device).unwrap()),
            ("l.weight_scales".to_string(), Tensor::new(&[0.5f32, 2.0], &device).unwrap()),
            ("l.bias".to_string(), Tensor::new(&[1f32, 2.0], &device).unwrap().to_dtype(DType::F16).unwrap()),
        ]);
        let out = dequantised(tensors).unwrap();
        let mut names: Vec<&String> = out.keys().collect();
        names.sort();
        assert_eq!(names, ["l.bias", "l.weight"]);
        assert_eq!(out["l.weight"].to_vec2::<f32>().unwrap(), [[0.5, -1.0], [0.0, 254.0]]);
        assert_eq!(out["l.bias"].to_vec1::<f32>().unwrap(), [1.0, 2.0]);
    }

    #[test]
    fn a_head_only_reader_reads_the_last_states_and_the_logits() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(READER_FILE);
        let device = Device::Cpu;
        save(&path, head(&device));
        let reader = Reader::load(&path, "test", &config(1, 2), Precision::F32, &device).unwrap();
        assert_eq!(reader.tap(), None);
        // Two rows of two tokens, the second row's second token padding: its mean is its [CLS].
        let states = Tensor::new(&[[[2f32], [4.0]], [[-3.0], [9.0]]], &device).unwrap();
        let mask = Tensor::new(&[[1u32, 1], [1, 0]], &device).unwrap();
        let logits = Tensor::new(&[[1f32], [-1.0]], &device).unwrap();
        let p = reader.probabilities(&states, &mask, &logits).unwrap();
        assert!((p[0] - sigmoid(3.0)).abs() < 1e-6 && (p[1] - sigmoid(0.0)).abs() < 1e-6, "{p:?}");
    }

    #[test]
    fn a_reader_with_its_own_top_layer_reads_from_the_tap() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(READER_FILE);
        let device = Device::Cpu;
        let (h, cfg) = (2, config(2, 3));
        // The top layer of three, its dense layers zero and its norms plain: it gives back its
        // input layer-normed, so [CLS] (1, 3) becomes (-1, 1).
        let mut tensors = vec![
            ("hidden.weight".into(), Tensor::new(&[[1f32, 0.0, 0.0, 0.0, 0.0]], &device).unwrap()),
            ("hidden.bias".into(), Tensor::new(&[0f32], &device).unwrap()),
            ("out.weight".into(), Tensor::new(&[[1f32]], &device).unwrap()),
            ("out.bias".into(), Tensor::new(&[0f32], &device).unwrap()),
        ];
        let zeros = |r: usize, c: usize| Tensor::zeros((r, c), DType::F32, &device).unwrap();
        let vector = |n: usize, v: f32| Tensor::full(v, n, &device).unwrap();
        for (name, outputs, inputs) in [
            ("attention.self.query", h, h),
            ("attention.self.key", h, h),
            ("attention.self.value", h, h),
            ("attention.output.dense", h, h),
            ("intermediate.dense", 2 * h, h),
            ("output.dense", h, 2 * h),
        ] {
            tensors.push((format!("encoder.layer.2.{name}.weight"), zeros(outputs, inputs)));
            tensors.push((format!("encoder.layer.2.{name}.bias"), vector(outputs, 0.0)));
        }
        for norm in ["attention.output.LayerNorm", "output.LayerNorm"] {
            tensors.push((format!("encoder.layer.2.{norm}.weight"), vector(h, 1.0)));
            tensors.push((format!("encoder.layer.2.{norm}.bias"), vector(h, 0.0)));
        }
        save(&path, tensors);
        let reader = Reader::load(&path, "test", &cfg, Precision::F32, &device).unwrap();
        assert_eq!(reader.tap(), Some(2));
        let tapped = Tensor::new(&[[[3f32, 1.0]], [[1.0, 3.0]]], &device).unwrap();
        let mask = Tensor::new(&[[1u32], [1]], &device).unwrap();
        let logits = Tensor::new(&[[0f32], [0.0]], &device).unwrap();
        let p = reader.probabilities(&tapped, &mask, &logits).unwrap();
        assert!((p[0] - sigmoid(1.0)).abs() < 1e-5 && (p[1] - sigmoid(0.0)).abs() < 1e-5, "{p:?}");
    }
}
