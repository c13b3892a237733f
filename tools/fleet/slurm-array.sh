#!/usr/bin/env bash
# redline replay over a Slurm array, one shard per task:
#
#   sbatch tools/fleet/slurm-array.sh /shared/logs /shared/out
#   # when the array is done:
#   redline report merge /shared/out/shard-*/measurement.json -o /shared/merged.json
#
# `--shard auto` reads SLURM_ARRAY_TASK_ID, SLURM_ARRAY_TASK_MIN and SLURM_ARRAY_TASK_COUNT:
# task i replays logs i, i + N, ... of the same sorted list and writes OUT/shard-i-of-N/.
#SBATCH --job-name=redline-replay
#SBATCH --array=0-7
#SBATCH --cpus-per-task=2
#SBATCH --mem=2G
#SBATCH --output=redline-replay-%A_%a.log
set -euo pipefail
logs=${1:?usage: sbatch slurm-array.sh LOG_DIR OUT_DIR [CONFIG]}
out=${2:?usage: sbatch slurm-array.sh LOG_DIR OUT_DIR [CONFIG]}
config=${3:-}
# The glob is sorted, so every task sees the same list in the same order.
args=(replay "$logs"/*.mcap --mode lockstep --shard auto --report "$out")
if [[ -n "$config" ]]; then args+=(--config "$config"); fi
exec redline "${args[@]}"
