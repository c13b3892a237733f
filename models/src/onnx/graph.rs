//! The ONNX file as a plain graph: nodes in file order with their attributes, constants
//! decoded into Rust vectors, the graph's inputs and outputs with static shapes.
//!
//! Contract: [`OnnxGraph::parse`] never panics on any byte string; every problem is an
//! [`EngineError`] naming the file, node or tensor at fault. Construction time only
//! (allocates freely).

use super::proto::onnx as pb;
use crate::engine::{ElemType, EngineError};
use protobuf::Message;
use std::collections::{HashMap, HashSet};
use std::path::Path;

/// ONNX `TensorProto.DataType` codes this importer reads.
pub(crate) mod dtype {
    pub const FLOAT: i32 = 1;
    pub const UINT8: i32 = 2;
    pub const INT8: i32 = 3;
    pub const INT32: i32 = 6;
    pub const INT64: i32 = 7;
    /// One byte per element, 0 or 1; held as `ConstData::U8`.
    pub const BOOL: i32 = 9;
    /// Two elements a byte, low nibble first; held widened and shifted as `ConstData::I8`
    /// (`x - 8`: -8..=7, like int4), which every quantized use reads as a difference from
    /// a zero point shifted the same way, so exactly. Readers that would see the shift
    /// (anything but Q/DQ and the QLinear operators) are refused at lowering.
    pub const UINT4: i32 = 21;
    /// Two elements a byte, low nibble first; held widened as `ConstData::I8` (-8..=7).
    pub const INT4: i32 = 22;

    /// Whether [`super::decode_tensor`] reads tensors of type `code`.
    pub fn readable(code: i32) -> bool {
        matches!(
            code,
            FLOAT | UINT8 | INT8 | INT32 | INT64 | BOOL | UINT4 | INT4
        )
    }
}

/// A constant the importer keeps no values of because it cannot compute in its type
/// (float16, uint16, float64, ...): named so that a node reading it is refused with the
/// type, while the rest of the file (operators, shapes) stays readable for
/// `redline model info` and other engines.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Unreadable {
    /// The ONNX data type code.
    pub code: i32,
    /// The bytes its values take in the file.
    pub bytes: usize,
}

/// A constant tensor (initializer or `Constant` node output), decoded.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum ConstData {
    F32(Vec<f32>),
    I8(Vec<i8>),
    U8(Vec<u8>),
    I32(Vec<i32>),
    I64(Vec<i64>),
}

/// A constant with its shape.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Const {
    pub shape: Vec<usize>,
    pub data: ConstData,
}

impl Const {
    pub fn len(&self) -> usize {
        match &self.data {
            ConstData::F32(v) => v.len(),
            ConstData::I8(v) => v.len(),
            ConstData::U8(v) => v.len(),
            ConstData::I32(v) => v.len(),
            ConstData::I64(v) => v.len(),
        }
    }

    /// The values as `f32` (integers converted exactly where they fit).
    pub fn to_f32(&self) -> Vec<f32> {
        match &self.data {
            ConstData::F32(v) => v.clone(),
            ConstData::I8(v) => v.iter().map(|&x| f32::from(x)).collect(),
            ConstData::U8(v) => v.iter().map(|&x| f32::from(x)).collect(),
            ConstData::I32(v) => v.iter().map(|&x| x as f32).collect(),
            ConstData::I64(v) => v.iter().map(|&x| x as f32).collect(),
        }
    }

    /// The values as `i64` (for shape, axes and pad tensors); floats are refused.
    pub fn to_i64(&self) -> Option<Vec<i64>> {
        match &self.data {
            ConstData::F32(_) => None,
            ConstData::I8(v) => Some(v.iter().map(|&x| i64::from(x)).collect()),
            ConstData::U8(v) => Some(v.iter().map(|&x| i64::from(x)).collect()),
            ConstData::I32(v) => Some(v.iter().map(|&x| i64::from(x)).collect()),
            ConstData::I64(v) => Some(v.clone()),
        }
    }

    pub fn elem(&self) -> ElemType {
        match &self.data {
            ConstData::F32(_) => ElemType::F32,
            ConstData::I8(_) => ElemType::I8,
            ConstData::U8(_) => ElemType::U8,
            ConstData::I32(_) => ElemType::I32,
            ConstData::I64(_) => ElemType::I64,
        }
    }
}

