#!/usr/bin/env python3
"""A persistent ONNX Runtime worker for the native-vs-ORT benchmark
(bench/benches/onnx_compare.rs). Spawned once; talks line by line over stdin/stdout.

Usage: python3 tools/onnx/ort_worker.py DIR   (DIR holds an export and the three .onnx models)

Protocol (one line each way):
- on start it prints `ready {json}` (ORT version, threads, models);
- `run N` -> runs N iterations of the whole work (backbone on all cameras, then the
  detection head, then the segmentation head, each `session.run` on the exported test
  inputs) and prints `{"ns": [...]}`: the duration of each iteration, measured here with
  time.perf_counter_ns around the three runs, so pipe and Python start-up costs are not
  counted; outputs are bound once to preallocated buffers (IOBinding), as the native engine
  writes into preallocated buffers;
- `check` -> prints `{"ok": true}` if the outputs of the last run equal the native ones;
- `quit` (or end of input) -> exits 0.
Sessions use redline_onnx.session_options: CPU provider, 2 intra-op threads, sequential.
"""

import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import redline_onnx as ro  # noqa: E402


def main(argv):
    if len(argv) != 2:
        ro.fail("usage: ort_worker.py DIR")
    try:
        import onnxruntime as ort
    except ImportError:
        ro.fail("the Python package 'onnxruntime' is missing: pip install onnxruntime")
    meta, tensors = ro.load_export(argv[1])
    runs = []  # (session, binding, outputs, native slices)
    for g in meta["graphs"]:
        sess = ro.open_session(os.path.join(argv[1], ro.MODEL_FILES[g["name"]]))
        binding = sess.io_binding()
        x = np.ascontiguousarray(tensors[g["test_input"]])
        binding.bind_cpu_input(g["input"], x)
        outs = []
        for o in g["outputs"]:
            buf = np.zeros(o["shape"], dtype=np.int8)
            binding.bind_output(o["name"], "cpu", 0, np.int8, buf.shape, buf.ctypes.data)
            lo, hi = o["native_channels"]
            outs.append((buf, tensors[g["test_output"]][..., lo:hi]))
        runs.append((sess, binding, x, outs))
    print("ready " + json.dumps({"onnxruntime": ort.__version__, "intra_op_num_threads": 2,
                                 "models": [g["name"] for g in meta["graphs"]]}), flush=True)
    for line in sys.stdin:
        cmd = line.split()
        if not cmd or cmd[0] == "quit":
            break
        if cmd[0] == "run" and len(cmd) == 2 and cmd[1].isdigit():
            ns = []
            for _ in range(int(cmd[1])):
                t0 = time.perf_counter_ns()
                for sess, binding, _, _ in runs:
                    sess.run_with_iobinding(binding)
                ns.append(time.perf_counter_ns() - t0)
            print(json.dumps({"ns": ns}), flush=True)
        elif cmd[0] == "check":
            ok = all(np.array_equal(buf, ref) for _, _, _, outs in runs for buf, ref in outs)
            print(json.dumps({"ok": bool(ok)}), flush=True)
        else:
            print(json.dumps({"error": f"unknown command {line.strip()!r}: use 'run N', 'check' or 'quit'"}),
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
