#!/usr/bin/env bash
# Reproduces the shipped trained network (models/trained/*.onnx) and its test fixtures
# from scratch: simulator dataset -> PyTorch training -> calibration and QDQ export ->
# evaluation by redline on drives it was not trained on.
#
# Usage: tools/train/reproduce.sh [WORK_DIR]     (default /tmp/redline-train)
# Needs: cargo, python3 with torch, numpy, onnx (pip install torch numpy onnx==1.23.2),
# about 10 GB of disk and 7 GB of memory. Seeds are fixed; on the 2-core development VM it
# takes about the time in the README's model card. SMALL=1 also remakes
# models/trained/small (the smaller, faster model of the previous release).
set -euo pipefail
cd "$(dirname "$0")/../.."
WORK=${1:-/tmp/redline-train}
mkdir -p "$WORK"
cargo build --release
start=$(date +%s)
# 1. 64 drives of 30 s (seeds 1000-1063, varied actors, lanes, lane widths and curvature):
#    whole drives, so the network sees traffic as it evolves, not only its first seconds.
target/release/redline sim dataset -o "$WORK/data" --drives 64 --seed 1000 --seconds 30
# 2. Training (fixed seed): the "dilated" architecture, 7 800 steps of 8 frames.
python3 tools/train/train.py "$WORK/data" -o "$WORK/model.pt" --arch dilated --epochs 2.1667 --seed 1
# 3. Calibration, QDQ export into models/trained, fixtures for tests/tests/trained_model.rs.
python3 tools/train/export.py "$WORK/model.pt" "$WORK/data" -o "$WORK/export" \
    --fixtures tests/fixtures/trained
cp "$WORK"/export/{backbone,det_head,seg_head}.onnx "$WORK/export/quantization.json" models/trained/
mkdir -p models/trained/float
cp "$WORK"/export/float/*.onnx models/trained/float/
if [ "${SMALL:-0}" = 1 ]; then
    # The previous release's model: 10 s drives (the first 32), 1 500 steps.
    target/release/redline sim dataset -o "$WORK/data10" --drives 64 --seed 1000 --seconds 10
    python3 tools/train/train.py "$WORK/data10" -o "$WORK/small.pt" --arch small --max-drives 32 \
        --epochs 3 --stop-at 1500 --seed 1
    python3 tools/train/export.py "$WORK/small.pt" "$WORK/data10" -o "$WORK/export_small"
    mkdir -p models/trained/small
    cp "$WORK"/export_small/{backbone,det_head,seg_head}.onnx "$WORK/export_small/quantization.json" \
        models/trained/small/
fi
echo "trained and exported in $(( $(date +%s) - start )) s"
# 4. Quality on drives it was not trained on: INT8 (the shipped models) and float.
cargo build --release
for s in 7 4242; do
    target/release/redline sim generate -o "$WORK/eval_$s.mcap" --seed "$s" --seconds 20
done
target/release/redline sim generate -o "$WORK/default_drive.mcap" --seed 7 --seconds 30
target/release/redline eval "$WORK"/eval_*.mcap --json "$WORK/eval_int8.json"
target/release/redline eval "$WORK/default_drive.mcap" --json "$WORK/eval_default_drive.json"
for s in 21 22 23; do
    target/release/redline sim generate -o "$WORK/more_$s.mcap" --seed "$s" --seconds 30
done
target/release/redline eval "$WORK"/more_*.mcap --json "$WORK/eval_more.json"
F="$PWD/models/trained/float"
cat > "$WORK/float.toml" <<TOML
[models]
backbone = { path = "$F/backbone.onnx", engine = "onnxruntime" }
det_head = { path = "$F/det_head.onnx", engine = "onnxruntime" }
seg_head = { path = "$F/seg_head.onnx", engine = "onnxruntime" }
TOML
target/release/redline eval "$WORK"/eval_*.mcap --config "$WORK/float.toml" --json "$WORK/eval_float.json"
