//! The weights of an int8 ONNX encoder, as onnxruntime's dynamic quantisation writes them, read
//! as tensors: ragbox runs the network itself (`model::bert`), so only the weights are taken from
//! the graph, never its operators.
//!
//! Such a file holds a BERT whose dense layers are `MatMulInteger` nodes: `(in, out)` int8 codes
//! with one scale and a zero point of 0, named after the layer by the node
//! (`/bert/encoder/layer.0/attention/self/query/MatMul_quant`); biases, layer norms and the
//! embedding tables' quantisation parameters are initializers named as in PyTorch
//! (`bert.embeddings.word_embeddings.weight_quantized`, `_scale`, `_zero_point`). [`OnnxWeights`]
//! gives back the float tensors under their PyTorch names (embedding tables dequantised: they are
//! looked up, not multiplied) and the dense layers' codes under `{layer}.weight`.
//!
//! Only the handful of protobuf fields this needs are declared (prost skips the rest).

use std::collections::HashMap;
use std::path::Path;

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use prost::Message;

use crate::error::{Error, Result};

/// `onnx.ModelProto`, the fields read.
#[derive(Clone, PartialEq, Message)]
struct ModelProto {
    #[prost(message, optional, tag = "7")]
    graph: Option<GraphProto>,
}

/// `onnx.GraphProto`, the fields read.
#[derive(Clone, PartialEq, Message)]
struct GraphProto {
    #[prost(message, repeated, tag = "1")]
    node: Vec<NodeProto>,
    #[prost(message, repeated, tag = "5")]
    initializer: Vec<TensorProto>,
}

/// `onnx.NodeProto`, the fields read.
#[derive(Clone, PartialEq, Message)]
struct NodeProto {
    #[prost(string, repeated, tag = "1")]
    input: Vec<String>,
    #[prost(string, tag = "3")]
    name: String,
    #[prost(string, tag = "4")]
    op_type: String,
}

/// `onnx.TensorProto`, the fields read.
#[derive(Clone, PartialEq, Message)]
struct TensorProto {
    #[prost(int64, repeated, tag = "1")]
    dims: Vec<i64>,
    #[prost(int32, tag = "2")]
    data_type: i32,
    #[prost(float, repeated, tag = "4")]
    float_data: Vec<f32>,
    #[prost(int32, repeated, tag = "5")]
    int32_data: Vec<i32>,
    #[prost(string, tag = "8")]
    name: String,
    #[prost(bytes = "vec", tag = "9")]
    raw_data: Vec<u8>,
}

/// `onnx.TensorProto.DataType` values read.
const FLOAT: i32 = 1;
const UINT8: i32 = 2;
const INT8: i32 = 3;

/// A float tensor: its shape and values, row-major.
#[derive(Debug, Clone)]
pub struct FloatTensor {
    /// Shape.
    pub dims: Vec<usize>,
    /// Values.
    pub values: Vec<f32>,
}

/// A dense layer's weight as the file stores it: `w[i][o] = scales[o] · codes[i][o]`.
#[derive(Debug, Clone)]
pub struct QuantisedWeight {
    /// Input width.
    pub inputs: usize,
    /// Output width.
    pub outputs: usize,
    /// `(inputs, outputs)` row-major int8 codes.
    pub codes: Vec<i8>,
    /// One scale per output channel (a file with one scale for the whole matrix has it
    /// repeated).
    pub scales: Vec<f32>,
}

impl QuantisedWeight {
    /// The `(outputs, inputs)` f32 weight (PyTorch's `Linear` layout): for a device or
    /// precision that cannot take the codes.
    pub fn dequantised(&self) -> Vec<f32> {
        let mut w = vec![0f32; self.inputs * self.outputs];
        for (i, row) in self.codes.chunks_exact(self.outputs).enumerate() {
            for (o, &c) in row.iter().enumerate() {
                w[o * self.inputs + i] = f32::from(c) * self.scales[o];
            }
        }
        w
    }
}

