"""The library baseline on a GPU in a child process: an illegal address kills a process's CUDA context, so the parent
runs the problems in a child and, when the child dies or stalls, records the problem it was on as an evaluator error
and starts a new child for the rest. Verdicts stream back one line each (our own library code, not a candidate's).
Usage (by the parent only): python -m kernels_eval.library.child --release R --problems ID,... [--device cuda]
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from kernels_eval.harness.config import Problem
from kernels_eval.harness.release_view import read_release_view
from kernels_eval.harness.verdict import Verdict
from kernels_eval.library.baseline import NO_PATH, ContextLost, operator_verdicts

MARK = "LIBRARY_VERDICT "
ROOT = Path(__file__).resolve().parents[2]  # the checkout: a child imports the same code as its parent


def isolated_verdicts(problems: list[Problem], release_path, device: str, *, sets: int, budget_s: float,
                      max_calls: int, problem_timeout_s: float = 180.0):
    """(problem, verdict, path) of each problem, in order, judged in child processes: one child for all of them,
    and after a crash or a problem that ran past `problem_timeout_s` a new one for those not yet reported (the
    problem it was on gets an evaluator-error verdict naming why)."""
    remaining = list(problems)
    while remaining:
        reported = set()
        cmd = [sys.executable, "-m", "kernels_eval.library.child", "--release", str(release_path), "--device", device,
               "--sets", str(sets), "--budget-s", str(budget_s), "--max-calls", str(max_calls),
               "--problems", ",".join(p.problem_id for p in remaining)]
        by_id = {p.problem_id: p for p in remaining}
        with tempfile.TemporaryFile(mode="w+") as err:
            path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True,
                                    env={**os.environ, "PYTHONPATH": path})
            lines: queue.Queue = queue.Queue()
            threading.Thread(target=lambda: [lines.put(ln) for ln in proc.stdout] + [lines.put(None)],
                             daemon=True).start()
            why = None
            while True:
                try:
                    line = lines.get(timeout=problem_timeout_s)
                except queue.Empty:
                    proc.kill()
                    why = f"no verdict within {problem_timeout_s:.0f} s: the child was stopped"
                    break
                if line is None:
                    break
                if line.startswith(MARK):
                    record = json.loads(line[len(MARK):])
                    reported.add(record["problem_id"])
                    yield by_id[record["problem_id"]], Verdict(**record["verdict"]), record["path"]
            code = proc.wait()
            err.seek(0)
            tail = " | ".join(err.read().strip().splitlines()[-2:])
        remaining = [p for p in remaining if p.problem_id not in reported]
        if remaining:
            lost = remaining.pop(0)
            why = why or f"the child process ended (exit {code}) before judging it: {tail}"
            yield lost, Verdict(error=f"evaluator error, not judged: {why}"[:2000]), NO_PATH


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="library verdicts of a release's problems (the baseline's child)")
    parser.add_argument("--release", required=True)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--problems", required=True)
    parser.add_argument("--sets", type=int, default=1)
    parser.add_argument("--budget-s", type=float, default=0.15)
    parser.add_argument("--max-calls", type=int, default=200)
    args = parser.parse_args(argv)
    order = args.problems.split(",")
    rows = {r["problem_id"]: r for r in read_release_view(args.release).problems}
    by_op: dict[str, list[Problem]] = {}
    for pid in order:
        p = Problem(rows[pid])
        by_op.setdefault(p.operator, []).append(p)
    try:
        for operator, problems in by_op.items():
            for p, verdict, path in operator_verdicts(operator, problems, args.device, sets=args.sets,
                                                      budget_s=args.budget_s, max_calls=args.max_calls):
                print(MARK + json.dumps({"problem_id": p.problem_id, "verdict": verdict.as_dict(), "path": path}),
                      flush=True)
    except ContextLost as exc:
        print(f"{exc}: ending this process; the parent starts another for the rest", file=sys.stderr, flush=True)
        sys.stdout.flush()
        os._exit(3)
    return 0


if __name__ == "__main__":
    sys.exit(main())
