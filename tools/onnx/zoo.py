#!/usr/bin/env python3
"""Builds a small zoo of CNN models with seeded random weights and quantizes each with ONNX
Runtime's quantize_static, for the redline ONNX importer to be checked against ORT.

Usage: python3 tools/onnx/zoo.py OUT_DIR [--only NAME...] [--seed N]

Models (float32, opset 17, static shapes, batch 1, He-init weights, BatchNorm assumed
folded into the conv biases):
- resnet18: 1x3x224x224 ResNet-18 classifier (conv7x7/2+relu, maxpool 3x3/2 p1, 4 stages x
  2 basic blocks at 64/128/256/512 channels, 1x1/2 projection shortcuts, Add then Relu,
  GlobalAveragePool, Flatten, Gemm to 1000).
- centernet: 1x3x256x448 CenterNet-style detector: ResNet-style backbone to stride 32, an
  FPN neck back to stride 4 (Resize nearest/asymmetric/floor, Resize linear/half_pixel,
  Resize nearest; Add and Concat merges), heads at stride 4: heatmap (3 classes, Sigmoid),
  wh (2 ch), offset (2 ch).
- mobilenetv2: 1x3x224x224 MobileNetV2 classifier (width 1.0): conv3x3/2 + Clip(0, 6), 17
  inverted residual blocks (1x1 expansion x6 + Clip, 3x3 depthwise at stride 1 or 2 +
  Clip, 1x1 linear projection, Add when the shape is kept), conv1x1 to 1280 + Clip,
  GlobalAveragePool, Flatten, Gemm to 1000. Most of its time is depthwise and 1x1
  convolutions, the op mix of edge backbones.
- regnetx: 1x3x224x224 RegNetX-200MF classifier: conv3x3/2 32 + relu, 4 stages (widths
  24/56/152/368, depths 1/1/4/7) of X blocks (1x1 + relu, 3x3 grouped conv with 8 channels
  per group + relu at stride 2 in a stage's first block, 1x1, projection shortcut when the
  shape changes, Add then Relu), GlobalAveragePool, Flatten, Gemm to 1000. Its grouped
  convolutions are neither dense nor depthwise.
- efficientnet: 1x3x224x224 EfficientNet-B0 classifier: conv3x3/2 + SiLU (x * sigmoid(x)),
  16 MBConv blocks (1x1 expansion + SiLU, 3x3 or 5x5 depthwise + SiLU, squeeze-and-
  excitation: GlobalAveragePool, 1x1 + SiLU, 1x1 + Sigmoid, channel Mul; 1x1 projection,
  Add when the shape is kept), conv1x1 to 1280 + SiLU, GlobalAveragePool, Flatten, Gemm.
  SiLU is the activation of YOLO-style detectors too.
- yolo: 1x3x384x640 YOLOv5n-style detector: 6x6/2 stem, Conv+SiLU, C3 blocks (two 1x1
  branches, bottlenecks of 1x1 + 3x3 + Add, Concat, 1x1), SPPF (three chained 5x5 stride-1
  MaxPools, Concat), a PAN neck (nearest x2 Resize + Concat down, stride-2 convs + Concat
  up) and three 1x1 detection outputs `p3`/`p4`/`p5` (24 channels: 3 anchors x (4 box + 1
  objectness + 3 classes)) at strides 8/16/32.
Writes OUT_DIR/<model>_float.onnx and <model>_{qdq,qop}_{s8,u8}.onnx, each quantized model
with its reference (<stem>.in*.bin, <stem>.out*.bin, <stem>.json; see qref.py and
README.md), and OUT_DIR/index.json listing the manifests (merged with an existing one).
Deterministic: the same seed gives byte-identical files.
"""

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import redline_onnx as ro  # noqa: E402
import qref  # noqa: E402


def basic_block(g, x, cout, stride):
    cin = g.shape[x][1]
    y = g.relu(g.conv(x, cout, 3, stride))
    y = g.conv(y, cout, 3, 1, gain=0.5)  # small last gain: keeps the residual sum's range sane
    sc = x if (stride == 1 and cin == cout) else g.conv(x, cout, 1, stride, pads=[0, 0, 0, 0])
    return g.relu(g.add(y, sc))


