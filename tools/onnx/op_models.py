#!/usr/bin/env python3
"""Writes small quantized ONNX models, one operator / attribute case each, plus K seeded
random graphs, so that an ONNX importer can be checked against ONNX Runtime op by op.

Usage: python3 tools/onnx/op_models.py OUT_DIR [--seed N] [--random K] [--only NAME...]

Every case is built in float (odd shapes: 1x5x13x11 inputs, 3/7/13 channels, ...) and
quantized like tools/onnx/zoo.py does (quantize_static, per-channel QInt8 weights, MinMax,
QDQ and QOperator formats x s8 and u8 activations): OUT_DIR/<case>_{qdq,qop}_{s8,u8}.onnx,
each with its reference files and manifest (see qref.py and README.md), the float model as
<case>_float.onnx, and OUT_DIR/index.json listing all manifests. Random graphs are
`rand<NN>` and are DAGs of Conv/Relu/Clip/Add/Mul/MaxPool/AveragePool/Concat/Resize/Sigmoid
with shapes valid by construction. Deterministic for a given seed.
"""

import argparse
import os
import sys
import time

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import redline_onnx as ro  # noqa: E402
import qref  # noqa: E402

X = (1, 5, 13, 11)


def stem(g, shape, cout=7):
    """input -> 3x3 conv: quantize_static leaves Relu/Clip/MaxPool/AveragePool/Resize/... that
    read a float graph input in float, so single-op cases read a quantized conv output."""
    return g.conv(g.input(shape), cout, 3)
P0 = [0, 0, 0, 0]
CASES = {}


def case(name):
    def reg(fn):
        CASES[name] = fn
        return fn
    return reg


def conv_case(name, **kw):
    def build(g):
        args = dict(kw)
        g.output(g.conv(g.input(X), args.pop("cout", 7), **args))
    CASES[name] = build


# -- Conv attributes --
for k in (1, 3, 5, 7):
    conv_case(f"conv_k{k}", k=k)
conv_case("conv_k3x1", k=(3, 1))
conv_case("conv_k1x5", k=(1, 5))
conv_case("conv_s2", k=3, stride=2)
conv_case("conv_s3", k=3, stride=3)
conv_case("conv_s2x1_k5x3", k=(5, 3), stride=(2, 1))
conv_case("conv_pads_asym", k=3, pads=[0, 1, 2, 0])
# Inception's factorized 1x7 and 7x1 convolutions (the native engine unfolds their taps into
# channels for its pointwise dense kernel, as every ungrouped one off the dense routes).
conv_case("conv_1x7", k=(1, 7), pads=[0, 3, 0, 3])
conv_case("conv_7x1_s2", k=(7, 1), stride=2, pads=[3, 0, 3, 0])
conv_case("conv_same_upper_s2", k=3, stride=2, auto_pad="SAME_UPPER")
conv_case("conv_same_upper_k4", k=4, auto_pad="SAME_UPPER")
conv_case("conv_dil2", k=3, dilation=2)
# Dilated "same" convolutions run as dilation phases on the dense kernels (13x11: phases of
# unequal size); other dilated ones on the general kernel.
conv_case("conv_dil3", k=3, dilation=3)
conv_case("conv_dil2_k5", k=5, dilation=2)
conv_case("conv_dil4_k1", k=1, dilation=4, cout=9)
conv_case("conv_dil2_pads_asym", k=3, dilation=2, pads=[0, 2, 2, 1])
conv_case("conv_dil2_s2", k=3, dilation=2, stride=2)
# Rectangular dilations run as dilation phases too (dh x dw phase images).
conv_case("conv_dil2x1", k=3, dilation=(2, 1))
conv_case("conv_dil4x2", k=3, dilation=(4, 2))
conv_case("conv_dil1x3_k5", k=5, dilation=(1, 3))
# Dilations as large as the image (DeepLabV3's ASPP at rates 24 and 36 on a 20x20 map): the
# taps that read padding only are dropped at load, leaving a 1x1 (or 1xk) convolution.
conv_case("conv_dil16_beyond_image", k=3, dilation=16)
conv_case("conv_dil16x2_rows_beyond", k=3, dilation=(16, 2))
conv_case("conv_depthwise_dil16", k=3, dilation=16, group=5, cout=5)


@case("trt_dil16_residual")
def _(g):
    # The same trimming on the float route: the dilated convolution's float output goes on
    # into a residual Add (TensorRT-style placement).
    g.formats = ["qdq", "qop", "trt"]
    x = g.conv(g.input(X), 6, 3)
    g.output(g.conv(g.relu(g.add(x, g.conv(x, 6, 3, dilation=16))), 4, 1, pads=P0))


@case("trt_conv_1x7_residual")
def _(g):
    # A 1x7 convolution whose float output goes on into a residual Add (TensorRT-style
    # placement): unfolded onto the dense kernels on the float route too.
    g.formats = ["qdq", "qop", "trt"]
    x = g.conv(g.input(X), 6, 3)
    g.output(g.conv(g.relu(g.add(x, g.conv(x, 6, (1, 7), pads=[0, 3, 0, 3]))), 4, 1, pads=P0))


@case("conv_s1x2")
def _(g):
    # Rows kept, columns strided: folded onto the dense kernels when the stride divides the
    # width (12), on the general kernel when it does not (the 13x11 case below).
    g.output(g.conv(g.input((1, 5, 13, 12)), 7, 3, stride=(1, 2)))


@case("conv_s1x3_k5")
def _(g):
    g.output(g.conv(g.input((1, 5, 9, 12)), 7, 5, stride=(1, 3)))


conv_case("conv_s1x2_odd_width", k=3, stride=(1, 2))
conv_case("conv_nobias", k=3, bias=False)
conv_case("conv_k1_nopad_13ch", k=1, cout=13, pads=P0)


@case("conv_pads_bottom_right_1x1")
def _(g):
    # Padding only after a 1x1 image: in + 2 * top pad is smaller than the kernel.
    g.output(g.conv(g.input((1, 5, 1, 1)), 7, 3, pads=[0, 0, 2, 2]))


@case("conv_group2")
def _(g):
    g.output(g.conv(g.input((1, 6, 13, 11)), 10, 3, group=2))


# Grouped convolutions with a square window run one dense layer per group (RegNet's X
# blocks: 8 channels per group); the others (asymmetric pads, dilation) the general kernel.
@case("conv_group_width8_s2")
def _(g):
    g.output(g.relu(g.conv(g.input((1, 24, 13, 11)), 24, 3, stride=2, group=3)))


@case("conv_group4_odd_clip6")
def _(g):
    g.output(g.clip(g.conv(g.input((1, 12, 9, 10)), 8, 3, group=4), 0.0, 6.0))


@case("conv_group2_1x1")
def _(g):
    g.output(g.conv(g.input((1, 10, 7, 9)), 6, 1, pads=[0, 0, 0, 0], group=2))


@case("conv_group2_asym_pads")
def _(g):
    g.output(g.conv(g.input((1, 8, 9, 10)), 8, 3, pads=[0, 1, 2, 1], group=2))


@case("conv_group2_dil2")
def _(g):
    g.output(g.conv(g.input((1, 8, 13, 11)), 8, 3, dilation=2, group=2))


@case("conv_depthwise")
def _(g):
    g.output(g.conv(g.input((1, 7, 13, 11)), 7, 3, group=7))


@case("conv_depthwise_s2_k5")
def _(g):
    g.output(g.conv(g.input((1, 7, 13, 11)), 7, 5, stride=2, group=7))


@case("conv_depthwise_mult2")
def _(g):
    g.output(g.conv(g.input((1, 3, 13, 11)), 6, 3, group=3))


@case("conv_relu")
def _(g):
    g.output(g.relu(g.conv(g.input(X), 7, 3)))


@case("conv_clip6")
def _(g):
    g.output(g.clip(g.conv(g.input(X), 7, 3), 0.0, 6.0))


@case("conv_chain")
def _(g):
    g.output(g.conv(g.relu(g.conv(g.input(X), 7, 3)), 3, 3, stride=2))


# -- elementwise --
for op in ("add", "mul"):
    def _same(g, op=op):
        x = g.input(X)
        g.output(getattr(g, op)(x, g.conv(x, 5, 3)))

    def _chan(g, op=op):
        x = g.input(X)
        g.output(getattr(g, op)(x, g.const(g.rng.uniform(0.5, 1.5, (1, 5, 1, 1)).astype(np.float32))))

    def _scalar(g, op=op):
        x = g.input(X)
        g.output(getattr(g, op)(x, g.const(np.float32(0.75))))

    def _two(g, op=op):
        g.output(getattr(g, op)(g.input(X), g.input(X)))

    def _two_bcast(g, op=op):
        g.output(getattr(g, op)(g.input(X), g.input((1, 5, 1, 1))))

    CASES[f"{op}_same"] = _same
    CASES[f"{op}_perchannel_const"] = _chan
    CASES[f"{op}_scalar_const"] = _scalar
    CASES[f"{op}_two_inputs"] = _two
    CASES[f"{op}_two_inputs_bcast"] = _two_bcast


@case("sigmoid")
def _(g):
    g.output(g.sigmoid(g.conv(g.input(X), 3, 3)))


# Functions of one byte the native engine folds into one table: SiLU (x * sigmoid(x)) and
# a hard-swish chain (x * clip(x + 3, 0, 6) * (1/6), scalar constants).
@case("silu")
def _(g):
    x = g.conv(g.input(X), 6, 3)
    g.output(g.mul(x, g.sigmoid(x)))


# Unary activations, each a table of its input's bytes.
for _op, _attrs in [("Tanh", {}), ("LeakyRelu", {"alpha": 0.1}), ("HardSigmoid", {}),
                    ("HardSwish", {}), ("Softplus", {})]:
    def _unary(g, op=_op, attrs=_attrs):
        # Between two convolutions: quantize_static leaves an operator it does not know in
        # float, and the next convolution's input is what quantizes its output. Those the
        # float route runs also in TensorRT-style placement (the convolution's float output
        # into the activation).
        if op in ("HardSigmoid", "HardSwish", "LeakyRelu"):
            g.formats = ["qdq", "qop", "trt"]
        x = g.conv(g.input(X), 6, 3)
        g.output(g.conv(g.node(op, [x], g.shape[x], **attrs), 4, 1, pads=[0, 0, 0, 0]))

    CASES[_op.lower()] = _unary


