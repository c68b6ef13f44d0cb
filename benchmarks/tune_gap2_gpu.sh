#!/usr/bin/env bash
# Where the evaluator's worker spends the ~10 s it takes to tune a compiled unified_attention shape (issue 17;
# benchmarks/results/kernel_span_H200/full2/README.md): the probe's fresh processes (tune_probe.py, now with
# the Worker built unsandboxed), then two problems evaluated into a cache, then the same two again on it with
# the kept autotuning removed, sampled by py-spy (its wheel in .device/) and with TRITON_PRINT_AUTOTUNING=1,
# listing which cache files the second run wrote. On one GPU from the repo root, HOTSHAPE_BWRAP set:
#     OUT=$OUT bash benchmarks/tune_gap2_gpu.sh        (~4 minutes on an H200)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:?set OUT}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
python3 benchmarks/tune_probe.py --problem p1bffc867902cda93 --variants compile,worker_hooks,sandboxed_worker_hooks \
  --json "$OUT/tune_probe_ua.json" | tee "$OUT/probe.txt"
python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["variants"]["sandboxed_worker_hooks"].get("profile", ""))' "$OUT/tune_probe_ua.json" > "$OUT/sandboxed_profile.txt"
U=p1bffc867902cda93,p508aead3f4f83ebb
CACHE=out/tune-gap-cache W=out/tune-gap
rm -rf "$CACHE" "$W"
OUT=$W LANES=1 TRITON_CACHE=$CACHE LABEL=_ua_compile PROBLEMS=$U bash benchmarks/eval_gpu.sh triton >/dev/null
find "$CACHE" -name '*.autotune.json' -delete
touch out/tune-gap-marker
python3 -m pip install -q --no-deps --target /tmp/pyspy .device/py_spy-*.whl
TRITON_PRINT_AUTOTUNING=1 OUT=$W LANES=1 TRITON_CACHE=$CACHE LABEL=_ua_spied PROBLEMS=$U \
  /tmp/pyspy/bin/py-spy record --subprocesses --rate 100 --format raw -o out/pyspy.txt -- \
  bash benchmarks/eval_gpu.sh triton >"$OUT/pyspy_err.txt" 2>&1 || echo "py-spy rc=$?" >> "$OUT/pyspy_err.txt"
{ echo "cache files: $(find "$CACHE" -type f | wc -l); written by the second run:"
  find "$CACHE" -type f -newer out/tune-gap-marker | sed "s|$CACHE/||" | head -50
  echo "--- autotuning lines"; grep -rh "autotuning" "$W" 2>/dev/null | head -20; } > "$OUT/cache_and_autotune.txt"
gzip -c out/pyspy.txt > "$OUT/pyspy.txt.gz" || true
cp "$W"/eval_gpu/triton_reference_ua_spied_progress.jsonl "$OUT"/ || true
python3 - out/pyspy.txt <<'PY' | tee "$OUT/pyspy_top.txt"
import collections, sys
self_c, incl = collections.Counter(), collections.Counter()
total = 0
for line in open(sys.argv[1]):
    stack, _, n = line.rstrip().rpartition(" ")
    if not n.isdigit() or "worker" not in stack:
        continue
    n = int(n); total += n
    frames = stack.split(";")
    self_c[frames[-1]] += n
    for f in set(frames):
        incl[f] += n
print(f"worker samples {total}")
print("top self:"); [print(f"  {c:6d} {f[:150]}") for f, c in self_c.most_common(25)]
print("top inclusive:"); [print(f"  {c:6d} {f[:150]}") for f, c in incl.most_common(45)]
PY
