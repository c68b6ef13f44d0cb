"""Triton attention against the library's (cuDNN SDPA first) on the largest problems of unified_attention and
attention_forward, side by side in one run: the done-when of issue 45 (ours >= 1.0x the library).

Usage (on the GPU machine, from the repo root; stock python3 with torch, triton, pyarrow; out/atrex-release carried):
    python3 benchmarks/attention_vs_library.py --release out/atrex-release --out $OUT/attention_vs_library.json
    python3 benchmarks/attention_vs_library.py --release out/atrex-release --top 3 \\
        --candidate reference=examples/submissions/triton_reference \\
        --candidate hopper=examples/submissions/triton_hopper_attention --out /tmp/avl.json

Each candidate is a submission folder with <op>.py (default: the Triton reference). The library side is the
baseline's own library path (kernels_eval/library/attention.py): SDPA with the first backend that runs (cuDNN, then
FlashAttention, memory-efficient, math; the row names which), unified_attention's paged K/V gathered contiguous
beforehand, untimed. Both sides are timed alike, in one process per operator (an illegal address loses only that
operator): kernels_eval/library/timing.py, the trusted replay's rule (CUPTI device-busy time between the evaluator's
markers, L2 flushed, input sets rotated), after untimed first calls (ours autotunes there). ratio = library time /
candidate time (>= 1.0: the candidate is at least as fast). A candidate's output is compared with the library's
(max |diff|; the baseline checks the library against the reference). Writes --out (JSON) and prints a table last.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

OPS = ("unified_attention", "attention_forward")
MARK = "AVL_RESULT "
REFERENCE = REPO / "examples" / "submissions" / "triton_reference"


def largest(release: Path, op: str, top: int) -> list[dict]:
    """The `top` problems of `op` with the most FLOPs (the work model's count)."""
    import pyarrow.parquet as pq

    from catalogue.operators import load_work

    rows = [r for r in pq.read_table(release / "public" / "manifest.parquet").to_pylist() if r["operator"] == op]
    work = load_work(op)
    for r in rows:
        r["init"], r["inputs"] = json.loads(r["init_kwargs"] or "{}"), json.loads(r["input_kwargs"])
        r["flops"] = int(work.flops(**{**r["init"], **r["inputs"]}))
    return sorted(rows, key=lambda r: -r["flops"])[:top]


def describe(op: str, inputs: dict) -> str:
    lens = inputs["seq_lens"]
    seqs = str(lens[0]) if len(lens) == 1 else (f"{len(lens)}x{lens[0]}" if len(set(lens)) == 1
                                                 else f"{len(lens)} seqs sum {sum(lens)}")
    if op == "attention_forward":
        return f"L{seqs} H{inputs['num_heads']} D{inputs['head_dim']}"
    return f"L{seqs} Hq{inputs['num_query_heads']}/{inputs['num_kv_heads']} D{inputs['head_size']}"


def _model(folder: Path, op: str, init: dict):
    spec = importlib.util.spec_from_file_location(f"avl_{folder.name}_{op}", folder / f"{op}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.Model(**init)


def child(args) -> int:
    """One operator's problems: the library and each candidate, timed alike."""
    import torch

    from kernels_eval import registry
    from kernels_eval.library.paths import library_options
    from kernels_eval.library.timing import time_library

    candidates = [tuple(c.split("=", 1)) for c in args.candidate]
    reference = registry.load_reference(args.child)
    for problem in json.loads(Path(args.child_problems).read_text()):
        res = {"op": args.child, "problem_id": problem["problem_id"], "shape": describe(args.child, problem["inputs"]),
               "flops": problem["flops"], "candidates": {}}
        began = time.time()
        try:
            sets = []
            for seed in range(2):
                g = torch.Generator(device="cuda").manual_seed(seed)
                sets.append(reference.make_inputs(**problem["inputs"], device="cuda", generator=g))
            ref_model = reference.Model(**problem["init"]).cuda()
            chosen = None
            runs = []
            for inputs in sets:  # the first library option that runs, the same one on each input set
                for option in library_options(args.child, ref_model, inputs, "cuda"):
                    if chosen is not None and option.path != chosen:
                        continue
                    try:
                        lib_out = option.outputs(option.run())
                        torch.cuda.synchronize()
                    except Exception:  # noqa: BLE001 - a backend that refuses the shape: the next one
                        continue
                    chosen = option.path
                    runs.append(option.run)
                    break
            res["library"] = chosen
            lib_out = lib_out if isinstance(lib_out, torch.Tensor) else next(iter(lib_out.values()))
            times, _ = time_library(runs, budget_s=args.budget_s)
            res["library_s"] = statistics.median(times)
            for name, folder in candidates:
                if not (Path(folder) / f"{args.child}.py").is_file():
                    continue  # a variant folder may hold one operator only
                model = _model(Path(folder), args.child, problem["init"])
                with torch.no_grad():
                    outs = [model(**inputs) for inputs in sets]  # first calls: compile and autotune, untimed
                    torch.cuda.synchronize()
                    diff = float((outs[-1].float() - lib_out.float()).abs().max())
                    times, _ = time_library([lambda inputs=inputs: model(**inputs) for inputs in sets],
                                            budget_s=args.budget_s)
                t = statistics.median(times)
                res["candidates"][name] = {"s": t, "ratio": res["library_s"] / t, "max_abs_diff_vs_library": diff,
                                           "tflops": problem["flops"] / t / 1e12}
            res["status"] = "ok"
        except Exception as exc:  # noqa: BLE001 - recorded; the next problem may still run
            res["status"], res["error"] = "error", f"{type(exc).__name__}: {exc}".splitlines()[0][:400]
        res["wall_s"] = round(time.time() - began, 1)
        print(MARK + json.dumps(res), flush=True)
        torch.cuda.empty_cache()
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--release", default=str(REPO / "out" / "atrex-release"))
    parser.add_argument("--out", default="attention_vs_library.json")
    parser.add_argument("--ops", default=",".join(OPS))
    parser.add_argument("--top", type=int, default=6, help="largest problems (by FLOPs) per operator")
    parser.add_argument("--candidate", action="append", default=[], metavar="NAME=FOLDER",
                        help=f"a submission folder with <op>.py (default: reference={REFERENCE.relative_to(REPO)})")
    parser.add_argument("--budget-s", type=float, default=0.3, help="timed seconds per side and problem")
    parser.add_argument("--timeout", type=float, default=280.0, help="seconds per operator's child process")
    parser.add_argument("--child", default="", help=argparse.SUPPRESS)
    parser.add_argument("--child-problems", default="", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.candidate = args.candidate or [f"reference={REFERENCE}"]
    if args.child:
        return child(args)
    import tempfile

    import torch

    began = time.time()
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for op in [o for o in args.ops.split(",") if o]:
            problems = largest(Path(args.release), op, args.top)
            path = Path(tmp) / f"{op}.json"
            path.write_text(json.dumps([{k: p[k] for k in ("problem_id", "init", "inputs", "flops")} for p in problems]))
            cmd = [sys.executable, str(Path(__file__).resolve()), "--child", op, "--child-problems", str(path),
                   "--budget-s", str(args.budget_s), *sum((["--candidate", c] for c in args.candidate), [])]
            try:
                done = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout, cwd=REPO)
                stdout, tail = done.stdout, " | ".join(done.stderr.strip().splitlines()[-2:])
            except subprocess.TimeoutExpired as exc:
                stdout = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
                tail = f"timed out after {args.timeout} s"
            got = [json.loads(ln[len(MARK):]) for ln in stdout.splitlines() if ln.startswith(MARK)]
            seen = {r["problem_id"] for r in got}
            got += [{"op": op, "problem_id": p["problem_id"], "shape": describe(op, p["inputs"]), "status": "crash",
                     "error": tail[:400]} for p in problems if p["problem_id"] not in seen]
            results += got
    names = [c.split("=", 1)[0] for c in args.candidate]
    summary = {}
    for op in {r["op"] for r in results}:
        for name in names:
            ratios = [r["candidates"][name]["ratio"] for r in results
                      if r["op"] == op and r["status"] == "ok" and name in r["candidates"]]
            if not ratios and not any(name in r.get("candidates", {}) for r in results if r["op"] == op):
                continue
            summary[f"{op}/{name}"] = {"ok": len(ratios), "min_ratio": min(ratios, default=None),
                                       "geomean_ratio": statistics.geometric_mean(ratios) if ratios else None,
                                       "all_at_least_library": bool(ratios) and min(ratios) >= 1.0}
    doc = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__,
           "cudnn": torch.backends.cudnn.version(), "command": " ".join([Path(sys.executable).name, *sys.argv]),
           "note": "ratio = library time / candidate time (>= 1.0: candidate at least as fast); device-busy CUPTI "
                   "time, L2 flushed; unified_attention's library reads K/V gathered contiguous (untimed)",
           "summary": summary, "results": results, "wall_s": round(time.time() - began, 1)}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(doc, indent=1))
    print(f"{doc['device']}  torch {doc['torch']}  cuDNN {doc['cudnn']}")
    print(f"{'op':<18} {'shape':<30} {'library µs':>11} " + " ".join(f"{n + ' µs':>12} {'ratio':>6}" for n in names)
          + "  library path")
    for r in results:
        if r["status"] != "ok":
            print(f"{r['op']:<18} {r['shape']:<30} {r['status'].upper()}: {r.get('error', '')}")
            continue
        cells = " ".join(f"{r['candidates'][n]['s'] * 1e6:>12.1f} {r['candidates'][n]['ratio']:>6.2f}"
                         if n in r["candidates"] else f"{'-':>12} {'-':>6}" for n in names)
        print(f"{r['op']:<18} {r['shape']:<30} {r['library_s'] * 1e6:>11.1f} {cells}  {r['library']}")
    for key, s in sorted(summary.items()):
        gm = "-" if s["geomean_ratio"] is None else f"{s['geomean_ratio']:.2f}"
        mn = "-" if s["min_ratio"] is None else f"{s['min_ratio']:.2f}"
        print(f"{key}: {s['ok']} ok, ratio min {mn} geomean {gm}, >= 1.0x library on all: "
              f"{'yes' if s['all_at_least_library'] else 'no'}")
    print(f"wrote {args.out} in {doc['wall_s']:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