@case("mish")
def _(g):
    g.opset = 18  # Mish is an opset-18 operator
    x = g.conv(g.input(X), 6, 3)
    g.output(g.conv(g.node("Mish", [x], g.shape[x]), 4, 1, pads=[0, 0, 0, 0]))


# Activations exported as chains of float operators (PyTorch below opset 18 writes Mish as
# x * tanh(softplus(x)), GELU through Erf, ...). quantize_static leaves the operators it does
# not know in float, so the chain between a DequantizeLinear and the next QuantizeLinear is a
# function of one quantized byte: the native engine makes it one table.
def _float_chain(build):
    def case_fn(g):
        x = g.conv(g.input(X), 6, 3)
        g.output(g.conv(build(g, x), 4, 1, pads=[0, 0, 0, 0]))
    return case_fn


def _scalar(g, v):
    return g.const(np.float32(v))


CASES["mish_decomposed"] = _float_chain(
    lambda g, x: g.mul(x, g.node("Tanh", [g.node("Softplus", [x], g.shape[x])], g.shape[x])))
CASES["gelu_erf"] = _float_chain(
    lambda g, x: g.mul(g.mul(x, _scalar(g, 0.5)),
                       g.add(g.node("Erf", [g.node("Div", [x, _scalar(g, 1.4142135)], g.shape[x])],
                                    g.shape[x]), _scalar(g, 1.0))))
CASES["silu_exp_div"] = _float_chain(
    lambda g, x: g.node("Div", [x, g.add(_scalar(g, 1.0), g.node("Exp", [g.node("Neg", [x], g.shape[x])],
                                                                 g.shape[x]))], g.shape[x]))
CASES["hardswish_decomposed"] = _float_chain(
    lambda g, x: g.node("Div", [g.mul(x, g.clip(g.add(x, _scalar(g, 3.0)), 0.0, 6.0)), _scalar(g, 6.0)],
                        g.shape[x]))


# Div and Sub of two quantized tensors: ONNX Runtime runs them in float between
# DequantizeLinear and QuantizeLinear (no quantized form). The quantized divisor may be 0:
# where it has zeros (0 / 0 is NaN, x / 0 infinite) both saturate before the next convolution.
@case("div_two_tensors")
def _(g):
    x = g.input(X)
    d = g.node("Div", [g.conv(x, 5, 3), g.conv(x, 5, 1, pads=P0)], (1, 5, 13, 11))
    g.output(g.conv(d, 4, 1, pads=P0))


@case("sub_two_tensors")
def _(g):
    x = g.input(X)
    d = g.node("Sub", [g.conv(x, 5, 3), g.conv(x, 5, 1, pads=P0)], (1, 5, 13, 11))
    g.output(g.conv(d, 4, 1, pads=P0))


# TensorRT-style Q/DQ placement (Q/DQ on convolution inputs only): the convolution's float
# output goes on into a residual Add, or a SiLU; also the usual QDQ/QOperator variants.
@case("trt_residual")
def _(g):
    g.formats = ["qdq", "qop", "trt"]
    x = g.relu(g.conv(g.input(X), 6, 3))
    g.output(g.relu(g.add(g.conv(g.relu(g.conv(x, 6, 3)), 6, 3), x)))


@case("trt_silu")
def _(g):
    g.formats = ["qdq", "qop", "trt"]
    x = g.conv(g.input(X), 6, 3)
    g.output(g.conv(g.mul(x, g.sigmoid(x)), 4, 1, pads=P0))


# EfficientNet's and MobileNetV3's blocks in that placement: a depthwise convolution (and a
# rectangular one with asymmetric padding, on the general kernel) whose float output goes
# into a SiLU.
@case("trt_depthwise_silu")
def _(g):
    g.formats = ["qdq", "qop", "trt"]
    x = g.conv(g.input((1, 8, 13, 11)), 8, 3, group=8)
    g.output(g.conv(g.mul(x, g.sigmoid(x)), 4, 1, pads=P0))


@case("trt_rect_silu")
def _(g):
    g.formats = ["qdq", "qop", "trt"]
    x = g.conv(g.input(X), 6, (3, 1), pads=[0, 1, 2, 0])
    g.output(g.conv(g.mul(x, g.sigmoid(x)), 4, 1, pads=P0))


# A squeeze-and-excitation gate scaling a convolution's float output: Mul of [1, C, H, W]
# and [1, C, 1, 1], broadcast over the pixels (also in the gate's order, Div as well).
@case("trt_se_scale")
def _(g):
    g.formats = ["qdq", "qop", "trt"]
    x = g.conv(g.input(X), 6, 3)
    y = g.conv(x, 6, 3)
    s = g.sigmoid(g.conv(g.gap(x), 6, 1, pads=P0))
    g.output(g.conv(g.mul(s, y), 4, 1, pads=P0))


@case("trt_se_div")
def _(g):
    g.formats = ["qdq", "trt"]
    x = g.conv(g.input(X), 6, 3)
    y = g.conv(x, 6, 3)
    s = g.add(g.sigmoid(g.conv(g.gap(x), 6, 1, pads=P0)), g.const(np.float32(0.5)))
    g.output(g.conv(g.node("Div", [y, s], g.shape[y]), 4, 1, pads=P0))


# An FPN-style merge in that placement: one convolution's float output upsampled (nearest)
# and concatenated with another's, in float up to the next convolution's input.
@case("trt_concat_resize")
def _(g):
    g.formats = ["qdq", "qop", "trt"]
    x = g.input((1, 4, 12, 10))
    a = g.conv(x, 6, 3)
    b = g.resize(g.conv(x, 5, 3, stride=2), "nearest", scale=2)
    g.output(g.conv(g.concat([a, b]), 4, 1, pads=P0))


# The same merge with a bilinear upsampling (CenterNet's and FPN's heads): half-pixel x2
# into a residual Add, and align-corners to odd sizes into a Concat. "strict" also runs the
# Add, the Concat and the Resize's output in float.
# Float operators with constant operands after a convolution's float output: a scalar
# minus the tensor, a per-channel scale, a per-channel divisor and a whole-tensor offset.
@case("trt_constant_operands")
def _(g):
    # quantize_static quantizes the [6, 1, 1] divisor per channel: in QDQ form the Div then
    # runs in float between DequantizeLinear and QuantizeLinear, in ONNX Runtime as natively.
    g.formats = ["qdq", "strict"]
    x = g.conv(g.input(X), 6, 3)
    y = g.node("Sub", [g.const(np.float32(1.5)), x], g.shape[x])
    y = g.mul(y, g.const(g.rng.uniform(0.5, 2.0, (1, 6, 1, 1)).astype(np.float32)))
    y = g.node("Div", [y, g.const(g.rng.uniform(0.5, 2.0, (6, 1, 1)).astype(np.float32))], g.shape[y])
    y = g.add(y, g.const(g.rng.uniform(-1.0, 1.0, (1, 6, 13, 11)).astype(np.float32)))
    g.output(g.conv(y, 4, 1, pads=P0))


@case("trt_add_resize_bilinear")
def _(g):
    g.formats = ["qdq", "trt", "strict"]
    x = g.input((1, 4, 12, 10))
    a = g.conv(x, 6, 3)
    b = g.resize(g.conv(x, 6, 3, stride=2), "linear", scale=2)
    g.output(g.conv(g.add(a, b), 4, 1, pads=P0))


@case("trt_concat_resize_bilinear_sizes")
def _(g):
    g.formats = ["qdq", "trt", "strict"]
    x = g.input((1, 4, 13, 11))
    a = g.conv(x, 6, 3)
    b = g.resize(g.conv(x, 5, 3, stride=2), "linear", size=(13, 11), ctm="align_corners")
    g.output(g.conv(g.concat([a, b]), 4, 1, pads=P0))


# Pooling and a classifier head in that placement: a convolution's float output max-pooled,
# globally averaged, or flattened (1x1 pixels) into a Gemm.
@case("trt_maxpool")
def _(g):
    g.formats = ["qdq", "qop", "trt"]
    x = g.conv(g.input(X), 6, 3)
    g.output(g.conv(g.maxpool(x, 3, 2, pads=(1, 1, 1, 1)), 4, 1, pads=P0))


# Average pooling of a float output: padded 3x3/2 without and with the padding counted,
# and a ceil-mode 2x2/2 window hanging past the image (ResNet-D's shortcut, pooled heads).
@case("trt_avgpool")
def _(g):
    g.formats = ["qdq", "qop", "trt", "strict"]
    x = g.conv(g.input(X), 6, 3)
    a = g.avgpool(x, 3, 2, pads=(1, 1, 1, 1))
    b = g.avgpool(g.conv(x, 6, 3), 3, 2, pads=(1, 1, 1, 1), count_include_pad=1)
    g.output(g.conv(g.add(a, b), 4, 1, pads=P0))


@case("trt_avgpool_ceil")
def _(g):
    g.formats = ["qdq", "qop", "trt", "strict"]
    x = g.conv(g.input(X), 6, 3)
    g.output(g.conv(g.avgpool(x, 2, 2, ceil_mode=1), 4, 1, pads=P0))


@case("trt_gap")
def _(g):
    g.formats = ["qdq", "qop", "trt"]
    x = g.conv(g.input(X), 6, 3)
    g.output(g.conv(g.gap(x), 4, 1, pads=P0))


@case("trt_flatten_gemm")
def _(g):
    g.formats = ["qdq", "qop", "trt"]
    x = g.conv(g.input((1, 3, 5, 5)), 8, 5, pads=P0)
    g.output(g.gemm(g.flatten(x), 6))


# Split and Slice: strided copies in the tensor's own layout (NHWC between convolutions).
@case("split_channels")
def _(g):
    a, b = g.split(g.conv(g.input(X), 6, 3), [2, 4], axis=1)
    g.output(g.conv(a, 3, 1, pads=[0, 0, 0, 0]), "a")
    g.output(g.conv(b, 3, 3), "b")


