"""Does the trusted replay's time agree with an independent CUPTI kernel-time loop outside the evaluator? (issue 38)

For each operator of the Triton reference submission (examples/submissions/triton_reference) it takes the largest
problem and the smallest (launch-bound) one of --release, evaluates them on the GPU (`evaluate`, the replay timing
each recorded launch program), then, in this process, times the submission's own Model on the same problem: L2
flushed by a plain `zero_` of a 256 MB buffer before each call, under torch.profiler, the trace exported as Chrome
JSON and each call's kernel time taken as the sum of the durations of the GPU work (kernels, copies, fills) after
each flush and before the next, in time order: no markers, no correlation ids, no replay. Both sides load the
autotuning the evaluator's worker kept in the file's persistent Triton cache, so they time the same
configurations. Target: within 3% on every problem. Needs torch, triton, pyarrow and pyyaml only:

    python benchmarks/replay_timing_agreement.py --release RELEASE --out OUT [--ops a,b] [--sandbox]

Writes OUT/replay_timing_agreement.json and prints one line per problem.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from kernels_eval import registry  # noqa: E402
from kernels_eval.harness.release_view import read_release_view  # noqa: E402
from kernels_eval.harness.runner import EvalConfig, evaluate  # noqa: E402
from kernels_eval.harness.autotune_pins import kernel_name  # noqa: E402
from kernels_eval.harness.triton_cache import file_cache_dir  # noqa: E402

SUBMISSION = REPO / "examples" / "submissions" / "triton_reference"
OPS = ("rms_norm", "silu_and_mul", "l2_norm", "layer_norm", "fused_add_rms_norm", "gated_rms_norm",
       "fp8_dynamic_per_token_quant", "per_token_group_quant_fp8", "moe_sum_reduce", "embedding", "gemm",
       "moe_topk_gating_softmax", "fused_qkv_rope", "reshape_and_cache", "fused_moe", "moe_align_block_size")
MIDDLE = ("rms_norm", "silu_and_mul", "layer_norm", "fp8_dynamic_per_token_quant")  # a third, mid-size problem
FLUSH_NAMES = ("FillFunctor<signed char>", "FillFunctor<char>")
GPU_WORK = ("kernel", "gpu_memcpy", "gpu_memset")


def log(*args) -> None:
    print(*args, flush=True)


def chosen_problems(release, ops) -> list[str]:
    """The largest and the smallest problem of each operator by interface bytes on H200 (and a middle one of
    MIDDLE's)."""
    size = {r["problem_id"]: r["bytes_read"] + r["bytes_written"] for r in release.roofline_rows
            if r["hardware"] == "H200"}
    out = []
    for op in ops:
        plist = sorted((p for p in release.problems if p["operator"] == op),
                       key=lambda p: (size.get(p["problem_id"], 0), p["problem_id"]))
        picks = (plist[-1:] + plist[:1] + (plist[len(plist) // 2:len(plist) // 2 + 1] if op in MIDDLE else [])
                 if plist else [])
        for p in picks:
            if p["problem_id"] not in out:
                out.append(p["problem_id"])
    return out


def busy_from_trace(path: Path) -> list[float]:
    """Seconds per call: the summed durations of the GPU work after each flush and before the next."""
    doc = json.loads(path.read_text())
    work = sorted((e for e in doc["traceEvents"] if e.get("cat") in GPU_WORK and "dur" in e), key=lambda e: e["ts"])
    flushes = [i for i, e in enumerate(work) if any(n in e["name"] for n in FLUSH_NAMES)]
    return [sum(e["dur"] for e in work[a + 1:b]) / 1e6 for a, b in zip(flushes, flushes[1:])
            if b > a + 1]


def independent(operator: str, problem: dict, cache: Path, calls: int = 100, warmup: int = 20,
                only: dict[str, int] | None = None) -> float:
    """Median per-call kernel time of the submission's Model on `problem`, measured outside the evaluator; with
    `only` (kernel name -> index into its autotuner's configs), each named autotuner runs that configuration alone."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    file = SUBMISSION / f"{operator}.py"
    os.environ["TRITON_CACHE_DIR"] = str(file_cache_dir(cache, file))  # the autotuning the worker kept
    os.environ["TRITON_CACHE_AUTOTUNING"] = "1"
    spec = importlib.util.spec_from_file_location(f"independent_{operator}", file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for tuner in vars(module).values():
        if type(tuner).__name__ == "Autotuner" and kernel_name(tuner) in (only or {}):
            tuner.configs = [tuner.configs[only[kernel_name(tuner)]]]  # one configuration: nothing to benchmark
    model = module.Model(**json.loads(problem["init_kwargs"]))
    if isinstance(model, torch.nn.Module):
        model = model.cuda()
    reference = registry.load_reference(operator)
    sets = []
    for seed in range(4):
        g = torch.Generator(device="cuda")
        g.manual_seed(1000 + seed)
        sets.append(reference.make_inputs(**json.loads(problem["input_kwargs"]), device="cuda", generator=g))
    flush = torch.empty(256 << 20, dtype=torch.int8, device="cuda")
    with torch.no_grad():
        for k in range(warmup):
            flush.zero_()
            model(**sets[k % len(sets)])
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for k in range(calls):
                flush.zero_()
                model(**sets[k % len(sets)])
            flush.zero_()
            torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(path))
        times = busy_from_trace(path)
    # which configuration each autotuner ran, and whether it benchmarked here (a miss of the kept autotuning)
    tuned = {name: (str(getattr(a, "best_config", None)), bool(getattr(a, "bench_time", 0)))
             for name, a in vars(module).items() if type(a).__name__ == "Autotuner"}
    del sets, flush, model
    torch.cuda.empty_cache()
    if len(times) < calls // 2:
        raise RuntimeError(f"only {len(times)} calls found in the trace of {calls}")
    return statistics.median(times), tuned


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--release", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--ops", default=",".join(OPS))
    ap.add_argument("--sandbox", action="store_true", help="run the evaluator's processes in bubblewrap")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    ops = [o for o in args.ops.split(",") if o]
    release = read_release_view(args.release)
    problems = {p["problem_id"]: p for p in release.problems}
    chosen = chosen_problems(release, ops)
    cache = Path(tempfile.mkdtemp(prefix="agreement-cache-"))
    t0 = time.monotonic()
    config = EvalConfig(memory_cgroup=False, device="cuda", sandbox=args.sandbox, triton_cache=cache)
    rows = {r["problem_id"]: r for r in evaluate(SUBMISSION, release, config=config, ops=ops, problems=chosen,
                                                 progress=lambda p, v: log(f"  judged {p.operator} {p.problem_id} "
                                                                           f"{v.stage} {(v.error or '')[:160]}"))}
    log(f"[agreement] evaluator: {len(rows)} problems in {time.monotonic() - t0:.0f} s")
    table = []
    for pid in chosen:
        r = rows[pid]
        row = {"problem_id": pid, "operator": r["operator"], "stage": r["stage"], "native": r["native"],
               "error": r["error"], "t_replay_s": r["t_measured_s"], "t_roofline_s": r["t_roofline_s"]}
        if r["t_measured_s"]:
            try:
                row["independent_s"], row["autotuned"] = independent(r["operator"], problems[pid], cache)
                row["agreement_diff"] = (r["t_measured_s"] - row["independent_s"]) / row["independent_s"]
            except Exception as exc:  # noqa: BLE001 - recorded; the other problems go on
                row["error"] = f"independent measurement: {type(exc).__name__}: {exc}"
        table.append(row)
        log(f"    {pid} {row['operator']:<28} {row['stage']:<11} replay={_us(row['t_replay_s'])} "
            f"independent={_us(row.get('independent_s'))} diff={_pct(row.get('agreement_diff'))} "
            f"{row.get('autotuned') or ''} "
            f"{(row['error'] or '')[:160]}")
    timed = [r for r in table if "agreement_diff" in r]
    doc = {"problems": len(table), "operators": len({r["operator"] for r in table}), "timed": len(timed),
           "agree_within_3pct": sum(abs(r["agreement_diff"]) <= 0.03 for r in timed),
           "below_roofline": sum(1 for r in timed if r["t_roofline_s"] and r["t_replay_s"] < r["t_roofline_s"]),
           "agreement_diff_median": statistics.median([r["agreement_diff"] for r in timed]) if timed else None,
           "evaluator_s": round(time.monotonic() - t0, 1), "rows": table}
    (out / "replay_timing_agreement.json").write_text(json.dumps(doc, indent=1, default=str))
    log(f"[agreement] {doc['agree_within_3pct']}/{len(table)} within 3% of the independent kernel time over "
        f"{doc['operators']} operators; {doc['below_roofline']} below the roofline")
    return 0 if doc["agree_within_3pct"] == len(table) else 1


def _us(x) -> str:
    return "-" if x is None else f"{x * 1e6:.2f}us"


def _pct(x) -> str:
    return "-" if x is None else f"{x:+.1%}"


if __name__ == "__main__":
    sys.exit(main())
