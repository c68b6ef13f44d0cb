"""Candidate Triton implementations of one catalogue operator, side by side on the same GPU in one run.

Before a faster kernel form replaces examples/submissions/triton_reference/<op>.py, time it against the
committed file on real catalogue problems, each output checked against the operator's torch reference, and
choose by measured ratios.

Usage (on the GPU machine, from the repo root; stock python3 with torch, triton, pyarrow, pyyaml):
    python3 benchmarks/kernel_variants.py --op unified_attention \
        --candidate committed=examples/submissions/triton_reference/unified_attention.py \
        --candidate tilemap=/tmp/unified_attention_tilemap.py --pick 5 --out /tmp/ua_variants.json
    python3 benchmarks/kernel_variants.py --op rms_norm --problems p247cd54078071d84,ped8bd384bcea81c9
    python3 benchmarks/kernel_variants.py --op unified_attention --pick 5 --dry-run   # the problems only; no GPU

Problems come from the release manifest (--manifest; out/ is git-ignored, so carry out/atrex-release/public to
the GPU machine): --problems names them in the order given, --pick N takes N evenly spaced ranks of the
operator's problems sorted by the work model's FLOPs (by bytes where every problem has 0 FLOPs), the smallest
and the largest included; with neither, all of the operator's problems, smallest first. Without --candidate
the committed file runs alone.

Per candidate one child process (an illegal memory access poisons the CUDA context, so a crash loses only that
candidate's remaining problems) imports the file and, per problem: draws the inputs with the reference's
make_inputs (seed 0), computes the reference output, runs the candidate on a copy of the inputs and judges it
with the evaluator's own compare (kernels_eval.harness.compare: the operator's tolerance, order-free outputs,
near-ties, inputs written outside the in-place contract). That call is untimed (autotuning happens there). A
correct candidate is then timed with the evaluator's loop (kernels_vs_libraries.timed_median, i.e.
kernels_eval.harness.timing.time_calls: CUDA events, L2 flushed and a launch shield queued before each call,
settling), median of at least --reps (>= 20) calls; fraction = t_roofline / t (catalogue.roofline on
--hardware). A wrong candidate is not timed. With --device cpu the child runs under Triton's interpreter and
times wall clock (tests only: nothing about the GPU can be read from it).

Printed last: one row per problem (roofline µs; per candidate µs and fraction, or FAIL / ERR / CRASH; the
fastest correct candidate and its speedup over the first), then per candidate: problems correct, the median
fraction over the problems with failures as 0 (the score's per-operator statistic) and the geometric-mean
speedup over the first candidate (t_first / t) on the problems both got right. --out writes all of it as JSON.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
for _path in (REPO, REPO / "benchmarks"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from kernels_vs_libraries import MANIFEST, SUBMISSION, timed_median  # noqa: E402

MARK = "KV_RESULT "
LIST_ITEMS = 4  # lists longer than this are summarised in shape labels
CELL = 16  # width of a candidate's column in the table


# ---- problems (no torch, no GPU) ---------------------------------------------------------------------------

def operator_problems(op: str, manifest: Path = MANIFEST) -> list[dict]:
    """[{"problem_id", "init", "inputs"}] of `op` in the release manifest, in manifest order."""
    import pyarrow.parquet as pq

    table = pq.read_table(manifest, columns=["problem_id", "operator", "init_kwargs", "input_kwargs"])
    return [{"problem_id": r["problem_id"], "init": json.loads(r["init_kwargs"] or "{}"),
             "inputs": json.loads(r["input_kwargs"])} for r in table.to_pylist() if r["operator"] == op]


def by_size(op: str, problems: list[dict]) -> list[dict]:
    """Problems smallest first by the work model's FLOPs, then bytes (which alone order them where every
    problem has 0 FLOPs), then id."""
    from kernels_eval import registry

    def key(p: dict) -> tuple:
        w = registry.work(op, p["init"], p["inputs"])
        return w["flops"], w["bytes_read"] + w["bytes_written"], p["problem_id"]

    return sorted(problems, key=key)


def spread(ranked: list, n: int) -> list:
    """`n` evenly spaced items of `ranked`, the first and the last included (the last alone for n = 1)."""
    if n >= len(ranked):
        return list(ranked)
    if n <= 1:
        return ranked[-1:]
    last = len(ranked) - 1
    return [ranked[(2 * i * last + n - 1) // (2 * (n - 1))] for i in range(n)]  # i * last / (n - 1), rounded


def choose(op: str, problems: list[dict], ids: list[str] | None = None, pick: int | None = None) -> list[dict]:
    """The problems to run: `ids` in the order given, else `pick` spread by size, else all by size."""
    if ids:
        known = {p["problem_id"]: p for p in problems}
        unknown = [i for i in ids if i not in known]
        if unknown:
            raise ValueError(f"{op} has no problems {unknown} in the manifest (it has {len(problems)}: "
                             f"{', '.join(sorted(known)[:6])}{', ...' if len(known) > 6 else ''})")
        return [known[i] for i in ids]
    ranked = by_size(op, problems)
    return spread(ranked, pick) if pick else ranked


def shape_label(inputs: dict) -> str:
    """A short label of input kwargs: long lists become "N x value" or "N values, sum S"."""
    def value(v) -> str:
        if isinstance(v, list) and len(v) > LIST_ITEMS:
            if all(x == v[0] for x in v):
                return f"{len(v)} x {v[0]}"
            if all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v):
                return f"{len(v)} values, sum {sum(v)}"
            return f"{len(v)} values"
        return json.dumps(v, separators=(",", ":")) if isinstance(v, (list, dict)) else str(v)

    return " ".join(f"{k}={value(v)}" for k, v in inputs.items())


def plan(op: str, problems: list[dict], hardware: str) -> list[dict]:
    """The chosen problems with their label, FLOPs, bytes and roofline time on `hardware`."""
    from catalogue.roofline import problem_roofline

    out = []
    for p in problems:
        roof = problem_roofline(op, p["init"], p["inputs"], hardware)
        out.append({**p, "shape": shape_label(p["inputs"]), "flops": roof["flops"], "bytes": roof["bytes"],
                    "t_roofline_s": roof["t_roofline_s"]})
    return out


# ---- the child: one candidate, every problem ----------------------------------------------------------------

def _load_candidate(name: str, path: str):
    spec = importlib.util.spec_from_file_location("kernel_variant_" + re.sub(r"\W", "_", name), path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def wall_median(fn, reps: int) -> float:
    """Median wall seconds per call of fn() over `reps` calls (the CPU interpreter has no CUDA events)."""
    times = []
    for _ in range(max(1, reps)):
        began = time.perf_counter()
        fn()
        times.append(time.perf_counter() - began)
    return statistics.median(times)


def _run_problem(op: str, module, reference, problem: dict, args) -> dict:
    """One problem's row: the candidate judged against the reference as the evaluator judges it, then timed."""
    import torch

    from kernels_eval import registry
    from kernels_eval.harness.compare import compare_outputs, named_outputs, unchanged_inputs

    spec = registry.spec(op)
    res: dict = {}
    g = torch.Generator(device=args.device).manual_seed(0)
    given = reference.make_inputs(**problem["inputs"], device=args.device, generator=g)

    def copy(inputs: dict) -> dict:
        return {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in inputs.items()}

    ref_model = reference.Model(**problem["init"]).to(args.device)
    model = module.Model(**problem["init"])
    if isinstance(model, torch.nn.Module):
        model = model.to(args.device)
    with torch.no_grad():
        # references never write their inputs (operators/README.md): `given` stays pristine
        expected = named_outputs(ref_model(**given), spec.outputs)
        tie_scores = getattr(reference, "tie_scores", None)
        ties = tie_scores(ref_model, given) if tie_scores is not None else None
        work = copy(given)
        got = named_outputs(model(**work), spec.outputs)  # untimed: autotuning happens here
        failures, res["max_err"] = compare_outputs(got, expected, spec.tolerance, spec.order_free_outputs, ties)
        failures += unchanged_inputs(work, given, set(spec.inplace.values()))
        del got, expected, ties, given
        if failures:
            res.update(status="fail", error="; ".join(failures[:3])[:400])
            return res
        res["correct"] = True
        if args.device == "cuda":
            t = timed_median(lambda: model(**work), args.reps, args.warmup)
        else:
            t = wall_median(lambda: model(**work), args.reps)
    res.update(status="ok", t_us=t * 1e6, fraction=problem["t_roofline_s"] / t)
    return res


