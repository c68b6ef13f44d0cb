"""`hotshape baseline`: the library line of a release into a results file (docs/library-baseline.md)."""

from __future__ import annotations

import argparse
import json
import sys

# Imports inside functions: `hotshape` imports this module to build its parser (pipelines/cli.py), so the command
# loads only what it runs.


def run_baseline_command(args: argparse.Namespace) -> int:
    """Judge and time each problem of RELEASE through its library path; append the rows to --out as a run of
    submission `library`. Exit 2 for bad input."""
    from kernels_eval.harness.release_view import ReleaseViewError, read_release_view
    from kernels_eval.library.baseline import NO_PATH
    from kernels_eval.library.record import run_baseline
    from kernels_eval.selection import SelectionError, select_problems

    ops = [o.strip() for o in args.ops.split(",") if o.strip()] if args.ops else None
    problems = [p.strip() for p in args.problems.split(",") if p.strip()] if args.problems else None
    try:
        release = read_release_view(args.release)
        select_problems(release.problems, release.name, ops, problems)
    except (ReleaseViewError, SelectionError) as exc:
        print(f"hotshape baseline: {exc}", file=sys.stderr)
        return 2
    device = args.device
    if device is None:
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"

    def progress(row: dict) -> None:
        if args.progress:
            t = f"{row['t_measured_s'] * 1e6:.1f} µs" if row["t_measured_s"] else "untimed"
            print(f"{row['operator']} {row['problem_id']}: {row['stage']} {t} {row['baseline']}"
                  + (f" ({row['error']})" if row["error"] else ""), file=sys.stderr, flush=True)

    try:
        rows = run_baseline(args.out, args.release, device, ops=ops, problem_ids=problems, sets=args.sets,
                            budget_s=args.budget_s, isolate=None if not args.in_process else False,
                            problem_timeout_s=args.problem_timeout_s, progress=progress)
    except (OSError, ValueError) as exc:  # ResultsWriteError, the host key's errors: one line naming the file
        print(f"hotshape baseline: {exc}", file=sys.stderr)
        return 2
    summary = {"problems": len(rows), "correct": sum(bool(r["correct"]) for r in rows),
               "timed": sum(r["t_measured_s"] is not None for r in rows),
               "no_library_path": sorted({r["operator"] for r in rows if r["baseline"] == NO_PATH and not r["compiled"]
                                          and (r["error"] or "").startswith("no library path")}),
               "paths": {r["operator"]: r["baseline"] for r in rows if r["correct"]}, "out": str(args.out)}
    if args.json:
        print(json.dumps(summary))
    else:
        for op, path in sorted(summary["paths"].items()):
            print(f"{op}: {path}")
        print(f"{summary['problems']} problems: {summary['correct']} correct through a library path, "
              f"{summary['timed']} timed; no library path for {', '.join(summary['no_library_path']) or 'none'}; "
              f"results in {args.out}")
    return 0


def register(subparsers) -> None:
    """Add `baseline` to the hotshape command."""
    b = subparsers.add_parser("baseline", help="the library line: each problem through the fastest library path, "
                                               "judged and timed like a candidate, stored as baseline rows")
    b.add_argument("--release", required=True, help="release directory")
    b.add_argument("--out", required=True, help="results Parquet file (rows appended as a run of submission "
                                                "'library', marked baseline)")
    b.add_argument("--device", choices=("cuda", "cpu"), default=None,
                   help="cuda: every problem on its shape, timed (CUPTI device-busy time, L2 flushed); cpu: the "
                        "operators' smoke shapes, correctness only")
    b.add_argument("--ops", help="comma-separated operators (default: all in the release)")
    b.add_argument("--problems", help="comma-separated problem ids")
    b.add_argument("--sets", type=int, default=1, help="fresh input sets the library is checked on per problem")
    b.add_argument("--budget-s", type=float, default=0.15, help="timed seconds per problem (as the replay's)")
    b.add_argument("--problem-timeout-s", type=float, default=180.0,
                   help="cuda: seconds a problem may take before its child process is stopped")
    b.add_argument("--in-process", action="store_true",
                   help="cuda: judge every problem in this process (default: in a child process, started again "
                        "after a crash, so a crash loses one problem)")
    b.add_argument("--progress", action="store_true", help="one line per problem on stderr")
    b.add_argument("--json", action="store_true", help="print the run's summary as JSON on stdout")
    b.set_defaults(func=run_baseline_command)
