"""Why a shape whose kernels are all compiled still takes seconds to autotune inside the evaluator (issue 17):
one fresh process per variant, all on one Triton cache that the first process fills, none keeping autotuning
(TRITON_CACHE_AUTOTUNING=0, so each one benchmarks every configuration again). Each line: the process's
first call of the Triton reference's Model on the problem, and for the teardown variant what the next
profile's start and stop cost. GPU only; the machine's stock python3.

    python3 benchmarks/tune_probe.py --release out/atrex-release --problem ID [--json OUT]

Variants: `plain` (no profiler in the process, Triton's 25 + 100 ms benchmarks), `short` (the evaluator's
5 + 20 ms benchmarks, harness/autotune_cache.shorter_benchmarks), `after_profile` (short, after one profile
started and stopped, as a prestarted worker is: CUPTI attached to the process), `after_profile_tiny` (the
same with benchmarks of 0.1 + 0.5 ms: what is left is loading and launching), `after_profile_teardown`
(the same with TEARDOWN_CUPTI=1: Kineto finalizes CUPTI when a profile stops), `under_profile` (short, the
call inside a profile), `worker_hooks` (the evaluator's Worker built in this process, unsandboxed, with its
hooks installed as `init` installs them, then its untimed tuning call, as `call_gpu` makes it),
`sandboxed_worker_hooks` (the same in the evaluator's bubblewrap sandbox, the cache bound as a worker's is,
the tuning call under cProfile: its top functions come back in `profile`).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VARIANTS = {
    "compile": {},
    "plain": {},
    "short": {},
    "after_profile": {},
    "after_profile_tiny": {},
    "after_profile_teardown": {"TEARDOWN_CUPTI": "1"},  # seen on H200: hangs past 240 s
    "under_profile": {},
    "worker_hooks": {},
    "sandboxed_worker_hooks": {},
}


def child(variant: str, row: dict) -> dict:
    import importlib.util

    import torch

    sys.path.insert(0, str(ROOT))
    from kernels_eval.harness.timing import gpu_profiler
    from kernels_eval.registry import load_reference

    if variant not in ("compile", "plain"):
        from kernels_eval.harness.autotune_cache import shorter_benchmarks

        shorter_benchmarks(*((0.1, 0.5) if variant.endswith("tiny") else (5.0, 20.0)))
    torch.cuda.init()
    if variant.endswith("worker_hooks"):
        return worker_hooks(row, profiled=variant.startswith("sandboxed"))
    began = time.perf_counter()
    if variant.startswith("after_profile"):
        with gpu_profiler():
            torch.cuda.synchronize()
    first_profile_s = time.perf_counter() - began
    file = ROOT / "examples" / "submissions" / "triton_reference" / f"{row['operator']}.py"
    spec = importlib.util.spec_from_file_location("probe_candidate", file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    model = module.Model(**json.loads(row["init_kwargs"]))
    if isinstance(model, torch.nn.Module):
        model = model.cuda()
    g = torch.Generator(device="cuda")
    g.manual_seed(1)
    inputs = load_reference(row["operator"]).make_inputs(**json.loads(row["input_kwargs"]), device="cuda",
                                                         generator=g)
    torch.cuda.synchronize()
    calls = []
    for _ in range(2):
        t0 = time.perf_counter()
        with torch.no_grad():
            if variant == "under_profile":
                with gpu_profiler():
                    model(**inputs)
                    torch.cuda.synchronize()
            else:
                model(**inputs)
                torch.cuda.synchronize()
        calls.append(round(time.perf_counter() - t0, 3))
    out = {"first_profile_s": round(first_profile_s, 3), "calls_s": calls}
    if variant.startswith("after_profile"):  # what the next profile costs once CUPTI was (or was not) torn down
        t0 = time.perf_counter()
        with gpu_profiler():
            model(**inputs)
            torch.cuda.synchronize()
        out["next_profiled_call_s"] = round(time.perf_counter() - t0, 3)
    return out


def worker_hooks(row: dict, profiled: bool) -> dict:
    import cProfile
    import io
    import pstats

    from kernels_eval.harness.worker import Worker
    from kernels_eval.harness.worker_commands import Init, Warm

    file = ROOT / "examples" / "submissions" / "triton_reference" / f"{row['operator']}.py"
    worker = Worker()
    with tempfile.TemporaryDirectory() as exchange:
        t0 = time.perf_counter()
        worker.warm(Warm(device="cuda"))
        warm_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        worker.init(Init(device="cuda", exchange=exchange, outputs=[], operator=row["operator"], file=str(file),
                         init_kwargs=json.loads(row["init_kwargs"]), autotune_bench_ms=[5.0, 20.0]))
        init_s = time.perf_counter() - t0
        prof = cProfile.Profile() if profiled else None
        if prof:
            prof.enable()
        calls = [round(worker._untimed_call(json.loads(row["input_kwargs"])), 3)]
        if prof:
            prof.disable()
        calls.append(round(worker._untimed_call(json.loads(row["input_kwargs"])), 3))
    out = {"warm_s": round(warm_s, 3), "init_s": round(init_s, 3), "calls_s": calls}
    if prof:
        text = io.StringIO()
        stats = pstats.Stats(prof, stream=text)
        stats.sort_stats("cumulative").print_stats(45)
        stats.sort_stats("tottime").print_stats(30)
        out["profile"] = text.getvalue()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--release", default="out/atrex-release")
    ap.add_argument("--problem", default="")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--variants", default=",".join(v for v in VARIANTS if v != "after_profile_teardown"),
                    help="comma-separated, in this order (default: all but after_profile_teardown, which hangs)")
    ap.add_argument("--child", default="")
    ap.add_argument("--row", default="")
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child, json.loads(args.row))))
        return
    if not args.problem:
        ap.error("--problem is required")
    sys.path.insert(0, str(ROOT))
    from kernels_eval.harness.release_view import read_release_view

    rows = {p["problem_id"]: p for p in read_release_view(args.release).problems}
    row = {k: rows[args.problem][k] for k in ("problem_id", "operator", "init_kwargs", "input_kwargs")}
    results = {"problem": row["problem_id"], "operator": row["operator"], "variants": {}}
    with tempfile.TemporaryDirectory() as cache, tempfile.TemporaryDirectory() as scratch:
        for variant in args.variants.split(","):
            extra = VARIANTS[variant]
            env = {**os.environ, "TRITON_CACHE_DIR": cache, "TRITON_CACHE_AUTOTUNING": "0",
                   "PYTHONPATH": str(ROOT), **extra}
            argv = [sys.executable, __file__, "--child", variant, "--row", json.dumps(row)]
            if variant.startswith("sandboxed"):
                from kernels_eval.harness import sandbox

                file = ROOT / "examples" / "submissions" / "triton_reference" / f"{row['operator']}.py"
                argv, env = sandbox.bwrap_command(sandbox.find_bwrap(), argv, device="cuda", scratch=Path(scratch),
                                                  files=[Path(__file__), file], file_cache=Path(cache),
                                                  environ=env, keep_autotuning=False)
            t0 = time.perf_counter()
            done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
            wall = round(time.perf_counter() - t0, 2)
            got = (json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0
                   else {"error": done.stderr.strip().splitlines()[-3:]})
            results["variants"][variant] = {**got, "process_s": wall}
            shown = {k: v for k, v in got.items() if k != "profile"}
            print(f"{row['operator']} {variant:<24} {json.dumps(shown)} process {wall} s", flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
