"""Rebuilds a training checkpoint from the float ONNX models that export.py wrote.

Usage: python3 tools/train/from_onnx.py FLOAT_DIR -o CKPT [--arch dilated_pos]

FLOAT_DIR holds backbone.onnx, det_head.onnx and seg_head.onnx as export.py writes them
under OUT/float (the shipped ones: models/trained/float): the float network's own weights
between the int8 boundaries. Their convolutions, in graph order, are the network's layers in
net.py's order, so a later stage can start from the shipped network (`train.py --init CKPT`)
without the checkpoint that made it. Every weight is checked against the architecture's
shape; a model with another layout is an error naming the model and the layer.
"""

import argparse
import os

import numpy as np
import onnx
import torch
from onnx import numpy_helper

import net as N


def conv_weights(path):
    """[(weight, bias)] of the model's Conv nodes in graph order."""
    if not os.path.exists(path):
        raise SystemExit(f"{path} does not exist: FLOAT_DIR must hold export.py's float models")
    m = onnx.load(path)
    inits = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
    out = []
    for node in m.graph.node:
        if node.op_type != "Conv":
            continue
        if len(node.input) != 3 or node.input[1] not in inits or node.input[2] not in inits:
            raise SystemExit(f"{path}: Conv node {node.name or node.output[0]} has no constant weight and bias")
        out.append((inits[node.input[1]], inits[node.input[2]]))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("float_dir")
    ap.add_argument("-o", "--output", required=True)
    ap.add_argument("--arch", default="dilated_pos", choices=sorted(N.ARCHS))
    a = ap.parse_args()
    N.set_arch(a.arch)
    # The grid only sizes the position map (not saved in the state).
    bev = {"nx": 80, "ny": 48, "res": 1.0, "x0": -16.0, "y0": -24.0}
    model = N.DrivingNet(np.full((48 * 80, 2), -1), bev)
    names = (
        [f"backbone.layers.{i}" for i in range(len(N.BACKBONE))],
        [f"det.hidden.{i}" for i in range(len(N.DET_HIDDEN))] + ["det.heat", "det.box"],
        [f"seg.hidden.{i}" for i in range(len(N.SEG_HIDDEN))] + ["seg.out"],
    )
    state = model.state_dict()
    for file, layers in zip(("backbone", "det_head", "seg_head"), names):
        path = os.path.join(a.float_dir, f"{file}.onnx")
        convs = conv_weights(path)
        if len(convs) != len(layers):
            raise SystemExit(f"{path} has {len(convs)} convolutions, the {a.arch} architecture {len(layers)}: pick the matching --arch")
        for layer, (w, b) in zip(layers, convs):
            for suffix, v in (("weight", w), ("bias", b)):
                key = f"{layer}.{suffix}"
                if tuple(state[key].shape) != v.shape:
                    raise SystemExit(f"{path}: {key} has shape {v.shape}, the {a.arch} architecture needs {tuple(state[key].shape)}")
                state[key] = torch.from_numpy(np.array(v, dtype=np.float32))
    model.load_state_dict(state)
    torch.save({"state": model.state_dict(), "stride": N.STRIDE, "arch": a.arch}, a.output)
    print(f"wrote {a.output}: {sum(v.numel() for v in state.values())} weights from {a.float_dir}")


if __name__ == "__main__":
    main()
