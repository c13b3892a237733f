#!/usr/bin/env bash
# Builds what tools/gpu/check.sh runs on a GPU machine, on any x86-64 Linux machine (no GPU
# needed), into .gpu/ (about 20 MiB: small enough to carry to a lent GPU machine):
#   .gpu/redline      the CLI with --features cuda (release, debug info stripped)
#   .gpu/cuda_engine  the GPU test binary (tests/tests/cuda_engine.rs)
#   .gpu/ops/         the ONNX operator models of tools/onnx/op_models.py (needs onnx, onnxruntime)
#   .gpu/real/        the realistic-scale backbone (tools/gpu/realistic_model.py: ResNet-18,
#                     six 1600x900 cameras, 316 GMAC per frame; 11 MiB)
#   .gpu/hr/          extra models to check and time, copied from $REDLINE_EXTRA_MODELS if set
#                     (e.g. a full-resolution export: backbone.onnx, det_head.onnx, seg_head.onnx)
# Usage: tools/gpu/stage.sh [--features cuda-13]
set -eu
FEATURES=${2:-cuda}
[ "${1:-}" = "--features" ] || FEATURES=cuda
mkdir -p .gpu
cargo build --release -p redline-cli --features "$FEATURES"
objcopy --strip-debug target/release/redline .gpu/redline
bin=$(cargo test -p redline-tests --features "$FEATURES" --test cuda_engine --no-run --message-format=json 2>/dev/null \
  | python3 -c 'import sys, json
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "cuda_engine" and m.get("executable"):
        print(m["executable"])')
objcopy --strip-debug "$bin" .gpu/cuda_engine
rm -rf .gpu/ops && python3 tools/onnx/op_models.py .gpu/ops > /dev/null
find .gpu/ops -type f ! -name '*.onnx' -delete
mkdir -p .gpu/real
[ -f .gpu/real/resnet18_6x900x1600.onnx ] || python3 tools/gpu/realistic_model.py .gpu/real/resnet18_6x900x1600.onnx
rm -rf .gpu/hr  # a stale copy from an earlier stage would be checked as if named now
if [ -n "${REDLINE_EXTRA_MODELS:-}" ]; then
  mkdir -p .gpu/hr && cp "$REDLINE_EXTRA_MODELS"/*.onnx .gpu/hr/
fi
du -sh .gpu
