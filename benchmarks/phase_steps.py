"""What the serving-phase code's per-row Python passes cost on a large unannotated trace, beside what reading and
classifying the trace costs, in one run: steps cut at sampling (ingest.step_kernels.cut_steps), each step's kernel
evidence (step_kernels._evidence), the step fill (ingest.phases._fill_by_step), all of assign_phases, and the
trace's read (ingest.pipeline.read_events) and classify_events.

    python benchmarks/big_trace.py --events 1500000 --source tests/fixtures/wild/vllm_v1_mi300x_tp4.json.gz \
        --out /tmp/big-vllm.json.gz
    python benchmarks/phase_steps.py /tmp/big-vllm.json.gz --repeats 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from ingest import phases, step_kernels
from ingest.classify import classify_events
from ingest.pipeline import read_events


def _time(fn, repeats: int) -> float:
    runs = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - t)
    return statistics.median(runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("trace")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    raw = read_events(args.trace)
    events = classify_events(raw)
    devices, ts, ops = events["device"].to_list(), events["ts_ns"].to_list(), events["operator"].to_list()
    kernels, dur = events["kernel"].to_list(), events["dur_ns"].to_list()
    grid_x = events["grid"].list.first().to_list()
    phase, rule = events["phase"].to_list(), events["phase_rule"].to_list()
    # the fill's input as the shape rule leaves it: every row the step evidence or a fill decided is undecided
    rule = ["none" if r.startswith("kernels:") or r == "shape:step" else r for r in rule]
    shapes = [{} for _ in ops]
    patterns = step_kernels.load_step_kernels()
    steps = step_kernels.cut_steps(devices, ts, ops)
    passes = {
        "cut_steps": lambda: step_kernels.cut_steps(devices, ts, ops),
        "step evidence": lambda: step_kernels._evidence(steps, kernels, dur, ops, patterns, grid_x),
        "fill by step": lambda: phases._fill_by_step(steps, list(phase), list(rule)),
        "assign_phases": lambda: phases.assign_phases(events, shapes, ops),
        "read_events": lambda: read_events(args.trace),
        "classify_events": lambda: classify_events(raw),
    }
    print(f"{args.trace}: {events.height} GPU rows, {len(set(steps))} steps; load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}; median of {args.repeats}")
    for name, fn in passes.items():
        print(f"{name:<16}{_time(fn, args.repeats):>10.3f} s")


if __name__ == "__main__":
    main()
