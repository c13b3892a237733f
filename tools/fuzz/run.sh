#!/usr/bin/env bash
# Coverage-guided fuzzing of the log reader, the CDR decoder, the H.264 and H.265 decoding of
# video cameras and the ONNX importer with
# AFL++ (cargo-afl).
#
#   tools/fuzz/run.sh [SECONDS]     # each target runs SECONDS (default 600)
#
# Installs cargo-afl and builds AFL++ from the sources it ships when missing (a C compiler
# and make; ~5 min on 2 cores the first time), builds the targets in fuzz/ (its own
# workspace), writes a tiny seed log with `redline sim generate` (0.2 s, 64x32 images) and
# its .db3 conversion and its zstd-compressed copy,
# takes the repository's small .onnx files as the importer's seeds, runs each target for
# SECONDS, prints executions, exec/s and crashes per target, and
# exits 1 if any crash was saved (the inputs are in fuzz/out/TARGET/default/crashes/:
# add each as a regression test next to sim/src/fuzzing.rs or, for onnx_model, to the
# rejection test in tests/tests/onnx_import.rs, then fix it).
set -euo pipefail
cd "$(dirname "$0")/../.."
secs=${1:-600}

if ! command -v cargo-afl >/dev/null; then
    cargo install cargo-afl --locked --version 0.18.2
fi
# Builds AFL++ once per toolchain and cargo-afl version (under ~/.local/share/afl.rs).
if ! ls "${XDG_DATA_HOME:-$HOME/.local/share}"/afl.rs/rustc-*/afl.rs-*/afl/bin/afl-fuzz >/dev/null 2>&1; then
    cargo afl config --build
fi

seeds=fuzz/seeds
mkdir -p "$seeds/log" "$seeds/cdr" "$seeds/h264" "$seeds/h265" "$seeds/onnx"
# ONNX seeds: the test fixtures (a QDQ convolution, a 3-D float one, a dynamic batch, a float
# network with depthwise and transposed convolutions, a quantized 1-D network, a GridSample,
# a TopK query selection)
# and the built-in heads, all under 8 KB (AFL mutates small seeds best).
cp cli/tests/fixtures/tiny_qdq_s8.onnx cli/tests/fixtures/tiny_float_conv.onnx \
    cli/tests/fixtures/tiny_dynamic_batch.onnx cli/tests/fixtures/tiny_float_net.onnx \
    cli/tests/fixtures/tiny_sequence_qdq.onnx cli/tests/fixtures/tiny_grid_warp.onnx \
    cli/tests/fixtures/tiny_query_select.onnx \
    models/builtin/det_head.onnx \
    models/builtin/seg_head.onnx "$seeds/onnx/"
if [ ! -s "$seeds/log/drive.mcap" ]; then
    # The dev profile (optimized, what `cargo test` builds): in CI this reuses the test step's
    # build instead of a release build of the whole CLI (about 1.5 GB of disk and minutes on
    # 2 cores) for a 0.2 s log.
    cargo run -q -p redline-cli --bin redline -- sim generate -o "$seeds/log/drive.mcap" \
        --seconds 0.2 --width 64 --height 32 --actors 3
fi
# The same log as a ROS 2 SQLite bag (.db3, 1 KiB pages: the reader's other format), when
# python3 has the mcap package (.ci/run installs it).
if [ ! -s "$seeds/log/drive.db3" ] && python3 -c "import mcap" 2>/dev/null; then
    python3 -c "import sys; sys.path.insert(0, 'tests/python'); import write_foreign_bag as w; \
w.PAGE_SIZE = 1024; w.to_db3(sys.argv[1], sys.argv[2])" "$seeds/log/drive.mcap" "$seeds/log/drive.db3"
fi
# The log compressed whole with zstd, as a file-compressed ROS 2 bag holds its files.
if [ ! -s "$seeds/log/drive.mcap.zstd" ] && python3 -c "import zstandard" 2>/dev/null; then
    python3 -c "import sys, zstandard; open(sys.argv[2], 'wb').write(zstandard.ZstdCompressor(\
level=1).compress(open(sys.argv[1], 'rb').read()))" "$seeds/log/drive.mcap" "$seeds/log/drive.mcap.zstd"
fi
# Video seeds, when python3 has av (.ci/run installs it): two short H.264 streams from PyAV's
# libx264 (64x32, 4 frames: Baseline-like CAVLC without B-frames, and Main with CABAC and
# B-frames) and two H.265 streams from its libx265 (64x64, 4 frames: P-frames only, and
# B-frames with an open group of pictures, so CRA and leading pictures); else one access
# unit's start code per codec, from which AFL grows its own.
if [ ! -s "$seeds/h265/open_b.h265" ] && python3 -c "import av" 2>/dev/null; then
    python3 - "$seeds" <<'PY'
