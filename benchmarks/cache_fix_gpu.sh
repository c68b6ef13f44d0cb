#!/usr/bin/env bash
# After the sandbox's Triton cache fix (one mount path for every worker, kernels_eval/harness/sandbox.py):
# four unified_attention problems in one lane, compiled into a cache and then evaluated again on it with the
# kept autotuning removed (was ~11 s a shape of in_worker_tune, every configuration compiled again); then half
# A of the catalogue (benchmarks/results/kernel_span_H200/full2/README.md) cold, then warm on the same cache,
# each cut at its limit. On one GPU from the repo root, HOTSHAPE_BWRAP set:
#     OUT=$OUT COLD_S=330 WARM_S=160 bash benchmarks/cache_fix_gpu.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:?set OUT}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
U=p1f73590d6838fab5,p1bffc867902cda93,p508aead3f4f83ebb,p01bc21affaefd806
HA=block_scaled_mm,causal_conv1d,chunk_gated_delta_rule_state,fp8_blockscale_fused_moe,fp8_dynamic_per_token_quant,fused_qkv_rope,fused_rmsnorm_quant,gated_delta_rule_update,l2_norm,mla_decode_attention,moe_align_block_size,moe_sum_reduce,mrope,paged_attention_decode,unified_attention
W=out/cache-fix
rm -rf "$W" out/cf-ua-cache out/cf-cache
OUT=$W LANES=1 TRITON_CACHE=out/cf-ua-cache LABEL=_ua_compile PROBLEMS=$U bash benchmarks/eval_gpu.sh triton >/dev/null
find out/cf-ua-cache -name '*.autotune.json' -delete
OUT=$W LANES=1 TRITON_CACHE=out/cf-ua-cache LABEL=_ua_again PROBLEMS=$U bash benchmarks/eval_gpu.sh triton >/dev/null
OUT=$W LANES=6 TRITON_CACHE=out/cf-cache LABEL=_coldA FULL_OPS=$HA timeout "${COLD_S:-330}" bash benchmarks/eval_gpu.sh triton >/dev/null
OUT=$W LANES=6 TRITON_CACHE=out/cf-cache LABEL=_warmA FULL_OPS=$HA timeout "${WARM_S:-160}" bash benchmarks/eval_gpu.sh triton >/dev/null
cp "$W"/eval_gpu/triton_reference_{ua_compile,ua_again,coldA,warmA}_progress.jsonl "$W"/eval_gpu/eval_gpu_triton.log "$OUT"/
python3 - "$OUT" <<'PY' | tee "$OUT/cache_fix.txt"
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
for run in ("ua_compile", "ua_again", "coldA", "warmA"):
    f = out / f"triton_reference_{run}_progress.jsonl"
    rows = [json.loads(line) for line in f.open()] if f.exists() else []
    tune = [r["step_s"].get("in_worker_tune", 0.0) for r in rows]
    timed = sum(1 for r in rows if r.get("t_measured_s"))
    print(f"{run:<10} rows {len(rows):4d} timed {timed:4d} in_worker_tune sum {sum(tune):7.1f} s"
          f" max {max(tune, default=0):5.2f}  stages {sorted({r['stage'] for r in rows})}")
PY
