#!/usr/bin/env bash
# Why a compiled shape tunes ~9x slower in the evaluator's worker than in a plain process (issue 17;
# benchmarks/results/kernel_span_H200/full2/README.md). On one GPU, from the repo root, with the release
# carried (out/atrex-release and the out/.atrex-release.d it links to) and HOTSHAPE_BWRAP set:
#     OUT=$OUT bash benchmarks/tune_gap_gpu.sh        (~6 minutes on an H200)
# 1. benchmarks/tune_probe.py on a unified_attention and a linear_sigmoid_mul problem (fresh processes:
#    plain, short benchmarks, after one profile, near-empty benchmarks, TEARDOWN_CUPTI=1, under the profiler);
# 2. four unified_attention problems in one lane: once to compile into a cache, then three times on it with
#    the kept autotuning removed before each, as the evaluator runs by default, with NO_WARM_PROFILE=1 and
#    with CUPTI_TEARDOWN=1. Compare each run's `in_worker_tune` (its *_progress.jsonl) with the probe's lines.
# Writes 8 files under $OUT: tune_probe_{ua,lsm}.json, the four runs'
# triton_reference_ua_*_progress.jsonl, their log eval_gpu_triton.log and the table, tune_gap.txt; the rest of
# the runs' files stay in out/tune-gap/.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:?set OUT}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
python3 benchmarks/tune_probe.py --problem p1bffc867902cda93 --json "$OUT/tune_probe_ua.json"
python3 benchmarks/tune_probe.py --problem p332193a36fa0b59b --json "$OUT/tune_probe_lsm.json"
U=p1f73590d6838fab5,p1bffc867902cda93,p508aead3f4f83ebb,p01bc21affaefd806
CACHE=out/tune-gap-cache W=out/tune-gap
rm -rf "$CACHE" "$W"
OUT=$W LANES=1 TRITON_CACHE=$CACHE LABEL=_ua_compile PROBLEMS=$U bash benchmarks/eval_gpu.sh triton >/dev/null
for run in default nowarm teardown; do
  find "$CACHE" -name '*.autotune.json' -delete  # the compiled kernels stay, the kept picks go
  case $run in
    default) OUT=$W LANES=1 TRITON_CACHE=$CACHE LABEL=_ua_$run PROBLEMS=$U bash benchmarks/eval_gpu.sh triton >/dev/null ;;
    nowarm) NO_WARM_PROFILE=1 OUT=$W LANES=1 TRITON_CACHE=$CACHE LABEL=_ua_$run PROBLEMS=$U bash benchmarks/eval_gpu.sh triton >/dev/null ;;
    teardown) CUPTI_TEARDOWN=1 OUT=$W LANES=1 TRITON_CACHE=$CACHE LABEL=_ua_$run PROBLEMS=$U bash benchmarks/eval_gpu.sh triton >/dev/null ;;
  esac
done
cp "$W"/eval_gpu/triton_reference_ua_*_progress.jsonl "$W"/eval_gpu/eval_gpu_triton.log "$OUT"/
python3 - "$OUT" <<'EOF' | tee "$OUT/tune_gap.txt"
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
for name in ("ua", "lsm"):
    doc = json.loads((out / f"tune_probe_{name}.json").read_text())
    for variant, got in doc["variants"].items():
        print(f"probe {doc['operator']:<20} {variant:<24} first call {got.get('calls_s', ['-'])[0]} s"
              f"  next profiled call {got.get('next_profiled_call_s', '-')}")
for run in ("compile", "default", "nowarm", "teardown"):
    rows = [json.loads(line) for line in (out / f"triton_reference_ua_{run}_progress.jsonl").open()]
    tune = [r["step_s"].get("in_worker_tune", 0.0) for r in rows]
    print(f"eval  {run:<9} in_worker_tune {' '.join(f'{t:.2f}' for t in tune)}  eval_s "
          f"{sum(r.get('eval_s') or 0 for r in rows):.1f}  stages {[r['stage'] for r in rows]}")
EOF
