#!/usr/bin/env python3
"""Builds QDQ-style ONNX models of the redline reference network from an export directory
(`network.safetensors` + `network.json`, written by `redline_models::export::export_network`).

Usage: python3 tools/onnx/export_qdq.py DIR   -> DIR/backbone.onnx, det_head.onnx, seg_head.onnx

Contract:
- Every convolution is one `QLinearConv` node (opset 10 operator, model opset 17): int8
  input with its per-tensor scale / zero point, int8 weights (OIHW, symmetric, zero point
  0) with per-output-channel scales (per-axis), int32 bias with scale x_scale * w_scale[c],
  int8 output with its scale / zero point. ONNX Runtime's CPU provider runs this as an
  integer kernel whose requantization is `saturate(round_half_even(acc * (x_scale *
  w_scale[c] / y_scale)) + y_zp)`, the native engine's rule.
- Fused ReLU: the native layers clamp below at y_zp. When y_zp = -128 (what min-max and
  percentile calibration give for a ReLU output) the int8 saturation already does that
  and no node is added; otherwise an int8 `Clip(min = y_zp)` node follows the convolution.
- Input and outputs are int8 NHWC, as in the native engine (preprocessing and the BEV
  transform stay outside): a `Transpose` node converts to NCHW after the input and back
  before each output; ORT's layout optimizer removes them around its NHWC kernels.
- Each model is checked with onnx.checker (full check) before it is saved.
Deterministic: the same export gives byte-identical models.
"""

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import redline_onnx as ro  # noqa: E402

try:
    import onnx
    from onnx import TensorProto, helper, numpy_helper
except ImportError:
    ro.fail("the Python package 'onnx' is missing: pip install onnx")


def scalar(name, value, dtype):
    return numpy_helper.from_array(np.array(value, dtype=dtype), name)


def build_graph(g, tensors):
    nodes, inits = [], []
    n, h, w, c = g["input_shape"]
    inputs = [helper.make_tensor_value_info(g["input"], TensorProto.INT8, [n, h, w, c])]
    nodes.append(helper.make_node("Transpose", [g["input"]], [g["input"] + "_nchw"], perm=[0, 3, 1, 2],
                                  name="input_to_nchw"))
    for layer in g["layers"]:
        if layer["kind"] != "conv2d":
            ro.fail(f"layer {g['name']}.{layer['name']} has kind {layer['kind']!r}; this exporter knows conv2d only")
        p = f"{g['name']}.{layer['name']}"
        wq = tensors[layer["weight"]]  # [out_c, k, k, in_c] (OHWI)
        expect = (layer["out_c"], layer["k"], layer["k"], layer["in_c"])
        if wq.dtype != np.int8 or wq.shape != expect:
            ro.fail(f"{layer['weight']} is {wq.dtype}{wq.shape}, expected int8{expect}")
        w_oihw = np.ascontiguousarray(np.transpose(wq, (0, 3, 1, 2)))
        ws = tensors[layer["w_scales"]].astype(np.float32)
        bias = tensors[layer["bias"]].astype(np.int32)
        inits += [
            scalar(p + ".x_scale", layer["in_q"]["scale"], np.float32),
            scalar(p + ".x_zp", layer["in_q"]["zero_point"], np.int8),
            numpy_helper.from_array(w_oihw, p + ".w"),
            numpy_helper.from_array(ws, p + ".w_scale"),
            numpy_helper.from_array(np.zeros(layer["out_c"], dtype=np.int8), p + ".w_zp"),
            scalar(p + ".y_scale", layer["out_q"]["scale"], np.float32),
            scalar(p + ".y_zp", layer["out_q"]["zero_point"], np.int8),
            numpy_helper.from_array(bias, p + ".bias"),
        ]
        src = layer["input"] + "_nchw"
        dst = layer["output"] + "_nchw"
        relu_clip = layer["relu"] and layer["out_q"]["zero_point"] != -128
        conv_out = dst + "_pre_relu" if relu_clip else dst
        k, s, pad = layer["k"], layer["stride"], layer["pad"]
        nodes.append(helper.make_node(
            "QLinearConv",
            [src, p + ".x_scale", p + ".x_zp", p + ".w", p + ".w_scale", p + ".w_zp", p + ".y_scale", p + ".y_zp",
             p + ".bias"],
            [conv_out], name=p, kernel_shape=[k, k], strides=[s, s], pads=[pad, pad, pad, pad], dilations=[1, 1],
            group=1))
        if relu_clip:
            inits.append(scalar(p + ".relu_min", layer["out_q"]["zero_point"], np.int8))
            nodes.append(helper.make_node("Clip", [conv_out, p + ".relu_min"], [dst], name=p + ".relu"))
    outputs = []
    for o in g["outputs"]:
        nodes.append(helper.make_node("Transpose", [o["name"] + "_nchw"], [o["name"]], perm=[0, 2, 3, 1],
                                      name=o["name"] + "_to_nhwc"))
        outputs.append(helper.make_tensor_value_info(o["name"], TensorProto.INT8, o["shape"]))
    graph = helper.make_graph(nodes, f"redline_{g['name']}", inputs, outputs, initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              producer_name="redline tools/onnx/export_qdq.py")
    model.ir_version = 9  # readable by every ONNX Runtime release this project supports
    return model


def main(argv):
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    export_dir = argv[1]
    meta, tensors = ro.load_export(export_dir)
    for g in meta["graphs"]:
        model = build_graph(g, tensors)
        onnx.checker.check_model(model, full_check=True)
        path = os.path.join(export_dir, ro.MODEL_FILES[g["name"]])
        onnx.save(model, path)
        n_conv = sum(1 for nd in model.graph.node if nd.op_type == "QLinearConv")
        print(f"{path}: {n_conv} QLinearConv, {len(model.graph.node)} nodes, checker ok")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