def resnet18(seed):
    g = qref.Graph("resnet18", seed)
    x = g.input((1, 3, 224, 224), "image")
    x = g.relu(g.conv(x, 64, 7, 2, pads=[3, 3, 3, 3]))
    x = g.maxpool(x, 3, 2, pads=(1, 1, 1, 1))
    for i, c in enumerate([64, 128, 256, 512]):
        x = basic_block(g, x, c, 1 if i == 0 else 2)
        x = basic_block(g, x, c, 1)
    x = g.flatten(g.gap(x))
    g.output(g.gemm(x, 1000), "logits")
    return g.model()


def centernet(seed):
    g = qref.Graph("centernet", seed)
    x = g.input((1, 3, 256, 448), "image")
    x = g.relu(g.conv(x, 32, 7, 2, pads=[3, 3, 3, 3]))     # /2
    x = g.maxpool(x, 3, 2, pads=(1, 1, 1, 1))               # /4
    c2 = basic_block(g, x, 64, 1)                           # /4, 64
    c3 = basic_block(g, c2, 96, 2)                          # /8, 96
    c4 = basic_block(g, c3, 128, 2)                         # /16, 128
    c5 = basic_block(g, c4, 192, 2)                         # /32, 192
    lat = lambda t, c: g.conv(t, c, 1, pads=[0, 0, 0, 0])  # noqa: E731
    p5 = lat(c5, 128)
    p4 = g.add(g.resize(p5, "nearest", scale=2), lat(c4, 128))             # nearest x2, Add merge
    p4 = g.relu(g.conv(p4, 96, 3))
    up = g.resize(p4, "linear", scale=2, ctm="half_pixel")                 # bilinear x2, Concat merge
    p3 = g.relu(g.conv(g.concat([up, lat(c3, 64)]), 96, 3))
    p2 = g.add(g.resize(p3, "nearest", scale=2), lat(c2, 96))              # nearest x2, Add merge
    p2 = g.relu(g.conv(p2, 64, 3))                                          # /4
    heads = {"heatmap": (3, -2.19), "wh": (2, None), "offset": (2, None)}
    for name, (ch, b) in heads.items():
        h = g.conv(g.relu(g.conv(p2, 64, 3)), ch, 1, pads=[0, 0, 0, 0], bias_value=b)
        g.output(g.sigmoid(h) if name == "heatmap" else h, name)
    return g.model()


def inverted_residual(g, x, cout, stride, expand):
    cin = g.shape[x][1]
    y = x
    if expand != 1:
        y = g.clip(g.conv(y, cin * expand, 1, pads=[0, 0, 0, 0]))
    c = g.shape[y][1]
    y = g.clip(g.conv(y, c, 3, stride, group=c))                        # depthwise
    y = g.conv(y, cout, 1, pads=[0, 0, 0, 0], gain=0.5 if stride == 1 and cin == cout else 1.0)
    return g.add(x, y) if stride == 1 and cin == cout else y


def mobilenetv2(seed):
    g = qref.Graph("mobilenetv2", seed)
    x = g.input((1, 3, 224, 224), "image")
    x = g.clip(g.conv(x, 32, 3, 2))
    # (expansion, output channels, blocks, first stride): MobileNetV2's table.
    for t, c, n, s in [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                       (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)]:
        for i in range(n):
            x = inverted_residual(g, x, c, s if i == 0 else 1, t)
    x = g.clip(g.conv(x, 1280, 1, pads=[0, 0, 0, 0]))
    x = g.flatten(g.gap(x))
    g.output(g.gemm(x, 1000), "logits")
    return g.model()


