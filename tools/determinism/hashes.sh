#!/usr/bin/env bash
# Output hashes of lockstep replays of the built-in drive, for 1, 2 and 4 lanes and both
# perception modes: the figure a refactor must leave unchanged.
#
#   tools/determinism/hashes.sh [REDLINE_BINARY] [FRAMES]    (default: target/release/redline, 300)
#
# Lockstep outputs do not depend on the machine's speed, except that a stage still counts
# as hung after 4 deadlines of wall time: run it on a quiet machine.
set -euo pipefail
bin=${1:-target/release/redline}
frames=${2:-300}
[ -x "$bin" ] || { echo "no redline binary at $bin: build it (cargo build --release) or name it" >&2; exit 2; }
for p in network oracle; do
    for l in 1 2 4; do
        hash=$("$bin" replay --mode lockstep --frames "$frames" --lanes "$l" --perception "$p" 2>/dev/null |
            sed -n 's/^output hash //p')
        echo "$p lanes $l: ${hash:-FAILED}"
    done
done
