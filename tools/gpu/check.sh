#!/usr/bin/env bash
# GPU checks of the CUDA engine (issue 13), run on a GPU machine from binaries built on a
# CPU machine, printing one table. Build and stage them first (on the CPU machine):
#
#   tools/gpu/stage.sh [--with-cuda-13]  # -> .gpu/: redline, cuda_engine (tests), ops/
#                                        #    (with the zoo's imports), hr/, real/; .gpu.tar.xz
#
# then on the GPU machine, from the repository root (after `tar xJf .gpu.tar.xz` if the
# archive is what travelled):
#
#   tools/gpu/check.sh [.gpu]     # logs and JSON under $OUT (or .gpu/out)
#   QUICK=1 tools/gpu/check.sh    # tests, the large models' benches and profiles only
#
# Steps (about 3.3 minutes on an H200, 2026-11-30): (1) the GPU tests — CUDA vs native bit for
# bit on the shipped models, every operator model (those the CUDA engine refuses are listed by
# operator) and the whole driving graph (pinned replay hash), zero allocations per run; the
# CUDA 13 build's tests too when staged; (2) `redline model bench` of each model: cuda
# against native (agreement, speed; the zoo's imported networks too), cuda (graph replay)
# against cuda-stream (plain launches), cuda-staged
# (no host copies) against cuda with blocking and spinning waits, and `redline model
# profile` of the large models;
# (3) the PyTorch fp16 + CUDA-graph peer on the same networks; (4) the driving graph end to
# end (real-time replay, 300 frames) on native and on cuda — the fast model on a six-camera
# drive — and lockstep hashes of the whole default drive on both.
set -u
BIN=${1:-.gpu}
OUT=${OUT:-$BIN/out}
mkdir -p "$OUT"
export REDLINE_REPO=$PWD
R="$BIN/redline"

# NVRTC compiles the kernels at start-up: find it (CUDA toolkit or PyPI wheel) and expose it
# under the names cudarc looks for.
if [ -z "${REDLINE_NVRTC:-}" ]; then
  for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
           $(python3 -c 'import site, glob; print(" ".join(d for p in site.getsitepackages() for d in glob.glob(p + "/nvidia/*/lib")))' 2>/dev/null); do
    f=$(ls "$d"/libnvrtc.so* 2>/dev/null | grep -v builtins | head -1)
    if [ -n "$f" ]; then REDLINE_NVRTC=$f; break; fi
  done
fi
if [ -z "${REDLINE_NVRTC:-}" ]; then echo "check: no libnvrtc.so found; set REDLINE_NVRTC=/path/libnvrtc.so.N"; exit 2; fi
mkdir -p /tmp/redline-nvrtc
ln -sf "$REDLINE_NVRTC" /tmp/redline-nvrtc/libnvrtc.so
export LD_LIBRARY_PATH=/tmp/redline-nvrtc:$(dirname "$REDLINE_NVRTC"):${LD_LIBRARY_PATH:-}:/usr/local/nvidia/lib64:/usr/lib/x86_64-linux-gnu
echo "NVRTC: $REDLINE_NVRTC"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader || true

step() { echo; echo "== $1 ($(date +%T))"; }

step "1. GPU tests"
# The extra model folders the stage has (hr/ only when REDLINE_EXTRA_MODELS was set): the test
# fails on a named folder that is missing, so name only the ones present.
EXTRA=$(for d in "$BIN/hr" "$BIN/real"; do [ -d "$d" ] && printf '%s:' "$d"; done)
# cuda_engine: the `cuda` build (CUDA 12.2 bindings); cuda_engine_cuda13, when staged
# (stage.sh --with-cuda-13): the same tests with cudarc's CUDA 13 bindings.
# The second build skips the operator models (the same kernels; only the bindings differ).
for t in cuda_engine cuda_engine_cuda13; do
  [ -x "$BIN/$t" ] || continue
  echo "-- $t"
  skip=; [ "$t" = cuda_engine_cuda13 ] && skip="--skip operator_models"
  REDLINE_CUDA_OP_MODELS=$BIN/ops REDLINE_CUDA_EXTRA_MODELS=${EXTRA%:} \
    timeout 300 "$BIN/$t" --test-threads=1 --nocapture $skip 2>&1 | tee "$OUT/tests_$t.log" \
    | grep -E "^test |GPU:|differing|bit-exact|not on the CUDA|hash|SKIPPED|panicked|result" | head -60
done

step "2. model bench"
: > "$OUT/bench.jsonl"
# The shipped backbone takes 6x128x256 since 2026-11-26; the fast model's is the 6x64x128 one.
SMALL="models/trained/fast/backbone.onnx models/trained/backbone.onnx models/trained/det_head.onnx models/trained/seg_head.onnx"
[ -n "${QUICK:-}" ] && SMALL=""
for m in $SMALL; do
  timeout 120 "$R" model bench "$m" --engine cuda --against native --iters 200 --json >> "$OUT/bench.jsonl" 2>>"$OUT/bench.err" || echo "bench cuda/native $m failed: $(tail -2 $OUT/bench.err)"
  timeout 120 "$R" model bench "$m" --engine cuda --against cuda-stream --iters 2000 --warmup 100 --json >> "$OUT/bench.jsonl" 2>>"$OUT/bench.err" || echo "bench cuda/stream $m failed: $(tail -2 $OUT/bench.err)"