/// An attribute value.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Attr {
    Int(i64),
    Float(f32),
    Ints(Vec<i64>),
    Floats(Vec<f32>),
    Str(String),
    Tensor(Const),
    Other,
}

/// One node.
#[derive(Clone, Debug)]
pub(crate) struct Node {
    /// The node's name, or `<op>:<first output>` when the file has none.
    pub name: String,
    pub op: String,
    pub domain: String,
    /// Input value names; `""` is an omitted optional input.
    pub inputs: Vec<String>,
    pub outputs: Vec<String>,
    pub attrs: HashMap<String, Attr>,
}

impl Node {
    pub fn unsupported(&self, reason: impl Into<String>) -> EngineError {
        EngineError::Unsupported {
            node: self.name.clone(),
            op: self.op_label(),
            reason: reason.into(),
        }
    }

    /// `Conv`, or `com.microsoft.QLinearAdd` for other domains.
    pub fn op_label(&self) -> String {
        if self.domain.is_empty() || self.domain == "ai.onnx" {
            self.op.clone()
        } else {
            format!("{}.{}", self.domain, self.op)
        }
    }

    pub fn int(&self, name: &str, default: i64) -> Result<i64, EngineError> {
        match self.attrs.get(name) {
            None => Ok(default),
            Some(Attr::Int(v)) => Ok(*v),
            Some(_) => Err(self.unsupported(format!("attribute {name} is not an integer"))),
        }
    }

    pub fn float(&self, name: &str, default: f32) -> Result<f32, EngineError> {
        match self.attrs.get(name) {
            None => Ok(default),
            Some(Attr::Float(v)) => Ok(*v),
            Some(Attr::Int(v)) => Ok(*v as f32),
            Some(_) => Err(self.unsupported(format!("attribute {name} is not a float"))),
        }
    }

    pub fn ints(&self, name: &str) -> Result<Option<Vec<i64>>, EngineError> {
        match self.attrs.get(name) {
            None => Ok(None),
            Some(Attr::Ints(v)) => Ok(Some(v.clone())),
            Some(Attr::Int(v)) => Ok(Some(vec![*v])),
            Some(_) => Err(self.unsupported(format!("attribute {name} is not a list of integers"))),
        }
    }

    pub fn string(&self, name: &str, default: &str) -> Result<String, EngineError> {
        match self.attrs.get(name) {
            None => Ok(default.to_string()),
            Some(Attr::Str(v)) => Ok(v.clone()),
            Some(_) => Err(self.unsupported(format!("attribute {name} is not a string"))),
        }
    }

    /// Input `i` if present and non-empty.
    pub fn input(&self, i: usize) -> Option<&str> {
        self.inputs
            .get(i)
            .map(String::as_str)
            .filter(|s| !s.is_empty())
    }
}

/// A graph input or output.
#[derive(Clone, Debug)]
pub(crate) struct ValueInfo {
    pub name: String,
    pub elem: Option<ElemType>,
    /// Static dimensions; `None` where the file has a symbolic or missing dimension.
    pub dims: Vec<Option<usize>>,
    /// For each dimension, its `dim_param` name where the file names it (a symbolic
    /// dimension such as a batch `N`); `None` for static and unnamed dimensions.
    pub dim_names: Vec<Option<String>>,
    /// The ONNX data type code (for messages about unsupported types).
    pub raw_type: i32,
}

/// The whole model.
#[derive(Clone, Debug)]
pub(crate) struct OnnxGraph {
    pub opset: i64,
    pub producer: String,
    pub nodes: Vec<Node>,
    pub consts: HashMap<String, Const>,
    /// Constants (initializers, `Constant` node outputs) of types the importer does not
    /// read, by name: not in `consts`; a node reading one is refused when lowered.
    pub unreadable: HashMap<String, Unreadable>,
    /// The constants stored as 4-bit integers (held widened in `consts`, see
    /// [`dtype::UINT4`]), by name, with their type code: a quantization *to* 4 bits clamps
    /// to `-8..=7` (both types, as held), not the 8-bit range.
    pub four_bit: HashMap<String, i32>,
    /// Graph inputs that are not initializers.
    pub inputs: Vec<ValueInfo>,
    pub outputs: Vec<ValueInfo>,
    /// The model's `metadata_props`, in file order.
    pub metadata: Vec<(String, String)>,
}