def _child(args) -> None:
    import torch
    import triton

    if args.device == "cpu":  # TRITON_INTERPRET=1 was set by the parent, before triton was first imported
        from kernels_eval.harness.interpreter import patch_interpreter

        patch_interpreter()
    from kernels_eval import registry

    device = torch.cuda.get_device_name(0) if args.device == "cuda" else "cpu"
    print(MARK + json.dumps({"versions": {"torch": torch.__version__, "triton": triton.__version__,
                                          "device": device}}), flush=True)
    problems = json.loads(Path(args.child_problems).read_text())
    reference = registry.load_reference(args.op)
    try:
        module, load_error = _load_candidate(args.child, args.child_file), ""
    except Exception as exc:  # noqa: BLE001 - every problem reports it
        module, load_error = None, f"importing {args.child_file}: {type(exc).__name__}: {exc}"
    for p in problems:
        res = {"candidate": args.child, "problem_id": p["problem_id"], "shape": p["shape"],
               "roof_us": p["t_roofline_s"] * 1e6, "status": "error", "correct": False, "max_err": None,
               "t_us": None, "fraction": None, "error": load_error}
        began = time.time()
        if module is not None:
            try:
                res.update(_run_problem(args.op, module, reference, p, args))
            except Exception as exc:  # noqa: BLE001 - recorded; the next problem may still run
                res["error"] = f"{type(exc).__name__}: {exc}".strip().splitlines()[0][:400]
        res["wall_s"] = round(time.time() - began, 2)
        print(MARK + json.dumps(res), flush=True)
        if args.device == "cuda":
            torch.cuda.empty_cache()


