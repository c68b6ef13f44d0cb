"""GPU time of a library call, by the trusted replay's rule (kernels_eval.harness.replay.time_program): calls issued
back to back between the evaluator's markers (the start marker flushes L2), input sets rotated, CUPTI records of
the timed calls attributed by the markers, and a call's time the union of its records' intervals (device busy,
host gaps excluded: TIMING_RULES' device_busy). The same markers, profiler, attribution and rule as a candidate's
replayed program; only what runs between the markers differs."""

from __future__ import annotations

import time
from typing import Callable

from kernels_eval.harness import spans
from kernels_eval.harness.timing import L2_FLUSH_BYTES, gpu_profiler, kineto_records

TIMING_RULE = "device_busy"


def time_library(runs: list[Callable[[], object]], *, budget_s: float = 0.15, min_calls: int = 10,
                 max_calls: int = 200, warmup: int = 3) -> tuple[list[float], dict[str, float]]:
    """(seconds of each timed call, µs per call by kernel name) of the library calls `runs` (one per input set,
    rotated) on a GPU."""
    import torch

    from kernels_eval.harness.markers import Markers  # loads triton: only a GPU timing needs the markers

    markers = Markers(L2_FLUSH_BYTES)
    with torch.no_grad():
        for k in range(warmup):
            runs[k % len(runs)]()
        markers.start()
        markers.end()
        torch.cuda.synchronize()
        began = time.perf_counter()
        runs[0]()
        torch.cuda.synchronize()
        per_call = max(time.perf_counter() - began, 1e-6)
        calls = int(min(max_calls, max(min_calls, budget_s / per_call)))
        with gpu_profiler() as prof:
            for k in range(calls):
                markers.start()
                out = runs[k % len(runs)]()
                markers.end()
                del out
            torch.cuda.synchronize()
    windows, _, _ = spans.attribute(kineto_records(prof), calls)
    for k, window in enumerate(windows):
        if not window:
            raise spans.SpanError(f"library call {k} ran no GPU work")
    times = [ns / 1e9 for ns in spans.call_busy(windows)]
    kernel_us = {name: us / len(windows) for name, us in spans.time_by_name(windows).items()}
    return times, kernel_us
