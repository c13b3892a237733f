#!/usr/bin/env python3
"""Exports a torchvision CNN quantized by PyTorch itself to ONNX, as a PyTorch user does:
eager-mode post-training quantization (`fuse_model`, the `x86` qconfig: uint8 activations,
per-channel int8 weights; calibration on seeded random images), `convert`, then
`torch.onnx.export` (the TorchScript exporter, `dynamo=False`, opset 17). The result is
the QDQ form PyTorch writes: every parameter a `Constant` node, a `Cast` between each
QuantizeLinear and its readers, int32 biases dequantized per channel.

Needs torch and torchvision (pip install torch torchvision; large, not installed by CI: the
CI tests the same graph structure with `zoo.py --pt`, qref.to_pytorch_export).

Usage: python3 tools/onnx/torch_export.py OUT_DIR [--model resnet18 mobilenet_v2 ...]
Then: redline model bench OUT_DIR/<model>_torch_u8.onnx --against onnxruntime
"""
import argparse
import os
import sys
import warnings

MODELS = ("resnet18", "resnet50", "mobilenet_v2", "mobilenet_v3_large", "shufflenet_v2_x1_0",
          "googlenet")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out_dir")
    ap.add_argument("--model", nargs="+", default=["resnet18"], choices=MODELS)
    ap.add_argument("--calibration", type=int, default=8, help="random calibration images")
    args = ap.parse_args()
    try:
        import torch
        import torchvision.models.quantization as tvq
        from torch.ao import quantization as tq
    except ImportError as e:
        sys.exit(f"torch_export.py: {e}; install them with: python3 -m pip install torch torchvision")
    warnings.filterwarnings("ignore")
    os.makedirs(args.out_dir, exist_ok=True)
    for name in args.model:
        torch.manual_seed(0)
        m = getattr(tvq, name)(weights=None, quantize=False).eval()
        m.fuse_model(is_qat=False)
        m.qconfig = tq.get_default_qconfig("x86")
        tq.prepare(m, inplace=True)
        calibrate(m, args.calibration)
        tq.convert(m, inplace=True)
        export_onnx(m, os.path.join(args.out_dir, f"{name}_torch_u8.onnx"))


def calibrate(model, images):
    """Runs `model` on `images` seeded random 1x3x224x224 images, without gradients."""
    import torch
    with torch.no_grad():
        for _ in range(images):
            model(torch.randn(1, 3, 224, 224))


def export_onnx(model, path, size=224, names=("input", "logits")):
    """`torch.onnx.export` as the real-export scripts use it: the TorchScript exporter
    (`dynamo=False`), opset 17, one `size`×`size` RGB input (`size` an int, or an (h, w)
    pair), input and output named `names`; prints the file's size."""
    import torch
    h, w = (size, size) if isinstance(size, int) else size
    torch.onnx.export(model, (torch.randn(1, 3, h, w),), path, opset_version=17,
                      dynamo=False, input_names=[names[0]], output_names=[names[1]])
    print(f"{path}: {os.path.getsize(path)} bytes (torch {torch.__version__})")


if __name__ == "__main__":
    main()
