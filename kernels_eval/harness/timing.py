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
               max_calls: int = 200, budget_s: float = 0.5, flush=None, warmup_s: float = 0.05,
               settle_tolerance: float = 0.02, settle_blocks: int = 30, retries: int = 2) -> list[float]:
    """Seconds per call of `call(**inputs)`, cycling through `input_sets`; `refresh()` (optional) returns a new
    list of sets with fresh contents at the start of every cycle after the first (it may reuse the list).

    Before measuring, blocks of 10 timed calls run until two in a row agree within `settle_tolerance`: a GPU
    that sat idle (the evaluator's correctness stage is mostly host work) runs at a fraction of its clock
    for a while, and a 4 µs kernel timed then reads 5-6x slower (seen on H200: 3.6 vs 23.4 µs between two
    runs). After measuring, a run whose first and second halves disagree by more than 3% is measured again
    (at most `retries` times) and the last run is returned.
    """
    import torch

    if flush is None:
        flush = torch.empty(L2_FLUSH_BYTES, dtype=torch.int8, device="cuda")
    state = {"sets": input_sets, "i": 0}

    def timed(n: int) -> list[float]:
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        for k in range(n):
            i = state["i"]
            if i and i % len(state["sets"]) == 0 and refresh is not None:
                state["sets"] = refresh()
            inputs = state["sets"][i % len(state["sets"])]
            state["i"] = i + 1
            torch.cuda._sleep(LAUNCH_SHIELD_CYCLES)
            flush.zero_()
            starts[k].record()
            call(**inputs)
            ends[k].record()
        torch.cuda.synchronize()
        return [a.elapsed_time(b) / 1e3 for a, b in zip(starts, ends)]

    sets = input_sets
    for i in range(warmup):
        call(**sets[i % len(sets)])
    torch.cuda.synchronize()
    # Keep the GPU busy for `warmup_s` before timing, then let the figure settle (see above).
    began = time.perf_counter()
    while time.perf_counter() - began < warmup_s:
        for i in range(8):
            flush.zero_()
            call(**sets[i % len(sets)])
        torch.cuda.synchronize()
    # Settling matters for short calls, whose blocks leave the GPU idle between them; it is bounded by
    # the timing budget, so a 300 ms call (a PyTorch reference on a large shape) settles in two blocks.
    previous, began = None, time.perf_counter()
    for _ in range(settle_blocks):
        block = statistics.median(timed(10))
        if previous is not None and (abs(block - previous) <= settle_tolerance * previous
                                     or time.perf_counter() - began > budget_s):
            break
        previous = block
    # the call count that fits the budget: each timed call also costs its shield and flush on the GPU
    began = time.perf_counter()
    timed(5)
    per_call_s = max((time.perf_counter() - began) / 5, 1e-7)
    n = int(min(max_calls, max(min_calls, budget_s / per_call_s)))
    for _ in range(retries + 1):
        measured = time.perf_counter()
        times = timed(n)
        half = len(times) // 2
        first, second = statistics.median(times[:half]), statistics.median(times[half:])
        if abs(first - second) <= 0.03 * statistics.median(times) or time.perf_counter() - measured > budget_s:
            break
    return times