/// The weights of one int8 ONNX encoder.
#[derive(Debug, Default)]
pub struct OnnxWeights {
    /// Float tensors by PyTorch name (dequantised embedding tables among them).
    pub floats: HashMap<String, FloatTensor>,
    /// Dense layers' weights by PyTorch name (`bert.encoder.layer.0.attention.self.query.weight`).
    pub quantised: HashMap<String, QuantisedWeight>,
}

impl OnnxWeights {
    /// Reads `path` (already verified by the caller); `model` names it in errors.
    pub fn read(path: &Path, model: &str) -> Result<OnnxWeights> {
        let bytes = std::fs::read(path).map_err(Error::path(path))?;
        OnnxWeights::parse(&bytes, model)
    }

    /// Parses the bytes of an ONNX file.
    pub fn parse(bytes: &[u8], model: &str) -> Result<OnnxWeights> {
        let bad = |reason: String| Error::ModelFormat { model: model.to_string(), reason };
        let proto = ModelProto::decode(bytes).map_err(|e| bad(format!("not an ONNX model: {e}")))?;
        let graph = proto.graph.ok_or_else(|| bad("the ONNX file has no graph".into()))?;
        let initializers: HashMap<&str, &TensorProto> = graph.initializer.iter().map(|t| (t.name.as_str(), t)).collect();
        let numbers = |name: &str| -> Result<Vec<f32>> {
            let t = initializers.get(name).ok_or_else(|| bad(format!("initializer `{name}` is missing")))?;
            match t.data_type {
                FLOAT => float_values(t),
                UINT8 | INT8 => int_values(t).map(|v| v.into_iter().map(|x| x as f32).collect()),
                _ => None,
            }
            .filter(|v| !v.is_empty())
            .ok_or_else(|| bad(format!("initializer `{name}` is not a number")))
        };
        let scalar = |name: &str| -> Result<f32> { Ok(numbers(name)?[0]) };

        let mut weights = OnnxWeights::default();
        for t in &graph.initializer {
            if t.data_type == FLOAT && !t.dims.is_empty() {
                let values = float_values(t).ok_or_else(|| bad(format!("initializer `{}` has no data", t.name)))?;
                weights.floats.insert(t.name.clone(), FloatTensor { dims: dims(t), values });
            } else if let Some(base) = t.name.strip_suffix(".weight_quantized") {
                // A table that is looked up (the embeddings), stored as u8 with a zero point.
                let (scale, zero) = (scalar(&format!("{base}.weight_scale"))?, scalar(&format!("{base}.weight_zero_point"))?);
                let codes = int_values(t).ok_or_else(|| bad(format!("initializer `{}` has no data", t.name)))?;
                let values = codes.iter().map(|&c| (c as f32 - zero) * scale).collect();
                weights.floats.insert(format!("{base}.weight"), FloatTensor { dims: dims(t), values });
            }
        }
        for node in graph.node.iter().filter(|n| n.op_type == "MatMulInteger") {
            let layer = layer_name(&node.name).ok_or_else(|| bad(format!("cannot tell which layer node `{}` is", node.name)))?;
            let b = node.input.get(1).ok_or_else(|| bad(format!("node `{}` has no weight input", node.name)))?;
            let t = initializers.get(b.as_str()).ok_or_else(|| bad(format!("weight `{b}` of `{layer}` is not an initializer")))?;
            let base = b.strip_suffix("_quantized").unwrap_or(b);
            if numbers(&format!("{base}_zero_point"))?.iter().any(|&z| z != 0.0) || t.data_type != INT8 || t.dims.len() != 2 {
                return Err(bad(format!("`{layer}`: only 2-d int8 weights with a zero point of 0 are supported")));
            }
            let d = dims(t);
            let codes: Vec<i8> = t.raw_data.iter().map(|&b| b as i8).collect();
            if codes.len() != d[0] * d[1] {
                return Err(bad(format!("`{layer}`: {} codes for a {}x{} weight", codes.len(), d[0], d[1])));
            }
            // One scale for the matrix, or one per output channel.
            let scales = match numbers(&format!("{base}_scale"))? {
                one if one.len() == 1 => vec![one[0]; d[1]],
                each if each.len() == d[1] => each,
                other => return Err(bad(format!("`{layer}`: {} scales for {} outputs", other.len(), d[1]))),
            };
            let quantised = QuantisedWeight { inputs: d[0], outputs: d[1], codes, scales };
            weights.quantised.insert(format!("{layer}.weight"), quantised);
        }
        Ok(weights)
    }