import sys
from fractions import Fraction
import av
x265 = "log-level=none:pools=1:frame-threads=1:info=0:keyint=3:min-keyint=3:scenecut=0:repeat-headers=1:"
for path, codec, (w, h), options in [
        ("h264/baseline.h264", "libx264", (64, 32),
         {"profile": "baseline", "threads": "1", "x264-params": "keyint=4:bframes=0:cabac=0"}),
        ("h264/main_b.h264", "libx264", (64, 32),
         {"profile": "main", "threads": "1", "x264-params": "keyint=4:bframes=2"}),
        ("h265/p_only.h265", "libx265", (64, 64), {"x265-params": x265 + "bframes=0"}),
        ("h265/open_b.h265", "libx265", (64, 64), {"x265-params": x265 + "bframes=2:open-gop=1"})]:
    enc = av.CodecContext.create(codec, "w")
    enc.width, enc.height, enc.pix_fmt = w, h, "yuv420p"
    enc.time_base, enc.framerate = Fraction(1, 10), Fraction(10, 1)
    enc.options = options
    out = b""
    for k in range(4):
        f = av.VideoFrame(w, h, "yuv420p")
        for i, p in enumerate(f.planes):
            p.update(bytes((x * 7 + k * 13 + i * 50) % 256 for x in range(p.buffer_size)))
        f.pts = k
        out += b"".join(bytes(p) for p in enc.encode(f))
    out += b"".join(bytes(p) for p in enc.encode(None))
    open(f"{sys.argv[1]}/{path}", "wb").write(out)
PY
fi
[ -n "$(ls "$seeds/h264")" ] || printf '\x00\x00\x00\x01\x67' > "$seeds/h264/start_code"
[ -n "$(ls "$seeds/h265")" ] || printf '\x00\x00\x00\x01\x40\x01' > "$seeds/h265/start_code"
# CDR seeds: an empty message, and a short run of zeros after the little-endian header.
printf '\x00\x01\x00\x00' > "$seeds/cdr/header_only"
printf '\x00\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00' > "$seeds/cdr/zeros"

(cd fuzz && cargo afl build --release -q)

export AFL_SKIP_CPUFREQ=1 AFL_I_DONT_CARE_ABOUT_MISSING_CRASHES=1 AFL_NO_UI=1
export AFL_NO_AFFINITY=1 AFL_SKIP_CRASHES=1
status=0
for target in log_reader cdr h264 h265 onnx_model; do
    case $target in log_reader) in=$seeds/log ;; cdr) in=$seeds/cdr ;; h264) in=$seeds/h264 ;; h265) in=$seeds/h265 ;; onnx_model) in=$seeds/onnx ;; esac
    out=fuzz/out/$target
    rm -rf "$out"; mkdir -p fuzz/out
    echo "== fuzzing $target for $secs s (AFL++, seeds in $in)"
    cargo afl fuzz -i "$in" -o "$out" -V "$secs" -- "fuzz/target/release/$target" >"$out.log" 2>&1 || {
        echo "afl-fuzz failed for $target; its output:"; tail -30 "$out.log"; exit 1; }
    stats=$out/default/fuzzer_stats
    get() { awk -F' *: *' -v k="$1" '$1 == k { print $2 }' "$stats"; }
    crashes=$(get saved_crashes)
    echo "   $target: $(get execs_done) executions, $(get execs_per_sec) exec/s, $(get corpus_count) corpus entries, $(get bitmap_cvg) coverage, crashes: $crashes, hangs: $(get saved_hangs)"
    if [ "${crashes:-0}" != 0 ]; then
        echo "   crashing inputs: $out/default/crashes/"
        status=1
    fi
done
exit $status