/// Checks that the nodes come in topological order and write each value once, as ONNX
/// requires: every input of a node is an initializer, a graph input or an output of an
/// earlier node. (So the graph has no cycle, which the lowering's walks along consumers
/// rely on.)
fn check_order(
    nodes: &[Node],
    consts: &HashMap<String, Const>,
    unreadable: &HashMap<String, Unreadable>,
    graph_inputs: &[pb::ValueInfoProto],
) -> Result<(), String> {
    let mut known: HashSet<&str> = consts.keys().map(String::as_str).collect();
    known.extend(unreadable.keys().map(String::as_str));
    known.extend(graph_inputs.iter().map(|v| v.name()));
    for n in nodes {
        if let Some(i) = n
            .inputs
            .iter()
            .find(|i| !i.is_empty() && !known.contains(i.as_str()))
        {
            return Err(format!(
                "node {} ({}) reads {i:?}, which no earlier node, graph input or initializer \
                 writes: ONNX lists nodes in topological order (sort the graph, e.g. with \
                 onnx-graphsurgeon's toposort(), or re-export it)",
                n.name, n.op
            ));
        }
        for o in n.outputs.iter().filter(|o| !o.is_empty()) {
            if !known.insert(o.as_str()) {
                return Err(format!(
                    "node {} ({}) writes {o:?}, which is already written: ONNX values are \
                     written once",
                    n.name, n.op
                ));
            }
        }
    }
    Ok(())
}

fn parse_err(path: &Path, reason: impl Into<String>) -> EngineError {
    EngineError::Parse {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

/// Reads little-endian elements out of `raw` (ONNX `raw_data`).
fn from_le<T, const N: usize>(raw: &[u8], f: fn([u8; N]) -> T) -> Vec<T> {
    raw.chunks_exact(N)
        .map(|c| {
            let mut b = [0u8; N];
            b.copy_from_slice(c);
            f(b)
        })
        .collect()
}

fn is_external(t: &pb::TensorProto) -> bool {
    t.data_location() == pb::tensor_proto::DataLocation::EXTERNAL || !t.external_data.is_empty()
}

/// The external data files a model's tensors read, each read once (construction time).
struct ExternalFiles<'a> {
    /// The model file's folder; `None` for a model parsed from bytes.
    dir: Option<&'a Path>,
    files: HashMap<String, Vec<u8>>,
}

impl ExternalFiles<'_> {
    /// The bytes of external tensor `t` (ONNX's `external_data` entries: `location`, a
    /// path relative to the model's folder, and optional `offset` and `length`).
    fn bytes_of(&mut self, t: &pb::TensorProto, what: &str) -> Result<Vec<u8>, String> {
        let Some(dir) = self.dir else {
            return Err(format!(
                "tensor {what} keeps its data in an external file, which can only be read when \
                 the model is loaded from its file: load it by path, or save the model with \
                 all tensors inside (onnx.save_model(m, path, save_as_external_data=False))"
            ));
        };
        let entry = |key: &str| {
            t.external_data
                .iter()
                .find(|e| e.key() == key)
                .map(|e| e.value().to_string())
        };
        let Some(location) = entry("location") else {
            return Err(format!(
                "tensor {what} is stored externally but names no location: the file is damaged"
            ));
        };
        let rel = Path::new(&location);
        let plain = rel.components().all(|c| {
            use std::path::Component;
            matches!(c, Component::Normal(_) | Component::CurDir)
        });
        if rel.is_absolute() || !plain {
            return Err(format!(
                "tensor {what}'s external data location {location:?} is not a plain path \
                 inside the model's folder (ONNX requires a relative path without '..')"
            ));
        }
        let number = |key: &str| -> Result<Option<usize>, String> {
            entry(key)
                .map(|v| {
                    v.trim().parse::<usize>().map_err(|_| {
                        format!("tensor {what}'s external data {key} {v:?} is not a byte count")
                    })
                })
                .transpose()
        };
        let (offset, length) = (number("offset")?.unwrap_or(0), number("length")?);
        if !self.files.contains_key(&location) {
            let path = dir.join(rel);
            let bytes = std::fs::read(&path).map_err(|e| {
                format!(
                    "tensor {what} keeps its data in {}, which cannot be read ({e}): keep the \
                     data file next to the model, as it was saved",
                    path.display()
                )
            })?;
            self.files.insert(location.clone(), bytes);
        }
        let file = &self.files[&location];
        let end = match length {
            Some(len) => offset.checked_add(len),
            None => Some(file.len()),
        };
        match end {
            Some(end) if offset <= end && end <= file.len() => Ok(file[offset..end].to_vec()),
            _ => Err(format!(
                "tensor {what} reads bytes {offset}..{} of {location}, which holds {}: the \
                 data file does not belong to this model or is truncated",
                end.map_or("(overflow)".to_string(), |e| e.to_string()),
                file.len()
            )),
        }
    }

    /// Decodes `t`, reading its bytes from its data file when it is external.
    fn decode(&mut self, t: &pb::TensorProto, what: &str) -> Result<Const, String> {
        if is_external(t) {
            let bytes = self.bytes_of(t, what)?;
            decode_with(t, what, Some(&bytes))
        } else {
            decode_with(t, what, None)
        }
    }
}

