#!/usr/bin/env python3
"""Quantizes a trained checkpoint and writes the models redline loads.

Usage: python3 tools/train/export.py CKPT DATA -o OUT [--calib-frames N] [--fixtures DIR]
                                      [--act-range mse|percentile] [--heat-score-floor P]

1. Calibration: the float network runs on N frames of DATA (every drive, evenly spaced);
   each activation's values are sampled. ReLU outputs use [0, hi] with zero point -128;
   head outputs use [lo, hi] (asymmetric). With --act-range mse (the default) hi is the
   value's q-quantile (lo its (1-q)-quantile) for the q of MSE_QUANTILES (p99.9 ... max)
   whose quantize-dequantize error on the samples is smallest; with percentile, q = 0.9999.
   MSE raised the shipped model's per-layer SQNR from 25-42 dB to 32-43 dB and its INT8
   mAP on the validation drives from 0.568 to 0.581.
   The heatmap is the exception (--heat-score-floor P, default 0.001): its range is the
   logits of the scores [P, 1 - P], fixed. Almost every heatmap cell is background with a
   logit far below zero, so an error-minimising range spends the 256 levels there: the
   seven-camera network's was [-114, +2.3] (a step of 0.456 in logit: no score between
   0.388 and 0.5, and none above 0.907). Scores below P (0.001) are all the same to the
   decoder (its threshold is 0.15); with P = 0.001 a step is 0.054 in logit, about one
   point of score near the threshold. P = 0 calibrates the heatmap like the other outputs. The BEV grid keeps the backbone
   output's quantization (redline's view transform and fusion carry features without
   rescaling).
2. Weights: symmetric per output channel INT8 (zero point 0), biases int32 with scale
   x_scale * w_scale[c].
3. OUT/backbone.onnx, det_head.onnx, seg_head.onnx: QDQ models (opset 17): int8 NHWC input
   -> Transpose -> DequantizeLinear -> [Conv (DequantizeLinear'd weights and bias) -> Relu
   -> QuantizeLinear -> DequantizeLinear]... -> QuantizeLinear -> Transpose -> int8 NHWC
   output, as redline's model contract (pipeline/src/models.rs) asks. The detection head has
   two outputs, `heatmap` then `boxes`, each with its own quantization.
   With a position map ("dilated_pos"), the detection head concatenates it, an int8
   constant at the features' quantization, after its input's channels (exact: no rescale).
4. OUT/float/*.onnx: the same graphs without the inner QuantizeLinear/DequantizeLinear
   pairs: float computation between the same int8 boundaries (camera input, features, BEV
   grid, head outputs), for the INT8-vs-float comparison run through redline's onnxruntime
   engine.
5. OUT/quantization.json: the scales and zero points, and per-layer SQNR of the INT8
   network (integer emulation, int8.py) against the float network on the calibration
   frames.
6. --fixtures DIR: one frame's int8 inputs and the integer emulation's outputs for each
   model, for redline's CI test (tests/tests/trained_model.rs) that runs without PyTorch.

Deterministic: the same checkpoint and data give byte-identical files.
"""

import argparse
import json
import os
import sys

import numpy as np
import onnx
import torch
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import data as D  # noqa: E402
import int8  # noqa: E402
import net as N  # noqa: E402

OPSET = 17


# Candidate tails for --act-range mse: the range is cut at the quantile q (and 1 - q for
# the heads' signed outputs); the candidate whose quantize-dequantize error is smallest wins.
MSE_QUANTILES = (0.999, 0.9995, 0.9999, 0.99995, 0.99999, 1.0)


def fake_quant_mse(v, s, zp):
    q = torch.clamp(torch.round(v / s) + zp, -128, 127)
    return float(((q - zp) * s - v).pow(2).mean())


def act_q(t, relu, mode="percentile"):
    v = t.detach().flatten().double()
    if v.numel() > 4_000_000:
        g = torch.Generator().manual_seed(0)
        v = v[torch.randint(v.numel(), (4_000_000,), generator=g)]
    quantiles = (0.9999,) if mode == "percentile" else MSE_QUANTILES
    best = None
    for qt in quantiles:
        if relu:
            hi = max(float(torch.quantile(v, qt)), 1e-3)
            cand = (hi / 255.0, -128)
        else:
            lo, hi = float(torch.quantile(v, 1.0 - qt)), float(torch.quantile(v, qt))
            lo, hi = min(lo, 0.0), max(hi, 0.0)
            s = max(hi - lo, 1e-3) / 255.0
            cand = (s, int(np.clip(np.round(-128 - lo / s), -128, 127)))
        err = fake_quant_mse(v, *cand) if len(quantiles) > 1 else 0.0
        if best is None or err < best[0]:
            best = (err, cand)
    return best[1]


