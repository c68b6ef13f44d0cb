"""`hotshape eval` and `hotshape score`: evaluate a submission against a release; score stored results."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

PROBLEM_KEYS = ("problem_id", "operator", "stage", "compiled", "correct", "native", "fallbacks", "error",
                "t_measured_s", "roofline_fraction")


def _csv(value: str | None) -> list[str] | None:
    return [v.strip() for v in value.split(",") if v.strip()] if value else None


def eval_summary(rows: list[dict]) -> dict:
    """Counts and rates over a run's rows (unweighted; `hotshape score` gives the weighted ones)."""
    n = len(rows)
    stages: dict[str, int] = {}
    for r in rows:
        stages[r["stage"]] = stages.get(r["stage"], 0) + 1
    rate = (lambda k: sum(bool(r[k]) for r in rows) / n) if n else (lambda k: None)
    return {"problems": n, "operators": len({r["operator"] for r in rows}),
            "hardware": rows[0]["hardware"] if rows else None, "run": rows[0]["run"] if rows else None,
            "compile_rate": rate("compiled"), "correct_rate": rate("correct"), "native_rate": rate("native"),
            "performance_measured": sum(bool(r["performance_measured"]) for r in rows), "stages": stages}


def run_eval(args: argparse.Namespace) -> int:
    """Evaluate SUBMISSION on RELEASE's problems; append the rows to --out."""
    from kernels_eval.harness.release_view import read_release_view
    from kernels_eval.harness.runner import EvalConfig, detect_hardware, evaluate
    from kernels_eval.results_schema import next_run, write_results

    release = read_release_view(args.release)  # pyarrow only: GPU machines have no polars
    device = args.device or _default_device()
    hardware = detect_hardware(device, release.hardware_names)
    config = EvalConfig(device=device, sets=args.sets, call_timeout_s=args.timeout_s,
                        memory_gb=args.memory_gb, hardware=hardware,
                        run=next_run(args.out, Path(args.submission).name, hardware),
                        keep_logs=Path(args.logs) if args.logs else None)
    if args.timing_budget_s is not None:
        config.timing_budget_s = args.timing_budget_s

    def progress(problem, verdict):
        if not args.json:
            print(f"{problem.problem_id} {problem.operator:<28} {verdict['stage']:<11} "
                  f"{(verdict.get('error') or '')[:100]}", file=sys.stderr)

    rows = evaluate(args.submission, release, config=config, ops=_csv(args.ops), problems=_csv(args.problems),
                    progress=progress)
    write_results(rows, args.out)
    summary = eval_summary(rows)
    if args.json:
        print(json.dumps({"problems": [{k: r[k] for k in PROBLEM_KEYS} for r in rows], "summary": summary},
                         default=str))
    else:
        by_op: dict[str, dict] = {}
        for r in rows:
            by_op.setdefault(r["operator"], r)
        for op, r in sorted(by_op.items()):
            print(f"{op:<30} {r['stage']:<11} compiled={r['compiled']!s:<5} correct={r['correct']!s:<5} "
                  f"native={r['native']!s:<5} {(r['error'] or '')[:120]}")
        print(f"{summary['problems']} problems: compile {summary['compile_rate']:.0%}, correct "
              f"{summary['correct_rate']:.0%}, native {summary['native_rate']:.0%}; results in {args.out}"
              if rows else "no problems selected")
    return 0


def _default_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def run_score(args: argparse.Namespace) -> int:
    """Score RESULTS under a weights version of RELEASE."""
    import polars as pl

    from kernels_eval.results_schema import read_results
    from kernels_eval.scoring import score
    from release.bundle import read_release

    release = read_release(args.release)
    results = pl.from_arrow(read_results(args.results))
    if args.submission:
        results = results.filter(pl.col("submission") == args.submission)
    scores = score(results, release, args.weights)
    if args.json:
        print(json.dumps({"scores": scores}))
        return 0
    for s in scores:
        fmt = lambda x: "n/a" if x is None else f"{x:.4f}"  # noqa: E731
        print(f"{s['submission']} on {s['hardware']} (weights {s['weights_version']}, "
              f"{s['evaluated']}/{s['problems']} problems evaluated"
              f"{'' if s['performance_measured'] else ', performance not measured'})")
        print(f"  S_agg {fmt(s['S_agg'])}   per-problem weighted {fmt(s['S_problem_weighted'])}   "
              + "  ".join(f"S_agg[{p}] {fmt(v)}" for p, v in s["S_agg_phase"].items()))
        r = s["rates"]
        print("  rates (unweighted / weighted): " + ", ".join(
            f"{k} {fmt(v['unweighted'])} / {fmt(v['weighted'])}" for k, v in r.items()))
        for kind, b in s["bound"].items():
            print(f"  {kind}-bound: {b['problems']} problems, weight {fmt(b['weight'])}, "
                  f"weighted S {fmt(b['s_weighted'])}")
    return 0


def register(subparsers) -> None:
    """Add `eval` and `score` to the hotshape command."""
    e = subparsers.add_parser("eval", help="evaluate a submission directory against a release")
    e.add_argument("submission", help="directory of <operator>.py files, each defining class Model")
    e.add_argument("--release", required=True)
    e.add_argument("--device", choices=("cuda", "cpu"), default=None,
                   help="cuda: every problem on its shape, timed; cpu: Triton interpreter on smoke shapes")
    e.add_argument("--ops", help="comma-separated operators (default: all in the release)")
    e.add_argument("--problems", help="comma-separated problem ids")
    e.add_argument("--out", required=True, help="results Parquet file (rows are appended as a new run)")
    e.add_argument("--sets", type=int, default=3, help="fresh random input sets per problem")
    e.add_argument("--timeout-s", type=float, default=120.0, help="deadline of one worker call")
    e.add_argument("--memory-gb", type=float, default=32.0, help="host memory limit of a worker")
    e.add_argument("--timing-budget-s", type=float, default=None, help="timed seconds per problem")
    e.add_argument("--logs", help="keep each worker's output in this directory")
    e.add_argument("--json", action="store_true")
    e.set_defaults(func=run_eval)

    s = subparsers.add_parser("score", help="score evaluation results under a release's weights")
    s.add_argument("results")
    s.add_argument("--release", required=True)
    s.add_argument("--weights", default=None, help="weights version (vN; default: the latest)")
    s.add_argument("--submission", default=None, help="only this submission's rows")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=run_score)