    /// The float tensors as a candle [`VarBuilder`] on `device` (the dense layers' codes stay
    /// in [`OnnxWeights::quantised`]).
    pub fn var_builder(&self, device: &Device) -> Result<VarBuilder<'static>> {
        let tensors = self
            .floats
            .iter()
            .map(|(name, t)| Ok((name.clone(), Tensor::from_slice(&t.values, t.dims.as_slice(), device)?)))
            .collect::<Result<HashMap<_, _>>>()?;
        Ok(VarBuilder::from_tensors(tensors, DType::F32, device))
    }

    /// The number of layers `{prefix}encoder.layer.N` the file holds.
    pub fn layer_count(&self, prefix: &str) -> usize {
        (0..).take_while(|i| self.floats.contains_key(&format!("{prefix}encoder.layer.{i}.output.LayerNorm.weight"))).count()
    }
}

/// `/bert/encoder/layer.0/attention/self/query/MatMul_quant` → `bert.encoder.layer.0.attention.self.query`;
/// `/classifier/Gemm_MatMul_quant` → `classifier`.
fn layer_name(node: &str) -> Option<String> {
    let (path, _op) = node.trim_start_matches('/').rsplit_once('/')?;
    (!path.is_empty()).then(|| path.replace('/', "."))
}

fn dims(t: &TensorProto) -> Vec<usize> {
    t.dims.iter().map(|&d| d.max(0) as usize).collect()
}

fn float_values(t: &TensorProto) -> Option<Vec<f32>> {
    if !t.raw_data.is_empty() {
        return Some(t.raw_data.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect());
    }
    (!t.float_data.is_empty()).then(|| t.float_data.clone())
}

