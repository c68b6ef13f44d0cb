"""What the evaluator's autotuning protocol (`hotshape eval --autotune protocol`) adds to a cold run of a submission,
estimated from the submission's own autotuners and a recorded run's per-call times (no GPU needed):

    PYTHONPATH=$PWD python benchmarks/autotune_protocol_cost.py \\
        --submission examples/submissions/triton_reference \\
        --progress benchmarks/results/triton_reference/catalogue_H200_progress.jsonl

Per problem, every autotuner of the operator's file is swept once (a kept choice is reused by later runs, which
add nothing): its configurations x the budget's rounds x one timing loop each (harness/autotune_protocol.py
`Budget.seconds`), each timed call costing the problem's recorded call time plus the timing loop's own per-call
work (the launch shield's spin and the L2 flush: PER_CALL_OVERHEAD_S). Configuration counts are the autotuners'
full lists: an upper bound, since each file's own pruning keeps fewer for a given shape (the row-wise kernels keep
at most 6 of their 35); the kept records hold the counts a GPU run really swept.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path

from kernels_eval.harness.autotune_protocol import DEFAULT_BUDGET

# the timing loop's own device time per timed call beside the call: the shield's 200,000-cycle spin (~0.1 ms at
# 1.98 GHz) and the 256 MB L2 flush (~0.06 ms at H200's 4.8 TB/s)
PER_CALL_OVERHEAD_S = 0.16e-3
# pruning functions whose file states how many configurations they keep at most: the Triton reference's row-wise
# kernels keep the heuristic tile and its neighbours, at most 6 (examples/submissions/triton_reference/rms_norm.py)
PRUNE_BOUNDS = {"prune_row_configs": 6}


def autotuners(file: Path) -> list[tuple[str, int, int]]:
    """(kernel name, configurations, at most kept by its pruning) of each triton.autotune in an operator file
    (imported, never run)."""
    from triton.runtime.autotuner import Autotuner

    spec = importlib.util.spec_from_file_location(f"cost_{file.stem}", file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    found = []
    for name, obj in vars(module).items():
        while obj is not None and not isinstance(obj, Autotuner) and hasattr(obj, "fn"):
            obj = obj.fn
        if isinstance(obj, Autotuner) and len(obj.configs) > 1:
            prune = getattr(obj.early_config_prune, "__name__", None)
            found.append((name, len(obj.configs), min(len(obj.configs), PRUNE_BOUNDS.get(prune, len(obj.configs)))))
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--submission", type=Path, required=True)
    parser.add_argument("--progress", type=Path, required=True, help="a recorded run's progress file (JSON lines)")
    args = parser.parse_args()
    verdicts = {}
    with args.progress.open() as lines:
        for row in map(json.loads, lines):
            verdicts[row["problem_id"]] = row
    budget = DEFAULT_BUDGET
    tuners = {f.stem: autotuners(f) for f in sorted(args.submission.glob("*.py"))}
    by_op: dict[str, list[tuple[float, float]]] = {}
    for v in verdicts.values():
        t = v.get("t_measured_s")
        if t is None or not tuners.get(v["operator"]):
            continue
        call_s = t + PER_CALL_OVERHEAD_S
        by_op.setdefault(v["operator"], []).append(
            (sum(budget.seconds(n, call_s=call_s) for _, n, _ in tuners[v["operator"]]),
             sum(budget.seconds(kept, call_s=call_s) for _, _, kept in tuners[v["operator"]])))
    print(f"budget: {budget.rounds} rounds x (warm-up {budget.warmup_s} s + 2 x {budget.budget_s} s + "
          f"{13 + 2 * budget.min_calls} calls) per configuration, noise band {budget.noise_band:.0%}")
    print("| operator | autotuners (configurations, at most kept) | problems | s per problem, all configurations "
          "| s per problem, pruning bound | s, all | s, pruning bound |")
    print("|---|---|---:|---:|---:|---:|---:|")
    total = [0.0, 0.0]
    for op, seconds in sorted(by_op.items(), key=lambda kv: -sum(a for a, _ in kv[1])):
        every, kept = sum(a for a, _ in seconds), sum(b for _, b in seconds)
        total[0] += every
        total[1] += kept
        listed = ", ".join(f"{name} ({n}, {k})" for name, n, k in tuners[op])
        print(f"| {op} | {listed} | {len(seconds)} | {every / len(seconds):.2f} | {kept / len(seconds):.2f} "
              f"| {every:.0f} | {kept:.0f} |")
    problems = len(verdicts)
    untuned = sorted(op for op, t in tuners.items() if not t)
    print(f"\nall {problems} problems of the run, in a cold run: {total[0]:.0f} s of sweeps ({total[0] / 60:.1f} min) "
          f"with every configuration, {total[1]:.0f} s ({total[1] / 60:.1f} min) with the stated pruning bounds; "
          f"0 s in a run that finds the kept choices")
    print(f"files without an autotuner (nothing to sweep): {', '.join(untuned)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
