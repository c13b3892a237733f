"""Shared code of zoo.py and op_models.py: a small graph builder for float NCHW models
(static shapes, batch 1, opset 17), static quantization with ONNX Runtime's quantizer in
both formats and both activation types, and the reference files (seeded inputs, ORT
outputs, manifest) an importer is checked against.

Contract:
- Everything is a pure function of the seed: the same seed gives byte-identical files.
- Quantization: `onnxruntime.quantization.quantize_static`, per_channel=True, weights
  QInt8, activations QInt8 ("s8") or QUInt8 ("u8"), MinMax calibration over
  CALIB_SAMPLES seeded image-like inputs, QuantFormat.QDQ ("qdq") or QOperator ("qop").
  Model inputs and outputs stay float32 (QuantizeLinear after the input, DequantizeLinear
  before the outputs), as quantize_static leaves them.
- Reference: ORT CPU provider, intra_op_num_threads=1, sequential, ORT_ENABLE_ALL. Files
  `<stem>.in<i>.bin` / `<stem>.out<j>.bin` are raw little-endian C-order arrays, and
  `<stem>.json` is the manifest (see README.md).
"""

import collections
import json
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import redline_onnx as ro  # noqa: E402

try:
    import onnx
    from onnx import TensorProto, helper, numpy_helper
except ImportError:
    ro.fail("the Python package 'onnx' is missing: pip install onnx")
try:
    import onnxruntime as ort
    from onnxruntime import quantization as oq
except ImportError:
    ro.fail("the Python package 'onnxruntime' is missing: pip install onnxruntime")

OPSET = 17
CALIB_SAMPLES = 8
# (format tag, QuantFormat), (activation tag, QuantType)
FORMATS = [("qdq", oq.QuantFormat.QDQ), ("qop", oq.QuantFormat.QOperator)]
ACTIVATIONS = [("s8", oq.QuantType.QInt8), ("u8", oq.QuantType.QUInt8)]
VARIANTS = [(f, fq, a, aq) for f, fq in FORMATS for a, aq in ACTIVATIONS]
IMAGE_MEAN, IMAGE_STD = 0.45, 0.225
# On x86, ORT's default (qdqisint8allowed = 0) rewrites int8 Q/DQ pairs to uint8 where it
# can and leaves the rest as DQ -> float op -> Q: a QDQ s8 model then runs about half of its
# convolutions, all Adds and the MaxPool in float. With "1" every QDQ node group fuses into
# the same integer kernels the QOperator model uses (ORT's default on ARM).
ORT_CONFIG = {"session.qdqisint8allowed": "1"}


def _pair(v):
    return (v, v) if isinstance(v, int) else tuple(v)


