"""Where small-kernel timings wobble: the evaluator's timing loop under variations, beside do_bench.

For the smallest and a mid-sized problem of the honest rms_norm / silu_and_mul kernels, times each
variant REPEATS times in this process and prints median, p10, p90, max and the share of calls slower
than 1.5x the p10 (calls the host or the clock disturbed). Run it twice (two processes) to see the
spread between processes too. Needs torch, triton, pyarrow (no polars):

    python benchmarks/timing_stability.py --release out/atrex-release [--json OUT.json]
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from kernels_eval import registry  # noqa: E402
from kernels_eval.harness import timing  # noqa: E402
from kernels_eval.harness.release_view import read_release_view  # noqa: E402

HONEST = REPO / "tests" / "adversarial" / "honest"


def load_model(operator: str, init_kwargs: dict):
    spec = importlib.util.spec_from_file_location(f"honest_{operator}", HONEST / f"{operator}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.Model(**init_kwargs).cuda()


def summary(times_s: list[float]) -> dict:
    q = timing.quantiles(times_s)
    slow = sum(t > 1.5 * q["p10"] for t in times_s) / len(times_s)
    return {"median_us": q["median"] * 1e6, "p10_us": q["p10"] * 1e6, "p90_us": q["p90"] * 1e6,
            "max_us": max(times_s) * 1e6, "slow_share": slow, "n": len(times_s)}


def main() -> int:
    import torch
    import triton
    from triton.testing import do_bench

    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--release", required=True)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    release = read_release_view(args.release)
    size = {r["problem_id"]: r["bytes_read"] + r["bytes_written"] for r in release.roofline_rows
            if r["hardware"] == "H200"}
    rows = []
    driver = triton.runtime.driver.active
    stock_cache = driver.get_empty_cache_for_benchmark
    for operator in ("rms_norm", "silu_and_mul"):
        problems = sorted((p for p in release.problems if p["operator"] == operator),
                          key=lambda p: size.get(p["problem_id"], 0))
        for p in (problems[0], problems[len(problems) // 2]):
            init_kwargs, input_kwargs = json.loads(p["init_kwargs"]), json.loads(p["input_kwargs"])
            model = load_model(operator, init_kwargs)
            make = registry.load_reference(operator).make_inputs
            seed = [0]

            def fresh(n=8):
                out = []
                for _ in range(n):
                    seed[0] += 1
                    g = torch.Generator(device="cuda")
                    g.manual_seed(seed[0])
                    out.append(make(**input_kwargs, device="cuda", generator=g))
                return out

            sets = fresh()
            variants = {
                "evaluator": lambda: timing.time_calls(model, sets, refresh=fresh, budget_s=0.3),
                "no_refresh": lambda: timing.time_calls(model, sets, budget_s=0.3),
            }

            def gc_off():
                gc.disable()
                try:
                    return timing.time_calls(model, sets, refresh=fresh, budget_s=0.3)
                finally:
                    gc.enable()

            def long_shield():  # 5x the shield's floor (the recorded study ran when the shield was fixed at it)
                old = timing.LAUNCH_SHIELD_CYCLES
                timing.LAUNCH_SHIELD_CYCLES = old * 5
                try:
                    return timing.time_calls(model, sets, refresh=fresh, budget_s=0.3)
                finally:
                    timing.LAUNCH_SHIELD_CYCLES = old

            def bench(cache_bytes):
                def run():
                    if cache_bytes:
                        big = torch.empty(cache_bytes, dtype=torch.int8, device="cuda")
                        driver.get_empty_cache_for_benchmark = lambda: big
                    try:
                        with torch.no_grad():
                            ms = do_bench(lambda: model(**sets[0]), warmup=25, rep=200, return_mode="all")
                    finally:
                        driver.get_empty_cache_for_benchmark = stock_cache
                    return [m / 1e3 for m in ms]
                return run

            def host_only():
                torch.cuda.synchronize()
                out = []
                with torch.no_grad():
                    for i in range(200):
                        torch.cuda._sleep(2_000_000)  # keep the GPU busy: this is the host's launch path alone
                        t0 = time.perf_counter()
                        model(**sets[i % len(sets)])
                        out.append(time.perf_counter() - t0)
                        if i % 20 == 19:
                            torch.cuda.synchronize()
                torch.cuda.synchronize()
                return out

            variants.update({"gc_off": gc_off, "shield_x5": long_shield, "do_bench": bench(0),
                             "do_bench_1GiB": bench(1 << 30), "host_launch": host_only})
            for name, fn in variants.items():
                for r in range(args.repeats):
                    with torch.no_grad():
                        s = summary(fn())
                    rows.append({"operator": operator, "problem_id": p["problem_id"], "variant": name, "repeat": r, **s})
                    print(f"{operator:<13}{p['problem_id']:<19}{name:<15}{r:>2} med {s['median_us']:8.2f} "
                          f"p10 {s['p10_us']:8.2f} p90 {s['p90_us']:8.2f} max {s['max_us']:8.1f} "
                          f"slow {s['slow_share']:.2f} n {s['n']}", flush=True)
            sets.clear()  # the closures above hold the list: empty it to free its tensors
            torch.cuda.empty_cache()
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
