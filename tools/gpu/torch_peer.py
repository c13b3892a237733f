#!/usr/bin/env python3
"""The PyTorch peer of `redline model bench --engine cuda` (issue 13): the same networks
(tools/train/net.py, architecture "dilated_pos", the shipped one; tools/gpu/realistic_model.py's
ResNet-18 over six 1600x900 cameras) in fp16 on the same GPU with
CUDA graphs, timed the way redline's engine is timed: each run uploads the input from pinned
host memory, replays the graph, downloads the output and waits for the stream.

Weights are random (time does not depend on them). Prints one JSON object per model:
{"model", "shape", "p50_ms", "p99_ms", "iters"}.

Usage: python3 tools/gpu/torch_peer.py [--iters N] [--full-res]
"""
import argparse
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "train"))
import net  # noqa: E402


class BasicBlock(torch.nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.c1 = torch.nn.Conv2d(cin, cout, 3, stride, 1)
        self.c2 = torch.nn.Conv2d(cout, cout, 3, 1, 1)
        self.sc = None if (stride == 1 and cin == cout) else torch.nn.Conv2d(cin, cout, 1, stride)

    def forward(self, x):
        y = self.c2(torch.relu(self.c1(x)))
        return torch.relu(y + (x if self.sc is None else self.sc(x)))


class ResNet18Features(torch.nn.Module):
    """tools/gpu/realistic_model.py's network; takes the uint8 camera bytes like the ONNX
    model and converts them on the GPU (inside the graph)."""

    def __init__(self):
        super().__init__()
        layers = [torch.nn.Conv2d(3, 64, 7, 2, 3), torch.nn.ReLU(), torch.nn.MaxPool2d(3, 2, 1)]
        cin = 64
        for i, c in enumerate([64, 128, 256, 512]):
            layers += [BasicBlock(cin, c, 1 if i == 0 else 2), BasicBlock(c, c, 1)]
            cin = c
        self.net = torch.nn.Sequential(*layers)

    def forward(self, x):
        return self.net((x.half() - 114.0) * (1.0 / 58.0))


def bench(name, module, shape, iters, warmup=50, dtype=torch.half):
    dev = torch.device("cuda")
    module = module.to(dev).half().eval()
    if dtype == torch.uint8:
        host_in = torch.randint(0, 256, shape, dtype=torch.uint8).pin_memory()
    else:
        host_in = torch.randn(*shape).to(dtype).pin_memory()
    static_in = torch.empty(*shape, device=dev, dtype=dtype)
    with torch.no_grad():
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                out = module(static_in)
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            static_out = module(static_in)
    outs = static_out if isinstance(static_out, (tuple, list)) else (static_out,)
    host_outs = [torch.empty(o.shape, dtype=o.dtype).pin_memory() for o in outs]
    times = []
    for i in range(warmup + iters):
        t0 = time.perf_counter()
        static_in.copy_(host_in, non_blocking=True)
        g.replay()
        for h, o in zip(host_outs, outs):
            h.copy_(o, non_blocking=True)
        torch.cuda.synchronize()
        if i >= warmup:
            times.append(time.perf_counter() - t0)
    times.sort()
    q = lambda p: times[min(len(times) - 1, int(p * len(times)))] * 1e3  # noqa: E731
    print(json.dumps({"model": name, "shape": list(shape), "p50_ms": q(0.50), "p99_ms": q(0.99), "iters": iters}))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=1000)
    a = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("torch_peer: no CUDA device visible to PyTorch")
    net.set_arch("dilated_pos")  # the shipped models' architecture
    torch.backends.cudnn.benchmark = True
    bench("backbone", net.Backbone(), (6, 3, 64, 128), a.iters)
    bench("backbone_full_res", net.Backbone(), (6, 3, 128, 256), a.iters)
    feat = net.BACKBONE[-1][1]
    # The shipped detection head concatenates a 3-channel BEV position map (a constant) to its
    # input, as net.DrivingNet builds it.
    bench("det_head", net.DetHead(torch.rand(3, 48, 80)), (1, feat, 48, 80), a.iters)
    bench("seg_head", net.SegHead(), (1, feat, 48, 80), a.iters)
    bench("resnet18_6x900x1600", ResNet18Features(), (6, 3, 900, 1600), max(50, a.iters // 10), dtype=torch.uint8)


if __name__ == "__main__":
    main()
