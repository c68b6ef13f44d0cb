"""GPU timing of one callable: CUDA events per call, L2 flushed before each, rotating input sets, warm-up,
an estimate-then-measure call count, median with p10/p90. Used for candidates (in the worker) and for the
PyTorch reference (in the parent), so both are timed the same way."""

from __future__ import annotations

import statistics
import time

L2_FLUSH_BYTES = 256 << 20  # larger than any L2 in hardware.yaml (H200: 60 MB, B200: 126 MB)
# GPU cycles of spin queued ahead of each timed call (~100 µs at 2 GHz), at the least: the host
# enqueues the whole call while the GPU spins, so the events bracket the call's kernels back to back
# (GPU time, as under CUDA graphs), not Python's launch path (seen on H200 before: 5-110 µs for one
# 10 µs kernel). `shield_cycles` stretches it to the call's measured host time.
LAUNCH_SHIELD_CYCLES = 200_000
# The shield covers this multiple of the slowest host launch seen while calibrating, up to MAX_SHIELD_S.
SHIELD_HOST_MARGIN = 3.0
MAX_SHIELD_S = 5e-3


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


def shield_cycles(call, input_sets: list[dict], calls: int = 5) -> int:
    """GPU spin cycles to queue ahead of each timed call: SHIELD_HOST_MARGIN x the slowest host time of up
    to `calls` calls (launching all of a call's kernels), at least LAUNCH_SHIELD_CYCLES, at most MAX_SHIELD_S.

    A call that launches several kernels with Python between them (a split-KV kernel and its merge,
    say) leaves the GPU idle between launches once the spin is used up; the events would then time the
    host (seen on H200: 112-157 µs for a 1-sequence paged decode whose kernels take a few µs). A call
    that waits for the GPU (reads a length back, say) cannot be covered by any spin: it keeps the least."""
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    torch.cuda._sleep(1_000_000)
    end.record()
    torch.cuda.synchronize()
    cycles_per_s = 1_000_000 / max(start.elapsed_time(end) / 1e3, 1e-9)
    ahead_s = 2 * MAX_SHIELD_S  # GPU work queued before each probe, so its launches never wait
    host: list[float] = []
    began = time.perf_counter()
    while len(host) < calls and (len(host) < 2 or time.perf_counter() - began < 0.1):
        torch.cuda._sleep(int(cycles_per_s * ahead_s))
        t0 = time.perf_counter()
        call(**input_sets[len(host) % len(input_sets)])
        host.append(time.perf_counter() - t0)
        torch.cuda.synchronize()
    if max(host) > 0.5 * ahead_s:  # the call waited for the queued spin: it synchronises
        return LAUNCH_SHIELD_CYCLES
    return max(LAUNCH_SHIELD_CYCLES, int(min(SHIELD_HOST_MARGIN * max(host), MAX_SHIELD_S) * cycles_per_s))


def time_calls(call, input_sets: list[dict], *, refresh=None, warmup: int = 3, min_calls: int = 10,
               max_calls: int = 200, budget_s: float = 0.5, flush=None, warmup_s: float = 0.05,
               settle_tolerance: float = 0.02, settle_blocks: int = 30, retries: int = 2,
               slow_call_s: float = 0.02) -> list[float]:
    """Seconds per call of `call(**inputs)`, cycling through `input_sets`; `refresh()` (optional) returns a new
    list of sets with fresh contents at the start of every cycle after the first (it may reuse the list).

    Before measuring, blocks of 10 timed calls run until two in a row agree within `settle_tolerance`: a GPU
    that sat idle (the evaluator's correctness stage is mostly host work) runs at a fraction of its clock
    for a while, and a 4 µs kernel timed then reads 5-6x slower (seen on H200: 3.6 vs 23.4 µs between two
    runs). After measuring, a run whose first and second halves disagree by more than 3% is measured again
    (at most `retries` times) and the last run is returned.

    A call that takes longer than `slow_call_s` (a PyTorch reference looping over a thousand sequences takes
    ~1 s) keeps the GPU busy by itself and dwarfs any launch path: after one warm-up call it is timed over
    `min_calls` (or as many as fit the budget) with no shield calibration or settling, which would cost tens of
    such calls.
    """
    import torch

    if flush is None:
        flush = torch.empty(L2_FLUSH_BYTES, dtype=torch.int8, device="cuda")
    state = {"sets": input_sets, "i": 0, "shield": LAUNCH_SHIELD_CYCLES}

    def timed(n: int) -> list[float]:
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        for k in range(n):
            i = state["i"]
            if i and i % len(state["sets"]) == 0 and refresh is not None:
                state["sets"] = refresh()
            inputs = state["sets"][i % len(state["sets"])]
            state["i"] = i + 1
            torch.cuda._sleep(state["shield"])
            flush.zero_()
            starts[k].record()
            call(**inputs)
            ends[k].record()
        torch.cuda.synchronize()
        return [a.elapsed_time(b) / 1e3 for a, b in zip(starts, ends)]

    sets = input_sets
    began = time.perf_counter()
    call(**sets[0])
    torch.cuda.synchronize()
    first_s = time.perf_counter() - began
    if first_s > slow_call_s:
        state["i"] = 1
        return timed(int(min(max_calls, max(min_calls, budget_s / first_s))))
    for i in range(1, warmup):
        call(**sets[i % len(sets)])
    torch.cuda.synchronize()
    state["shield"] = shield_cycles(call, sets)
    # Keep the GPU busy for `warmup_s` before timing, then let the figure settle (see above).
    began = time.perf_counter()
    while time.perf_counter() - began < warmup_s:
        for i in range(8):
            flush.zero_()
            call(**sets[i % len(sets)])
        torch.cuda.synchronize()
    # Settling matters for short calls, whose blocks leave the GPU idle between them; it is bounded by
    # the timing budget, so a 300 ms call (a PyTorch reference on a large shape) settles in one block.
    previous, began = None, time.perf_counter()
    for _ in range(settle_blocks):
        block = statistics.median(timed(10))
        if time.perf_counter() - began > budget_s or (
                previous is not None and abs(block - previous) <= settle_tolerance * previous):
            break  # a block that alone outlasts the budget kept the GPU busy long enough to reach its clock
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