/// Decodes a `TensorProto` (raw or typed storage) held inside the model: an external one is
/// an error that says how to load it (attributes; initializers go through
/// [`ExternalFiles`]).
pub(crate) fn decode_tensor(t: &pb::TensorProto, what: &str) -> Result<Const, String> {
    let mut none = ExternalFiles {
        dir: None,
        files: HashMap::new(),
    };
    none.decode(t, what)
}

/// Decodes `t`, its raw bytes taken from `external` where given (an external tensor).
fn decode_with(t: &pb::TensorProto, what: &str, external: Option<&[u8]>) -> Result<Const, String> {
    let mut shape = Vec::with_capacity(t.dims.len());
    for &d in &t.dims {
        if d < 0 {
            return Err(format!("tensor {what} has a negative dimension {d}"));
        }
        shape.push(d as usize);
    }
    let n = shape
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .ok_or_else(|| format!("tensor {what}: element count overflows"))?;
    let raw = external.unwrap_or(t.raw_data());
    let has_raw = external.is_some() || t.has_raw_data();
    let data = match t.data_type() {
        dtype::FLOAT => ConstData::F32(if has_raw {
            from_le(raw, f32::from_le_bytes)
        } else {
            t.float_data.clone()
        }),
        dtype::INT8 => ConstData::I8(if has_raw {
            raw.iter().map(|&b| b as i8).collect()
        } else {
            t.int32_data.iter().map(|&v| v as i8).collect()
        }),
        dtype::UINT8 | dtype::BOOL => ConstData::U8(if has_raw {
            raw.to_vec()
        } else {
            t.int32_data.iter().map(|&v| v as u8).collect()
        }),
        dtype::INT32 => ConstData::I32(if has_raw {
            from_le(raw, i32::from_le_bytes)
        } else {
            t.int32_data.clone()
        }),
        dtype::INT64 => ConstData::I64(if has_raw {
            from_le(raw, i64::from_le_bytes)
        } else {
            t.int64_data.clone()
        }),
        code @ (dtype::UINT4 | dtype::INT4) => {
            // ONNX packs two elements a byte, the first in the low nibble; typed storage
            // holds one packed byte per int32.
            let packed: Vec<u8> = if has_raw {
                raw.to_vec()
            } else {
                t.int32_data.iter().map(|&v| v as u8).collect()
            };
            if packed.len() != n.div_ceil(2) {
                return Err(format!(
                    "tensor {what} holds {} bytes of packed 4-bit values but its shape {shape:?} \
                     needs {}",
                    packed.len(),
                    n.div_ceil(2)
                ));
            }
            let nibbles = packed.iter().flat_map(|&b| [b & 0x0f, b >> 4]).take(n);
            ConstData::I8(if code == dtype::INT4 {
                nibbles.map(|x| ((x << 4) as i8) >> 4).collect()
            } else {
                nibbles.map(|x| x as i8 - 8).collect()
            })
        }
        other => {
            return Err(format!(
                "tensor {what} has ONNX data type {other} ({}); supported: float32, int8, uint8, \
                 int32, int64, bool, int4, uint4",
                type_name(other)
            ))
        }
    };
    let c = Const { shape, data };
    if c.len() != n {
        return Err(format!(
            "tensor {what} has {} values but its shape {:?} needs {n}",
            c.len(),
            c.shape
        ));
    }
    Ok(c)
}

