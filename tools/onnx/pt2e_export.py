#!/usr/bin/env python3
"""Exports a torchvision CNN quantized with PyTorch 2 export quantization (PT2E) to ONNX, as
a PyTorch user does today: `torch.export.export`, `prepare_pt2e` with an inductor quantizer
from torchao (`x86`: X86InductorQuantizer, uint8 activations, per-channel int8 weights;
`arm`: ArmInductorQuantizer, per-tensor weights), calibration on seeded random images,
`convert_pt2e`, then `torch.onnx.export(..., dynamo=True)` (the dynamo exporter, opset 18+).
The result is the QDQ form that flow writes: weights as `DequantizeLinear` of int8
initializers, and (with the `arm` quantizer) convolutions whose outputs go on in float
into `Relu`, `MaxPool` and the residual `Add` before the next `QuantizeLinear`.

Needs torch, torchvision, torchao and onnxscript (python3 -m pip install torch torchvision
torchao onnxscript; large, not installed by CI). With torch 2.15 / torchao 0.18 the x86
quantizer rejects ResNets' residual blocks ("Input partition has more than one output
node"): use `--quantizer arm` for them.

Usage: python3 tools/onnx/pt2e_export.py OUT_DIR [--model mobilenet_v2 resnet18 ...]
       [--quantizer x86|arm] [--size H W]
A name of `torchvision.models.segmentation` (lraspp_mobilenet_v3_large, ...) exports its
`out` map; others are classifiers (`logits`).
Then: redline model bench OUT_DIR/<model>_pt2e_<quantizer>.onnx --against onnxruntime
"""
import argparse
import os
import sys
import warnings


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out_dir")
    ap.add_argument("--model", nargs="+", default=["mobilenet_v2"],
                    help="torchvision.models constructors (weights=None)")
    ap.add_argument("--quantizer", choices=("x86", "arm"), default="x86")
    ap.add_argument("--calibration", type=int, default=8, help="random calibration images")
    ap.add_argument("--size", type=int, nargs=2, default=[224, 224], metavar=("H", "W"))
    args = ap.parse_args()
    try:
        import torch
        import torchvision
        from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e
        if args.quantizer == "x86":
            import torchao.quantization.pt2e.quantizer.x86_inductor_quantizer as qz
            quantizer = qz.X86InductorQuantizer().set_global(
                qz.get_default_x86_inductor_quantization_config())
        else:
            import torchao.quantization.pt2e.quantizer.arm_inductor_quantizer as qz
            quantizer = qz.ArmInductorQuantizer().set_global(
                qz.get_default_arm_inductor_quantization_config())
    except ImportError as e:
        sys.exit(f"pt2e_export.py: {e}; install them with: "
                 "python3 -m pip install torch torchvision torchao onnxscript")
    warnings.filterwarnings("ignore")
    os.makedirs(args.out_dir, exist_ok=True)
    shape = (1, 3, *args.size)
    for name in args.model:
        torch.manual_seed(0)
        segmentation = hasattr(torchvision.models.segmentation, name)
        if segmentation:
            net = getattr(torchvision.models.segmentation, name)(weights=None, weights_backbone=None)
            model = OutputMap(net).eval()
        else:
            model = getattr(torchvision.models, name)(weights=None).eval()
        example = (torch.randn(*shape),)
        graph = torch.export.export(model, example).module()
        prepared = prepare_pt2e(graph, quantizer)
        with torch.no_grad():
            for _ in range(args.calibration):
                prepared(torch.randn(*shape))
        converted = convert_pt2e(prepared)
        path = os.path.join(args.out_dir, f"{name}_pt2e_{args.quantizer}.onnx")
        program = torch.onnx.export(converted, example, dynamo=True, input_names=["input"],
                                    output_names=["out" if segmentation else "logits"])
        program.save(path)
        print(f"{path}: {os.path.getsize(path)} bytes (torch {torch.__version__})")


def OutputMap(net):
    """A torchvision segmentation network returning its `out` map alone (its forward returns
    a dict)."""
    import torch

    class Out(torch.nn.Module):
        def __init__(self, net):
            super().__init__()
            self.net = net

        def forward(self, x):
            return self.net(x)["out"]

    return Out(net)


if __name__ == "__main__":
    main()