@case("split_height_equal")
def _(g):
    x = g.conv(g.input((1, 5, 12, 11)), 4, 3)
    parts = g.split(x, [4, 4, 4], axis=2)
    g.output(g.concat([g.conv(p, 4, 1, pads=[0, 0, 0, 0]) for p in parts], axis=1))


@case("split_equal_no_sizes")
def _(g):
    parts = g.split(g.conv(g.input(X), 6, 3), [2, 2, 2], axis=1, as_input=False)
    g.output(g.add(g.conv(parts[0], 3, 1, pads=[0, 0, 0, 0]), g.conv(parts[2], 3, 3)))


@case("c2f_block")
def _(g):
    # YOLOv8's C2f: 1x1, Split in two, bottlenecks on the second half, Concat, 1x1.
    x = g.conv(g.input(X), 8, 1, pads=[0, 0, 0, 0])
    a, b = g.split(x, [4, 4], axis=1)
    m = g.add(b, g.conv(g.relu(g.conv(b, 4, 3)), 4, 3))
    g.output(g.conv(g.concat([a, b, m]), 6, 1, pads=[0, 0, 0, 0]))


@case("slice_channels")
def _(g):
    x = g.conv(g.input(X), 7, 3)
    g.output(g.conv(g.slice(x, [1], [-1], [1]), 3, 3))


@case("slice_focus")
def _(g):
    # YOLOv5's early Focus layer: four stride-2 slices (space to depth), Concat, conv.
    x = g.conv(g.input((1, 3, 12, 10)), 4, 3)
    parts = [g.slice(x, [i, j], [100, 100], [2, 3], [2, 2]) for i, j in [(0, 0), (1, 0), (0, 1), (1, 1)]]
    g.output(g.conv(g.concat(parts), 8, 3))


# Transposed convolutions (CenterNet's and U-Net's upsampling): phase convolutions on the
# dense kernels and a merge; each followed by a 1x1 so that its output is quantized.
for _name, _k, _s, _p, _op in [("deconv_k4s2p1", 4, 2, (1, 1, 1, 1), (0, 0)),
                               ("deconv_k2s2", 2, 2, (0, 0, 0, 0), (0, 0)),
                               ("deconv_k3s2p1_outpad1", 3, 2, (1, 1, 1, 1), (1, 1)),
                               ("deconv_k3s1p1", 3, 1, (1, 1, 1, 1), (0, 0)),
                               ("deconv_asym_pads", 3, 2, (0, 1, 2, 0), (0, 0)),
                               ("deconv_rect_k3x2_s2x1", (3, 2), (2, 1), (1, 0, 1, 0), (0, 0))]:
    def _deconv(g, k=_k, s=_s, p=_p, op=_op):
        # QDQ only: quantize_static's QOperator form leaves ConvTranspose in float with
        # float weights, which the native engine refuses (as it says).
        g.formats = ["qdq"]
        x = g.relu(g.conv(g.input(X), 8, 3))
        y = g.relu(g.conv_transpose(x, 6, k, s, pads=p, output_padding=op))
        g.output(g.conv(y, 4, 1, pads=[0, 0, 0, 0]))

    CASES[_name] = _deconv


@case("hardswish_chain")
def _(g):
    x = g.conv(g.input(X), 6, 3)
    y = g.mul(g.clip(g.add(x, g.const(np.float32(3.0))), 0.0, 6.0), g.const(np.float32(1.0 / 6.0)))
    g.output(g.mul(x, y))


@case("add_relu")
def _(g):
    x = g.input(X)
    g.output(g.relu(g.add(x, g.conv(x, 5, 3))))


@case("add_clip6")
def _(g):
    x = g.input(X)
    g.output(g.clip(g.add(x, g.conv(x, 5, 3)), 0.0, 6.0))


# -- pooling --
@case("maxpool_k2s2")
def _(g):
    g.output(g.maxpool(stem(g, X), 2, 2))


@case("maxpool_k3s2p1")
def _(g):
    g.output(g.maxpool(stem(g, X), 3, 2, pads=(1, 1, 1, 1)))


# Channel counts that are multiples of 4 and 16: the CUDA engine's max pooling takes 4 or 16
# channels per thread there (the 7-channel cases above take the one-channel path).
@case("maxpool_k3s2p1_c8")
def _(g):
    g.output(g.maxpool(stem(g, X, cout=8), 3, 2, pads=(1, 1, 1, 1)))


@case("maxpool_k3s2p1_c32")
def _(g):
    g.output(g.maxpool(stem(g, X, cout=32), 3, 2, pads=(1, 1, 1, 1)))


@case("maxpool_k2s2_ceil")
def _(g):
    g.output(g.maxpool(stem(g, X), 2, 2, ceil_mode=1))


@case("maxpool_k3s2_ceil_p1")
def _(g):
    g.output(g.maxpool(stem(g, (1, 5, 14, 11)), 3, 2, pads=(1, 1, 1, 1), ceil_mode=1))


@case("avgpool_k2s2")
def _(g):
    g.output(g.avgpool(stem(g, X), 2, 2))


@case("avgpool_k3s2p1_cip0")
def _(g):
    g.output(g.avgpool(stem(g, X), 3, 2, pads=(1, 1, 1, 1), count_include_pad=0))


@case("avgpool_k3s2p1_cip1")
def _(g):
    g.output(g.avgpool(stem(g, X), 3, 2, pads=(1, 1, 1, 1), count_include_pad=1))


@case("avgpool_k3s1_asym_cip0")
def _(g):
    g.output(g.avgpool(stem(g, X), 3, 1, pads=(0, 1, 2, 0), count_include_pad=0))


@case("avgpool_k2s2_ceil")
def _(g):
    g.output(g.avgpool(stem(g, X), 2, 2, ceil_mode=1))


@case("gap")
def _(g):
    g.output(g.gap(g.conv(g.input(X), 7, 3)))


# -- concat / resize --
@case("concat_channels")
def _(g):
    x = g.input(X)
    a = g.conv(x, 3, 3, gain=0.3)
    b = g.relu(g.conv(x, 7, 1, pads=P0, gain=3.0))
    g.output(g.concat([a, x, b]))


@case("concat_const_channels")
def _(g):  # CoordConv-style: a constant position map beside the features, then a conv
    x = stem(g, X)
    gy, gx = np.mgrid[0 : X[2], 0 : X[3]].astype(np.float32)
    pos = np.stack([gx / X[3], gy / X[2]])[None].astype(np.float32)
    g.output(g.conv(g.concat([x, g.const(pos)]), 6, 3))


@case("concat_two_inputs")
def _(g):
    g.output(g.concat([g.input(X), g.input((1, 3, 13, 11))]))


@case("resize_nearest_x2")
def _(g):
    g.output(g.resize(g.conv(g.input(X), 7, 3), "nearest", scale=2))


@case("resize_nearest_sizes")
def _(g):
    g.output(g.resize(g.conv(g.input(X), 7, 3), "nearest", size=(26, 33)))


@case("resize_bilinear_x2")
def _(g):
    g.output(g.resize(g.conv(g.input(X), 7, 3), "linear", scale=2, ctm="half_pixel"))


@case("resize_bilinear_sizes")
def _(g):
    g.output(g.resize(g.conv(g.input(X), 7, 3), "linear", size=(20, 17), ctm="half_pixel"))


@case("resize_bilinear_x2_align_corners")
def _(g):
    g.output(g.resize(g.conv(g.input(X), 7, 3), "linear", scale=2, ctm="align_corners"))


# -- fully connected and CNN-head reshapes --
@case("gemm_transb")
def _(g):
    g.output(g.gemm(g.flatten(g.gap(g.conv(g.input(X), 13, 3))), 10, trans_b=1))


@case("gemm_flatten_spatial")
def _(g):
    g.output(g.gemm(g.flatten(g.conv(g.input(X), 3, 3, stride=2)), 7, trans_b=1))


@case("gemm_no_transb")
def _(g):
    g.output(g.gemm(g.flatten(g.gap(g.conv(g.input(X), 13, 3))), 10, trans_b=0))


@case("matmul_flatten")
def _(g):
    g.output(g.matmul(g.flatten(g.gap(g.conv(g.input(X), 13, 3))), 10))


@case("head_reshape_transpose")
def _(g):  # [1,C,H,W] -> [1,C,H*W] -> [1,H*W,C] (detection-head style)
    y = g.conv(g.input(X), 7, 3)
    g.output(g.transpose(g.reshape(y, [1, 7, -1]), [0, 2, 1]))


# Shapes computed in the graph, as PyTorch's exporter writes `x.view(x.size(0), -1)`,
# `x.reshape(b, c, h * w)` and `F.interpolate(x, size=y.shape[-2:])`: Shape, Gather, Slice,
# Mul, Unsqueeze, Concat and Cast on the way to a Reshape or a Resize's sizes.
def shape_of(g, x, idx):
    i64 = lambda v: g.const(np.array(v, dtype=np.int64), "i")
    sh = g.node("Shape", [x], (len(g.shape[x]),))
    return [g.node("Unsqueeze", [g.node("Gather", [sh, i64(i)], (), axis=0), i64([0])], (1,)) for i in idx], sh


@case("head_view_size")
def _(g):
    g.formats = ["qdq", "qop", "strict"]
    y = g.conv(g.input(X), 7, 3)
    (b,), _ = shape_of(g, y, [0])
    flat = g.node("Concat", [b, g.const(np.array([-1], dtype=np.int64), "i")], (2,), axis=0)
    g.output(g.gemm(g.node("Reshape", [y, flat], (1, 7 * 13 * 11)), 6))


@case("head_reshape_hw")
def _(g):
    y = g.conv(g.input(X), 7, 3)
    (b, c, h, w), _ = shape_of(g, y, [0, 1, 2, 3])
    shape = g.node("Concat", [b, c, g.node("Mul", [h, w], (1,))], (3,), axis=0)
    g.output(g.transpose(g.node("Reshape", [y, shape], (1, 7, 13 * 11)), [0, 2, 1]))