# ---- the parent ---------------------------------------------------------------------------------------------

def run_candidate(name: str, path: str, problems: list[dict], todo: Path, args) -> tuple[list[dict], dict]:
    """(rows, versions) of one candidate from its child (`todo`: `problems` as JSON); problems it never
    reported are marked "crash"."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--op", args.op, "--child", name, "--child-file", path,
           "--child-problems", str(todo), "--device", args.device, "--reps", str(args.reps),
           "--warmup", str(args.warmup)]
    env = {**os.environ, "TRITON_INTERPRET": "1"} if args.device == "cpu" else None
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout, cwd=REPO, env=env)
        stdout, stderr, rc = proc.stdout, proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as exc:
        stdout = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        stderr, rc = f"timed out after {args.timeout} s", None
    lines = [json.loads(ln[len(MARK):]) for ln in stdout.splitlines() if ln.startswith(MARK)]
    versions = next((x["versions"] for x in lines if "versions" in x), {})
    rows = [x for x in lines if "problem_id" in x]
    done = {r["problem_id"] for r in rows}
    tail = " | ".join(stderr.strip().splitlines()[-2:])
    for p in problems:
        if p["problem_id"] not in done:
            rows.append({"candidate": name, "problem_id": p["problem_id"], "shape": p["shape"],
                         "roof_us": p["t_roofline_s"] * 1e6, "status": "crash", "correct": False, "max_err": None,
                         "t_us": None, "fraction": None, "error": f"child rc {rc}: {tail}"[:400]})
    order = {p["problem_id"]: i for i, p in enumerate(problems)}
    return sorted(rows, key=lambda r: order[r["problem_id"]]), versions


def _scored(row: dict | None) -> bool:
    return bool(row and row.get("correct") and row.get("t_us"))


def summarise(rows: list[dict], candidates: list[str], problem_ids: list[str]) -> dict:
    """Per candidate: problems correct, the median over problems of the roofline fraction (failures 0) and the
    geometric-mean speedup t_first / t over the problems where it and the first candidate are both correct."""
    by = {(r["candidate"], r["problem_id"]): r for r in rows}
    out = {}
    for name in candidates:
        mine = [by.get((name, pid)) for pid in problem_ids]
        base = [by.get((candidates[0], pid)) for pid in problem_ids]
        fractions = [r["fraction"] if _scored(r) else 0.0 for r in mine]
        speedups = [b["t_us"] / r["t_us"] for r, b in zip(mine, base) if _scored(r) and _scored(b)]
        out[name] = {"problems": len(problem_ids), "correct": sum(bool(r and r.get("correct")) for r in mine),
                     "median_fraction": statistics.median(fractions) if fractions else None,
                     "geomean_speedup": statistics.geometric_mean(speedups) if speedups else None,
                     "speedups_over": len(speedups)}
    return out


def best(rows: list[dict], candidates: list[str]) -> str:
    """The fastest correct candidate of one problem's rows and its speedup over the first ("-" if none)."""
    scored = [r for r in rows if _scored(r)]
    if not scored:
        return "-"
    top = min(scored, key=lambda r: r["t_us"])
    first = next((r for r in rows if r["candidate"] == candidates[0]), None)
    return f"{top['candidate']} x{first['t_us'] / top['t_us']:.2f}" if _scored(first) else top["candidate"]


