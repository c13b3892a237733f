#!/usr/bin/env python3
"""Exports float PyTorch networks to ONNX and quantizes them with ONNX Runtime's
`quantize_static` (QDQ, per-channel int8 weights, int8 and uint8 activations), with ONNX
Runtime's reference outputs, as a user with a float model does: torchvision classifiers
(any name in torchvision.models, e.g. convnext_tiny, vit_b_16, shufflenet_v2_x1_0),
torchvision segmentation networks (`seg_` + a name in torchvision.models.segmentation, e.g.
seg_deeplabv3_mobilenet_v3_large, at 320x320, its "out" map) and Ultralytics detectors
(`ultralytics:` + a model yaml, e.g. ultralytics:yolov8n.yaml or ultralytics:rtdetr-l.yaml, at
320x320, BatchNorm fused).
Weights are random (`weights=None`, the yaml alone): nothing is downloaded; BatchNorm
statistics and zero biases are randomized too (seeded), as training leaves them, so that no
two layers share a bias (`distinct_statistics`). Export: the TorchScript exporter
(`dynamo=False`), opset 17.

Needs torch and torchvision (and ultralytics for its models): large, not installed by CI;
the CI checks the operators these exports hold with tools/onnx/op_models.py.

Usage: python3 tools/onnx/float_export.py OUT_DIR --model convnext_tiny vit_b_16 ... [--mixed]
           [--size H W] [--float-only]
Then:  redline model bench OUT_DIR/<model>_qdq_u8.onnx --against onnxruntime \\
           --input OUT_DIR/<model>_qdq_u8.in0.bin
"""
import argparse
import os
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def distinct_statistics(net, seed=0):
    """Gives every BatchNorm random statistics and affine parameters and every all-zero
    convolution or linear bias small random values (seeded), as training leaves them.

    Why: an untrained network's BatchNorms fold into identical all-zero biases, which
    torch.onnx.export stores once and shares between the layers through `Identity`;
    quantize_static then quantizes the shared tensor with its first reader's scale, and
    ONNX Runtime runs the other readers in float (ResNet-50: 47 convolutions), so a
    benchmark would time ONNX Runtime's float path and compare against its float roundings.
    With distinct biases, as a trained network has, every layer is quantized for itself."""
    import torch
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in net.modules():
            if isinstance(m, torch.nn.modules.batchnorm._BatchNorm) and m.track_running_stats:
                n = m.num_features
                m.running_mean.copy_(torch.randn(n, generator=g) * 0.1)
                m.running_var.copy_(torch.rand(n, generator=g) + 0.5)
                if m.affine:
                    m.weight.copy_(torch.rand(n, generator=g) + 0.5)
                    m.bias.copy_(torch.randn(n, generator=g) * 0.1)
            elif isinstance(m, (torch.nn.Conv2d, torch.nn.Linear)) and m.bias is not None:
                if not torch.any(m.bias != 0):
                    m.bias.copy_(torch.randn(m.bias.shape, generator=g) * 0.01)
    return net


def build(name):
    """The float network and its input size (BatchNorm statistics and zero biases made
    distinct: `distinct_statistics`)."""
    import torch
    import torchvision
    if name.startswith("ultralytics:"):
        os.environ.setdefault("YOLO_OFFLINE", "1")
        from ultralytics import RTDETR, YOLO
        spec = name.split(":", 1)[1]
        # RT-DETR (a detection transformer: TopK query selection, deformable attention's
        # GridSample) has its own class; every other yaml is a YOLO.
        kind = RTDETR if os.path.basename(spec).startswith("rtdetr") else YOLO
        net = distinct_statistics(kind(spec).model).fuse().eval()
        for m in net.modules():  # the export head: one output tensor, as `model.export` writes
            if hasattr(m, "export"):
                m.export = True
            if hasattr(m, "format"):
                m.format = "onnx"
        return net, 320
    if name.startswith("seg_"):
        ctor = getattr(torchvision.models.segmentation, name[4:])
        inner = distinct_statistics(
            ctor(weights=None, weights_backbone=None, num_classes=21, aux_loss=False)).eval()

        class Out(torch.nn.Module):
            def __init__(self, m):
                super().__init__()
                self.m = m

            def forward(self, x):
                return self.m(x)["out"]
        return Out(inner).eval(), 320
    return distinct_statistics(getattr(torchvision.models, name)(weights=None)).eval(), 224


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out_dir")
    ap.add_argument("--model", nargs="+", required=True, metavar="NAME")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--size", nargs=2, type=int, metavar=("H", "W"),
                    help="the input's height and width instead of the model's own (224x224 "
                         "classifiers, 320x320 segmentation and Ultralytics networks), e.g. "
                         "--size 448 800 for a camera-sized image")
    ap.add_argument("--float-only", action="store_true",
                    help="write <model>_float.onnx alone, no quantized variants (quantizing "
                         "calibrates on the float model: minutes for camera-sized inputs)")
    ap.add_argument("--mixed", action="store_true",
                    help="also <model>_mixed_{s8,u8}: the first convolution and the last Gemm/MatMul "
                         "kept in float (quantize_static's nodes_to_exclude)")
    args = ap.parse_args()
    try:
        import onnx
        import torch
        import torchvision  # noqa: F401
    except ImportError as e:
        sys.exit(f"float_export.py: {e}; install them with: python3 -m pip install torch torchvision onnx onnxruntime")
    import qref
    from torch_export import export_onnx
    warnings.filterwarnings("ignore")
    os.makedirs(args.out_dir, exist_ok=True)
    failed = 0
    for name in args.model:
        t0 = time.time()
        stem = name.split(":", 1)[-1].replace(".yaml", "")
        try:
            torch.manual_seed(0)
            net, size = build(name)
            size = tuple(args.size) if args.size else size
            path = os.path.join(args.out_dir, f"{stem}_export.onnx")
            export_onnx(net, path, size, names=("x", "y"))
            formats = ["qdq", "mixed"] if args.mixed else ["qdq"]
            qref.build_all(args.out_dir, stem, onnx.load(path), args.seed,
                           formats=[] if args.float_only else formats)
            print(f"# {stem}: {time.time() - t0:.0f} s", file=sys.stderr)
        except Exception as e:  # report and go on with the next model
            failed += 1
            print(f"float_export.py: {name}: {type(e).__name__}: {e}", file=sys.stderr)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
