#!/usr/bin/env bash
# The evaluator's GPU run (issue 7) on one H200, under the machine's stock python3 (torch, triton, pyarrow,
# pyyaml; no polars). Build the release on a CPU machine first and carry it:
#     hotshape import-atrex examples/atrex-bench --out out/atrex-release
# then on the GPU machine, from the repo root (each line fits the 10-minute command limit):
#     OUT=$OUT bash benchmarks/eval_gpu.sh adversarial,honest
#     OUT=$OUT bash benchmarks/eval_gpu.sh full
# LANES=4 judges four operators at once (eval --lanes); TRITON_CACHE=DIR keeps each file's compile cache there
# for a later run; LABEL=_cold names the triton phase's files triton_reference_cold*; AUTOTUNE=protocol times the
# triton phase with the evaluator's autotuning protocol (default: Triton's own autotuner, as eval), AUTOTUNE_STORE=DIR keeps its choices.
# EVAL_DEVICE=cpu runs the triton phase on CPU (smoke shapes, Triton's interpreter): a dry run of a plan.
# Writes under $OUT/eval_gpu/: adversarial.json, honest.parquet, honest.json, fallback.parquet, fallback.json
# and one log per invocation. Copy them to benchmarks/results/eval_gpu/ with the command that made them.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-benchmarks/results}
RELEASE=${RELEASE:-out/atrex-release}
PHASES=${1:-adversarial,honest,full}
mkdir -p "$OUT/eval_gpu"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
LOG="$OUT/eval_gpu/eval_gpu_${PHASES//,/_}.log"
{
  date -u +%FT%TZ
  python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__, torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU")'
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader || true
  python3 benchmarks/eval_gpu.py --release "$RELEASE" --out "$OUT/eval_gpu" --phases "$PHASES" ${FULL_OPS:+--full-ops "$FULL_OPS"} ${FULL_PER_OP:+--full-per-op "$FULL_PER_OP"} ${PROBLEMS:+--problems "$PROBLEMS"} ${EVAL_DEVICE:+--device "$EVAL_DEVICE"} ${LANES:+--lanes "$LANES"} ${TRITON_CACHE:+--triton-cache "$TRITON_CACHE"} ${LABEL:+--label "$LABEL"} ${AUTOTUNE:+--autotune "$AUTOTUNE"} ${AUTOTUNE_STORE:+--autotune-store "$AUTOTUNE_STORE"} ${STACK_DUMP_S:+--stack-dump-s "$STACK_DUMP_S"} ${CASES:+--cases "$CASES"}
  date -u +%FT%TZ
} 2>&1 | tee -a "$LOG"
