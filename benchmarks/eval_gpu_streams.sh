#!/usr/bin/env bash
# Runs a plan of evaluator steps on several GPUs of one machine at once, one stream per GPU.
#     OUT=$OUT bash benchmarks/eval_gpu_streams.sh benchmarks/plans/NAME.plan
# Each plan line is `GPU SECONDS DIR COMMAND...`: on GPU (CUDA_VISIBLE_DEVICES), within SECONDS (timeout kills
# the step's whole process group), with OUT=$OUT/DIR, run COMMAND (usually `env VAR=... bash
# benchmarks/eval_gpu.sh triton`). Lines of one GPU run in plan order; GPUs run in parallel. '#' starts a comment.
# Steps write their own logs under their DIR (eval_gpu.sh does). Each step's exit status is printed (124: cut at
# its time limit; the evaluator's progress file keeps every verdict reached).
set -uo pipefail
cd "$(dirname "$0")/.."
PLAN=$1
OUT=${OUT:?set OUT}
export PYTHONUNBUFFERED=1
gpus=$(grep -v '^\s*#' "$PLAN" | awk 'NF {print $1}' | sort -u)
for gpu in $gpus; do
  (
    grep -v '^\s*#' "$PLAN" | awk -v g="$gpu" 'NF && $1 == g' | while read -r _ seconds dir cmd; do
      mkdir -p "$OUT/$dir"
      began=$(date +%s)
      CUDA_VISIBLE_DEVICES=$gpu OUT="$OUT/$dir" timeout "$seconds" bash -c "$cmd" >/dev/null 2>&1 </dev/null
      echo "gpu $gpu: rc=$? in $(( $(date +%s) - began )) s: $cmd"
    done
  ) &
done
wait