pub(crate) fn type_name(code: i32) -> &'static str {
    match code {
        1 => "float32",
        2 => "uint8",
        3 => "int8",
        4 => "uint16",
        5 => "int16",
        6 => "int32",
        7 => "int64",
        8 => "string",
        9 => "bool",
        10 => "float16",
        11 => "float64",
        12 => "uint32",
        13 => "uint64",
        14 => "complex64",
        15 => "complex128",
        16 => "bfloat16",
        17..=20 => "float8",
        21 => "uint4",
        22 => "int4",
        23 => "float4",
        _ => "other",
    }
}

/// Bytes per element of ONNX type `code` in a file (packed 4-bit types: 1, rounding up;
/// strings and unknown codes: 0).
fn type_bytes(code: i32) -> usize {
    match code {
        1 | 6 | 12 => 4,
        2..=3 | 9 | 17..=23 => 1,
        4 | 5 | 10 | 16 => 2,
        7 | 11 | 13 | 14 => 8,
        15 => 16,
        _ => 0,
    }
}

fn elem_of(code: i32) -> Option<ElemType> {
    match code {
        dtype::FLOAT => Some(ElemType::F32),
        dtype::INT8 => Some(ElemType::I8),
        dtype::UINT8 => Some(ElemType::U8),
        dtype::INT32 => Some(ElemType::I32),
        dtype::INT64 => Some(ElemType::I64),
        _ => None,
    }
}

fn value_info(v: &pb::ValueInfoProto) -> ValueInfo {
    let mut info = ValueInfo {
        name: v.name().to_string(),
        elem: None,
        dims: Vec::new(),
        dim_names: Vec::new(),
        raw_type: 0,
    };
    if let Some(pb::type_proto::Value::TensorType(tt)) = &v.type_.value {
        info.raw_type = tt.elem_type();
        info.elem = elem_of(tt.elem_type());
        if let Some(shape) = tt.shape.as_ref() {
            for d in &shape.dim {
                use pb::tensor_shape_proto::dimension::Value;
                let (dim, name) = match &d.value {
                    Some(Value::DimValue(v)) if *v >= 0 => (Some(*v as usize), None),
                    Some(Value::DimParam(p)) if !p.is_empty() => (None, Some(p.clone())),
                    _ => (None, None),
                };
                info.dims.push(dim);
                info.dim_names.push(name);
            }
        }
    }
    info
}

fn attr_value(a: &pb::AttributeProto, node: &str) -> Result<Attr, String> {
    use pb::attribute_proto::AttributeType as T;
    Ok(match a.type_() {
        T::INT => Attr::Int(a.i()),
        T::FLOAT => Attr::Float(a.f()),
        T::INTS => Attr::Ints(a.ints.clone()),
        T::FLOATS => Attr::Floats(a.floats.clone()),
        T::STRING => Attr::Str(String::from_utf8_lossy(a.s()).into_owned()),
        // A tensor of a type the importer does not read: kept as `Other` (the node that
        // needs it is refused when lowered).
        T::TENSOR if !dtype::readable(a.t.data_type()) => Attr::Other,
        T::TENSOR => Attr::Tensor(decode_tensor(
            &a.t,
            &format!("attribute {} of node {node}", a.name()),
        )?),
        _ => Attr::Other,
    })
}

/// `(scale input, zero point input)` of the quantization a node gives its output:
/// `QuantizeLinear` and the QOperator forms. `None` for other operators.
pub(crate) fn output_quant_inputs(op: &str) -> Option<(usize, usize)> {
    Some(match op {
        "QuantizeLinear" => (1, 2),
        "QLinearConv" | "QLinearMatMul" | "QLinearAdd" | "QLinearMul" => (6, 7),
        "QGemm" => (7, 8),
        "QLinearSigmoid"
        | "QLinearLeakyRelu"
        | "QLinearAveragePool"
        | "QLinearGlobalAveragePool" => (3, 4),
        "QLinearConcat" => (0, 1),
        _ => return None,
    })
}

