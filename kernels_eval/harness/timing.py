"""GPU timing of one callable: CUDA events per call, L2 flushed before each, rotating input sets, warm-up,
an estimate-then-measure call count, median with p10/p90. Used for candidates (in the worker) and for the
PyTorch reference (in the parent), so both are timed the same way."""

from __future__ import annotations

import statistics
import time

L2_FLUSH_BYTES = 256 << 20  # larger than any L2 in hardware.yaml (H200: 60 MB, B200: 126 MB)
# GPU cycles of spin queued ahead of each timed call (~100 µs at 2 GHz): longer than the host takes
# to launch a call, so the start event never waits for the host and small kernels are timed on the
# GPU, not on Python's launch path (seen on H200 before: 5-110 µs for one 10 µs kernel).
LAUNCH_SHIELD_CYCLES = 200_000


def quantiles(times: list[float]) -> dict:
    """median, p10 and p90 of a list of times (same unit)."""
    xs = sorted(times)
    if not xs:
        return {"median": None, "p10": None, "p90": None}

    def q(p: float) -> float:
        k = (len(xs) - 1) * p
        lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
        return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)

    return {"median": statistics.median(xs), "p10": q(0.1), "p90": q(0.9)}


def time_calls(call, input_sets: list[dict], *, refresh=None, warmup: int = 3, min_calls: int = 10,
               max_calls: int = 200, budget_s: float = 0.5, flush=None, warmup_s: float = 0.05) -> list[float]:
    """Seconds per call of `call(**inputs)`, cycling through `input_sets`; `refresh()` (optional) returns a new
    list of sets with fresh contents at the start of every cycle after the first (it may reuse the list)."""
    import torch

    if flush is None:
        flush = torch.empty(L2_FLUSH_BYTES, dtype=torch.int8, device="cuda")
    sets = input_sets
    for i in range(warmup):
        call(**sets[i % len(sets)])
    torch.cuda.synchronize()
    # Keep the GPU busy for `warmup_s` before timing: an idle GPU sits at a low clock and a short
    # burst of small kernels is timed before it ramps up (seen on H200: 4x spread on 10 µs kernels).
    began = time.perf_counter()
    while time.perf_counter() - began < warmup_s:
        for i in range(8):
            flush.zero_()
            call(**sets[i % len(sets)])
        torch.cuda.synchronize()
    # estimate: a few calls timed together give the count that fits the budget
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for i in range(5):
        flush.zero_()
        call(**sets[i % len(sets)])
    end.record()
    torch.cuda.synchronize()
    per_call_s = max(start.elapsed_time(end) / 5e3, 1e-7)
    n = int(min(max_calls, max(min_calls, budget_s / per_call_s)))
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
    for i in range(n):
        if i and i % len(sets) == 0 and refresh is not None:
            sets = refresh()
        inputs = sets[i % len(sets)]
        torch.cuda._sleep(LAUNCH_SHIELD_CYCLES)
        flush.zero_()
        starts[i].record()
        call(**inputs)
        ends[i].record()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) / 1e3 for s, e in zip(starts, ends)]
