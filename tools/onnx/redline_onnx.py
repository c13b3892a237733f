"""Shared helpers of the redline ONNX tools: read an export written by
`redline_models::export::export_network` (network.safetensors + network.json) and open
ONNX Runtime sessions the way every tool here must (CPU provider, 2 intra-op threads,
sequential execution, all graph optimizations).

Contract: pure functions of the export directory; nothing here writes outside the
directories it is given, and nothing depends on the clock except the timing the callers do.
"""

import json
import os
import sys

import numpy as np

FORMAT_VERSION = 1
MODEL_FILES = {"backbone": "backbone.onnx", "det_head": "det_head.onnx", "seg_head": "seg_head.onnx"}
# Operators that run integer kernels on ORT's CPU provider. Anything else in the optimized
# graph (Conv, DequantizeLinear, QuantizeLinear, MatMul, Relu, ...) means part of the model
# runs in float: the tools treat that as an error, never as a silent fallback.
INTEGER_OPS = {"QLinearConv", "NhwcQLinearConv", "Transpose", "Clip"}


def fail(msg):
    print(f"error: {msg}", file=sys.stderr)
    sys.exit(2)


def load_export(export_dir):
    """Returns (meta dict, {name: numpy array}) of an export directory."""
    meta_path = os.path.join(export_dir, "network.json")
    if not os.path.isfile(meta_path):
        fail(f"{meta_path} not found: run export_network (redline_models::export) into {export_dir} first")
    with open(meta_path, "r", encoding="utf-8") as f:
        meta = json.load(f)
    if meta.get("format_version") != FORMAT_VERSION:
        fail(f"{meta_path} has format_version {meta.get('format_version')}, these tools read {FORMAT_VERSION}: "
             "re-export with the matching redline version")
    try:
        from safetensors.numpy import load_file
    except ImportError:
        fail("the Python package 'safetensors' is missing: pip install safetensors numpy")
    tensors = load_file(os.path.join(export_dir, meta["tensors_file"]))
    return meta, tensors


def nhwc_to_nchw(x):
    return np.ascontiguousarray(np.transpose(x, (0, 3, 1, 2)))


def session_options(profile_prefix=None, optimized_path=None):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 2
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    if profile_prefix:
        so.enable_profiling = True
        so.profile_file_prefix = profile_prefix
    if optimized_path:
        so.optimized_model_filepath = optimized_path
    return so


def open_session(model_path, **kw):
    import onnxruntime as ort

    if not os.path.isfile(model_path):
        fail(f"{model_path} not found: run tools/onnx/export_qdq.py on the export directory first")
    sess = ort.InferenceSession(model_path, sess_options=session_options(**kw), providers=["CPUExecutionProvider"])
    if sess.get_providers() != ["CPUExecutionProvider"]:
        fail(f"ONNX Runtime picked providers {sess.get_providers()}, expected only CPUExecutionProvider")
    return sess


def graph_inputs(meta, tensors):
    """{graph name: NHWC int8 test input} (the models take NHWC, like the native engine)."""
    return {g["name"]: tensors[g["test_input"]] for g in meta["graphs"]}
