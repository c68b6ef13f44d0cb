"""One short GPU run (~2 minutes) that shakes out the kernel-span timing (issue 17) before a full evaluation.

1. spans: a small Triton kernel timed by timing.time_calls between the evaluator's markers under the profiler;
   which correlation field orders the records; per-call spans next to CUDA-event times; the markers' cost.
2. fill: the caching allocator's free blocks filled with 0xFF read back as NaN from a fresh torch.empty.
3. verdicts: the honest rms_norm and the timing exploits (back_to_back, stack_detect, profiler_detect,
   side_stream) through the real runner on the smallest and largest rms_norm problem of --release, against each
   case's expected.json.

Imports only torch, triton, numpy, pyarrow, pyyaml and kernels_eval.

    python benchmarks/eval_gpu_selftest.py --release out/atrex-release --out "$OUT"

Writes OUT/selftest.json; exits 1 when any part fails.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import traceback
from pathlib import Path

import torch
import triton
import triton.language as tl

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from eval_gpu import error_expected  # noqa: E402
from kernels_eval.harness import spans  # noqa: E402
from kernels_eval.harness.markers import Markers  # noqa: E402
from kernels_eval.harness.timing import (L2_FLUSH_BYTES, gpu_profiler, kineto_records, quantiles,  # noqa: E402
                                         time_calls)

ADVERSARIAL = REPO / "tests" / "adversarial"
CASES = ("honest", "back_to_back", "stack_detect", "profiler_detect", "side_stream")


@triton.jit
def scale_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2.0, mask=mask)


def log(*args) -> None:
    print(*args, flush=True)


def part_spans() -> dict:
    n = 1 << 22  # 16 MB in, 16 MB out: ~10 µs on an H200
    sets = [{"x": torch.randn(n, device="cuda")} for _ in range(4)]
    out = torch.empty(n, device="cuda")

    def call(x):
        scale_kernel[(triton.cdiv(n, 4096),)](x, out, n, BLOCK=4096)
        return out

    markers = Markers(L2_FLUSH_BYTES)
    markers.start()
    markers.end()
    call(**sets[0])
    torch.cuda.synchronize()
    with torch.no_grad(), gpu_profiler() as prof:
        times = time_calls(call, sets, markers=markers, budget_s=0.05)
    table = kineto_records(prof)
    doc = {"records": len(table["rows"]), "kinds": table["kinds"], "marked": times.marked, "reported": len(times)}
    for key in ("correlation_id", "linked_correlation_id"):
        try:
            spans.call_windows(spans.records_from_rows(table, key), times.marked)
            doc[f"orders_by_{key}"] = True
        except spans.SpanError as exc:
            doc[f"orders_by_{key}"] = str(exc)[:300]
    windows, outside, pairs = spans.attribute(table, times.marked)
    span_ns = spans.call_spans(windows, pairs)[-len(times):]
    span_us = [s / 1e3 for s in span_ns]
    event_us = [t * 1e6 for t in times]
    flush_us = [(a.end_ns - a.start_ns) / 1e3 for a, _ in pairs]
    doc.update(span_median_us=statistics.median(span_us), event_median_us=statistics.median(event_us),
               span_p10_p90_us=[quantiles(span_us)["p10"], quantiles(span_us)["p90"]],
               kernels_per_window=sorted({len(w) for w in windows}), flush_median_us=statistics.median(flush_us),
               outside_names=sorted({r.name for r in outside})[:12],
               pairs=[[round(s, 2), round(e, 2)] for s, e in list(zip(span_us, event_us))[:10]])
    doc["ok"] = (doc["kernels_per_window"] == [1] and 0 < doc["span_median_us"] <= doc["event_median_us"] * 1.02)
    log(f"[spans] records={doc['records']} kinds={doc['kinds']} marked={doc['marked']} "
        f"by corr={doc['orders_by_correlation_id']} by linked={doc['orders_by_linked_correlation_id']}")
    log(f"[spans] span median {doc['span_median_us']:.2f} us vs events {doc['event_median_us']:.2f} us; "
        f"flush {doc['flush_median_us']:.1f} us; kernels/window {doc['kernels_per_window']}; "
        f"first (span, event) us: {doc['pairs'][:5]}")
    return doc


def part_fill() -> dict:
    from kernels_eval.harness.worker_gpu import fill_free_blocks

    x = torch.ones(1 << 22, device="cuda")
    del x
    began = time.perf_counter()
    filled = fill_free_blocks(torch)
    took = time.perf_counter() - began
    y = torch.empty(1 << 22, device="cuda")
    doc = {"filled_bytes": filled, "fill_s": took, "nan_share": float(torch.isnan(y).float().mean()),
           "bf16_nan": bool(torch.isnan(torch.empty(1 << 20, device="cuda", dtype=torch.bfloat16)).all())}
    doc["ok"] = filled >= (1 << 24) and doc["nan_share"] == 1.0
    log(f"[fill] {doc}")
    return doc


def part_verdicts(release_path: str) -> dict:
    sys.path.insert(0, str(REPO / "benchmarks"))
    from eval_gpu import problems_by_size

    from kernels_eval.harness.release_view import read_release_view
    from kernels_eval.harness.runner import EvalConfig, evaluate

    release = read_release_view(release_path)
    sized = problems_by_size(release, "rms_norm")
    chosen = [sized[0]["problem_id"], sized[-1]["problem_id"]]
    doc = {"problems": chosen, "cases": []}
    for case in CASES:
        expected = json.loads((ADVERSARIAL / case / "expected.json").read_text())
        t0 = time.monotonic()
        rows = evaluate(ADVERSARIAL / case, release, config=EvalConfig(memory_cgroup=False, device="cuda", call_timeout_s=60.0,
                                                                     timing_budget_s=0.1),
                        ops=["rms_norm"], problems=chosen)
        results = []
        for r in rows:
            got = {k: r[k] for k in expected["verdict"]}
            checked = expected.get("gpu_check") != "largest" or r["problem_id"] == chosen[-1]
            ok = got == expected["verdict"] and error_expected(expected, "cuda") in (r["error"] or "")
            results.append({"problem_id": r["problem_id"], "checked": checked, "as_expected": ok, "got": got,
                            "error": r["error"], "t_measured_s": r["t_measured_s"],
                            "t_event_s": r.get("t_event_s"), "native_fraction": r["native_fraction"],
                            "fallbacks": (r["fallbacks"] or [])[:4], "eval_s": r["eval_s"]})
        passed = all(x["as_expected"] for x in results if x["checked"])
        doc["cases"].append({"case": case, "expected": expected, "passed": passed, "rows": results})
        log(f"[verdict] {case:<16} {'PASS' if passed else 'FAIL'} ({time.monotonic() - t0:.0f} s)")
        for x in results:
            log(f"    {x['problem_id']} {x['got']} span={_us(x['t_measured_s'])} event={_us(x['t_event_s'])} "
                f"{(x['error'] or '')[:140]}")
    doc["ok"] = all(c["passed"] for c in doc["cases"])
    return doc


def _us(x) -> str:
    return "-" if x is None else f"{x * 1e6:.2f}us"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--release", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--parts", default="spans,fill,verdicts")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    log("torch", torch.__version__, "triton", triton.__version__, torch.cuda.get_device_name(0))
    doc: dict = {"torch": torch.__version__, "triton": triton.__version__, "device": torch.cuda.get_device_name(0)}
    t0 = time.monotonic()
    for part in args.parts.split(","):
        began = time.monotonic()
        try:
            doc[part] = {"spans": part_spans, "fill": part_fill,
                         "verdicts": lambda: part_verdicts(args.release)}[part]()
        except Exception as exc:  # noqa: BLE001 - every part reports, the next one still runs
            doc[part] = {"ok": False, "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
            log(f"[{part}] FAILED: {type(exc).__name__}: {exc}\n{traceback.format_exc()}")
        doc[part]["part_s"] = time.monotonic() - began
        (out / "selftest.json").write_text(json.dumps(doc, indent=1, default=str))
    doc["wall_s"] = time.monotonic() - t0
    doc["all_ok"] = all(doc[p].get("ok") for p in args.parts.split(","))
    (out / "selftest.json").write_text(json.dumps(doc, indent=1, default=str))
    log(f"[selftest] {'ALL OK' if doc['all_ok'] else 'FAILURES'} in {doc['wall_s']:.0f} s -> {out / 'selftest.json'}")
    return 0 if doc["all_ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
