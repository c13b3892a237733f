#!/usr/bin/env python3
"""Runs the exported QDQ ONNX models on ONNX Runtime's CPU provider and compares their
outputs with the native engine's outputs stored in the export.

Usage: python3 tools/onnx/compare.py DIR [--max-fraction F]

- Sessions: CPUExecutionProvider only, intra_op_num_threads=2, sequential execution, all
  graph optimizations (see redline_onnx.session_options).
- Kernel check: every session is profiled; the script prints which operator / provider
  ran how often and FAILS (exit 3) if any node outside the integer set
  (QLinearConv / NhwcQLinearConv / Transpose / Clip) ran, or any node ran on another
  provider: a silent fallback to float is an error.
- Prints one JSON object {model_output: {elements, differing, max_abs_diff_lsb, fraction}}
  on stdout and exits 1 if any output's fraction of differing elements exceeds F
  (default 0: bit-exact).
"""

import argparse
import collections
import glob
import json
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import redline_onnx as ro  # noqa: E402


def kernels_from_profile(path):
    """Counts (op_name, provider) of the node events in an ORT profile."""
    with open(path, "r", encoding="utf-8") as f:
        events = json.load(f)
    counts = collections.Counter()
    for e in events:
        if e.get("cat") != "Node" or not e.get("name", "").endswith("_kernel_time"):
            continue
        args = e.get("args", {})
        counts[(args.get("op_name", "?"), args.get("provider", "?"))] += 1
    return counts


def main():
    ap = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    ap.add_argument("dir", help="export directory (network.json, network.safetensors, *.onnx)")
    ap.add_argument("--max-fraction", type=float, default=0.0,
                    help="largest accepted fraction of differing output elements per output (default 0)")
    a = ap.parse_args()
    if not (0.0 <= a.max_fraction <= 1.0):
        ro.fail(f"--max-fraction {a.max_fraction}: must be in [0, 1]")
    try:
        import onnxruntime as ort
    except ImportError:
        ro.fail("the Python package 'onnxruntime' is missing: pip install onnxruntime")
    meta, tensors = ro.load_export(a.dir)
    report = {}
    bad_kernels = []
    with tempfile.TemporaryDirectory(prefix="redline-ort-prof-") as prof_dir:
        for g in meta["graphs"]:
            model = os.path.join(a.dir, ro.MODEL_FILES[g["name"]])
            sess = ro.open_session(model, profile_prefix=os.path.join(prof_dir, g["name"]))
            x = tensors[g["test_input"]]
            names = [o["name"] for o in g["outputs"]]
            ys = sess.run(names, {g["input"]: x})
            prof = sess.end_profiling()
            counts = kernels_from_profile(prof)
            if not counts:
                ro.fail(f"the ORT profile of {g['name']} has no node events: cannot tell which kernels ran")
            ran = ", ".join(f"{op}@{prov.replace('ExecutionProvider', '')} x{n}"
                            for (op, prov), n in sorted(counts.items()))
            print(f"{g['name']}: kernels run: {ran}", file=sys.stderr)
            for (op, prov), _ in counts.items():
                if op not in ro.INTEGER_OPS or prov != "CPUExecutionProvider":
                    bad_kernels.append(f"{g['name']}: {op} on {prov}")
            native = tensors[g["test_output"]]
            for o, y in zip(g["outputs"], ys):
                lo, hi = o["native_channels"]
                ref = native[..., lo:hi]
                if y.dtype != np.int8 or y.shape != ref.shape:
                    ro.fail(f"{g['name']}.{o['name']}: ORT gave {y.dtype}{y.shape}, native is int8{ref.shape}")
                diff = np.abs(y.astype(np.int32) - ref.astype(np.int32))
                differing = int(np.count_nonzero(diff))
                report[f"{g['name']}.{o['name']}"] = {
                    "elements": int(diff.size),
                    "differing": differing,
                    "max_abs_diff_lsb": int(diff.max()) if diff.size else 0,
                    "fraction": differing / diff.size if diff.size else 0.0,
                }
        for p in glob.glob(os.path.join(prof_dir, "*")):
            os.remove(p)
    print(json.dumps(report, indent=2, sort_keys=True))
    if bad_kernels:
        print("error: nodes ran outside the integer kernels (float fallback): " + "; ".join(bad_kernels),
              file=sys.stderr)
        return 3
    worst = max(r["fraction"] for r in report.values())
    if worst > a.max_fraction:
        print(f"error: {worst:.6g} of the elements of an output differ from the native engine, more than the "
              f"accepted {a.max_fraction:.6g}", file=sys.stderr)
        return 1
    print(f"ok: ONNX Runtime {ort.__version__} agrees with the native engine (worst fraction {worst:.6g}, "
          f"accepted {a.max_fraction:.6g})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
