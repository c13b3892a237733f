#!/usr/bin/env bash
# Builds what tools/gpu/check.sh runs on a GPU machine, on any x86-64 Linux machine (no GPU
# needed), into .gpu/ (about 20 MiB: small enough to carry to a lent GPU machine):
#   .gpu/redline      the CLI with --features cuda (release, debug info stripped)
#   .gpu/cuda_engine  the GPU test binary (tests/tests/cuda_engine.rs)
#   .gpu/cuda_engine_cuda13  the same tests built with --features cuda-13 (only with
#                     --with-cuda-13: another build of the workspace, several minutes)
#   .gpu/ops/         the ONNX operator models of tools/onnx/op_models.py (needs onnx, onnxruntime),
#                     and as zoo_*.onnx the uint8 QDQ imports of the model zoo when
#                     target/tmp/onnx-import-zoo exists (written by `cargo test --test
#                     onnx_import`): checked on the GPU like the operator models
#   .gpu/real/        the realistic-scale backbone (tools/gpu/realistic_model.py: ResNet-18,
#                     six 1600x900 cameras, 316 GMAC per frame; 11 MiB)
#   .gpu/hr/          extra models to check and time, copied from $REDLINE_EXTRA_MODELS if set
#                     (e.g. a full-resolution export: backbone.onnx, det_head.onnx, seg_head.onnx)
#   .gpu.tar.xz       all of the above in one archive (81 -> 47 MiB with the zoo imports) for a
#                     device call whose transfers are limited: unpack with `tar xJf .gpu.tar.xz`
# Usage: tools/gpu/stage.sh [--features cuda-13] [--with-cuda-13]
set -eu
FEATURES=cuda
CUDA13=
while [ $# -gt 0 ]; do
  case "$1" in
    --features) FEATURES=$2; shift 2 ;;
    --with-cuda-13) CUDA13=1; shift ;;
    *) echo "stage.sh: unknown argument $1 (use --features F, --with-cuda-13)"; exit 2 ;;
  esac
done
mkdir -p .gpu
test_binary() { # $1 features: prints the path of the cuda_engine test binary built with them
  cargo test -p redline-tests --features "$1" --test cuda_engine --no-run --message-format=json 2>/dev/null \
    | python3 -c 'import sys, json
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "cuda_engine" and m.get("executable"):
        print(m["executable"])'
}
cargo build --release -p redline-cli --features "$FEATURES"
objcopy --strip-debug target/release/redline .gpu/redline
objcopy --strip-debug "$(test_binary "$FEATURES")" .gpu/cuda_engine
rm -f .gpu/cuda_engine_cuda13
if [ -n "$CUDA13" ]; then
  objcopy --strip-debug "$(test_binary cuda-13)" .gpu/cuda_engine_cuda13
fi
rm -rf .gpu/ops && python3 tools/onnx/op_models.py .gpu/ops > /dev/null
find .gpu/ops -type f ! -name '*.onnx' -delete
# REDLINE_STAGE_ZOO: which zoo imports to take, as file name globs without .onnx (default:
# each network's uint8 QDQ export, and EfficientNet-B0 and RegNetX in the TensorRT-style and
# ModelOpt placements, which run the float route; about 35 MB in all: mind a transfer limit,
# ResNet-18 alone is 12 MB).
read -r -a zoo_globs <<< "${REDLINE_STAGE_ZOO:-*_qdq_u8 efficientnet_trt_u8 regnetx_modelopt_u8}"
for g in "${zoo_globs[@]}"; do
  for m in target/tmp/onnx-import-zoo/$g.onnx; do
    [ -f "$m" ] && cp "$m" ".gpu/ops/zoo_$(basename "$m")"
  done
done
mkdir -p .gpu/real
[ -f .gpu/real/resnet18_6x900x1600.onnx ] || python3 tools/gpu/realistic_model.py .gpu/real/resnet18_6x900x1600.onnx
rm -rf .gpu/hr  # a stale copy from an earlier stage would be checked as if named now
if [ -n "${REDLINE_EXTRA_MODELS:-}" ]; then
  mkdir -p .gpu/hr && cp "$REDLINE_EXTRA_MODELS"/*.onnx .gpu/hr/
fi
du -sh .gpu
tar cJf .gpu.tar.xz --exclude .gpu/out .gpu
du -sh .gpu.tar.xz