# The arithmetic of a dynamic-axes export: Range indices into Gather, ConstantOfShape, Div,
# and Reshape's 0 ("copy this dimension") resolved through Equal and Where.
@case("head_shape_arithmetic")
def _(g):
    y = g.conv(g.input(X), 7, 3)
    i64 = lambda v: g.const(np.array(v, dtype=np.int64), "i")
    dims = g.node("Shape", [y], (4,))
    nc = g.node("Gather", [dims, g.node("Range", [i64(0), i64(2), i64(1)], (2,))], (2,), axis=0)
    ones = g.node("ConstantOfShape", [g.node("Shape", [nc], (1,))], (2,),
                  value=onnx.helper.make_tensor("one", onnx.TensorProto.INT64, [1], [1]))
    nc = g.node("Div", [g.node("Mul", [nc, ones], (2,)), ones], (2,))
    target = g.node("Concat", [g.node("Mul", [nc, i64([0, 1])], (2,)), i64([-1])], (3,), axis=0)
    copy = g.node("Slice", [dims, i64([0]), i64([3]), i64([0])], (3,))
    target = g.node("Where", [g.node("Equal", [target, i64([0])], (3,)), copy, target], (3,))
    g.output(g.transpose(g.node("Reshape", [y, target], (1, 7, 13 * 11)), [0, 2, 1]))


@case("fpn_resize_to_shape")
def _(g):
    g.formats = ["qdq", "qop", "trt", "strict"]
    x = g.input((1, 4, 12, 10))
    a = g.conv(x, 6, 3)
    b = g.conv(x, 6, 3, stride=2)
    i64 = lambda v: g.const(np.array(v, dtype=np.int64), "i")
    hw = g.node("Slice", [g.node("Shape", [a], (4,)), i64([2]), i64([4]), i64([0])], (2,))
    nc = g.node("Slice", [g.node("Shape", [b], (4,)), i64([0]), i64([2]), i64([0])], (2,))
    sizes = g.node("Cast", [g.node("Concat", [nc, hw], (4,), axis=0)], (4,), to=7)
    up = g.node("Resize", [b, "", "", sizes], (1, 6, 12, 10), mode="nearest",
                coordinate_transformation_mode="asymmetric", nearest_mode="floor")
    g.output(g.conv(g.add(a, up), 4, 1, pads=P0))


@case("head_nhwc_reshape")
def _(g):  # NCHW -> NHWC -> [1, H*W*A, C/A]
    y = g.conv(g.input(X), 6, 1, pads=P0)
    g.output(g.reshape(g.transpose(y, [0, 2, 3, 1]), [1, -1, 3]))


@case("head_flatten")
def _(g):
    g.output(g.flatten(g.conv(g.input(X), 3, 3, stride=2)))


@case("head_squeeze_unsqueeze")
def _(g):
    y = g.squeeze(g.gap(g.conv(g.input(X), 7, 3)), [2, 3])
    g.output(g.unsqueeze(y, [1]))


@case("head_unsqueeze_matmul")
def _(g):
    y = g.unsqueeze(g.squeeze(g.gap(g.conv(g.input(X), 13, 3)), [2, 3]), [0])
    g.output(g.matmul(y, 4))