done

# Imported models (stage.sh copies the zoo's uint8 QDQ imports as ops/zoo_*.onnx): GPU
# against the CPU on a real network. A model the CUDA engine refuses fails here by name.
for m in $BIN/ops/zoo_*.onnx; do
  [ -f "$m" ] || continue
  timeout 120 "$R" model bench "$m" --engine cuda --against native --iters 100 --warmup 10 --json >> "$OUT/bench.jsonl" 2>>"$OUT/bench.err" || echo "bench cuda/native $m failed: $(tail -2 $OUT/bench.err)"
done

for m in $BIN/real/*.onnx; do
  [ -f "$m" ] || continue
  timeout 120 "$R" model bench "$m" --engine cuda --against cuda-stream --iters 300 --warmup 20 --json >> "$OUT/bench.jsonl" 2>>"$OUT/bench.err" || echo "bench cuda/stream $m failed: $(tail -2 $OUT/bench.err)"
done
# What the host copies of `run` cost (cuda-staged: the producer writes into the pinned
# staging), and what spinning instead of sleeping on the stream changes (REDLINE_CUDA_SYNC).
for m in models/trained/backbone.onnx $BIN/real/*.onnx; do
  [ -f "$m" ] || continue
  timeout 120 "$R" model bench "$m" --engine cuda-staged --against cuda --iters 300 --warmup 20 --json >> "$OUT/bench.jsonl" 2>>"$OUT/bench.err" || echo "bench staged $m failed: $(tail -2 $OUT/bench.err)"
  REDLINE_CUDA_SYNC=spin timeout 120 "$R" model bench "$m" --engine cuda-staged --against cuda --iters 300 --warmup 20 --json >> "$OUT/bench.jsonl" 2>>"$OUT/bench.err" || echo "bench spin $m failed: $(tail -2 $OUT/bench.err)"
done

step "2b. where the time goes (redline model profile)"
for m in $BIN/real/*.onnx; do
  [ -f "$m" ] || continue
  timeout 60 "$R" model profile "$m" --reps 10 --top 12 2>&1 | tee -a "$OUT/profile.txt"
  timeout 60 "$R" model profile "$m" --reps 5 --top 5 --no-tensor-cores 2>&1 | tee -a "$OUT/profile.txt"
done
timeout 60 "$R" model profile models/trained/backbone.onnx --reps 20 --top 8 2>&1 | tee -a "$OUT/profile.txt"
# The zoo's imports (their launches, the float route's included): to the file only.
for m in $BIN/ops/zoo_*.onnx; do
  [ -f "$m" ] || continue
  timeout 60 "$R" model profile "$m" --reps 10 --top 10 >> "$OUT/profile.txt" 2>&1
done

if [ -n "${QUICK:-}" ]; then
  step "table (QUICK: no PyTorch peer, no end-to-end replays)"
  python3 tools/gpu/table.py "$OUT"
  exit 0
fi

step "3. PyTorch peer (fp16, CUDA graphs)"
timeout 180 python3 tools/gpu/torch_peer.py --iters 2000 > "$OUT/torch.jsonl" 2>"$OUT/torch.err" || { echo "torch peer failed:"; tail -5 "$OUT/torch.err"; }

step "4. driving graph end to end"
mk() { # $1 engine, $2 model folder
  printf '[models]\nbackbone = { path = "%s/backbone.onnx", engine = "%s" }\ndet_head = { path = "%s/det_head.onnx", engine = "%s" }\nseg_head = { path = "%s/seg_head.onnx", engine = "%s" }\n' "$2" "$1" "$2" "$1" "$2" "$1"
}
for e in native cuda; do
  mk $e models/trained > "$OUT/$e.toml"
  mk $e models/trained/fast > "$OUT/${e}_fast.toml"
done
# The fast model takes the six-camera rig (models/trained/fast/config.toml): its replays read
# a six-camera drive; the shipped models replay the built-in (seven-camera) scenario.
timeout 60 "$R" sim generate -o "$OUT/drive6.mcap" --seconds 10 --tele-hfov off > /dev/null 2>&1 \
  || echo "sim generate of the six-camera drive failed"
for c in native cuda cuda_spin native_fast cuda_fast; do
  cfg=${c%_spin}; sync=block; [ "$c" != "$cfg" ] && sync=spin
  log=; case $c in *_fast) log=$OUT/drive6.mcap ;; esac
  REDLINE_CUDA_SYNC=$sync timeout 60 "$R" replay $log --config "$OUT/$cfg.toml" --frames 300 --no-rt > "$OUT/replay_$c.txt" 2>&1 || echo "replay $c failed: $(tail -3 $OUT/replay_$c.txt)"
  grep -E "^(backbone|detection_head|segmentation_head|end to end)|deadline misses|output hash" "$OUT/replay_$c.txt" | sed "s/^/$c: /"
done
for c in native cuda; do
  timeout 120 "$R" replay --config "$OUT/$c.toml" --mode lockstep --no-rt > "$OUT/lockstep_$c.txt" 2>&1
  echo "lockstep whole default drive, $c: $(grep 'output hash' $OUT/lockstep_$c.txt) ($(grep -o '[0-9]* published' $OUT/lockstep_$c.txt))"
done

step "table"
python3 tools/gpu/table.py "$OUT"
