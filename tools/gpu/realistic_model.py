#!/usr/bin/env python3
"""Writes the realistic-scale backbone of issue 13's GPU targets: a ResNet-18 feature
extractor (conv7x7/2 + maxpool, four stages of two basic blocks at 64/128/256/512 channels,
stride 32; no pooling or classifier) over six 1600x900 cameras, quantized QDQ by ONNX
Runtime's quantize_static (per-channel int8 weights, uint8 activations, MinMax), with a
uint8 NCHW camera input [6, 3, 900, 1600] (the input QuantizeLinear removed: the engine takes
the camera bytes) and features [6, 512, 29, 50]. About 316 GMAC per frame (53 per camera).

Seeded He-init weights (speed and bit-exactness do not depend on training). Calibrated on
seeded image-like samples at a small size (the graph is size-independent), then given its
static full size. Deterministic for a given seed.

Usage: python3 tools/gpu/realistic_model.py OUT.onnx [--seed N] [--cams 6] [--height 900] [--width 1600]
"""
import argparse
import os
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "onnx"))
import qref  # noqa: E402
from onnxruntime import quantization as oq  # noqa: E402


def basic_block(g, x, cout, stride):
    cin = g.shape[x][1]
    y = g.relu(g.conv(x, cout, 3, stride))
    y = g.conv(y, cout, 3, 1, gain=0.5)
    sc = x if (stride == 1 and cin == cout) else g.conv(x, cout, 1, stride, pads=[0, 0, 0, 0])
    return g.relu(g.add(y, sc))


def resnet18_features(seed, shape):
    g = qref.Graph("resnet18_features", seed)
    x = g.input(shape, "image")
    x = g.relu(g.conv(x, 64, 7, 2, pads=[3, 3, 3, 3]))
    x = g.maxpool(x, 3, 2, pads=(1, 1, 1, 1))
    for i, c in enumerate([64, 128, 256, 512]):
        x = basic_block(g, x, c, 1 if i == 0 else 2)
        x = basic_block(g, x, c, 1)
    g.output(x, "features")
    return g.model()


def out_size(n):
    n = (n + 6 - 7) // 2 + 1  # conv 7x7/2 p3
    n = (n + 2 - 3) // 2 + 1  # maxpool 3x3/2 p1
    for _ in range(3):
        n = (n + 2 - 3) // 2 + 1  # stride-2 3x3 p1 of stages 2-4
    return n


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("--cams", type=int, default=6)
    ap.add_argument("--height", type=int, default=900)
    ap.add_argument("--width", type=int, default=1600)
    a = ap.parse_args()
    cal_shape = (1, 3, 96, 160)
    model = resnet18_features(a.seed, cal_shape)
    rng = np.random.default_rng(a.seed)
    samples = [{"image": qref.image_like(rng, cal_shape)} for _ in range(4)]
    with tempfile.TemporaryDirectory() as tmp:
        src, dst = os.path.join(tmp, "f.onnx"), os.path.join(tmp, "q.onnx")
        onnx.save(model, src)
        oq.quantize_static(src, dst, qref.Reader(samples), quant_format=oq.QuantFormat.QDQ, per_channel=True,
                           weight_type=oq.QuantType.QInt8, activation_type=oq.QuantType.QUInt8,
                           calibrate_method=oq.CalibrationMethod.MinMax)
        q = onnx.load(dst)
    g = q.graph
    # The camera bytes are the input: drop the input's QuantizeLinear and feed its output.
    (quant,) = [n for n in g.node if n.op_type == "QuantizeLinear" and n.input[0] == "image"]
    g.node.remove(quant)
    full = (a.cams, 3, a.height, a.width)
    del g.input[:]
    g.input.append(helper.make_tensor_value_info(quant.output[0], TensorProto.UINT8, full))
    del g.value_info[:]
    out = g.output[0]
    del g.output[:]
    g.output.append(helper.make_tensor_value_info(out.name, TensorProto.FLOAT,
                                                  (a.cams, 512, out_size(a.height), out_size(a.width))))
    onnx.checker.check_model(q)
    onnx.save(q, a.out)
    print(f"{a.out}: input uint8 {list(full)}, features float {[a.cams, 512, out_size(a.height), out_size(a.width)]}")


if __name__ == "__main__":
    main()