# -- random DAGs --
def random_graph(g, rng):
    c0, h0, w0 = int(rng.integers(1, 9)), int(rng.integers(7, 24)), int(rng.integers(7, 24))
    live = [stem(g, (1, c0, h0, w0), int(rng.integers(1, 17)))]
    used = set()

    def pick(cond=lambda t: True):
        cands = [t for t in live if cond(t)]
        return cands[int(rng.integers(len(cands)))] if cands else None

    def hw(t):
        return g.shape[t][2:]

    def ch(t):
        return g.shape[t][1]

    steps = int(rng.integers(4, 11))
    for _ in range(steps):
        kind = rng.choice(["conv", "conv", "conv", "act", "add", "mul", "pool", "concat", "resize"])
        x = pick(lambda t: min(hw(t)) >= 1 and max(hw(t)) <= 48)
        y = None
        if kind == "conv":
            k = int(rng.choice([1, 3, 5]))
            s = int(rng.choice([1, 1, 2]))
            if min(hw(x)) + 2 * (k // 2) < k:
                k = 1
            cin, cout = ch(x), int(rng.integers(1, 17))
            u = rng.random()
            group = 1
            if u < 0.2 and cin > 1:
                group, cout = cin, cin                  # depthwise
            elif u < 0.35:
                divs = [d for d in range(2, cin + 1) if cin % d == 0]
                if divs:                                 # grouped, 1..4 outputs per group
                    group = int(rng.choice(divs))
                    cout = group * int(rng.integers(1, 5))
            y = g.conv(x, cout, k, s, group=group, bias=bool(rng.random() < 0.9))
        elif kind == "act":
            y = [g.relu, g.sigmoid, lambda t: g.clip(t, 0.0, 6.0)][int(rng.integers(3))](x)
        elif kind in ("add", "mul"):
            other = pick(lambda t: t != x and g.shape[t] == g.shape[x])
            if rng.random() < 0.2:
                other = g.const(rng.uniform(0.5, 1.5, (1, ch(x), 1, 1)).astype(np.float32))
            elif other is None:  # make one: 1x1 conv to x's shape from a tensor with x's spatial size
                src = pick(lambda t: hw(t) == hw(x))
                other = g.conv(src, ch(x), 1, pads=P0)
            else:
                used.add(other)
            y = getattr(g, kind)(x, other)
        elif kind == "pool":
            if min(hw(x)) < 3:
                continue
            k, s = int(rng.choice([2, 3])), int(rng.choice([1, 2]))
            p = (k // 2,) * 4 if (k == 3 and rng.random() < 0.5) else (0, 0, 0, 0)
            if rng.random() < 0.5:
                y = g.maxpool(x, k, s, pads=p)
            else:
                y = g.avgpool(x, k, s, pads=p, count_include_pad=int(rng.integers(2)))
        elif kind == "concat":
            other = pick(lambda t: t != x and hw(t) == hw(x))
            if other is None:
                other = g.conv(x, int(rng.integers(1, 9)), 3)
            used.add(other)
            y = g.concat([x, other] if rng.random() < 0.5 else [other, x])
        elif kind == "resize":
            target = pick(lambda t: hw(t) != hw(x) and min(hw(t)) >= min(hw(x)))
            mode = "nearest" if rng.random() < 0.5 else "linear"
            if target is not None and rng.random() < 0.6:
                y = g.resize(x, mode, size=hw(target))
            elif max(hw(x)) <= 24:
                y = g.resize(x, mode, scale=2)
            else:
                continue
        if y is not None:
            used.add(x)
            live.append(y)
    leaves = [t for t in live[1:] if t not in used]
    outs = leaves[-2:] if leaves else [live[-1]]
    for o in outs:
        g.output(o)


# Softmax, LogSoftmax and LayerNormalization: quantize_static leaves them in float between
# DequantizeLinear and QuantizeLinear (QDQ only: its QOperator form is a com.microsoft
# operator); the native engine runs them on the float route. Channels of an NHWC tensor are
# contiguous rows; a softmax over H or W normalizes rows strided across the channels. ONNX
# Runtime fuses DQ -> Softmax -> Q into its table-based QLinearSoftmax, which scales by
# floor(1 / y_scale) (254 for the 1/255 that quantize_static gives a softmax): the softmax
# cases output the softmax itself, so the difference is counted in its own steps.
def _norm_case(build, opset=None, head=True):
    def case_fn(g):
        g.formats = ["qdq", "qop"]
        if opset:
            g.opset = opset
        y = build(g, g.conv(g.input(X), 6, 3))
        g.output(g.conv(y, 4, 1, pads=P0) if head else y)
    return case_fn


def _softmax(op, axis):
    return lambda g, x: g.node(op, [x], g.shape[x], axis=axis)


CASES["softmax_channels"] = _norm_case(_softmax("Softmax", 1), head=False)
CASES["softmax_width"] = _norm_case(_softmax("Softmax", -1), head=False)
CASES["softmax_height"] = _norm_case(_softmax("Softmax", 2), head=False)
CASES["logsoftmax_channels"] = _norm_case(_softmax("LogSoftmax", 1))


def _layer_norm_nhwc(g, x):
    """ConvNeXt's LayerNorm2d: to NHWC, LayerNormalization over channels, back."""
    c = g.shape[x][1]
    t = g.transpose(x, [0, 2, 3, 1])
    ln = g.node("LayerNormalization", [t, g.const(g.rng.uniform(0.5, 1.5, c).astype(np.float32), "s"),
                                       g.const(g.rng.normal(0.0, 0.2, c).astype(np.float32), "b")],
                g.shape[t], axis=-1, epsilon=1e-6)
    return g.transpose(ln, [0, 3, 1, 2])


CASES["layernorm_nhwc"] = _norm_case(_layer_norm_nhwc, opset=17)


@case("layernorm_tokens")
def _(g):
    # A transformer's tokens: [1, C, H, W] -> [1, H*W, C], LayerNormalization (no bias) over
    # the features, a linear layer.
    g.formats = ["qdq"]
    g.opset = 17
    x = g.conv(g.input(X), 6, 3)
    t = g.transpose(g.reshape(x, [1, 6, -1]), [0, 2, 1])
    ln = g.node("LayerNormalization", [t, g.const(g.rng.uniform(0.5, 1.5, 6).astype(np.float32), "s")],
                g.shape[t], axis=-1)
    g.output(g.matmul(ln, 5))


@case("dfl_softmax")
def _(g):
    # YOLOv8's distribution focal loss decode: 4 x 8 bins per pixel, softmax over the bins,
    # their expectation by a fixed 1x1 convolution (weights 0..7).
    g.formats = ["qdq"]
    x = g.conv(g.input(X), 32, 1, pads=P0)
    hw = X[2] * X[3]
    t = g.transpose(g.reshape(x, [1, 4, 8, hw]), [0, 2, 1, 3])
    sm = g.node("Softmax", [t], g.shape[t], axis=1)
    w = g.const(np.arange(8, dtype=np.float32).reshape(1, 8, 1, 1), "w")
    y = g.node("Conv", [sm, w], (1, 1, 4, hw), kernel_shape=[1, 1])
    g.output(g.reshape(y, [1, 4, hw]))


@case("expand_grid")
def _(g):
    # YOLOv8's anchor grid: Range and Expand of constants (folded at load), concatenated
    # beside the features as a position map.
    x = g.conv(g.input(X), 6, 3)
    _, _, hh, ww = g.shape[x]
    i64 = lambda v: g.const(np.array(v, dtype=np.int64), "i")
    f32 = lambda v: g.const(np.array(v, dtype=np.float32), "f")
    cols = g.node("Range", [f32(0.0), f32(float(ww)), f32(1.0)], (ww,))
    grid = g.node("Expand", [cols, i64([1, 1, hh, ww])], (1, 1, hh, ww))
    g.output(g.conv(g.concat([x, grid]), 4, 3))


@case("shared_bias")
def _(g):
    # PyTorch's exporter shares equal parameters: one tensor is a convolution's bias (an
    # int32 DequantizeLinear after quantize_static) and, through an Identity, the bias Add
    # of a per-pixel linear layer (a QuantizeLinear of that dequantized constant), as in
    # torchvision's ConvNeXt.
    g.formats = ["qdq"]
    x = g.input(X)
    y = g.conv(x, 6, 3)
    bias = g.nodes[-1].input[2]
    t = g.transpose(y, [0, 2, 3, 1])
    lin = g.matmul(t, 6)
    shared = g.node("Identity", [bias], (6,))
    z = g.add(lin, shared)
    g.output(g.conv(g.transpose(z, [0, 3, 1, 2]), 4, 1, pads=P0))


@case("reduce_mean_spatial")
def _(g):
    # x.mean((2, 3)) before a classifier (ShuffleNetV2, MNASNet) and, kept 4-D, a
    # squeeze-and-excitation's squeeze: ReduceMean over H and W (left in float by
    # quantize_static) is a global average pool.
    g.formats = ["qdq"]
    x = g.conv(g.input(X), 7, 3)
    flat = g.node("ReduceMean", [x], (1, 7), axes=[2, 3], keepdims=0)
    kept = g.node("ReduceMean", [x], (1, 7, 1, 1), axes=[-1, -2])
    g.output(g.gemm(flat, 5), "logits")
    g.output(g.mul(x, g.sigmoid(g.conv(kept, 7, 1, pads=P0))), "gated")


def _tokens_and_heads(g, shape=X):
    """A convolution's pixels as 8-feature tokens [1, T, 8], T, and a split of tokens into
    two heads, [1, T, 8] -> [1, 2, T, 4]."""
    x = g.conv(g.input(shape), 8, 3)
    t = g.transpose(g.reshape(x, [1, 8, -1]), [0, 2, 1])
    T = g.shape[t][1]

    def heads(y):
        return g.transpose(g.reshape(y, [1, T, 2, 4]), [0, 2, 1, 3])
    return t, T, heads


@case("attention")
def _(g):
    # One attention layer on a conv's pixels as tokens, two heads: q·kᵀ and softmax·v are
    # products of two computed tensors (QLinearMatMul with a computed B in ONNX Runtime), the
    # scores scaled by 1/√d, the first token taken by a Gather (a class token). Its QOperator
    # form holds com.microsoft.QLinearSoftmax.
    g.formats = ["qdq", "qop"]
    t, T, heads = _tokens_and_heads(g)
    q, k, v = heads(g.matmul(t, 8)), heads(g.matmul(t, 8)), heads(g.matmul(t, 8))
    scores = g.node("MatMul", [q, g.transpose(k, [0, 1, 3, 2])], (1, 2, T, T))
    scores = g.node("Div", [scores, g.const(np.float32(2.0))], (1, 2, T, T))
    p = g.node("Softmax", [scores], (1, 2, T, T), axis=-1)
    o = g.node("MatMul", [p, v], (1, 2, T, 4))
    o = g.reshape(g.transpose(o, [0, 2, 1, 3]), [1, T, 8])
    g.output(g.matmul(o, 5), "tokens")
    first = g.node("Gather", [o, g.const(np.array(0, dtype=np.int64), "i")], (1, 8), axis=1)
    g.output(g.gemm(first, 3), "cls")


# Float reductions and row broadcasts (quantize_static leaves ReduceL2, Sqrt, Pow, ... in
# float between DequantizeLinear and QuantizeLinear): F.normalize (a re-ID embedding, Swin-V2's
# cosine attention), a layer norm written out as opset-13 exports write it, and the other
# reductions over channels and over tokens.
def _normalize(g, x, axis):
    """F.normalize(x, dim=axis): x / max(||x||, eps), the norm expanded to x's shape."""
    n = list(g.shape[x])
    n[axis] = 1
    norm = g.node("ReduceL2", [x], tuple(n), axes=[axis], keepdims=1)
    norm = g.node("Clip", [norm, g.const(np.float32(1e-12)), ""], tuple(n))
    sh = g.node("Shape", [x], (len(g.shape[x]),))
    return g.node("Div", [x, g.node("Expand", [norm, sh], g.shape[x])], g.shape[x])


@case("normalize_rows")
def _(g):
    g.formats = ["qdq"]
    x = g.conv(g.input(X), 6, 3)
    t = g.transpose(g.reshape(x, [1, 6, -1]), [0, 2, 1])  # [1, T, 6] tokens
    g.output(g.matmul(_normalize(g, t, 2), 5), "tokens")
    g.output(g.conv(_normalize(g, x, 1), 4, 1, pads=P0), "channels")


def _layer_norm_decomposed(g, x, axis):
    """LayerNorm as an opset-13 export writes it: mean, centre, mean square, sqrt, divide."""
    n = list(g.shape[x])
    c = n[axis]
    n[axis] = 1
    mean = g.node("ReduceMean", [x], tuple(n), axes=[axis], keepdims=1)
    d = g.node("Sub", [x, mean], g.shape[x])
    var = g.node("ReduceMean", [g.node("Pow", [d, g.const(np.float32(2.0))], g.shape[x])], tuple(n),
                 axes=[axis], keepdims=1)
    std = g.node("Sqrt", [g.node("Add", [var, g.const(np.float32(1e-5))], tuple(n))], tuple(n))
    y = g.node("Div", [d, std], g.shape[x])
    shape = [1] * len(g.shape[x])
    shape[axis] = c
    gamma = g.const(g.rng.uniform(0.5, 1.5, c).astype(np.float32).reshape(shape), "s")
    beta = g.const(g.rng.normal(0.0, 0.2, c).astype(np.float32).reshape(shape), "b")
    return g.node("Add", [g.node("Mul", [y, gamma], g.shape[x]), beta], g.shape[x])


@case("layernorm_decomposed")
def _(g):
    g.formats = ["qdq"]
    g.opset = 13
    x = g.conv(g.input(X), 6, 3)
    t = g.transpose(g.reshape(x, [1, 6, -1]), [0, 2, 1])
    g.output(g.matmul(_layer_norm_decomposed(g, t, 2), 5), "tokens")
    g.output(g.conv(_layer_norm_decomposed(g, x, 1), 4, 1, pads=P0), "channels")


@case("reductions")
def _(g):
    # Each reduction then an Add (quantized by quantize_static), so its result is quantized
    # and a last-bit difference of ONNX Runtime's summation order shows as at most a step.
    g.formats = ["qdq"]
    x = g.conv(g.input(X), 6, 3)
    axes = g.const(np.array([1], dtype=np.int64), "i")  # ReduceSum's axes are an input
    out = lambda r, name: g.output(g.add(r, g.const(np.float32(0.5))), name)
    out(g.node("ReduceSum", [x, axes], (1, 1, 13, 11), keepdims=1), "sum_channels")
    out(g.node("ReduceMax", [x], (1, 6, 11), axes=[2], keepdims=0), "max_height")
    out(g.node("ReduceMin", [x], (1, 6, 13, 1), axes=[-1], keepdims=1), "min_width")
    out(g.node("ReduceL1", [x], (1, 13, 11), axes=[1], keepdims=0), "l1_channels")
    out(g.node("ReduceSumSquare", [x], (1, 6), axes=[2, 3], keepdims=0), "sumsq_spatial")
    out(g.node("ReduceMean", [x], (1, 1, 1, 1), keepdims=1), "mean_all")


# Swin-V2's window attention: a per-head logit scale (Exp of a clipped parameter) and a
# position bias from an MLP of a constant coordinate table (Sigmoid, times 16): subgraphs of
# parameters only, folded at load (their weights quantized by quantize_static too). The
# quantized Mul of the scores by the per-head scale runs one scalar along each row.
@case("attention_constant_bias")
def _(g):
    g.formats = ["qdq"]
    t, T, heads = _tokens_and_heads(g, (1, 5, 24, 22))  # T = 528
    q, k = heads(g.matmul(t, 8)), heads(g.matmul(t, 8))
    scores = g.node("MatMul", [q, g.transpose(k, [0, 1, 3, 2])], (1, 2, T, T))
    logit = g.const(np.log(10 * np.ones((2, 1, 1), dtype=np.float32)) * g.rng.uniform(0.8, 1.2, (2, 1, 1)).astype(np.float32), "p")
    scale = g.node("Exp", [g.node("Clip", [logit, "", g.const(np.float32(np.log(100.0)))], (2, 1, 1))], (2, 1, 1))
    scores = g.node("Mul", [scores, scale], (1, 2, T, T))
    table = g.const(g.rng.uniform(-1, 1, (T, 2)).astype(np.float32), "t")
    w1 = g.const(g.rng.normal(0, 0.5, (2, 16)).astype(np.float32), "w")
    w2 = g.const(g.rng.normal(0, 0.5, (16, 2)).astype(np.float32), "w")
    hidden = g.node("Relu", [g.node("MatMul", [table, w1], (T, 16))], (T, 16))
    bias = g.node("Transpose", [g.node("MatMul", [hidden, w2], (T, 2))], (2, T), perm=[1, 0])
    bias = g.node("Mul", [g.node("Sigmoid", [bias], (2, T)), g.const(np.float32(16.0))], (2, T))
    bias = g.node("Unsqueeze", [bias, g.const(np.array([1], dtype=np.int64), "i")], (2, 1, T))
    scores = g.node("Add", [scores, bias], (1, 2, T, T))
    g.output(g.node("Softmax", [scores], (1, 2, T, T), axis=-1))


@case("attention_einsum")
def _(g):
    # MaxViT's attention: q·kᵀ and p·v written as Einsum (the second with its operand as
    # is, the first transposed by the equation).
    g.formats = ["qdq"]
    t, T, heads = _tokens_and_heads(g)
    q, k, v = heads(g.matmul(t, 8)), heads(g.matmul(t, 8)), heads(g.matmul(t, 8))
    scores = g.node("Einsum", [q, k], (1, 2, T, T), equation="b h i d, b h j d -> b h i j")
    p = g.node("Softmax", [scores], (1, 2, T, T), axis=-1)
    o = g.node("Einsum", [p, v], (1, 2, T, 4), equation="bhij,bhjd->bhid")
    g.output(g.matmul(g.reshape(g.transpose(o, [0, 2, 1, 3]), [1, T, 8]), 5), "tokens")
    # The product itself (exact; after it, the fused softmax).
    g.output(g.node("Identity", [scores], g.shape[scores]), "scores")


# Quantized Mul as ONNX Runtime runs it (QLinearMul: the debiased integers' product times
# one float ratio sa·sb/sy, plus the stored zero point, rounded): a tensor by a scalar that is
# no power of two (an attention's q·d^-0.5, which Swin writes as Pow(32, -0.5) of constants),
# and two computed tensors of unrelated scales.
@case("mul_scalar_scale")
def _(g):
    g.formats = ["qdq", "qop"]
    x = g.conv(g.input(X), 6, 3)
    scale = g.node("Pow", [g.const(np.float32(32.0)), g.const(np.float32(-0.5))], ())
    g.output(g.mul(x, scale))


@case("mul_scalar")
def _(g):
    g.formats = ["qdq", "qop"]
    x = g.conv(g.input((1, 5, 24, 22)), 16, 3)
    g.output(g.mul(x, _scalar(g, 0.17677669)))


@case("mul_two_tensors")
def _(g):
    x = g.input((1, 5, 48, 40))
    g.output(g.mul(g.conv(x, 8, 3), g.conv(x, 8, 1, pads=P0)))


# Pad of a computed tensor: constant (the zero point), reflect, edge and wrap, with a crop
# (a negative pad), and pads of 0 (a shifted-window transformer's Pad when the map is a
# multiple of its window: the input itself).
def _pad_case(mode, pads, formats=("qdq", "qop")):
    def build(g):
        g.formats = list(formats)
        x = g.conv(g.input(X), 6, 3)
        n, c, h, w = g.shape[x]
        shp = (n, c + pads[1] + pads[5], h + pads[2] + pads[6], w + pads[3] + pads[7])
        y = g.node("Pad", [x, g.const(np.array(pads, dtype=np.int64), "pads")], shp, mode=mode)
        g.output(g.conv(y, 4, 1, pads=P0))
    return build


CASES["pad_constant"] = _pad_case("constant", [0, 0, 1, 2, 0, 0, 3, 1])
CASES["pad_constant_channels_crop"] = _pad_case("constant", [0, 1, -1, 0, 0, 2, 0, -2])
CASES["pad_reflect"] = _pad_case("reflect", [0, 0, 2, 1, 0, 0, 1, 3], formats=("qdq",))
CASES["pad_edge"] = _pad_case("edge", [0, 0, 1, 3, 0, 0, 2, 0], formats=("qdq",))
CASES["pad_zero"] = _pad_case("constant", [0] * 8)


# A shifted-window attention mask as torchvision's Swin exports it: ScatterND writes region
# labels into a constant, Equal/Not/Where turn them into 0 / -100, all folded at load; the mask
# is added to a computed tensor.
@case("scatter_mask")
def _(g):
    x = g.conv(g.input(X), 6, 3)
    n, c, h, w = g.shape[x]
    base = g.node("ConstantOfShape", [g.const(np.array([h, w], dtype=np.int64), "shape")], (h, w),
                  value=numpy_helper.from_array(np.array([0], dtype=np.int64)))
    idx = np.array([[i, j] for i in range(h) for j in range(w) if i >= h // 2 or j >= w // 2],
                   dtype=np.int64)
    labels = (idx[:, 0] >= h // 2).astype(np.int64) + 2 * (idx[:, 1] >= w // 2).astype(np.int64)
    regions = g.node("ScatterND", [base, g.const(idx, "idx"), g.const(labels, "labels")], (h, w))
    same = g.node("Not", [g.node("Equal", [regions, g.const(np.int64(0))], (h, w))], (h, w))
    mask = g.node("Where", [same, g.const(np.float32(-1.5)), g.const(np.float32(0.0))], (h, w))
    mask = g.node("Transpose", [mask], (w, h), perm=[1, 0])
    mask = g.node("Transpose", [mask], (h, w), perm=[1, 0])
    g.output(g.conv(g.add(x, mask), 4, 1, pads=P0))


# Cases also written with float weights and a Q/DQ pair on each (`qref.to_float_weights`,
# as PyTorch's QAT export, pytorch-quantization and ModelOpt write weights): per-channel
# weights of every layout the importer reads (dense, grouped, depthwise, transposed, Gemm
# with and without transB, MatMul).
# Added last: a case's seed is its position in CASES, so new ones go here and leave the
# others' models as they were.
CASES["sin_cos"] = _float_chain(
    lambda g, x: g.add(g.node("Sin", [x], g.shape[x]), g.node("Cos", [x], g.shape[x])))


@case("oriented_box_tail")
def _(g):
    # YOLO11-OBB's rotated-box decode: distances (lt, rb) and an angle per pixel; the box
    # centre (rb - lt) / 2 rotated by the angle's cos and sin, and its size lt + rb, in a float
    # tail that quantize_static leaves partly unquantized (Sub of two dequantized tensors
    # into a float Div).
    g.formats = ["qdq"]
    x = g.input(X)
    lt, rb = g.split(g.conv(x, 4, 3), [2, 2])
    ang = g.conv(x, 1, 1, pads=P0)
    c, s = g.node("Cos", [ang], g.shape[ang]), g.node("Sin", [ang], g.shape[ang])
    d = g.node("Div", [g.node("Sub", [rb, lt], g.shape[rb]), _scalar(g, 2.0)], g.shape[rb])
    xf, yf = g.split(d, [1, 1])
    rx = g.node("Sub", [g.mul(xf, c), g.mul(yf, s)], g.shape[xf])
    ry = g.add(g.mul(xf, s), g.mul(yf, c))
    g.output(g.concat([rx, ry, g.add(lt, rb)]))


@case("channel_shuffle")
def _(g):
    # ShuffleNetV2's unit: the channels split in halves, one half through convolutions, the
    # two concatenated and shuffled (reshape to [1, 2, C/2, H, W], the groups swapped,
    # reshaped back), then split again.
    x = g.conv(g.input(X), 8, 3)
    a, b = g.split(x, [4, 4])
    y = g.concat([a, g.conv(g.conv(b, 4, 1, pads=P0), 4, 3)])
    n, c, h, w = g.shape[y]
    t = g.transpose(g.reshape(y, [n, 2, c // 2, h, w]), [0, 2, 1, 3, 4])
    p, q = g.split(g.reshape(t, [n, c, h, w]), [4, 4])
    g.output(g.concat([p, g.conv(q, 4, 3)]))


@case("conv_wide_weights")
def _(g):
    # A 3x3 convolution whose packed weights (128 x 256 x 9 = 295 KB) outgrow the quarter of
    # L2 above which the native engine makes one chunk of rows per lane (ResNet's last
    # stages): the outputs must not depend on that count.
    g.output(g.conv(g.conv(g.input(X), 128, 1, pads=P0), 256, 3))


# Square root, reciprocal, absolute value, logarithm, sine and cosine of a convolution's
# float output (their results quantized by the next convolution's input).
CASES["float_unary_tail"] = _float_chain(
    lambda g, x: g.add(
        g.add(g.mul(g.node("Sqrt", [g.node("Abs", [x], g.shape[x])], g.shape[x]),
                    g.node("Cos", [x], g.shape[x])),
              g.mul(g.node("Log", [g.add(g.node("Abs", [x], g.shape[x]), _scalar(g, 1.0))], g.shape[x]),
                    g.node("Sin", [x], g.shape[x]))),
        g.node("Reciprocal", [g.add(g.node("Abs", [x], g.shape[x]), _scalar(g, 2.0))], g.shape[x])))



@case("avgpool_k3s2p1_ceil_cip1")
def _(g):
    # Ceil mode with the padding counted: the last window of each row reaches past the
    # padding, and ONNX Runtime's QLinearAveragePool divides every window by the whole kernel.
    g.output(g.avgpool(stem(g, (1, 5, 14, 11)), 3, 2, pads=(1, 1, 1, 1), ceil_mode=1,
                       count_include_pad=1))


@case("avgpool_whole_image")
def _(g):
    # A window the size of the image, no padding: ONNX Runtime averages it as a global
    # pool (integer sums, one requantization), not in its float pooling formula.
    g.output(g.avgpool(stem(g, X), (13, 11), 1))


@case("gap_shared")
def _(g):
    # A global pool large enough (48x40x40 = 76,800 values) that the native engine shares
    # its rows among the lanes and adds the chunks' integer sums up.
    g.output(g.gap(g.conv(g.input((1, 3, 48, 40)), 40, 3)))


@case("silu_interleaved")
def _(g):
    # Two branches' SiLUs listed interleaved (Conv, Conv, Sigmoid, Sigmoid, Mul, Mul), as a
    # YOLO C2f block's exports list them: a multiply is not the step after its sigmoid, and
    # the native engine still folds each into one table.
    x = g.input(X)
    a, b = g.conv(x, 5, 3), g.conv(x, 4, 1, pads=[0, 0, 0, 0])
    sa, sb = g.sigmoid(a), g.sigmoid(b)
    g.output(g.concat([g.mul(a, sa), g.mul(b, sb)]))


@case("gelu")
def _(g):
    g.opset = 20  # Gelu is an opset-20 operator (torch.onnx.export(dynamo=True) writes it)
    g.formats = ["qdq", "qop", "trt"]  # trt: the float route's Gelu step after a float conv
    x = g.conv(g.input(X), 6, 3)
    g.output(g.conv(g.node("Gelu", [x], g.shape[x]), 4, 1, pads=[0, 0, 0, 0]))


@case("gelu_tanh")
def _(g):
    g.opset = 20
    g.formats = ["qdq", "qop", "trt"]
    x = g.conv(g.input(X), 6, 3)
    g.output(g.conv(g.node("Gelu", [x], g.shape[x], approximate="tanh"), 4, 1, pads=[0, 0, 0, 0]))


FLOAT_WEIGHT_CASES = ("conv_k3", "conv_s2x1_k5x3", "conv_group2", "conv_depthwise",
                      "conv_depthwise_mult2", "gemm_transb", "gemm_no_transb", "matmul_flatten",
                      "deconv_k4s2p1", "trt_residual")


# Cases also written with Q/DQ on convolution and Gemm inputs only (`qref.to_trt_strict`):
# their slices, splits, transposes and reshapes move a convolution's float output, and
# constant operands meet it.
STRICT_CASES = ("slice_channels", "slice_focus", "split_channels", "split_height_equal",
                "c2f_block", "head_reshape_transpose", "head_nhwc_reshape", "head_reshape_hw",
                "head_shape_arithmetic", "hardswish_decomposed", "hardswish_chain", "trt_se_div",
                "tanh", "softplus", "mish", "mish_decomposed", "silu_exp_div",
                "concat_const_channels", "gelu_erf", "softmax_channels", "softmax_width",
                "layernorm_nhwc", "pad_constant", "pad_reflect", "float_unary_tail")


def conv1d(g, x, cout, k, s=1, d=1, pads=None, group=1):
    """A PyTorch Conv1d as exported: 3-D weights [cout, cin / group, k] over [N, C, L]."""
    n, cin, length = g.shape[x]
    pads = pads if pads is not None else [d * (k - 1) // 2] * 2
    wt = g.rng.standard_normal((cout, cin // group, k)) * np.sqrt(2.0 / (cin // group * k))
    b = g.rng.normal(0.0, 0.1, cout)
    out = (length + pads[0] + pads[1] - d * (k - 1) - 1) // s + 1
    return g.node("Conv", [x, g.const(wt.astype(np.float32), "w"), g.const(b.astype(np.float32), "b")],
                  (n, cout, out), kernel_shape=[k], strides=[s], dilations=[d], pads=list(pads), group=group)


@case("conv1d_temporal")
def _(g):
    # A temporal encoder over agent histories, as PyTorch's Conv1d, MaxPool1d, AvgPool1d and
    # AdaptiveAvgPool1d(1) export: [N, C, L] tensors, which the native importer lifts to
    # [N, C, 1, L] (`onnx::lift`). Two sequences, odd lengths, a dilated strided convolution
    # with uneven pads, a depthwise one.
    h = g.relu(conv1d(g, g.input((2, 5, 23)), 16, 3))
    h = g.relu(conv1d(g, h, 24, 5, s=2, d=2, pads=[4, 3]))
    h = g.node("MaxPool", [h], (2, 24, 5), kernel_shape=[2], strides=[2])
    h = g.relu(conv1d(g, h, 24, 3, group=24))
    h = g.node("AveragePool", [h], (2, 24, 5), kernel_shape=[3], strides=[1], pads=[1, 1])
    h = conv1d(g, h, 6, 1)
    g.output(g.node("GlobalAveragePool", [h], (2, 6, 1)))


@case("conv1d_transposed")
def _(g):
    # PyTorch's ConvTranspose1d between two quantized Conv1d. QDQ only: with QOperator,
    # ONNX Runtime's optimized graph computes a 1-D ConvTranspose otherwise than its own
    # unoptimized one (138 of 552 outputs a step apart on this case's first draft; the 2-D
    # form of the same layer agrees), and the native engine follows the unoptimized one.
    g.formats = ["qdq"]
    h = g.relu(conv1d(g, g.input((2, 5, 23)), 24, 3))
    wt = g.rng.standard_normal((24, 8, 4)) * np.sqrt(2.0 / 48)
    h = g.node("ConvTranspose", [h, g.const(wt.astype(np.float32), "w")], (2, 8, 46), kernel_shape=[4],
               strides=[2], pads=[1, 1])
    g.output(conv1d(g, g.relu(h), 6, 1))


@case("grid_sample_bev")
def _(g):
    # GridSample at constant locations (a BEV view transform's sampling), between two
    # quantized convolutions: ONNX Runtime leaves it in float between DequantizeLinear and
    # QuantizeLinear, and so does the native engine's float route.
    x = g.conv(g.input(X), 8, 3)
    grid = g.const(g.rng.uniform(-1.2, 1.2, (1, 9, 10, 2)).astype(np.float32), "grid")
    s = g.node("GridSample", [x, grid], (1, 8, 9, 10), mode="bilinear", padding_mode="zeros", align_corners=0)
    g.output(g.conv(g.relu(s), 4, 3))


@case("grid_sample_flow")
def _(g):
    # GridSample at locations a convolution computes (a flow field, deformable attention's
    # offsets), nearest with reflection and bilinear with border padding.
    x = g.conv(g.input(X), 6, 3)
    grid = g.transpose(g.conv(x, 2, 3), [0, 2, 3, 1])
    a = g.node("GridSample", [x, grid], (1, 6, 13, 11), mode="nearest", padding_mode="reflection", align_corners=1)
    b = g.node("GridSample", [x, grid], (1, 6, 13, 11), mode="bilinear", padding_mode="border", align_corners=0)
    g.output(g.conv(g.add(a, b), 4, 1, pads=P0))


def topk(g, x, k, axis, largest=1):
    """ONNX TopK (K an int64 input): the names of its values and its int64 indices."""
    name = g._id("topk")
    outs = [f"{name}_values", f"{name}_indices"]
    g.nodes.append(helper.make_node("TopK", [x, g.const(np.array([k], dtype=np.int64), "k")], outs,
                                    name=name, axis=axis, largest=largest))
    shape = list(g.shape[x])
    shape[axis] = k
    for o in outs:
        g.shape[o] = tuple(shape)
    return outs


def floor_div(g, x, d):
    """`x // d` of an int64 tensor as PyTorch exports it: Div truncates, then Where picks
    quotient - 1 when the signs differ and the remainder is not zero."""
    i64 = lambda v: g.const(np.array(v, dtype=np.int64), "i")
    shape = g.shape[x]
    q = g.node("Div", [x, i64(d)], shape)
    neg = g.node("Xor", [g.node("Less", [x, i64(0)], shape), g.const(np.array(d < 0), "b")], shape)
    rem = g.node("Not", [g.node("Equal", [g.node("Mod", [x, i64(d)], shape, fmod=0), i64(0)], shape)], shape)
    return g.node("Where", [g.node("And", [neg, rem], shape), g.node("Sub", [q, i64(1)], shape), q], shape)


@case("query_select_topk")
def _(g):
    # A detection transformer's query selection (RT-DETR, DINO): per-pixel scores, TopK,
    # the chosen pixels' features gathered by the indices; then a class-major TopK over
    # every (pixel, class) score split into pixel and class by integer floor division as
    # PyTorch exports `//`, GatherElements of the pixels' features, the class cast to float.
    # Quantized scores tie often: ONNX Runtime's order among ties (smaller index first) is
    # what must match.
    x = g.conv(g.input(X), 8, 3)
    T = X[2] * X[3]
    t = g.transpose(g.reshape(x, [1, 8, T]), [0, 2, 1])
    s = g.node("ReduceMax", [t], (1, T), axes=[2], keepdims=0)
    vals, idx = topk(g, s, 20, axis=1)
    feats = g.node("Gather", [g.reshape(t, [T, 8]), g.reshape(idx, [20])], (20, 8), axis=0)
    g.output(g.gemm(feats, 5), "queries")
    g.output(g.relu(vals), "scores")
    flat = g.reshape(t, [1, T * 8])
    fv, fi = topk(g, flat, 30, axis=1, largest=0)
    pixel = floor_div(g, fi, 8)
    cls = g.node("Sub", [fi, g.node("Mul", [pixel, g.const(np.array(8, dtype=np.int64), "i")], (1, 30))], (1, 30))
    where = g.node("Expand", [g.unsqueeze(pixel, [2]), g.const(np.array([1, 30, 8], dtype=np.int64), "shape")],
                   (1, 30, 8))
    picked = g.node("GatherElements", [t, where], (1, 30, 8), axis=1)
    label = g.node("Cast", [g.unsqueeze(cls, [2])], (1, 30, 1), to=TensorProto.FLOAT)
    g.output(g.concat([picked, g.unsqueeze(fv, [2]), label], axis=2), "picks")


@case("seg_argmax")
def _(g):
    # A segmentation head's class map: ArgMax over a convolution's 6 class channels (the
    # first of tied codes, as ONNX Runtime picks), and ArgMin along the width keeping the last
    # of ties (select_last_index), both cast to float.
    x = g.conv(g.input(X), 6, 3)
    classes = g.node("ArgMax", [x], (1, 1, X[2], X[3]), axis=1, keepdims=1)
    g.output(g.node("Cast", [classes], (1, 1, X[2], X[3]), to=TensorProto.FLOAT), "classes")
    col = g.node("ArgMin", [x], (1, 6, X[2]), axis=-1, keepdims=0, select_last_index=1)
    g.output(g.node("Cast", [col], (1, 6, X[2]), to=TensorProto.FLOAT), "columns")


def write_mul_ties(out_dir, seed):
    """Quantized Mul written by hand with fixed scales (`mul_ties_<form>_<type>`): every pair
    of the 256 codes of two tensors, in QDQ form (ONNX Runtime fuses it into QLinearMul) and
    as com.microsoft.QLinearMul. The scales and zero points are Swin-T's q·d^-0.5 Mul (whose
    code 163 rounds the other way in the dequantized-product formula), then two random
    triples; a Mul of dequantized operands differs from ONNX Runtime in 12 of the uint8
    models' 196,608 pairs and 1 of the int8 models' (measured), ONNX Runtime's formula in
    none."""
    from onnx import TensorProto, helper
    rng = np.random.default_rng([seed, 11])
    bits = np.array([1005026095, 976599726, 983658642], dtype=np.uint32).view(np.float32)
    triples = [tuple(bits)] + [tuple(np.float32(rng.uniform(0.002, 0.05, 3))) for _ in range(2)]
    manifests = []
    for ty, (lo, hi), npty in (("u8", (0, 255), np.uint8), ("s8", (-128, 127), np.int8)):
        tp = TensorProto.UINT8 if ty == "u8" else TensorProto.INT8
        swin = [127, 0, 125] if ty == "u8" else [-1, -128, -3]
        zps = swin + [int(rng.integers(lo + 40, hi - 40)) for _ in range(3 * len(triples) - 3)]
        codes = np.arange(lo, hi + 1)
        for form in ("qdq", "qop"):
            nodes, inits, inputs, outputs, feeds = [], [], [], [], {}
            for t, (sa, sb, sy) in enumerate(triples):
                za, zb, zy = zps[3 * t:3 * t + 3]
                names = {}
                for k, (s_, z_) in enumerate(((sa, za), (sb, zb), (sy, zy))):
                    names[k] = (f"s{t}_{k}", f"z{t}_{k}")
                    inits += [helper.make_tensor(names[k][0], TensorProto.FLOAT, [], [float(s_)]),
                              helper.make_tensor(names[k][1], tp, [], [z_])]
                a_codes, b_codes = np.meshgrid(codes, codes, indexing="ij")
                for k, (c, z_, s_) in enumerate(((a_codes, za, sa), (b_codes, zb, sb))):
                    name = f"in{t}_{k}"
                    inputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, [256, 256]))
                    feeds[name] = ((c - z_) * np.float32(s_)).astype(np.float32)
                    nodes.append(helper.make_node("QuantizeLinear", [name, *names[k]], [f"q{t}_{k}"]))
                out = f"y{t}"
                if form == "qdq":
                    for k in (0, 1):
                        nodes.append(helper.make_node("DequantizeLinear", [f"q{t}_{k}", *names[k]], [f"d{t}_{k}"]))
                    nodes += [helper.make_node("Mul", [f"d{t}_0", f"d{t}_1"], [f"m{t}"]),
                              helper.make_node("QuantizeLinear", [f"m{t}", *names[2]], [f"qm{t}"])]
                else:
                    nodes.append(helper.make_node(
                        "QLinearMul", [f"q{t}_0", *names[0], f"q{t}_1", *names[1], *names[2]], [f"qm{t}"],
                        domain="com.microsoft"))
                nodes.append(helper.make_node("DequantizeLinear", [f"qm{t}", *names[2]], [out]))
                outputs.append(helper.make_tensor_value_info(out, TensorProto.FLOAT, [256, 256]))
            graph = helper.make_graph(nodes, "mul_ties", inputs, outputs, inits)
            model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13),
                                                            helper.make_opsetid("com.microsoft", 1)])
            stem = f"mul_ties_{form}_{ty}"
            onnx.save(model, os.path.join(out_dir, stem + ".onnx"))
            qref.write_reference(out_dir, stem, stem + ".onnx", feeds, {"form": form, "act": ty})
            manifests.append(stem + ".json")
            print(f"{stem}.onnx  hand-written QLinearMul scales, {len(triples)} x 65536 pairs")
    return manifests


def write_bias_scales(out_dir, seed):
    """QDQ convolutions whose int32 bias is dequantized with a scale other than
    x_scale * w_scale (`bias_scales_<type>`): ONNX Runtime fuses only a bias with that scale
    into its integer kernel and computes the others in float, as ONNX's semantics say. Four
    convolutions of one input: the bias scale equal to the product; four times it; and one
    bias tensor shared through Identity by two convolutions whose weight scales differ by 2
    (as torch.onnx.export shares equal biases and quantize_static then scales the shared
    tensor for its first reader). Every scale is a power of two, so ONNX Runtime's float
    sums are exact and so are its roundings: the engines must agree byte for byte."""
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng([seed, 13])
    manifests = []
    sx, sy = 2.0 ** -5, 2.0 ** -2
    for ty, tp, npty, zx, zy in (("u8", TensorProto.UINT8, np.uint8, 120, 128),
                                 ("s8", TensorProto.INT8, np.int8, -3, 0)):
        lo, hi = (0, 255) if ty == "u8" else (-128, 127)
        inits = [numpy_helper.from_array(np.array(sx, np.float32), "sx"),
                 numpy_helper.from_array(np.array(zx, npty), "zx"),
                 numpy_helper.from_array(np.array(sy, np.float32), "sy"),
                 numpy_helper.from_array(np.array(zy, npty), "zy")]
        nodes = [helper.make_node("QuantizeLinear", ["x", "sx", "zx"], ["xq"]),
                 helper.make_node("DequantizeLinear", ["xq", "sx", "zx"], ["xf"])]
        outputs = []
        sw_first = (2.0 ** -np.array([6, 7, 6, 8])).astype(np.float32)

        def conv(k, sw, bias_name):
            w = rng.integers(-127, 128, (4, 8, 3, 3)).astype(np.int8)
            inits.extend([numpy_helper.from_array(w, f"w{k}"),
                          numpy_helper.from_array(sw.astype(np.float32), f"sw{k}"),
                          numpy_helper.from_array(np.zeros(4, np.int8), f"zw{k}")])
            nodes.extend([helper.make_node("DequantizeLinear", [f"w{k}", f"sw{k}", f"zw{k}"], [f"wf{k}"], axis=0),
                          helper.make_node("Conv", ["xf", f"wf{k}", bias_name], [f"c{k}"], pads=[1, 1, 1, 1]),
                          helper.make_node("QuantizeLinear", [f"c{k}", "sy", "zy"], [f"cq{k}"]),
                          helper.make_node("DequantizeLinear", [f"cq{k}", "sy", "zy"], [f"y{k}"])])
            outputs.append(helper.make_tensor_value_info(f"y{k}", TensorProto.FLOAT, [1, 4, 6, 7]))

        def bias(k, scale):
            inits.extend([numpy_helper.from_array(rng.integers(-3000, 3000, 4).astype(np.int32), f"b{k}"),
                          numpy_helper.from_array(scale.astype(np.float32), f"sb{k}"),
                          numpy_helper.from_array(np.zeros(4, np.int32), f"zb{k}")])
            nodes.append(helper.make_node("DequantizeLinear", [f"b{k}", f"sb{k}", f"zb{k}"], [f"bf{k}"], axis=0))
            return f"bf{k}"

        conv(0, sw_first, bias(0, sx * sw_first))          # as quantizers write it: fused
        conv(1, sw_first, bias(1, 4 * sx * sw_first))      # another scale: float in ORT
        shared = bias(2, sx * sw_first)                    # one tensor, two readers
        nodes += [helper.make_node("Identity", [shared], ["shared_a"]),
                  helper.make_node("Identity", [shared], ["shared_b"])]
        conv(2, sw_first, "shared_a")
        conv(3, sw_first / 2, "shared_b")
        graph = helper.make_graph(nodes, "bias_scales", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 6, 7])],
                                  outputs, inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
        model.ir_version = 8
        onnx.checker.check_model(model, full_check=True)
        stem = f"bias_scales_qdq_{ty}"
        onnx.save(model, os.path.join(out_dir, stem + ".onnx"))
        codes = rng.integers(lo, hi + 1, (1, 8, 6, 7))
        feeds = {"x": ((codes - zx) * sx).astype(np.float32)}
        qref.write_reference(out_dir, stem, stem + ".onnx", feeds, {"form": "qdq", "act": ty})
        manifests.append(stem + ".json")
        print(f"{stem}.onnx  hand-written bias scales: fused, x4, shared through Identity")
    return manifests


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out_dir")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--random", type=int, default=20, metavar="K", help="number of random graphs (default 20)")
    ap.add_argument("--only", nargs="+", metavar="NAME", help="subset of the fixed cases (random graphs still follow --random)")
    ap.add_argument("--reduce-range", action="store_true",
                    help="7-bit weights (quantize_static reduce_range=True): keeps ORT's u8 x s8 AVX2 kernel "
                         "(no VNNI) from saturating its int16 pair sums, see README.md")
    args = ap.parse_args()
    hand_written = ("mul_ties", "bias_scales")
    names = [n for n in (args.only or list(CASES)) if n not in hand_written]
    for n in names:
        if n not in CASES:
            ro.fail(f"unknown case {n!r}; known: {', '.join(CASES)}")
    os.makedirs(args.out_dir, exist_ok=True)
    t0 = time.perf_counter()
    manifests = []
    for i, n in enumerate(names):
        seed = args.seed * 100_003 + list(CASES).index(n)
        g = qref.Graph(n, seed)
        CASES[n](g)
        formats = getattr(g, "formats", None)
        if n in FLOAT_WEIGHT_CASES:
            formats = (formats or ["qdq", "qop"]) + ["fq"]
        if n in STRICT_CASES:
            formats = (formats or ["qdq", "qop"]) + ["strict"]
        manifests += qref.build_all(args.out_dir, n, g.model(), seed, reduce_range=args.reduce_range,
                                    formats=formats)
    for r in range(args.random):
        n = f"rand{r:02d}"
        seed = args.seed * 100_003 + 50_000 + r
        g = qref.Graph(n, seed)
        random_graph(g, np.random.default_rng([seed, 7]))
        manifests += qref.build_all(args.out_dir, n, g.model(), seed, reduce_range=args.reduce_range)
    if args.only is None or "mul_ties" in args.only:
        manifests += write_mul_ties(args.out_dir, args.seed)
    if args.only is None or "bias_scales" in args.only:
        manifests += write_bias_scales(args.out_dir, args.seed)
    qref.write_index(args.out_dir, manifests)
    print(f"# {len(manifests)} quantized models in {time.perf_counter() - t0:.1f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