def x_block(g, x, cout, stride, group_width):
    cin = g.shape[x][1]
    y = g.relu(g.conv(x, cout, 1, pads=[0, 0, 0, 0]))
    y = g.relu(g.conv(y, cout, 3, stride, group=cout // group_width))   # grouped 3x3
    y = g.conv(y, cout, 1, pads=[0, 0, 0, 0], gain=0.5)
    sc = x if (stride == 1 and cin == cout) else g.conv(x, cout, 1, stride, pads=[0, 0, 0, 0])
    return g.relu(g.add(y, sc))


def regnetx(seed):
    g = qref.Graph("regnetx", seed)
    x = g.input((1, 3, 224, 224), "image")
    x = g.relu(g.conv(x, 32, 3, 2))
    # RegNetX-200MF: (width, depth) per stage, group width 8, bottleneck ratio 1.
    for w, d in [(24, 1), (56, 1), (152, 4), (368, 7)]:
        for i in range(d):
            x = x_block(g, x, w, 2 if i == 0 else 1, 8)
    x = g.flatten(g.gap(x))
    g.output(g.gemm(x, 1000), "logits")
    return g.model()


def silu(g, x):
    return g.mul(x, g.sigmoid(x))


def mb_conv(g, x, cout, k, stride, expand):
    cin = g.shape[x][1]
    y = x
    if expand != 1:
        y = silu(g, g.conv(y, cin * expand, 1, pads=[0, 0, 0, 0]))
    c = g.shape[y][1]
    y = silu(g, g.conv(y, c, k, stride, group=c))                       # depthwise
    # Squeeze-and-excitation: GAP, 1x1 reduce + SiLU, 1x1 expand + Sigmoid, channel Mul.
    se = silu(g, g.conv(g.gap(y), max(1, cin // 4), 1, pads=[0, 0, 0, 0]))
    se = g.sigmoid(g.conv(se, c, 1, pads=[0, 0, 0, 0]))
    y = g.mul(y, se)
    y = g.conv(y, cout, 1, pads=[0, 0, 0, 0], gain=0.5 if stride == 1 and cin == cout else 1.0)
    return g.add(x, y) if stride == 1 and cin == cout else y


def efficientnet(seed):
    g = qref.Graph("efficientnet", seed)
    x = g.input((1, 3, 224, 224), "image")
    x = silu(g, g.conv(x, 32, 3, 2))
    # EfficientNet-B0's table: (expansion, kernel, output channels, blocks, first stride).
    for t, k, c, n, s in [(1, 3, 16, 1, 1), (6, 3, 24, 2, 2), (6, 5, 40, 2, 2), (6, 3, 80, 3, 2),
                          (6, 5, 112, 3, 1), (6, 5, 192, 4, 2), (6, 3, 320, 1, 1)]:
        for i in range(n):
            x = mb_conv(g, x, c, k, s if i == 0 else 1, t)
    x = silu(g, g.conv(x, 1280, 1, pads=[0, 0, 0, 0]))
    x = g.flatten(g.gap(x))
    g.output(g.gemm(x, 1000), "logits")
    return g.model()


def conv_silu(g, x, c, k=1, s=1):
    return silu(g, g.conv(x, c, k, s, pads=[(k - 1) // 2] * 4))


def c3(g, x, c, n, shortcut=True):
    """YOLOv5's C3: two 1x1 branches, n bottlenecks (1x1, 3x3, Add) on one, Concat, 1x1."""
    h = c // 2
    a = conv_silu(g, x, h)
    for _ in range(n):
        y = conv_silu(g, conv_silu(g, a, h), h, 3)
        a = g.add(a, y) if shortcut else y
    return conv_silu(g, g.concat([a, conv_silu(g, x, h)]), c)


def yolo(seed):
    g = qref.Graph("yolo", seed)
    x = g.input((1, 3, 384, 640), "image")
    x = conv_silu(g, x, 16, 6, 2)                            # /2 (YOLOv5's 6x6 stem)
    x = c3(g, conv_silu(g, x, 32, 3, 2), 32, 1)              # /4
    p3 = c3(g, conv_silu(g, x, 64, 3, 2), 64, 2)             # /8
    p4 = c3(g, conv_silu(g, p3, 128, 3, 2), 128, 3)          # /16
    p5 = c3(g, conv_silu(g, p4, 256, 3, 2), 256, 1)          # /32
    # SPPF: three chained 5x5 stride-1 max pools, Concat, 1x1.
    a = conv_silu(g, p5, 128)
    m1 = g.maxpool(a, 5, 1, pads=(2, 2, 2, 2))
    m2 = g.maxpool(m1, 5, 1, pads=(2, 2, 2, 2))
    m3 = g.maxpool(m2, 5, 1, pads=(2, 2, 2, 2))
    p5 = conv_silu(g, g.concat([a, m1, m2, m3]), 256)
    # PAN neck: nearest x2 + Concat down, strided conv + Concat up.
    h5 = conv_silu(g, p5, 128)
    n4 = c3(g, g.concat([g.resize(h5, "nearest", scale=2), p4]), 128, 1, shortcut=False)
    h4 = conv_silu(g, n4, 64)
    n3 = c3(g, g.concat([g.resize(h4, "nearest", scale=2), p3]), 64, 1, shortcut=False)
    d4 = c3(g, g.concat([conv_silu(g, n3, 64, 3, 2), h4]), 128, 1, shortcut=False)
    d5 = c3(g, g.concat([conv_silu(g, d4, 128, 3, 2), h5]), 256, 1, shortcut=False)
    # Detect: one 1x1 per scale, 3 anchors x (4 box + 1 object + 3 classes).
    for name, t in [("p3", n3), ("p4", d4), ("p5", d5)]:
        g.output(g.conv(t, 24, 1, pads=[0, 0, 0, 0]), name)
    return g.model()


MODELS = {"resnet18": resnet18, "centernet": centernet, "mobilenetv2": mobilenetv2,
          "regnetx": regnetx, "efficientnet": efficientnet, "yolo": yolo}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out_dir")
    ap.add_argument("--only", nargs="+", metavar="NAME", help=f"subset of {sorted(MODELS)}")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--reduce-range", action="store_true",
                    help="7-bit weights (quantize_static reduce_range=True): keeps ORT's u8 x s8 AVX2 kernel "
                         "(no VNNI) from saturating its int16 pair sums, see README.md")
    ap.add_argument("--trt", nargs="*", metavar="NAME", default=None,
                    help="also <name>_trt_{s8,u8} for these models (all when none is named): the QDQ "
                         "model in TensorRT-style Q/DQ placement (qref.to_trt_style)")
    ap.add_argument("--strict", nargs="*", metavar="NAME", default=None,
                    help="also <name>_strict_{s8,u8} for these models (all when none is named): the "
                         "QDQ model with Q/DQ on convolution and Gemm inputs only (qref.to_trt_strict)")
    ap.add_argument("--strictfq", nargs="*", metavar="NAME", default=None,
                    help="also <name>_strictfq_{s8,u8} for these models (all when none is named): "
                         "Q/DQ on convolution and Gemm inputs only and float weights with a Q/DQ "
                         "pair, as NVIDIA's toolkits export (qref.to_strict_float_weights)")
    ap.add_argument("--pt", nargs="*", metavar="NAME", default=None,
                    help="also <name>_pt_{s8,u8} for these models (all when none is named): the "
                         "QDQ model written as PyTorch's exporter writes a quantized model "
                         "(qref.to_pytorch_export)")
    ap.add_argument("--modelopt", nargs="*", metavar="NAME", default=None,
                    help="also <name>_modelopt_{s8,u8}: the QDQ model as NVIDIA's ModelOpt "
                         "exports it (qref.to_modelopt_export)")
    ap.add_argument("--w4", nargs="*", metavar="NAME", default=None,
                    help="also <name>_w4_{s8,u8}: 4-bit weights (quantize_static weight_type QInt4 "
                         "with int8 activations, QUInt4 with uint8), the reference computed by ORT on "
                         "the same weights stored in 8 bits (ORT runs 4-bit weights in float)")
    args = ap.parse_args()
    names = args.only or list(MODELS)
    for n in names:
        if n not in MODELS:
            ro.fail(f"unknown model {n!r}; known: {', '.join(MODELS)}")
    os.makedirs(args.out_dir, exist_ok=True)
    idx_path = os.path.join(args.out_dir, "index.json")
    manifests = set()
    if os.path.isfile(idx_path):
        with open(idx_path, "r", encoding="utf-8") as f:
            manifests = set(json.load(f).get("manifests", []))
    def formats(n):
        # --trt / --strict / --strictfq / --pt with no names: every model; with names: those.
        extra = [tag for tag, sel in (("trt", args.trt), ("strict", args.strict),
                                      ("strictfq", args.strictfq), ("pt", args.pt),
                                      ("modelopt", args.modelopt), ("w4", args.w4))
                 if sel is not None and (not sel or n in sel)]
        return ["qdq", "qop"] + extra if extra else None

    for i, n in enumerate(names):
        t0 = time.perf_counter()
        model = MODELS[n](args.seed * 1000 + list(MODELS).index(n))
        manifests |= set(qref.build_all(args.out_dir, n, model, args.seed * 1000 + list(MODELS).index(n),
                                             reduce_range=args.reduce_range,
                                             formats=formats(n)))
        print(f"# {n}: {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    qref.write_index(args.out_dir, manifests)


if __name__ == "__main__":
    main()