/// `(scale input, zero point input)` of the quantization a node reads its data input 0
/// with: `DequantizeLinear` and the QOperator forms (not `QLinearConcat`, whose inputs each
/// carry their own). `None` for other operators.
pub(crate) fn input_quant_inputs(op: &str) -> Option<(usize, usize)> {
    Some(match op {
        "DequantizeLinear"
        | "QLinearConv"
        | "QLinearMatMul"
        | "QGemm"
        | "QLinearAdd"
        | "QLinearMul"
        | "QLinearSigmoid"
        | "QLinearLeakyRelu"
        | "QLinearAveragePool"
        | "QLinearGlobalAveragePool" => (1, 2),
        _ => return None,
    })
}

impl OnnxGraph {
    /// The constant named `name`: an initializer or the `value` of a `Constant` node.
    pub fn constant(&self, name: &str) -> Option<&Const> {
        self.consts.get(name).or_else(|| {
            self.nodes
                .iter()
                .find(|n| n.op == "Constant" && n.outputs.first().map(String::as_str) == Some(name))
                .and_then(|n| match n.attrs.get("value") {
                    Some(Attr::Tensor(c)) => Some(c),
                    _ => None,
                })
        })
    }

    /// Reads and parses a file.
    pub fn load(path: &Path) -> Result<OnnxGraph, EngineError> {
        let bytes = std::fs::read(path).map_err(|source| EngineError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Self::parse_in(&bytes, path, path.parent().or(Some(Path::new("."))))
    }

    /// Parses the bytes of an `.onnx` file (`path` is only used in messages); a tensor kept
    /// in an external data file is an error (see [`OnnxGraph::load`]).
    pub fn parse(bytes: &[u8], path: &Path) -> Result<OnnxGraph, EngineError> {
        Self::parse_in(bytes, path, None)
    }

    /// [`OnnxGraph::parse`], reading external tensor data from files in `data_dir`.
    fn parse_in(
        bytes: &[u8],
        path: &Path,
        data_dir: Option<&Path>,
    ) -> Result<OnnxGraph, EngineError> {
        let model = pb::ModelProto::parse_from_bytes(bytes).map_err(|e| {
            parse_err(
                path,
                format!("not an ONNX protobuf ({e}); is this really an .onnx file?"),
            )
        })?;
        let Some(g) = model.graph.as_ref() else {
            return Err(parse_err(path, "the model has no graph"));
        };
        let opset = model
            .opset_import
            .iter()
            .find(|o| o.domain().is_empty() || o.domain() == "ai.onnx")
            .map(|o| o.version())
            .unwrap_or(0);
        let mut external = ExternalFiles {
            dir: data_dir,
            files: HashMap::new(),
        };
        let mut consts = HashMap::new();
        let mut unreadable = HashMap::new();
        let mut four_bit = HashMap::new();
        for t in &g.initializer {
            let code = t.data_type();
            if !dtype::readable(code) {
                let length = t.external_data.iter().find(|e| e.key() == "length");
                let bytes = if let Some(len) = length.and_then(|e| e.value().parse().ok()) {
                    len
                } else if t.has_raw_data() {
                    t.raw_data().len()
                } else {
                    let n = t.dims.iter().map(|&d| d.max(0) as usize);
                    n.fold(1usize, usize::saturating_mul)
                        .saturating_mul(type_bytes(code))
                };
                unreadable.insert(t.name().to_string(), Unreadable { code, bytes });
                continue;
            }
            let c = external
                .decode(t, t.name())
                .map_err(|r| parse_err(path, r))?;
            if matches!(code, dtype::INT4 | dtype::UINT4) {
                four_bit.insert(t.name().to_string(), code);
            }
            consts.insert(t.name().to_string(), c);
        }
        if !g.sparse_initializer.is_empty() {
            return Err(parse_err(
                path,
                "the graph has sparse initializers, which this importer does not read",
            ));
        }
        let mut unreadable_outputs = Vec::new();
        let mut nodes = Vec::with_capacity(g.node.len());
        for n in &g.node {
            let first = n.output.first().map(String::as_str).unwrap_or("");
            let name = if n.name().is_empty() {
                format!("{}:{first}", n.op_type())
            } else {
                n.name().to_string()
            };
            if first.is_empty() {
                return Err(parse_err(
                    path,
                    format!(
                        "node {name} ({}) has no first output: every operator writes one; the \
                         file is damaged or not written by an ONNX exporter",
                        n.op_type()
                    ),
                ));
            }
            if n.op_type() == "Constant" {
                if let Some(a) = n.attribute.iter().find(|a| a.name() == "value") {
                    let code = a.t.data_type();
                    if !dtype::readable(code) {
                        let bytes = a.t.raw_data().len();
                        // Merged after the order check: the node writes this value.
                        unreadable_outputs.push((first.to_string(), Unreadable { code, bytes }));
                    } else if matches!(code, dtype::INT4 | dtype::UINT4) {
                        four_bit.insert(first.to_string(), code);
                    }
                }
            }
            let mut attrs = HashMap::new();
            for a in &n.attribute {
                if !a.ref_attr_name().is_empty() {
                    return Err(parse_err(
                        path,
                        format!(
                            "node {name} has a reference attribute (functions are not supported)"
                        ),
                    ));
                }
                attrs.insert(
                    a.name().to_string(),
                    attr_value(a, &name).map_err(|r| parse_err(path, r))?,
                );
            }
            nodes.push(Node {
                name,
                op: n.op_type().to_string(),
                domain: n.domain().to_string(),
                inputs: n.input.clone(),
                outputs: n.output.clone(),
                attrs,
            });
        }
        check_order(&nodes, &consts, &unreadable, &g.input).map_err(|r| parse_err(path, r))?;
        unreadable.extend(unreadable_outputs);
        let inputs = g
            .input
            .iter()
            .filter(|v| !consts.contains_key(v.name()) && !unreadable.contains_key(v.name()))
            .map(value_info)
            .collect();
        let outputs = g.output.iter().map(value_info).collect();
        Ok(OnnxGraph {
            opset,
            producer: format!("{} {}", model.producer_name(), model.producer_version())
                .trim()
                .to_string(),
            nodes,
            consts,
            unreadable,
            four_bit,
            inputs,
            outputs,
            metadata: metadata_of(&model),
        })
    }
}

/// ONNX Runtime's `DedicatedQDQPair` option (and some exporters) give each reader of a
/// tensor a `QuantizeLinear` of its own with the same parameters. Those quantize the same
/// values the same way, so all but the first are dropped and their readers read the
/// first's output: the tensor is quantized once, and the operator before it keeps its
/// integer path (a convolution with two such readers would otherwise write float and be
/// quantized twice). A duplicate whose output is a graph output is kept. `None` when the
/// graph has no duplicates. Construction time only (clones the graph when it merges).
pub(crate) fn merge_duplicate_quantizers(g: &OnnxGraph) -> Option<OnnxGraph> {
    let same_input = |a: Option<&str>, b: Option<&str>| match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) => {
            a == b || matches!((g.constant(a), g.constant(b)), (Some(x), Some(y)) if x == y)
        }
        _ => false,
    };
    let graph_outputs: HashSet<&str> = g.outputs.iter().map(|o| o.name.as_str()).collect();
    let mut kept: HashMap<&str, Vec<usize>> = HashMap::new();
    let mut renamed: HashMap<String, String> = HashMap::new();
    let mut dropped = vec![false; g.nodes.len()];
    for (j, n) in g.nodes.iter().enumerate() {
        let (Some(x), Some(out)) = (n.input(0), n.outputs.first()) else {
            continue;
        };
        if n.op != "QuantizeLinear" || n.outputs.len() != 1 {
            continue;
        }
        let twins = kept.entry(x).or_default();
        let twin = twins.iter().copied().find(|&k| {
            let m = &g.nodes[k];
            m.domain == n.domain
                && m.attrs == n.attrs
                && same_input(m.input(1), n.input(1))
                && same_input(m.input(2), n.input(2))
        });
        match twin {
            Some(k) if !graph_outputs.contains(out.as_str()) => {
                renamed.insert(out.clone(), g.nodes[k].outputs[0].clone());
                dropped[j] = true;
            }
            _ => twins.push(j),
        }
    }
    if renamed.is_empty() {
        return None;
    }
    let nodes = g
        .nodes
        .iter()
        .zip(&dropped)
        .filter(|(_, &d)| !d)
        .map(|(n, _)| {
            let mut n = n.clone();
            for i in &mut n.inputs {
                if let Some(to) = renamed.get(i.as_str()) {
                    i.clone_from(to);
                }
            }
            n
        })
        .collect();
    Some(OnnxGraph { nodes, ..g.clone() })
}

