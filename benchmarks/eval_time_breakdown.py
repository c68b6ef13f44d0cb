"""Where a full evaluation's time goes: the evaluator's per-step seconds (`step_s` of each streamed verdict) summed by
step and by operator over the latest record of each problem in the recorded progress files (stdlib only).

    python benchmarks/eval_time_breakdown.py [benchmarks/results/triton_reference] [--exclude example_release]

A progress file's run number is the N of its `runN_` prefix; a problem's latest record is the last line of the
highest-numbered run that has it. `in_worker_*` steps are the worker's own split of `worker_call` (not added to
the total); `unclocked` is eval_s less the clocked steps: before the CUPTI timing, almost all of it was the
PyTorch reference's timing (`_reference_time`, never clocked as a step); `no_step_log` is the whole eval_s of
records from runs before the per-step log.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results" / "triton_reference"

# Where each step goes under kernel-span timing (issue 17), and the share of it that is expected to remain.
EXPECTED = {
    "worker_profile": (0.0, "the profile command is gone: the timed calls' own records decide adoption"),
    "unclocked": (0.05, "PyTorch reference timing is opt-in (--time-reference); scores use the roofline"),
    "worker_time": (0.9, "settling kept (a cold clock slows kernels as it slowed events), at most 10 blocks; "
                         "the profiler's records and a few kept samples added"),
    "worker_call": (0.95, "one judged call fewer per problem (the one after timing); the first call's compile "
                          "and autotune dominate this step and stay"),
    "reference": (1.0, "the reference still runs once per judged call and per kept sample"),
    "no_step_log": (0.5, "older runs with no split: assumed to split like the logged ones (reference timing "
                         "about half)"),
}


def run_number(path: Path) -> int:
    m = re.match(r"run(\d+)_", path.name)
    return int(m.group(1)) if m else -1


def latest_records(files: list[Path]) -> dict[str, dict]:
    """problem_id -> its latest verdict record over `files`."""
    latest: dict[str, tuple[int, int, dict]] = {}
    for path in files:
        run = run_number(path)
        for line_no, line in enumerate(path.read_text().splitlines()):
            if not line.strip():
                continue
            rec = json.loads(line)
            key = (run, line_no)
            if rec["problem_id"] not in latest or key >= latest[rec["problem_id"]][:2]:
                latest[rec["problem_id"]] = (run, line_no, rec)
    return {pid: rec for pid, (_, _, rec) in latest.items()}


def steps_of(rec: dict) -> dict[str, float]:
    """A record's seconds per step, with `unclocked` = eval_s less the clocked (non in_worker_) steps."""
    if not rec.get("step_s"):  # runs before the per-step log: only their total is known
        return {"no_step_log": float(rec.get("eval_s") or 0.0)}
    steps = {k: float(v) for k, v in rec["step_s"].items()}
    clocked = sum(v for k, v in steps.items() if not k.startswith("in_worker_"))
    steps["unclocked"] = max(0.0, float(rec.get("eval_s") or 0.0) - clocked)
    return steps


def breakdown(records: dict[str, dict]) -> dict:
    by_step: dict[str, float] = {}
    by_op: dict[str, dict[str, float]] = {}
    counts: dict[str, int] = {}
    for rec in records.values():
        op = rec["operator"]
        counts[op] = counts.get(op, 0) + 1
        per = by_op.setdefault(op, {})
        for k, v in steps_of(rec).items():
            by_step[k] = by_step.get(k, 0.0) + v
            per[k] = per.get(k, 0.0) + v
    eval_s = sum(float(r.get("eval_s") or 0.0) for r in records.values())
    return {"problems": len(records), "eval_s": eval_s, "by_step": by_step, "by_op": by_op, "counts": counts}


def report(doc: dict, command: str) -> str:
    lines = [f"$ {command}", f"problems: {doc['problems']}  sum of eval_s: {doc['eval_s']:.0f} s", "",
             "by step (s; in_worker_* are inside worker_call):"]
    for k, v in sorted(doc["by_step"].items(), key=lambda kv: -kv[1]):
        lines.append(f"  {k:<20} {v:8.1f}  {v / max(doc['eval_s'], 1e-9):6.1%}")
    lines += ["", "by operator (s): problems, eval_s, then the largest steps"]
    for op, per in sorted(doc["by_op"].items(), key=lambda kv: -sum(v for k, v in kv[1].items()
                                                                     if not k.startswith("in_worker_"))):
        top = sorted(((v, k) for k, v in per.items() if not k.startswith("in_worker_")), reverse=True)[:4]
        total = sum(v for k, v in per.items() if not k.startswith("in_worker_"))
        lines.append(f"  {op:<30} {doc['counts'][op]:>3} {total:8.1f}  " + " ".join(f"{k}={v:.1f}" for v, k in top))
    lines += ["", "expected under kernel-span timing (step: now -> expected, why):"]
    saved = 0.0
    for step, (keep, why) in EXPECTED.items():
        now = doc["by_step"].get(step, 0.0)
        saved += now * (1 - keep)
        lines.append(f"  {step:<16} {now:7.1f} -> {now * keep:7.1f} s  {why}")
    lines.append(f"  expected total: {doc['eval_s']:.0f} -> {doc['eval_s'] - saved:.0f} s of per-problem time "
                 f"(one worker per operator; spawn overlaps the previous operator)")
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("directory", nargs="?", type=Path, default=RESULTS)
    ap.add_argument("--exclude", action="append", default=[], help="skip progress files whose name contains this")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    files = sorted(p for p in args.directory.glob("*_progress.jsonl") if not any(x in p.name for x in args.exclude))
    doc = breakdown(latest_records(files))
    command = "python benchmarks/eval_time_breakdown.py " + " ".join(sys.argv[1:])
    text = report(doc, command.strip())
    if args.out:
        args.out.write_text(text)
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