def _cell(row: dict | None) -> str:
    if _scored(row):
        return f"{row['t_us']:9.1f} {row['fraction']:6.3f}"
    return {"fail": "FAIL", "crash": "CRASH"}.get((row or {}).get("status"), "ERR")


def table(problems: list[dict], rows: list[dict], candidates: list[str], summary: dict) -> list[str]:
    """The printed table: a row per problem, then a line per candidate."""
    by = {(r["candidate"], r["problem_id"]): r for r in rows}
    head = f"best (speedup vs {candidates[0]})"
    width = max(24, len(head))
    lines = [f"{'problem':<20} {'roof us':>9} " + " ".join(f"{n[:CELL]:>{CELL}}" for n in candidates)
             + f"  {head:<{width}} shape",
             f"{'':<20} {'':>9} " + " ".join(f"{'us  fraction':>{CELL}}" for _ in candidates)]
    for p in problems:
        mine = [by.get((n, p["problem_id"])) for n in candidates]
        lines.append(f"{p['problem_id']:<20} {p['t_roofline_s'] * 1e6:9.4g} "
                     + " ".join(f"{_cell(r):>{CELL}}" for r in mine)
                     + f"  {best([r for r in mine if r], candidates):<{width}} {p['shape']}")
    for p in problems:  # the failures, one line each, under the table
        for n in candidates:
            r = by.get((n, p["problem_id"]))
            if r and not _scored(r) and r.get("error"):
                lines.append(f"  {n} {p['problem_id']}: {r['status'].upper()}: {r['error']}")
    for n, s in summary.items():
        gm = f"{s['geomean_speedup']:.3f} over {s['speedups_over']}" if s["geomean_speedup"] else "-"
        mf = f"{s['median_fraction']:.3f}" if s["median_fraction"] is not None else "-"
        lines.append(f"{n:<20} correct {s['correct']}/{s['problems']}  median fraction {mf} (failures 0)  "
                     f"geomean speedup vs {candidates[0]}: {gm}")
    return lines


