#!/usr/bin/env python3
"""Exports a torchvision CNN quantized by NVIDIA's ModelOpt to ONNX, as a TensorRT user
does: BatchNorm statistics taken from seeded random batches (so activations keep their
scale in an untrained network), `mtq.quantize(model, mtq.INT8_DEFAULT_CFG, calibration)`,
then `torch.onnx.export` (the TorchScript exporter, `dynamo=False`, opset 17). The result
is the placement NVIDIA's toolkits write: Q/DQ on convolution and Gemm inputs only, float
weights with their own per-channel Q/DQ pair, each BatchNormalization left after its
convolution for TensorRT to fold, float logits.

Needs torch, torchvision, nvidia-modelopt and huggingface_hub (pip install; not installed
by CI: the CI tests the same graph structure with `zoo.py --modelopt`,
qref.to_modelopt_export).

Usage: python3 tools/onnx/modelopt_export.py OUT_DIR [--model resnet18 mobilenet_v2 ...]
Then: redline model bench OUT_DIR/<model>_modelopt.onnx --against onnxruntime
"""
import argparse
import os
import sys
import warnings

from torch_export import calibrate, export_onnx


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out_dir")
    ap.add_argument("--model", nargs="+", default=["resnet18"],
                    help="torchvision.models names (resnet18, resnet50, mobilenet_v2, "
                         "mobilenet_v3_large, efficientnet_b0, regnet_x_400mf, ...)")
    ap.add_argument("--calibration", type=int, default=4, help="random calibration images")
    args = ap.parse_args()
    try:
        import torch
        import torchvision
        import modelopt.torch.quantization as mtq
    except ImportError as e:
        sys.exit(f"modelopt_export.py: {e}; install them with: python3 -m pip install torch "
                 "torchvision nvidia-modelopt huggingface_hub")
    warnings.filterwarnings("ignore")
    os.makedirs(args.out_dir, exist_ok=True)
    for name in args.model:
        torch.manual_seed(0)
        m = getattr(torchvision.models, name)(weights=None)
        for mod in m.modules():
            if isinstance(mod, torch.nn.BatchNorm2d):
                mod.momentum = None  # a cumulative average over the batches below
                mod.reset_running_stats()
        m.train()
        with torch.no_grad():
            for _ in range(8):
                m(torch.randn(4, 3, 224, 224))
        m.eval()
        m = mtq.quantize(m, mtq.INT8_DEFAULT_CFG, lambda model: calibrate(model, args.calibration))
        export_onnx(m, os.path.join(args.out_dir, f"{name}_modelopt.onnx"))


if __name__ == "__main__":
    main()
