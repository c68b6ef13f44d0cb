"""The library baseline of a release as results rows: each problem's library verdict (kernels_eval/library/baseline.py;
on a GPU from child processes, kernels_eval/library/child.py) as a row of submission LIBRARY with `baseline` naming
the path that ran, signed with the host's results key and merged into the results file after each operator, one
sealed run (kernels_eval/results_seal.py). The library line's rows are never native and `score`/`leaderboard` keep
them off the ranking (kernels_eval/library/line.py). pyarrow and the standard library only, like the evaluator.
"""

from __future__ import annotations

from datetime import datetime, timezone
from itertools import groupby
from pathlib import Path

from kernels_eval.harness.config import Problem
from kernels_eval.harness.release_view import read_release_view
from kernels_eval.harness.runner import _t_roofline, detect_hardware, new_run_id, release_identity, result_row
from kernels_eval.harness.verdict import Verdict
from kernels_eval.library.baseline import library_sha256, operator_verdicts
from kernels_eval.library.child import isolated_verdicts
from kernels_eval.results_key import host_key, sign_row
from kernels_eval.results_schema import next_run
from kernels_eval.results_store import check_out, merge_rows

LIBRARY = "library"  # the submission name of baseline rows


def baseline_row(base: dict, p: Problem, verdict: Verdict, path: str, t_roof: float | None, device: str) -> dict:
    """One results row of a baseline verdict (the evaluator's result_row, with `baseline` naming the path)."""
    row = result_row(base, p, verdict, base["file_sha256"], t_roof, device)
    row["baseline"] = path
    return row


def run_baseline(out: str | Path, release_path: str | Path, device: str, *, ops: list[str] | None = None,
                 problem_ids: list[str] | None = None, sets: int = 1, budget_s: float = 0.15, max_calls: int = 200,
                 isolate: bool | None = None, problem_timeout_s: float = 180.0, progress=None) -> list[dict]:
    """The baseline rows of a release's problems (those of `ops`, in that order, / `problem_ids` when given), written
    to results file `out`. `isolate` (default: on a GPU) judges them in child processes."""
    release = read_release_view(release_path)
    out = Path(out)
    check_out(out)
    key = host_key()
    hardware = detect_hardware(device, release.hardware_names)
    roof = release.roofline(hardware)
    rank = {op: i for i, op in enumerate(ops or ())}  # operators in the order given (a cut run keeps the first)
    chosen = [Problem(r) for r in sorted(release.problems, key=lambda r: (rank.get(r["operator"], 0), r["operator"],
                                                                          r["problem_id"]))
              if (ops is None or r["operator"] in ops) and (problem_ids is None or r["problem_id"] in problem_ids)]
    base = {"submission": LIBRARY, "release": release.name, "run_id": new_run_id(),
            "run": next_run(out, LIBRARY, hardware), "hardware": hardware, "device": device,
            "evaluated_at": datetime.now(timezone.utc).isoformat(timespec="seconds"), **release_identity(release),
            "sandboxed": False, "memory_accounting": None, "file_sha256": library_sha256(), "run_sealed": True}
    if device == "cuda" if isolate is None else isolate:
        found = isolated_verdicts(chosen, release_path, device, sets=sets, budget_s=budget_s, max_calls=max_calls,
                                  problem_timeout_s=problem_timeout_s)
    else:
        found = (item for operator, problems in groupby(chosen, key=lambda p: p.operator)
                 for item in operator_verdicts(operator, list(problems), device, sets=sets, budget_s=budget_s,
                                               max_calls=max_calls))
    rows: list[dict] = []
    for _, items in groupby(found, key=lambda item: item[0].operator):
        kept = []
        for p, verdict, path in items:
            kept.append(sign_row(baseline_row(base, p, verdict, path, _t_roofline(roof, p, hardware), device), key))
            if progress is not None:
                progress(kept[-1])
        merge_rows(kept, out, key=key)  # an operator's rows kept as soon as it is judged
        rows += kept
    return rows
