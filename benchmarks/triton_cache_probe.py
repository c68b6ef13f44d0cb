"""Does a Triton compile cache written by one process serve the next, and where does a cold shape's first call
go? (issue 17: a cold full evaluation's timing phase spent most of its time in first calls, which looked like
compiling again what the checks had compiled; it was autotuning under the profiler, with every kernel cached:
benchmarks/results/kernel_span_H200/first_call/README.md.) GPU only; the machine's stock python3.

    python3 benchmarks/triton_cache_probe.py --release out/atrex-release --problems ID[,ID...] [--eval [--runs N]]
        [--no-raw]

For the first problem, fresh processes call the Triton reference's Model once, then again, on one cache
directory (the first with the lanes' cache manager, which keeps no autotuning; the second with Triton's own),
then twice more on a second directory with the evaluator's profiler active, as the evaluator's calls are: each
line says the first call's seconds and how many files it added to the cache. With --eval, the evaluator itself
judges the problems `--runs` times (2) in two lanes on one persistent cache (so the timing phase's workers
follow the checks' ones), each problem's first check and first timed call printed, and after the first run
every compiled kernel of the cache with its configuration and specialisation. `--no-raw` skips the fresh
processes.
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


def cache_files(root: Path) -> dict[str, int]:
    counts: dict[str, int] = {}
    for _, _, names in os.walk(root):
        for n in names:
            ext = n.rsplit(".", 1)[-1] if "." in n else "-"
            counts[ext] = counts.get(ext, 0) + 1
    return counts


def child(args: argparse.Namespace) -> None:
    """One fresh process: the reference submission's first and second call on the problem (JSON on stdout)."""
    began = time.perf_counter()
    import importlib.util

    import torch

    sys.path.insert(0, str(ROOT))
    from kernels_eval.registry import load_reference

    row = json.loads(args.row)
    init, inputs_kw = json.loads(row["init_kwargs"]), json.loads(row["input_kwargs"])
    file = ROOT / "examples" / "submissions" / "triton_reference" / f"{row['operator']}.py"
    spec = importlib.util.spec_from_file_location("probe_candidate", file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    reference = load_reference(row["operator"])
    model = module.Model(**init)
    if isinstance(model, torch.nn.Module):
        model = model.cuda()
    g = torch.Generator(device="cuda")
    g.manual_seed(1)
    inputs = reference.make_inputs(**inputs_kw, device="cuda", generator=g)
    torch.cuda.synchronize()
    ready = time.perf_counter() - began
    before = cache_files(Path(os.environ["TRITON_CACHE_DIR"]))
    calls = []
    for _ in range(2):
        t0 = time.perf_counter()
        if args.profile:
            from torch.profiler import ProfilerActivity, profile

            with torch.no_grad(), profile(activities=[ProfilerActivity.CUDA]):
                model(**inputs)
                torch.cuda.synchronize()
        else:
            with torch.no_grad():
                model(**inputs)
            torch.cuda.synchronize()
        calls.append(round(time.perf_counter() - t0, 3))
    after = cache_files(Path(os.environ["TRITON_CACHE_DIR"]))
    added = {k: after.get(k, 0) - before.get(k, 0) for k in after if after.get(k, 0) != before.get(k, 0)}
    print(json.dumps({"ready_s": round(ready, 2), "calls_s": calls, "added": added}))


def run_child(row: dict, cache: Path, env_extra: dict, profile: bool) -> dict:
    env = {**os.environ, "TRITON_CACHE_DIR": str(cache), "PYTHONPATH": str(ROOT), **env_extra}
    cmd = [sys.executable, __file__, "--child", "--row", json.dumps(row)] + (["--profile"] if profile else [])
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        return {"error": done.stderr.strip().splitlines()[-1:]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def print_variants(cache: Path) -> None:
    """Each compiled kernel's name, warps and stages, and the signature line of its TTIR (argument types,
    divisibility and constants): entries alike but for that line are one kernel specialised two ways."""
    seen: dict[tuple, list[str]] = {}
    for meta in sorted(cache.rglob("*.json")):
        if meta.name.startswith("__grp__") or meta.name.endswith(".autotune.json"):
            continue
        try:
            m = json.loads(meta.read_text())
            ttir = meta.with_suffix(".ttir").read_text()
        except (OSError, ValueError):
            continue
        sig = next((line.strip() for line in ttir.splitlines() if "tt.func" in line), "?")
        key = (m.get("name"), m.get("num_warps"), m.get("num_stages"))
        seen.setdefault(key, []).append(sig)
    for key, sigs in sorted(seen.items(), key=str):
        print(f"  variant {key}: {len(sigs)} compiled")
        if len(sigs) > 1:
            for sig in sorted(set(sigs)):
                print(f"    {sig[:1500]}")


def evaluator_runs(release, ids: list[str], cache: Path, runs: int = 2) -> None:
    sys.path.insert(0, str(ROOT))
    from kernels_eval.harness.runner import EvalConfig, evaluate

    sub = ROOT / "examples" / "submissions" / "triton_reference"
    for k in range(1, runs + 1):
        seen: list[tuple] = []
        t0 = time.monotonic()
        evaluate(sub, release, config=EvalConfig(memory_cgroup=False, device="cuda", triton_cache=cache, run=k), problems=ids, lanes=2,
                 progress=lambda p, v: seen.append((p, v)))
        print(f"evaluator run {k}: {time.monotonic() - t0:.1f} s, cache {cache_files(cache)}")
        if k == 1:
            print_variants(cache)
        for p, v in seen:
            s = getattr(v, "step_s", None) or (v.get("step_s") if isinstance(v, dict) else None) or {}
            stage = getattr(v, "stage", None) or (v.get("stage") if isinstance(v, dict) else "?")
            print(f"  {p.problem_id} {p.operator:<20} {stage:<12} check run {s.get('in_worker_run', 0):6.2f} s"
                  f"  first timed call {s.get('in_worker_time_first_call', 0):6.2f} s", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--release", default="out/atrex-release")
    ap.add_argument("--problems", default="")
    ap.add_argument("--eval", action="store_true")
    ap.add_argument("--runs", type=int, default=2, help="evaluator runs on one cache (--eval)")
    ap.add_argument("--no-raw", action="store_true", help="skip the fresh-process calls")
    ap.add_argument("--child", action="store_true")
    ap.add_argument("--row", default="")
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args()
    if args.child:
        child(args)
        return
    sys.path.insert(0, str(ROOT))
    from kernels_eval.harness.autotune_cache import MANAGER
    from kernels_eval.harness.release_view import read_release_view

    release = read_release_view(args.release)
    ids = [p for p in args.problems.split(",") if p]
    rows = {p["problem_id"]: p for p in release.problems}
    row = {k: rows[ids[0]][k] for k in ("problem_id", "operator", "init_kwargs", "input_kwargs")}
    with tempfile.TemporaryDirectory() as tmp:
        a, b = Path(tmp) / "a", Path(tmp) / "b"
        a.mkdir()
        b.mkdir()
        plan = [("A lanes manager", a, {"TRITON_CACHE_MANAGER": MANAGER, "TRITON_CACHE_AUTOTUNING": "0"}, False),
                ("A Triton's", a, {"TRITON_CACHE_AUTOTUNING": "1"}, False),
                ("B profiler", b, {}, True),
                ("B profiler", b, {}, True)]
        print(f"{row['problem_id']} {row['operator']}") if not args.no_raw else None
        for name, cache, extra, profile in [] if args.no_raw else plan:
            print(f"  {name:<16} {run_child(row, cache, extra, profile)}", flush=True)
        if args.eval:
            evaluator_runs(release, ids, Path(tmp) / "eval-cache", args.runs)


if __name__ == "__main__":
    main()