def _candidates(parser, op: str, specs: list[str]) -> dict[str, str]:
    """name -> absolute path of every --candidate name=path (the committed file when none is given)."""
    out = {}
    for spec in specs or [f"committed={SUBMISSION / f'{op}.py'}"]:
        name, sep, path = spec.partition("=")
        if not sep or not name or not path:
            parser.error(f"--candidate {spec!r}: expected name=path")
        if name in out:
            parser.error(f"--candidate name {name!r} given twice")
        if not Path(path).is_file():
            parser.error(f"--candidate {name}: no file {path}")
        out[name] = str(Path(path).resolve())
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--op", required=True, help="catalogue operator")
    parser.add_argument("--candidate", action="append", default=[], metavar="NAME=PATH",
                        help="a Triton file defining Model (repeatable; default: the committed file)")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--problems", default="", help="comma list of problem ids, run in this order")
    which.add_argument("--pick", type=int, default=0, help="N problems spread over the operator's, by FLOPs")
    parser.add_argument("--manifest", default=str(MANIFEST))
    parser.add_argument("--hardware", default="H200", help="hardware.yaml name for the roofline")
    parser.add_argument("--reps", type=int, default=20, help="timed calls per problem (at least 20 on a GPU)")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per candidate child")
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"),
                        help="cpu: Triton's interpreter, wall-clock times (tests only)")
    parser.add_argument("--out", default="", help="JSON of every row, the summary and the versions")
    parser.add_argument("--dry-run", action="store_true", help="print the chosen problems and exit; no GPU")
    parser.add_argument("--child", default="", help=argparse.SUPPRESS)
    parser.add_argument("--child-file", default="", help=argparse.SUPPRESS)
    parser.add_argument("--child-problems", default="", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        _child(args)
        return 0

    from kernels_eval import registry

    if not registry.is_benchmarkable(args.op):
        parser.error(f"unknown operator {args.op!r}; known: {', '.join(registry.operator_names())}")
    if not Path(args.manifest).is_file():
        parser.error(f"no manifest at {args.manifest}: out/ is git-ignored, so carry out/atrex-release/public to "
                     "the GPU machine or pass --manifest")
    if args.pick < 0:
        parser.error("--pick must be positive")
    everything = operator_problems(args.op, Path(args.manifest))
    if not everything:
        parser.error(f"the manifest has no {args.op} problems")
    try:
        chosen = choose(args.op, everything, [i for i in args.problems.split(",") if i], args.pick)
    except ValueError as exc:
        parser.error(str(exc))
    problems = plan(args.op, chosen, args.hardware)
    if args.dry_run:
        print(f"{args.op}: {len(problems)} of {len(everything)} problems; roofline on {args.hardware}")
        print(f"{'problem':<20} {'GFLOP':>12} {'roof us':>10}  shape")
        for p in problems:
            print(f"{p['problem_id']:<20} {p['flops'] / 1e9:12.4g} {p['t_roofline_s'] * 1e6:10.4g}  {p['shape']}")
        return 0

    candidates = _candidates(parser, args.op, args.candidate)
    t0 = time.time()
    rows, versions = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        todo = Path(tmp) / "problems.json"
        todo.write_text(json.dumps(problems))
        for name, path in candidates.items():
            print(f"-- {name}: {path}, {len(problems)} problems", flush=True)
            began = time.time()
            got, seen = run_candidate(name, path, problems, todo, args)
            versions = versions or seen
            for r in got:
                print(f"   {r['problem_id']:<20} {_cell(r):>{CELL}}  {r.get('error') or ''}"[:200], flush=True)
            print(f"   ({name}: {time.time() - began:.0f} s)", flush=True)
            rows += got
    names = list(candidates)
    summary = summarise(rows, names, [p["problem_id"] for p in problems])
    if args.out:
        command = shlex.join(["python3", "benchmarks/kernel_variants.py",
                              *(sys.argv[1:] if argv is None else argv)])
        out = {"op": args.op, "hardware": args.hardware, "device_kind": args.device, **versions,
               "command": command, "candidates": candidates, "problems": problems, "rows": rows,
               "summary": summary, "wall_s": round(time.time() - t0, 1)}
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(out, indent=1))

    reps = max(20, args.reps) if args.device == "cuda" else max(1, args.reps)  # as timed_median / wall_median
    print(f"\n{args.op} on {versions.get('device')}  torch {versions.get('torch')}  triton {versions.get('triton')}"
          f"  (fraction = roofline on {args.hardware} / measured; median of >= {reps} calls)")
    print("\n".join(table(problems, rows, names, summary)))
    print(f"{'wrote ' + args.out + ' ' if args.out else ''}in {time.time() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