def calibrate(model, ds, frames, mode="percentile"):
    """Runs the float network on `frames` (drive, t) items; returns {tap: (scale, zp)}."""
    taps = {}
    acc = {}
    with torch.no_grad():
        for i in range(0, len(frames), 8):
            b = ds.batch(frames[i : i + 8])
            t = {}
            model(b["frames"], b["warp"], b["m"], t)
            for k, v in t.items():
                acc.setdefault(k, []).append(v.flatten()[:: max(1, v.numel() // 500_000)])
    for k, vs in acc.items():
        relu = not (k.endswith("heat") or k.endswith("box") or k.endswith("out"))
        taps[k] = act_q(torch.cat(vs), relu, mode)
    return taps


def heat_range(floor):
    """(scale, zero point) of the heatmap: the logits of the scores [floor, 1 - floor]."""
    if not 0 < floor < 0.5:
        sys.exit(f"--heat-score-floor {floor}: use a score in (0, 0.5), e.g. 0.001, or 0 to calibrate")
    hi = float(np.log((1 - floor) / floor))
    s = 2 * hi / 255.0
    return (s, int(np.clip(np.round(-128 + hi / s), -128, 127)))


def quant_weights(conv):
    w = conv.weight.detach().double().numpy()
    amax = np.abs(w).reshape(w.shape[0], -1).max(1)
    ws = np.where(amax > 0, amax / 127.0, 1.0)
    wq = np.clip(np.round(w / ws[:, None, None, None]), -127, 127).astype(np.int8)
    return wq, ws.astype(np.float32)


def quant_bias(conv, x_scale, ws):
    b = conv.bias.detach().double().numpy()
    bs = (np.float32(x_scale) * ws).astype(np.float32)
    bq = np.clip(np.round(b / bs.astype(np.float64)), -(2**31), 2**31 - 1).astype(np.int32)
    return bq, bs


class Builder:
    def __init__(self, name, qdq):
        self.name, self.qdq = name, qdq
        self.nodes, self.inits, self.n = [], [], 0

    def fresh(self, base):
        self.n += 1
        return f"{base}_{self.n}"

    def const(self, arr, base):
        name = self.fresh(base)
        self.inits.append(numpy_helper.from_array(arr, name))
        return name

    def node(self, op, ins, base, **attrs):
        out = self.fresh(base)
        self.nodes.append(helper.make_node(op, ins, [out], name=out, **attrs))
        return out

    def q(self, x, s, zp):
        return self.node("QuantizeLinear", [x, self.const(np.float32(s), "s"), self.const(np.int8(zp), "zp")], "q")

    def dq(self, x, s, zp):
        return self.node("DequantizeLinear", [x, self.const(np.float32(s), "s"), self.const(np.int8(zp), "zp")], "dq")

    def conv(self, x, conv, x_scale, relu, out_q, last=False):
        """Float-domain x -> conv (+relu) -> float-domain output (QDQ'd unless `last` or
        a float model)."""
        wq, ws = quant_weights(conv)
        bq, bs = quant_bias(conv, x_scale, ws)
        if self.qdq:
            w = self.node(
                "DequantizeLinear",
                [self.const(wq, "w"), self.const(ws, "ws"), self.const(np.zeros(len(ws), np.int8), "wzp")],
                "wdq",
                axis=0,
            )
            b = self.node(
                "DequantizeLinear",
                [self.const(bq, "b"), self.const(bs, "bs"), self.const(np.zeros(len(bs), np.int32), "bzp")],
                "bdq",
                axis=0,
            )
        else:
            w = self.const(conv.weight.detach().numpy().astype(np.float32), "w")
            b = self.const(conv.bias.detach().numpy().astype(np.float32), "b")
        # (rows, columns) each: a layer may stride or dilate the two differently
        # ("dilated_pos_r2").
        (ph, pw), d = conv.padding, list(conv.dilation)
        y = self.node(
            "Conv", [x, w, b], "conv", kernel_shape=list(conv.kernel_size), strides=list(conv.stride),
            pads=[ph, pw, ph, pw], dilations=d,
        )
        if relu:
            y = self.node("Relu", [y], "relu")
        if self.qdq and not last:
            y = self.dq(self.q(y, *out_q), *out_q)
        return y

    def model(self, inputs, outputs, role, metadata):
        g = helper.make_graph(self.nodes, self.name, inputs, outputs, self.inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="redline-train")
        m.ir_version = 8
        m.metadata_props.append(onnx.StringStringEntryProto(key="redline.role", value=role))
        # What the network was trained with that its shapes do not say (redline reads these
        # at load: pipeline/src/models/metadata.rs, META_*).
        for key, value in metadata.items():
            m.metadata_props.append(onnx.StringStringEntryProto(key=key, value=value))
        onnx.checker.check_model(m, full_check=True)
        return m


def degrees(values):
    """`[40.0, 80.00001]` -> "40,80": comma-separated, rounded to 0.001 degree."""
    return ",".join(f"{round(v, 3):g}" for v in values)


def rig_metadata(meta):
    """The `metadata_props` declaring the camera rig the dataset was rendered with (each
    camera's horizontal field of view and heading, degrees, in camera order): redline refuses
    logs from another rig. Datasets written before meta.json listed its cameras declare
    nothing."""
    cams = meta.get("cameras")
    if not cams:
        print("meta.json lists no cameras (an older dataset): the models declare no rig")
        return {}
    return {
        "redline.camera_hfov_deg": degrees(c["hfov_deg"] for c in cams),
        "redline.camera_yaw_deg": degrees(c["yaw_deg"] for c in cams),
    }


def view_transform_metadata():
    """The `metadata_props` declaring the selected architecture's view transform: its
    lift heights (m, comma-separated, the heads' channel order) and sampling."""
    return {
        "redline.bev_lift_m": ",".join(repr(float(z)) for z in N.LIFTS),
        "redline.bev_sampling": N.SAMPLING,
    }


def nhwc_in(b, name, shape, s, zp):
    x = b.node("Transpose", [name], "to_nchw", perm=[0, 3, 1, 2])
    return b.dq(x, s, zp), [helper.make_tensor_value_info(name, TensorProto.INT8, shape)]


def nhwc_out(b, y, name, shape, q):
    yq = b.q(y, *q)
    b.nodes.append(helper.make_node("Transpose", [yq], [name], name=f"{name}_to_nhwc", perm=[0, 2, 3, 1]))
    return helper.make_tensor_value_info(name, TensorProto.INT8, shape)


def hidden_layers(b, x, s, layers, prefix, qp):
    """The ReLU convolutions `layers` (taps `prefix.i`) from input scale `s`: (x, scale)."""
    for i, l in enumerate(layers):
        q = qp[f"{prefix}.{i}"]
        x = b.conv(x, l, s, True, q)
        s = q[0]
    return x, s


def feat_tap():
    """The tap (calibration key) of the backbone's output, the features."""
    return f"backbone.{len(N.BACKBONE) - 1}"


def build_models(model, qp, cams, h, w, ny, nx, qdq, metadata):
    """The three ONNX models (QDQ when `qdq`, else float), each carrying `metadata` (the
    `metadata_props` besides its role: view_transform_metadata and rig_metadata)."""
    in_q = (1.0 / 128.0, 0)
    feat_q = qp[feat_tap()]
    fh, fw = h // N.STRIDE_Y, w // N.STRIDE_X
    out = {}
    # Backbone.
    b = Builder("backbone", qdq)
    x, ins = nhwc_in(b, "input", [cams, h, w, 3], *in_q)
    s = in_q[0]
    layers = model.backbone.layers
    for i, l in enumerate(layers):
        q = qp[f"backbone.{i}"]
        x = b.conv(x, l, s, True, q, last=i == len(layers) - 1)
        s = q[0]
    outs = [nhwc_out(b, x, "features", [cams, fh, fw, N.FEAT_C], feat_q)]
    out["backbone"] = b.model(ins, outs, "backbone", metadata)
    # Detection head (the position map, if any, is a constant beside the BEV features).
    b = Builder("det_head", qdq)
    x, ins = nhwc_in(b, "input", [1, ny, nx, N.FEAT_C * len(N.LIFTS)], *feat_q)
    if model.det.pos is not None:
        if qdq:
            pos = b.dq(b.const(int8.quantize_pos(model.det.pos, feat_q)[None], "pos"), *feat_q)
            x = b.dq(b.q(b.node("Concat", [x, pos], "concat", axis=1), *feat_q), *feat_q)
        else:
            pos = b.const(model.det.pos.numpy()[None].astype(np.float32), "pos")
            x = b.node("Concat", [x, pos], "concat", axis=1)
    x, s = hidden_layers(b, x, feat_q[0], model.det.hidden, "det", qp)
    heat = b.conv(x, model.det.heat, s, False, qp["det.heat"], last=True)
    box = b.conv(x, model.det.box, s, False, qp["det.box"], last=True)
    outs = [
        nhwc_out(b, heat, "heatmap", [1, ny, nx, N.CLASSES], qp["det.heat"]),
        nhwc_out(b, box, "boxes", [1, ny, nx, N.REG], qp["det.box"]),
    ]
    out["det_head"] = b.model(ins, outs, "det_head", metadata)
    # Segmentation head.
    b = Builder("seg_head", qdq)
    x, ins = nhwc_in(b, "input", [1, ny, nx, N.FEAT_C * len(N.LIFTS)], *feat_q)
    x, s = hidden_layers(b, x, feat_q[0], model.seg.hidden, "seg", qp)
    y = b.conv(x, model.seg.out, s, False, qp["seg.out"], last=True)
    outs = [nhwc_out(b, y, "logits", [1, ny, nx, N.SEG_CLASSES], qp["seg.out"])]
    out["seg_head"] = b.model(ins, outs, "seg_head", metadata)
    return out


def save(m, path):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(m.SerializeToString(deterministic=True))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("ckpt")
    ap.add_argument("data")
    ap.add_argument("-o", "--output", required=True)
    ap.add_argument("--calib-frames", type=int, default=256)
    ap.add_argument("--fixtures", default=None)
    ap.add_argument("--act-range", choices=("percentile", "mse"), default="mse",
                    help="activation ranges: [p0.01,] p99.99, or the tail cut that minimises "
                    "each tensor's quantization error")
    ap.add_argument("--heat-score-floor", type=float, default=0.001,
                    help="the heatmap's range is logit(P) .. logit(1 - P); 0: calibrate it")
    ap.add_argument("--arch", default=None, help="architecture of a checkpoint that does not record it")
    a = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(os.cpu_count() or 1)
    ckpt = torch.load(a.ckpt)
    N.set_arch(a.arch or ckpt.get("arch", "small"))
    ds = D.Dataset(a.data, N.STRIDE, lifts=N.LIFTS, sampling=N.SAMPLING)
    model = N.DrivingNet(ds.taps, ds.bev)
    model.load_state_dict(ckpt["state"])
    model.eval()
    step = max(1, len(ds.index) // a.calib_frames)
    frames = ds.index[::step][: a.calib_frames]
    qp = calibrate(model, ds, frames, a.act_range)
    if a.heat_score_floor > 0:
        qp["det.heat"] = heat_range(a.heat_score_floor)
    if model.det.pos is not None:
        # The position map (values in [0, 1]) shares the BEV features' quantization: keep
        # 1.0 representable.
        s, zp = qp[feat_tap()]
        if s * (127 - zp) < 1.0:
            print(f"feature scale {s:.6f} raised to {1.0 / (127 - zp):.6f} for the position map")
            qp[feat_tap()] = (1.0 / (127 - zp), zp)
    m = ds.meta
    metadata = {**view_transform_metadata(), **rig_metadata(m)}
    cams, h, w = m["cams"], m["net_h"], m["net_w"]
    ny, nx = ds.bev["ny"], ds.bev["nx"]
    for qdq, sub in ((True, ""), (False, "float")):
        for name, mod in build_models(model, qp, cams, h, w, ny, nx, qdq, metadata).items():
            save(mod, os.path.join(a.output, sub, f"{name}.onnx"))
    # Per-layer SQNR of the integer network against the float one.
    qnet = int8.QuantNet(model, qp, ds)
    sq = qnet.sqnr(ds, frames[:32])
    report = {
        "activations": {k: {"scale": v[0], "zero_point": v[1]} for k, v in sorted(qp.items())},
        "sqnr_db": sq,
        "calibration_frames": len(frames),
    }
    with open(os.path.join(a.output, "quantization.json"), "w") as f:
        json.dump(report, f, indent=1, sort_keys=True)
    for k, v in sq.items():
        print(f"SQNR {k:14s} {v:6.1f} dB")
    if a.fixtures:
        qnet.write_fixtures(ds, frames[len(frames) // 2], a.fixtures)
    print(f"wrote {a.output}")


if __name__ == "__main__":
    main()