def conv_out(size, k, s, pb, pe, d=1, ceil=False):
    num = size + pb + pe - d * (k - 1) - 1
    out = (-(-num // s) if ceil else num // s) + 1
    if ceil and (out - 1) * s >= size + pb:  # last window must start inside input or head pad
        out -= 1
    return out


class Graph:
    """Float NCHW graph under construction. Tensors are names; `self.shape[name]` is the
    static shape. Weights come from `self.rng` (He-init); every method returns the name of
    its output."""

    def __init__(self, name, seed):
        self.name = name
        self.rng = np.random.default_rng(seed)
        self.nodes, self.inits, self.inputs, self.outputs = [], [], [], []
        self.shape = {}
        self._n = collections.Counter()

    # -- plumbing --
    def _id(self, kind):
        self._n[kind] += 1
        return f"{kind}_{self._n[kind]}"

    def node(self, op, ins, out_shape, **attrs):
        name = self._id(op.lower())
        out = name + "_out"
        self.nodes.append(helper.make_node(op, ins, [out], name=name, **attrs))
        self.shape[out] = tuple(int(v) for v in out_shape)
        return out

    def conv_transpose(self, x, cout, k, stride, pads=(0, 0, 0, 0), output_padding=(0, 0), bias=True):
        """ONNX ConvTranspose (one group, no dilation), He-init weights [cin, cout, kh, kw]."""
        n, cin, h, w = self.shape[x]
        kh, kw = _pair(k)
        sh, sw = _pair(stride)
        wt = self.rng.normal(0.0, np.sqrt(2.0 / (cin * kh * kw / (sh * sw))), (cin, cout, kh, kw))
        ins = [x, self.const(wt.astype(np.float32), "w")]
        if bias:
            ins.append(self.const(self.rng.normal(0.0, 0.1, cout).astype(np.float32), "b"))
        oh = (h - 1) * sh + kh + output_padding[0] - pads[0] - pads[2]
        ow = (w - 1) * sw + kw + output_padding[1] - pads[1] - pads[3]
        return self.node("ConvTranspose", ins, (n, cout, oh, ow), kernel_shape=[kh, kw], strides=[sh, sw],
                         pads=list(pads), output_padding=list(output_padding))

    def split(self, x, sizes, axis=1, as_input=True):
        """ONNX Split into parts of `sizes` along `axis` (sizes as an input, opset 13+, or,
        with as_input=False, no sizes: equal parts); returns the output names."""
        name = self._id("split")
        outs = [f"{name}_out{i}" for i in range(len(sizes))]
        ins = [x, self.const(np.array(sizes, dtype=np.int64), "split_sizes")] if as_input else [x]
        self.nodes.append(helper.make_node("Split", ins, outs, name=name, axis=axis))
        for o, k in zip(outs, sizes):
            shp = list(self.shape[x])
            shp[axis] = k
            self.shape[o] = tuple(shp)
        return outs

    def slice(self, x, starts, ends, axes, steps=None):
        """ONNX Slice with constant starts/ends/axes/steps (positive steps)."""
        steps = steps or [1] * len(starts)
        shp = list(self.shape[x])
        for s0, e0, a, k in zip(starts, ends, axes, steps):
            d = shp[a]
            s1 = min(max(s0 + d if s0 < 0 else s0, 0), d)
            e1 = min(max(e0 + d if e0 < 0 else e0, 0), d)
            shp[a] = max(0, -(-(e1 - s1) // k))
        ins = [x] + [self.const(np.array(v, dtype=np.int64), "slice_" + n)
                     for n, v in (("starts", starts), ("ends", ends), ("axes", axes), ("steps", steps))]
        return self.node("Slice", ins, shp)

    def const(self, array, kind="c"):
        name = self._id(kind)
        arr = np.asarray(array)
        self.inits.append(numpy_helper.from_array(arr, name))
        self.shape[name] = arr.shape
        return name

    def input(self, shape, name=None):
        name = name or f"input{len(self.inputs)}"
        self.inputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, list(shape)))
        self.shape[name] = tuple(shape)
        return name

    def output(self, x, name=None):
        if name:  # rename the producing node's output
            for nd in self.nodes:
                for i, o in enumerate(nd.output):
                    if o == x:
                        nd.output[i] = name
            self.shape[name] = self.shape[x]
            x = name
        self.outputs.append(x)
        return x

    def model(self):
        outs = [helper.make_tensor_value_info(o, TensorProto.FLOAT, list(self.shape[o])) for o in self.outputs]
        graph = helper.make_graph(self.nodes, self.name, self.inputs, outs, self.inits)
        opset = getattr(self, "opset", OPSET)  # a case may ask for a newer one (Mish: 18)
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], producer_name="redline-zoo")
        m.ir_version = 8
        m = onnx.shape_inference.infer_shapes(m, check_type=True, strict_mode=True)
        onnx.checker.check_model(m, full_check=True)
        for vi in m.graph.output:  # our shape bookkeeping must agree with ONNX's
            got = tuple(d.dim_value for d in vi.type.tensor_type.shape.dim)
            if got != self.shape[vi.name]:
                ro.fail(f"{self.name}: output {vi.name} has ONNX shape {got}, builder computed {self.shape[vi.name]}")
        return m

    # -- layers --
    def conv(self, x, cout, k=3, stride=1, pads=None, dilation=1, group=1, bias=True, auto_pad=None, gain=1.0,
             bias_value=None):
        n, cin, h, w = self.shape[x]
        kh, kw = _pair(k)
        sh, sw = _pair(stride)
        dh, dw = _pair(dilation)
        attrs = dict(kernel_shape=[kh, kw], strides=[sh, sw], dilations=[dh, dw], group=group)
        if auto_pad == "SAME_UPPER":
            oh, ow = -(-h // sh), -(-w // sw)
            attrs["auto_pad"] = "SAME_UPPER"
        else:
            if pads is None:  # "same"-style symmetric padding
                pads = [dh * (kh - 1) // 2, dw * (kw - 1) // 2] * 2
            attrs["pads"] = list(pads)
            oh = conv_out(h, kh, sh, pads[0], pads[2], dh)
            ow = conv_out(w, kw, sw, pads[1], pads[3], dw)
        assert cin % group == 0 and cout % group == 0, (cin, cout, group)
        fan_in = cin // group * kh * kw
        wt = (self.rng.standard_normal((cout, cin // group, kh, kw)) * gain * np.sqrt(2.0 / fan_in)).astype(np.float32)
        ins = [x, self.const(wt, "w")]
        if bias:
            b = self.rng.normal(0.0, 0.1, cout) if bias_value is None else np.full(cout, bias_value)
            ins.append(self.const(b.astype(np.float32), "b"))
        return self.node("Conv", ins, (n, cout, oh, ow), **attrs)

    def relu(self, x):
        return self.node("Relu", [x], self.shape[x])

    def clip(self, x, lo=0.0, hi=6.0):
        return self.node("Clip", [x, self.const(np.float32(lo), "lo"), self.const(np.float32(hi), "hi")],
                         self.shape[x])

    def sigmoid(self, x):
        return self.node("Sigmoid", [x], self.shape[x])

    def add(self, a, b):
        return self.node("Add", [a, b], np.broadcast_shapes(self.shape[a], self.shape[b]))

    def mul(self, a, b):
        return self.node("Mul", [a, b], np.broadcast_shapes(self.shape[a], self.shape[b]))

    def maxpool(self, x, k=2, s=2, pads=(0, 0, 0, 0), ceil_mode=0):
        return self._pool("MaxPool", x, k, s, pads, ceil_mode)

    def avgpool(self, x, k=2, s=2, pads=(0, 0, 0, 0), ceil_mode=0, count_include_pad=0):
        return self._pool("AveragePool", x, k, s, pads, ceil_mode, count_include_pad=count_include_pad)

    def _pool(self, op, x, k, s, pads, ceil_mode, **extra):
        n, c, h, w = self.shape[x]
        kh, kw = _pair(k)
        sh, sw = _pair(s)
        oh = conv_out(h, kh, sh, pads[0], pads[2], ceil=bool(ceil_mode))
        ow = conv_out(w, kw, sw, pads[1], pads[3], ceil=bool(ceil_mode))
        return self.node(op, [x], (n, c, oh, ow), kernel_shape=[kh, kw], strides=[sh, sw], pads=list(pads),
                         ceil_mode=ceil_mode, **extra)

    def gap(self, x):
        n, c, _, _ = self.shape[x]
        return self.node("GlobalAveragePool", [x], (n, c, 1, 1))

    def concat(self, xs, axis=1):
        shp = list(self.shape[xs[0]])
        shp[axis] = sum(self.shape[x][axis] for x in xs)
        return self.node("Concat", list(xs), shp, axis=axis)

    def resize(self, x, mode="nearest", scale=None, size=None, ctm=None, nearest_mode=None):
        """scale: spatial factor (float) or size: (H, W). ctm defaults: nearest -> asymmetric
        with nearest_mode floor (the 'Upsample' behaviour), linear -> half_pixel."""
        n, c, h, w = self.shape[x]
        attrs = {"mode": mode}
        if mode == "nearest":
            attrs["coordinate_transformation_mode"] = ctm or "asymmetric"
            attrs["nearest_mode"] = nearest_mode or "floor"
        else:
            attrs["coordinate_transformation_mode"] = ctm or "half_pixel"
        if size is not None:
            sizes = self.const(np.array([n, c, size[0], size[1]], dtype=np.int64), "sizes")
            return self.node("Resize", [x, "", "", sizes], (n, c, size[0], size[1]), **attrs)
        sc = _pair(scale)
        scales = self.const(np.array([1, 1, sc[0], sc[1]], dtype=np.float32), "scales")
        return self.node("Resize", [x, "", scales], (n, c, int(np.floor(h * sc[0])), int(np.floor(w * sc[1]))),
                         **attrs)

    def flatten(self, x, axis=1):
        s = self.shape[x]
        return self.node("Flatten", [x], (int(np.prod(s[:axis])), int(np.prod(s[axis:]))), axis=axis)

    def gemm(self, x, nout, trans_b=1, bias=True):
        m, k = self.shape[x]
        wt = (self.rng.standard_normal((nout, k) if trans_b else (k, nout)) * np.sqrt(1.0 / k)).astype(np.float32)
        ins = [x, self.const(wt, "w")]
        if bias:
            ins.append(self.const(self.rng.normal(0.0, 0.1, nout).astype(np.float32), "b"))
        return self.node("Gemm", ins, (m, nout), transB=trans_b)

    def matmul(self, x, nout):
        k = self.shape[x][-1]
        wt = (self.rng.standard_normal((k, nout)) * np.sqrt(1.0 / k)).astype(np.float32)
        return self.node("MatMul", [x, self.const(wt, "w")], self.shape[x][:-1] + (nout,))

    def reshape(self, x, shape):
        out = np.empty(self.shape[x], dtype=np.uint8).reshape(shape).shape
        return self.node("Reshape", [x, self.const(np.array(shape, dtype=np.int64), "shape")], out)

    def transpose(self, x, perm):
        return self.node("Transpose", [x], tuple(self.shape[x][p] for p in perm), perm=list(perm))

    def squeeze(self, x, axes):
        out = tuple(d for i, d in enumerate(self.shape[x]) if i not in axes)
        return self.node("Squeeze", [x, self.const(np.array(axes, dtype=np.int64), "axes")], out)

    def unsqueeze(self, x, axes):
        out = list(self.shape[x])
        for a in sorted(axes):
            out.insert(a, 1)
        return self.node("Unsqueeze", [x, self.const(np.array(axes, dtype=np.int64), "axes")], out)


# -- inputs --
def image_like(rng, shape):
    """Normalised-image-like float32 NCHW: smooth random blobs in [0, 1] plus pixel noise,
    then (x - 0.45) / 0.225, so mostly within [-2, 2.5]."""
    n, c, h, w = shape
    lh, lw = max(1, -(-h // 8)), max(1, -(-w // 8))
    low = rng.uniform(0.0, 1.0, (n, c, lh, lw))
    up = np.repeat(np.repeat(low, 8, axis=2), 8, axis=3)[:, :, :h, :w]
    img = np.clip(up + rng.normal(0.0, 0.1, (n, c, h, w)), 0.0, 1.0)
    return ((img - IMAGE_MEAN) / IMAGE_STD).astype(np.float32)


def make_inputs(model, rng):
    """An image-like NCHW input for each 4-D graph input (`image_like`), standard normal
    values clipped to [-3, 3] for any other shape (a sequence, a feature vector)."""
    feeds = {}
    for vi in model.graph.input:
        shape = tuple(d.dim_value for d in vi.type.tensor_type.shape.dim)
        if not shape or any(d <= 0 for d in shape):
            ro.fail(f"{model.graph.name}: input {vi.name} has shape {shape}; inputs here have static shapes")
        if len(shape) == 4:
            feeds[vi.name] = image_like(rng, shape)
        else:
            feeds[vi.name] = np.clip(rng.standard_normal(shape), -3, 3).astype(np.float32)
    return feeds


class Reader(oq.CalibrationDataReader):
    def __init__(self, samples):
        self.samples = samples
        self.it = iter(samples)

    def get_next(self):
        return next(self.it, None)

    def rewind(self):
        self.it = iter(self.samples)


# -- quantization and reference --
def op_histogram(model):
    h = collections.Counter()
    for nd in model.graph.node:
        h[f"{nd.domain}.{nd.op_type}" if nd.domain not in ("", "ai.onnx") else nd.op_type] += 1
    return dict(sorted(h.items()))


def session(path_or_bytes, optimized_path=None, optimize=True):
    """An ORT CPU session on one thread; `optimize=False` runs the graph as written (no
    fusions: ORT's optimizer turns `DequantizeLinear -> MatMul(float weights) -> Add ->
    QuantizeLinear` into a QGemm that quantizes the weights itself)."""
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = (ort.GraphOptimizationLevel.ORT_ENABLE_ALL if optimize
                                   else ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    so.log_severity_level = 3
    for k, v in ORT_CONFIG.items():
        so.add_session_config_entry(k, v)
    if optimized_path:
        so.optimized_model_filepath = optimized_path
    return ort.InferenceSession(path_or_bytes, sess_options=so, providers=["CPUExecutionProvider"])


def cpu_isa():
    """x86 dot-product features that decide which MLAS int8 kernel ORT runs (Linux only)."""
    try:
        with open("/proc/cpuinfo", "r", encoding="utf-8") as f:
            flags = next((ln.split(":", 1)[1].split() for ln in f if ln.startswith("flags")), [])
    except OSError:
        return []
    return sorted(set(flags) & {"avx2", "avx512f", "avx512_vnni", "avx512bw", "avx_vnni", "amx_int8"})


def quantize(float_model, out_path, samples, fmt, act, reduce_range=False, weights=oq.QuantType.QInt8,
             exclude=None):
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "float.onnx")
        onnx.save(float_model, src)
        oq.quantize_static(src, out_path, Reader(samples), quant_format=fmt, per_channel=True,
                           weight_type=weights, activation_type=act, reduce_range=reduce_range,
                           calibrate_method=oq.CalibrationMethod.MinMax, nodes_to_exclude=exclude or [])
    return onnx.load(out_path)


def float_ends(model):
    """The names of `model`'s first Conv and last Gemm/MatMul (named here where the export
    left them unnamed): the layers mixed-precision deployments keep in float."""
    convs = [n for n in model.graph.node if n.op_type == "Conv"]
    products = [n for n in model.graph.node if n.op_type in ("Gemm", "MatMul")]
    ends = ([convs[0]] if convs else []) + ([products[-1]] if products else [])
    for i, n in enumerate(ends):
        if not n.name:
            n.name = f"float_end_{i}"
    return [n.name for n in ends]


def widen_four_bit(model):
    """`model` with every int4/uint4 initializer stored as int8/uint8: the same values and
    zero points, so the same ONNX results; ORT runs this copy with its integer kernels,
    where it runs 4-bit weights in float (dequantized, float convolution). Returns how many
    initializers it widened."""
    widened = 0
    for t in model.graph.initializer:
        if t.data_type in (TensorProto.INT4, TensorProto.UINT4):
            a = numpy_helper.to_array(t)
            dt = np.int8 if t.data_type == TensorProto.INT4 else np.uint8
            t.CopyFrom(numpy_helper.from_array(a.astype(dt), t.name))
            widened += 1
    return widened


def _tensor_entry(name, arr, path):
    arr = np.ascontiguousarray(arr)
    arr.astype(arr.dtype.newbyteorder("<"), copy=False).tofile(path)
    return {"name": name, "dtype": arr.dtype.name, "shape": list(arr.shape), "file": os.path.basename(path)}


def float_ops(model):
    """Histogram of the nodes of an (ORT-optimized) model that compute on float32 data, other
    than Quantize/DequantizeLinear: what ORT did not run as an integer kernel. Tensor types
    are propagated the simple way (a node's output has its first input's type)."""
    ty = {vi.name: vi.type.tensor_type.elem_type for vi in model.graph.input}
    ty.update({i.name: i.data_type for i in model.graph.initializer})
    h = collections.Counter()
    for nd in model.graph.node:
        if nd.op_type == "QuantizeLinear":
            t = ty.get(nd.input[2]) if len(nd.input) > 2 else TensorProto.UINT8
        elif nd.op_type == "DequantizeLinear":
            t = TensorProto.FLOAT
        else:
            # QLinearConcat's inputs are (Y_scale, Y_zero_point, X0, X0_scale, ...)
            first = nd.input[2] if nd.op_type == "QLinearConcat" else (nd.input[0] if nd.input else None)
            t = ty.get(first)
            if t == TensorProto.FLOAT and nd.op_type not in ("Shape",):
                h[f"{nd.domain}.{nd.op_type}" if nd.domain else nd.op_type] += 1
        for o in nd.output:
            ty[o] = t
    return dict(sorted(h.items()))


def write_reference(out_dir, stem, model_file, feeds, extra, ref_model=None, optimize=True):
    """Runs `model_file` (in out_dir) on ORT and writes <stem>.in*/out*.bin and <stem>.json.
    With `ref_model` (an onnx.ModelProto with the same inputs and outputs) ORT runs that
    model instead, and the manifest says so (`"reference_model": "widened copy"`); with
    `optimize=False` ORT runs the graph without its optimizer (`"graph_optimizations":
    "disabled"`). Returns the manifest."""
    path = os.path.join(out_dir, model_file)
    with tempfile.TemporaryDirectory() as tmp:
        opt_path = os.path.join(tmp, "optimized.onnx")
        run_path = path
        if ref_model is not None:
            run_path = os.path.join(tmp, "reference.onnx")
            onnx.save(ref_model, run_path)
        sess = session(run_path, optimized_path=opt_path, optimize=optimize)
        optimized = onnx.load(opt_path)
    outs = sess.run(None, feeds)
    model = onnx.load(path)
    man = {"model": model_file, "inputs": [], "outputs": []}
    for i, vi in enumerate(sess.get_inputs()):
        man["inputs"].append(_tensor_entry(vi.name, feeds[vi.name], os.path.join(out_dir, f"{stem}.in{i}.bin")))
    for j, (vi, arr) in enumerate(zip(sess.get_outputs(), outs)):
        if not np.all(np.isfinite(arr)):
            ro.fail(f"{model_file}: output {vi.name} has non-finite values")
        man["outputs"].append(_tensor_entry(vi.name, arr, os.path.join(out_dir, f"{stem}.out{j}.bin")))
    man["ops"] = op_histogram(model)
    if ref_model is not None:
        man["reference_model"] = "widened copy"
    if not optimize:
        man["graph_optimizations"] = "disabled"
    man.update(extra)
    man["ort"] = {"version": ort.__version__, "config": ORT_CONFIG, "intra_op_num_threads": 1, "cpu_isa": cpu_isa(),
                  "optimized_ops": op_histogram(optimized), "float_ops": float_ops(optimized)}
    with open(os.path.join(out_dir, f"{stem}.json"), "w", encoding="utf-8") as f:
        json.dump(man, f, indent=1, sort_keys=False)
        f.write("\n")
    return man


def qdq_pair(x, scale, zero_point, out):
    """`QuantizeLinear` of `x` (into `out + "_q"`) and its `DequantizeLinear` into `out`."""
    from onnx import helper
    return [helper.make_node("QuantizeLinear", [x, scale, zero_point], [out + "_q"]),
            helper.make_node("DequantizeLinear", [out + "_q", scale, zero_point], [out])]


def save_hand_model(out_dir, name, nodes, inits, shape, rng, opset=18, reference=True, unoptimized=False):
    """A hand-written test model: one float32 input `x` of `shape`, one output `y`, saved as
    <name>.onnx, with ORT's reference on a standard-normal input drawn from `rng` (unless
    `reference` is false) and, with `unoptimized`, a second one <name>_unoptimized from ORT
    running the graph as written (`write_reference(optimize=False)`)."""
    from onnx import helper
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    m = helper.make_model(helper.make_graph(nodes, "g", [x], [y], inits),
                          opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 10 if opset >= 21 else 8
    onnx.save(m, os.path.join(out_dir, f"{name}.onnx"))
    if not reference:
        return
    feeds = {"x": rng.standard_normal(shape).astype(np.float32)}
    extra = {"format": "hand", "activations": "s8"}
    write_reference(out_dir, name, f"{name}.onnx", feeds, extra)
    if unoptimized:
        write_reference(out_dir, name + "_unoptimized", f"{name}.onnx", feeds, extra, optimize=False)


# The readers through which a TensorRT-style convolution's float output goes on.
TRT_FLOAT_READERS = ("Add", "Sub", "Mul", "Div", "Sigmoid", "HardSigmoid", "HardSwish", "LeakyRelu",
                     "Neg", "Exp", "Tanh", "Softplus", "Mish", "Gelu",
                     "Concat", "Resize", "MaxPool", "AveragePool", "GlobalAveragePool", "Flatten", "Shape",
                     "Slice", "Split", "Transpose")


def remove_qdq_pairs(model, removable):
    """Removes each QuantizeLinear -> DequantizeLinear pair on a computed activation for which
    `removable(producer, readers)` holds (`producer` the node computing the quantized value,
    `readers` the nodes reading its dequantized value), unless a DequantizeLinear of it is a
    graph output: its readers then read the float value. Returns the number of pairs
    removed."""
    g = model.graph
    producer = {o: nd for nd in g.node for o in nd.output}
    readers = collections.defaultdict(list)
    for nd in g.node:
        for i in nd.input:
            readers[i].append(nd)
    outputs = {o.name for o in g.output}
    drop, rename = set(), {}
    for q in g.node:
        src = producer.get(q.input[0])
        if q.op_type != "QuantizeLinear" or src is None:
            continue
        dqs = readers[q.output[0]]
        if not dqs or any(d.op_type != "DequantizeLinear" or d.output[0] in outputs for d in dqs):
            continue
        if not removable(src, [r for d in dqs for r in readers[d.output[0]]]):
            continue
        drop.update(id(n) for n in [q] + dqs)
        rename.update({d.output[0]: q.input[0] for d in dqs})
    kept = [nd for nd in g.node if id(nd) not in drop]
    for nd in kept:
        for k, i in enumerate(nd.input):
            if i in rename:
                nd.input[k] = rename[i]
    del g.node[:]
    g.node.extend(kept)
    return len(rename)


def to_trt_style(model):
    """TensorRT-style Q/DQ placement (NVIDIA's pytorch-quantization, ModelOpt): removes
    each QuantizeLinear -> DequantizeLinear pair on a Conv's output whose dequantized value
    is read only by operators of TRT_FLOAT_READERS, so the convolution's float output goes on
    into them
    (ONNX Runtime then runs that convolution in float). Returns the number of pairs removed."""
    return remove_qdq_pairs(model, lambda src, after: src.op_type == "Conv" and bool(after)
                            and all(r.op_type in TRT_FLOAT_READERS for r in after))


STRICT_QUANTIZED_READERS = ("Conv", "ConvTranspose", "Gemm", "MatMul")


def to_trt_strict(model):
    """Q/DQ on the inputs of convolutions and matrix products only (as an exporter that
    quantizes those layers' inputs and nothing else writes it): removes every
    QuantizeLinear -> DequantizeLinear pair on a computed activation none of whose
    dequantized readers is a Conv/ConvTranspose/Gemm/MatMul and which is not a graph
    output, so everything between such layers runs in float. The graph input's quantization
    stays. quantize_static folds a ReLU after a convolution into its QuantizeLinear's range;
    removing that pair drops the ReLU, so the result computes another function than the float
    model: an agreement test of two engines on the same graph, not a model to deploy.
    Returns the number of pairs removed."""
    return remove_qdq_pairs(model, lambda src, after: not any(
        r.op_type in STRICT_QUANTIZED_READERS for r in after))


def to_float_weights(model):
    """Float weights with a QuantizeLinear -> DequantizeLinear pair, as PyTorch's QAT export,
    pytorch-quantization and ModelOpt write them: each DequantizeLinear of an int8/uint8
    initializer of rank >= 2 reads instead a QuantizeLinear (same scales, zero points and
    axis) of the float initializer ((q - zp) * scale, exactly representable). The quantized
    integers, and so every engine's result, stay the same. Returns the number of weights
    rewritten."""
    from onnx import helper, numpy_helper
    g = model.graph
    inits = {i.name: i for i in g.initializer}
    nodes, done = [], 0
    for nd in g.node:
        w = inits.get(nd.input[0]) if nd.op_type == "DequantizeLinear" else None
        q = numpy_helper.to_array(w) if w is not None else None
        if q is not None and q.dtype in (np.int8, np.uint8) and q.ndim >= 2:
            scale = numpy_helper.to_array(inits[nd.input[1]]).astype(np.float32)
            has_zp = len(nd.input) > 2 and nd.input[2] != ""
            zp = numpy_helper.to_array(inits[nd.input[2]]) if has_zp else np.zeros(1, q.dtype)
            axis = next((a.i for a in nd.attribute if a.name == "axis"), 1)
            shape = [1] * q.ndim
            if scale.size > 1:
                shape[axis] = -1
            f = (q.astype(np.float32) - zp.astype(np.float32).reshape(shape)) * scale.reshape(shape)
            fname, qname = f"{nd.input[0]}_float{done}", f"{nd.input[0]}_fakequant{done}"
            g.initializer.append(numpy_helper.from_array(f.astype(np.float32), fname))
            qn = helper.make_node("QuantizeLinear", [fname] + list(nd.input[1:]), [qname],
                                  name=f"{nd.name or qname}_weight_quantize")
            qn.attribute.extend(a for a in nd.attribute if a.name == "axis")
            nodes.append(qn)
            nd.input[0] = qname
            done += 1
        nodes.append(nd)
    del g.node[:]
    g.node.extend(nodes)
    used = {i for nd in g.node for i in nd.input}
    kept = [i for i in g.initializer if i.name in used]
    del g.initializer[:]
    g.initializer.extend(kept)
    return done


def to_strict_float_weights(model):
    """`to_trt_strict` and `to_float_weights` together, as NVIDIA's toolkits export a model:
    Q/DQ on convolution and Gemm inputs only, float weights with their own Q/DQ pair.
    Returns the number of pairs removed (the weights must all be rewritten as well)."""
    removed = to_trt_strict(model)
    return removed if to_float_weights(model) > 0 else 0


def to_pytorch_export(model):
    """The QDQ model written as PyTorch's exporter writes a quantized model
    (`torch.onnx.export` of a `torch.ao.quantization.convert`ed module; checked against
    torchvision's quantizable ResNet-18 with torch 2.15): every initializer becomes a
    `Constant` node just before the node that reads it (one per reader: a QuantizeLinear's
    scale is then defined after the Conv whose output it quantizes); a `Cast` to the
    tensor's own type sits between each QuantizeLinear and each node reading it; an int32
    bias's DequantizeLinear gets a zero point of shape [1] made by ConstantOfShape and Cast,
    beside its per-channel scales. The values, and so every engine's result, stay the same.
    Returns the number of Casts inserted."""
    from onnx import helper, numpy_helper, TensorProto
    g = model.graph
    inits = {i.name: i for i in g.initializer}
    zp_type = {}
    for nd in g.node:
        if nd.op_type == "QuantizeLinear":
            z = inits.get(nd.input[2]) if len(nd.input) > 2 else None
            zp_type[nd.output[0]] = z.data_type if z is not None else TensorProto.UINT8
    nodes, casts, k = [], 0, 0
    for nd in g.node:
        for j, name in enumerate(nd.input):
            if name in zp_type:
                cname = f"{nd.name or 'node'}_cast{k}"
                nodes.append(helper.make_node("Cast", [name], [cname], name=cname, to=zp_type[name]))
                nd.input[j], k, casts = cname, k + 1, casts + 1
            elif name in inits:
                cname = f"{nd.name or 'node'}_const{k}"
                t = onnx.TensorProto()
                t.CopyFrom(inits[name])
                t.name = ""
                nodes.append(helper.make_node("Constant", [], [cname], name=cname, value=t))
                nd.input[j], k = cname, k + 1
        nodes.append(nd)
    # int32 biases: a [1] zero point from ConstantOfShape and Cast, as PyTorch writes it.
    out = []
    for nd in nodes:
        if nd.op_type == "DequantizeLinear":
            src = next((c for c in nodes if c.op_type == "Constant" and c.output[0] == nd.input[0]), None)
            if src is not None and src.attribute[0].t.data_type == TensorProto.INT32:
                base = f"{nd.name or 'dq'}_zp{k}"
                k += 1
                shape = numpy_helper.from_array(np.array([1], np.int64))
                out.append(helper.make_node("Constant", [], [base + "_shape"], value=shape))
                out.append(helper.make_node(
                    "ConstantOfShape", [base + "_shape"], [base + "_zeros"],
                    value=numpy_helper.from_array(np.array([0], np.int32))))
                out.append(helper.make_node("Cast", [base + "_zeros"], [base], to=TensorProto.INT32))
                if len(nd.input) > 2:
                    nd.input[2] = base
                else:
                    nd.input.append(base)
        out.append(nd)
    del g.node[:]
    g.node.extend(out)
    del g.initializer[:]
    return casts


def to_modelopt_export(model, seed=0):
    """The QDQ model as NVIDIA's ModelOpt exports a network it quantized for TensorRT
    (`mtq.quantize(model, INT8_DEFAULT_CFG)`, `torch.onnx.export`; checked against
    torchvision's ResNet-18 with ModelOpt 0.47): Q/DQ on convolution and Gemm inputs only,
    float weights with their own Q/DQ pair (`to_strict_float_weights`), each convolution's
    bias a BatchNormalization after it (ModelOpt leaves BatchNorm for TensorRT to fold; here
    with seeded random statistics, so the function differs from the QDQ model's), a
    Cast to float32 on each residual Add's skip input, and the output's Q/DQ pair removed
    (float logits). Returns the number of BatchNormalizations inserted."""
    from onnx import helper, numpy_helper, TensorProto
    if to_strict_float_weights(model) == 0:
        return 0
    g = model.graph
    rng = np.random.default_rng([seed, 11])
    inits = {i.name: i for i in g.initializer}
    outputs = {o.name for o in g.output}
    dq_of = {n.output[0]: n for n in g.node if n.op_type == "DequantizeLinear"}

    def float_bias(name):
        # A float initializer, or quantize_static's int32 bias and its DequantizeLinear.
        if name in inits:
            return numpy_helper.to_array(inits[name]).astype(np.float32)
        dq = dq_of.get(name)
        if dq is None or dq.input[0] not in inits:
            return None
        q = numpy_helper.to_array(inits[dq.input[0]]).astype(np.float64)
        scale = numpy_helper.to_array(inits[dq.input[1]]).astype(np.float64)
        return (q * scale).astype(np.float32)

    nodes, bns = [], 0
    for nd in g.node:
        nodes.append(nd)
        bias = float_bias(nd.input[2]) if nd.op_type == "Conv" and len(nd.input) > 2 else None
        if bias is not None:
            c = bias.size
            stats = {"gamma": rng.uniform(0.5, 1.5, c), "beta": bias,
                     "mean": rng.normal(0.0, 0.1, c), "var": rng.uniform(0.5, 2.0, c)}
            names = []
            for k, v in stats.items():
                names.append(f"{nd.name}_bn_{k}")
                g.initializer.append(numpy_helper.from_array(np.asarray(v, np.float32), names[-1]))
            del nd.input[2]
            conv_out = nd.output[0] + "_prebn"
            bn = helper.make_node("BatchNormalization", [conv_out] + names, [nd.output[0]],
                                  name=f"{nd.name}_bn", epsilon=1e-5)
            nd.output[0] = conv_out
            nodes.append(bn)
            bns += 1
    # A Cast to float32 on each residual Add's dequantized skip input.
    producer = {o: n for n in nodes for o in n.output}
    out = []
    for nd in nodes:
        if nd.op_type == "Add":
            for j, i in enumerate(nd.input):
                src = producer.get(i)
                if src is not None and src.op_type == "DequantizeLinear":
                    cname = f"{nd.name}_skip_cast{j}"
                    out.append(helper.make_node("Cast", [i], [cname], name=cname, to=TensorProto.FLOAT))
                    nd.input[j] = cname
        out.append(nd)
    # The output's Q/DQ pair removed: the producer writes the graph output in float.
    for o in outputs:
        dq = next((n for n in out if n.op_type == "DequantizeLinear" and n.output[0] == o), None)
        q = next((n for n in out if dq is not None and n.op_type == "QuantizeLinear"
                  and n.output[0] == dq.input[0]), None)
        if q is None:
            continue
        src = next(n for n in out if q.input[0] in n.output)
        src.output[list(src.output).index(q.input[0])] = o
        out = [n for n in out if n is not q and n is not dq]
    del g.node[:]
    g.node.extend(out)
    return bns


# The placements derived from the QDQ model: format tag -> (transform, what it means when
# it removes nothing, log label).
PLACEMENTS = {
    "trt": (to_trt_style, f"no convolution output feeds {'/'.join(TRT_FLOAT_READERS)}",
            "TensorRT-style placement"),
    "strict": (to_trt_strict, "every quantized activation feeds a convolution already",
               "Q/DQ on convolution and Gemm inputs only"),
    "fq": (to_float_weights, "no int8/uint8 weight initializer is dequantized",
           "float weights with a Q/DQ pair"),
    "modelopt": (to_modelopt_export, "no convolution has a bias to turn into a BatchNorm",
                 "as ModelOpt exports it (BatchNorm after each convolution, float logits)"),
    "pt": (to_pytorch_export, "no QuantizeLinear output is read",
           "written as PyTorch's exporter writes a quantized model"),
    "strictfq": (to_strict_float_weights,
                 "every quantized activation feeds a convolution already, or no weight is int8",
                 "Q/DQ on convolution and Gemm inputs only, float weights with a Q/DQ pair"),
}


def build_all(out_dir, name, float_model, seed, log=print, reduce_range=False, formats=None):
    """Saves <name>_float.onnx and the four quantized variants with their references (or
    only those of `formats`, e.g. ["qdq"]; "trt" adds <name>_trt_{s8,u8}: the QDQ model in
    TensorRT-style placement, `to_trt_style`; "w4" adds <name>_w4_{s8,u8}: int4 / uint4
    weights, ORT's reference computed on their 8-bit copy, `widen_four_bit`; "strict" adds <name>_strict_{s8,u8}: Q/DQ on
    convolution and matrix-product inputs only, `to_trt_strict`; "fq" <name>_fq_{s8,u8}: float
    weights with a Q/DQ pair, `to_float_weights`; "strictfq" both; "mixed" <name>_mixed_{s8,u8}:
    the first Conv and the last Gemm/MatMul left in float, `float_ends`). Returns the list of manifest file names
    (quantized models only)."""
    rng = np.random.default_rng([seed, 1])
    samples = [make_inputs(float_model, rng) for _ in range(CALIB_SAMPLES)]
    feeds = make_inputs(float_model, np.random.default_rng([seed, 2]))
    fpath = os.path.join(out_dir, f"{name}_float.onnx")
    onnx.save(float_model, fpath)
    session(fpath)  # loads in ORT
    log(describe(fpath, float_model))
    manifests = []
    for ftag, fq, atag, aq in VARIANTS:
        if formats is not None and ftag not in formats:
            continue
        stem = f"{name}_{ftag}_{atag}"
        qpath = os.path.join(out_dir, stem + ".onnx")
        qm = quantize(float_model, qpath, samples, fq, aq, reduce_range)
        man = write_reference(out_dir, stem, stem + ".onnx", feeds,
                              {"format": ftag, "activations": atag, "reduce_range": reduce_range,
                               "float_model": os.path.basename(fpath)})
        manifests.append(stem + ".json")
        fl = " ".join(f"{k}:{v}" for k, v in man["ort"]["float_ops"].items()) or "-"
        log(describe(qpath, qm) + f"  | ORT float ops: {fl}")
    for tag, (transform, none_removed, label) in PLACEMENTS.items():
        for atag, aq in ACTIVATIONS if formats is not None and tag in formats else []:
            stem = f"{name}_{tag}_{atag}"
            qpath = os.path.join(out_dir, stem + ".onnx")
            qm = quantize(float_model, qpath, samples, oq.QuantFormat.QDQ, aq, reduce_range)
            if transform(qm) == 0:
                ro.fail(f"{stem}: {none_removed}")
            onnx.save(qm, qpath)
            write_reference(out_dir, stem, stem + ".onnx", feeds,
                            {"format": tag, "activations": atag, "reduce_range": reduce_range,
                             "float_model": os.path.basename(fpath)})
            manifests.append(stem + ".json")
            log(describe(qpath, qm) + f"  | {label}")
    # "mixed": mixed precision, the first convolution and the last matrix product kept in
    # float (quantize_static's nodes_to_exclude), as deployments that guard accuracy do.
    for atag, aq in ACTIVATIONS if formats is not None and "mixed" in formats else []:
        stem = f"{name}_mixed_{atag}"
        qpath = os.path.join(out_dir, stem + ".onnx")
        named = onnx.ModelProto()
        named.CopyFrom(float_model)
        excluded = float_ends(named)
        qm = quantize(named, qpath, samples, oq.QuantFormat.QDQ, aq, reduce_range, exclude=excluded)
        write_reference(out_dir, stem, stem + ".onnx", feeds,
                        {"format": "mixed", "activations": atag, "reduce_range": reduce_range,
                         "float_model": os.path.basename(fpath)})
        manifests.append(stem + ".json")
        log(describe(qpath, qm) + f"  | mixed precision: {', '.join(excluded)} in float")
    # "w4": 4-bit weights (int4 with int8 activations, uint4 with uint8 ones), as
    # quantize_static writes them with weight_type QInt4/QUInt4; the reference is ORT on the
    # copy with the same weights stored in 8 bits (`widen_four_bit`).
    for atag, aq in ACTIVATIONS if formats is not None and "w4" in formats else []:
        stem = f"{name}_w4_{atag}"
        qpath = os.path.join(out_dir, stem + ".onnx")
        wq = oq.QuantType.QInt4 if atag == "s8" else oq.QuantType.QUInt4
        qm = quantize(float_model, qpath, samples, oq.QuantFormat.QDQ, aq, reduce_range, weights=wq)
        wide = onnx.load(qpath)
        if widen_four_bit(wide) == 0:
            ro.fail(f"{stem}: quantize_static wrote no 4-bit weight")
        write_reference(out_dir, stem, stem + ".onnx", feeds,
                        {"format": "w4", "activations": atag, "reduce_range": reduce_range,
                         "float_model": os.path.basename(fpath)}, ref_model=wide)
        manifests.append(stem + ".json")
        log(describe(qpath, qm) + "  | 4-bit weights; reference: ORT on the 8-bit copy")
    return manifests


def describe(path, model):
    hist = op_histogram(model)
    ops = " ".join(f"{k}:{v}" for k, v in hist.items())
    return f"{os.path.basename(path)}  {os.path.getsize(path)} B  {len(model.graph.node)} nodes  {ops}"


def write_index(out_dir, manifests, extra=None):
    idx = {"manifests": sorted(manifests)}
    if extra:
        idx.update(extra)
    with open(os.path.join(out_dir, "index.json"), "w", encoding="utf-8") as f:
        json.dump(idx, f, indent=1)
        f.write("\n")