/// u8 or i8 values (raw bytes, or `int32_data` where a writer put them).
fn int_values(t: &TensorProto) -> Option<Vec<i32>> {
    let signed = t.data_type == INT8;
    if !t.raw_data.is_empty() {
        return Some(t.raw_data.iter().map(|&b| if signed { i32::from(b as i8) } else { i32::from(b) }).collect());
    }
    (!t.int32_data.is_empty()).then(|| t.int32_data.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tensor(name: &str, data_type: i32, dims: &[i64], raw: Vec<u8>) -> TensorProto {
        TensorProto { dims: dims.to_vec(), data_type, name: name.into(), raw_data: raw, ..Default::default() }
    }

    fn scalar_f32(name: &str, v: f32) -> TensorProto {
        tensor(name, FLOAT, &[], v.to_le_bytes().to_vec())
    }

    #[test]
    fn reads_codes_biases_and_dequantised_tables_by_their_pytorch_names() {
        let graph = GraphProto {
            node: vec![NodeProto {
                input: vec!["x_quantized".into(), "onnx::MatMul_7_quantized".into()],
                name: "/bert/encoder/layer.0/attention/self/query/MatMul_quant".into(),
                op_type: "MatMulInteger".into(),
            }],
            initializer: vec![
                tensor("onnx::MatMul_7_quantized", INT8, &[2, 3], vec![1, 255, 127, 0, 2, 129]),
                scalar_f32("onnx::MatMul_7_scale", 0.5),
                tensor("onnx::MatMul_7_zero_point", INT8, &[], vec![0]),
                tensor("bert.encoder.layer.0.attention.self.query.bias", FLOAT, &[3], [1f32, 2.0, 3.0].iter().flat_map(|v| v.to_le_bytes()).collect()),
                tensor("bert.embeddings.word_embeddings.weight_quantized", UINT8, &[2, 2], vec![10, 12, 14, 16]),
                scalar_f32("bert.embeddings.word_embeddings.weight_scale", 0.25),
                tensor("bert.embeddings.word_embeddings.weight_zero_point", UINT8, &[], vec![12]),
            ],
        };
        let bytes = ModelProto { graph: Some(graph) }.encode_to_vec();
        let w = OnnxWeights::parse(&bytes, "m").unwrap();
        let q = &w.quantised["bert.encoder.layer.0.attention.self.query.weight"];
        assert_eq!((q.inputs, q.outputs, q.scales.clone()), (2, 3, vec![0.5; 3]));
        assert_eq!(q.codes, vec![1, -1, 127, 0, 2, -127]);
        // (outputs, inputs): row o holds codes[.][o].
        assert_eq!(q.dequantised(), vec![0.5, 0.0, -0.5, 1.0, 63.5, -63.5]);
        assert_eq!(w.floats["bert.encoder.layer.0.attention.self.query.bias"].values, vec![1.0, 2.0, 3.0]);
        let table = &w.floats["bert.embeddings.word_embeddings.weight"];
        assert_eq!((table.dims.clone(), table.values.clone()), (vec![2, 2], vec![-0.5, 0.0, 0.5, 1.0]));
    }

    #[test]
    fn per_channel_scales_are_kept_per_output() {
        let graph = GraphProto {
            node: vec![NodeProto { input: vec!["x".into(), "w_quantized".into()], name: "/encoder/layer.0/output/dense/MatMul_quant".into(), op_type: "MatMulInteger".into() }],
            initializer: vec![
                tensor("w_quantized", INT8, &[1, 2], vec![2, 4]),
                tensor("w_scale", FLOAT, &[2], [0.5f32, 0.25].iter().flat_map(|v| v.to_le_bytes()).collect()),
                tensor("w_zero_point", INT8, &[2], vec![0, 0]),
            ],
        };
        let w = OnnxWeights::parse(&ModelProto { graph: Some(graph) }.encode_to_vec(), "m").unwrap();
        let q = &w.quantised["encoder.layer.0.output.dense.weight"];
        assert_eq!(q.scales, vec![0.5, 0.25]);
        assert_eq!(q.dequantised(), vec![1.0, 1.0]);
    }

    #[test]
    fn names_layers_from_their_nodes() {
        assert_eq!(layer_name("/bert/pooler/dense/Gemm_MatMul_quant").as_deref(), Some("bert.pooler.dense"));
        assert_eq!(layer_name("/classifier/Gemm_MatMul_quant").as_deref(), Some("classifier"));
        assert_eq!(layer_name("/encoder/layer.11/output/dense/MatMul_quant").as_deref(), Some("encoder.layer.11.output.dense"));
        assert_eq!(layer_name("MatMul_quant"), None);
    }

    #[test]
    fn garbage_and_nonzero_weight_zero_points_are_format_errors() {
        let err = OnnxWeights::parse(b"\xff\xff\xff not protobuf", "m").unwrap_err().to_string();
        assert!(err.contains("not an ONNX model"), "{err}");
        let graph = GraphProto {
            node: vec![NodeProto { input: vec!["x".into(), "w_quantized".into()], name: "/a/b/MatMul_quant".into(), op_type: "MatMulInteger".into() }],
            initializer: vec![tensor("w_quantized", INT8, &[1, 1], vec![3]), scalar_f32("w_scale", 1.0), tensor("w_zero_point", INT8, &[], vec![5])],
        };
        let err = OnnxWeights::parse(&ModelProto { graph: Some(graph) }.encode_to_vec(), "m").unwrap_err().to_string();
        assert!(err.contains("zero point of 0"), "{err}");
    }
}