/// The `metadata_props` of `model` as (key, value) pairs, in file order.
pub(crate) fn metadata_of(model: &pb::ModelProto) -> Vec<(String, String)> {
    model
        .metadata_props
        .iter()
        .map(|p| (p.key().to_string(), p.value().to_string()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tensor(name: &str, code: i32, dims: &[i64], raw: Option<Vec<u8>>) -> pb::TensorProto {
        let mut t = pb::TensorProto::new();
        t.set_name(name.to_owned());
        t.set_data_type(code);
        t.dims = dims.to_vec();
        if let Some(raw) = raw {
            t.set_raw_data(raw);
        }
        t
    }

    #[test]
    fn four_bit_tensors_unpack_low_nibble_first_in_both_storages() {
        // [1, 2, -8, -1, 7] as int4: 0x21, 0xf8, 0x07 (the last high nibble is padding).
        let raw = vec![0x21, 0xf8, 0x07];
        let i4 = decode_tensor(&tensor("a", dtype::INT4, &[5], Some(raw.clone())), "a").unwrap();
        assert_eq!(i4.data, ConstData::I8(vec![1, 2, -8, -1, 7]));
        // uint4 [1, 2, 8, 15, 7], held as x - 8.
        let u4 = decode_tensor(&tensor("b", dtype::UINT4, &[5], Some(raw.clone())), "b").unwrap();
        assert_eq!(u4.data, ConstData::I8(vec![-7, -6, 0, 7, -1]));
        // Typed storage: one packed byte per int32.
        let mut typed = tensor("c", dtype::INT4, &[5], None);
        typed.int32_data = raw.iter().map(|&b| i32::from(b)).collect();
        assert_eq!(decode_tensor(&typed, "c").unwrap(), i4);
        // A byte too many or too few is an error that says so.
        for bytes in [2, 4] {
            let t = tensor("d", dtype::INT4, &[5], Some(vec![0; bytes]));
            let e = decode_tensor(&t, "d").unwrap_err();
            assert!(
                e.contains(&format!("holds {bytes} bytes")) && e.contains("needs 3"),
                "{e}"
            );
        }
    }

    #[test]
    fn constants_of_unread_types_keep_the_graph_readable() {
        let mut g = pb::GraphProto::new();
        g.initializer
            .push(tensor("half", 10, &[2], Some(vec![0; 4])));
        g.initializer.push(tensor("zp16", 4, &[], Some(vec![0; 2])));
        g.initializer
            .push(tensor("w4", dtype::INT4, &[3], Some(vec![0x21, 0x03])));
        let mut c = pb::NodeProto::new();
        c.set_op_type("Constant".into());
        c.output = vec!["k".into()];
        let mut a = pb::AttributeProto::new();
        a.set_name("value".into());
        a.set_type(pb::attribute_proto::AttributeType::TENSOR);
        a.t = protobuf::MessageField::some(tensor("", 11, &[1], Some(vec![0; 8])));
        c.attribute.push(a);
        let mut add = pb::NodeProto::new();
        add.set_op_type("Add".into());
        add.input = vec!["half".into(), "k".into()];
        add.output = vec!["y".into()];
        g.node = vec![c, add];
        let mut m = pb::ModelProto::new();
        m.graph = protobuf::MessageField::some(g);
        let bytes = m.write_to_bytes().unwrap();
        let g = OnnxGraph::parse(&bytes, Path::new("m.onnx")).unwrap();
        assert_eq!(g.unreadable["half"], Unreadable { code: 10, bytes: 4 });
        assert_eq!(g.unreadable["zp16"], Unreadable { code: 4, bytes: 2 });
        assert_eq!(g.unreadable["k"], Unreadable { code: 11, bytes: 8 });
        assert!(!g.consts.contains_key("half") && g.constant("k").is_none());
        assert_eq!(g.four_bit["w4"], dtype::INT4);
        assert_eq!(g.consts["w4"].data, ConstData::I8(vec![1, 2, 3]));
        assert_eq!(type_name(10), "float16");
    }
}
