"""GPU timing of one callable: each timed call bracketed by the evaluator's start marker (which flushes L2) and
end marker, a GPU spin queued ahead of it, rotating input sets, a short warm-up, an estimate-then-measure call
count, CUDA events per call beside it. The GPU time of a call is its kernel span from the profiler's records of
the timed calls themselves (kernels_eval.harness.spans); the events' figure is kept beside it. Used for
candidates (in the worker) and for the PyTorch reference (in the parent, when asked), so both are timed alike."""

from __future__ import annotations

import statistics
import time
from kernels_eval.harness.spans import GPU_WORK

L2_FLUSH_BYTES = 256 << 20  # larger than any L2 in hardware.yaml (H200: 60 MB, B200: 126 MB)
# GPU cycles of spin queued ahead of each timed call (~100 µs at 2 GHz), at the least: the host
# enqueues the whole call while the GPU spins, so a call's kernels run back to back (GPU time, as under
# CUDA graphs), not at the pace of Python's launch path (seen on H200 before: 5-110 µs for one 10 µs
# kernel). `shield_cycles` stretches it to the call's measured host time.
LAUNCH_SHIELD_CYCLES = 200_000
# The shield covers this multiple of the slowest host launch seen while calibrating, up to MAX_SHIELD_S.
SHIELD_HOST_MARGIN = 3.0
MAX_SHIELD_S = 5e-3


class TimedCalls(list):
    """CUDA-event seconds of the reported run's calls (a list, as before), with `marked`: how many calls the
    whole timing bracketed with markers (the estimate and any repeated run included), the reported run last."""

    marked: int = 0
    first_s: float = 0.0  # host seconds of the first call and its synchronize (compiling and autotuning included)
    benchmarked: int = 0  # autotuning benchmarks run after the untimed first calls (`benchmarks`)


class FlushMarkers:
    """Markers without identity (a plain flush before each call, nothing after): for timing by events only."""

    def __init__(self, flush) -> None:
        self.flush = flush

    def start(self) -> None:
        self.flush.zero_()

    def end(self) -> None:
        pass

    def warm(self) -> None:
        self.flush.zero_()


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


def shield_cycles(call, next_inputs, calls: int = 5) -> int:
    """GPU spin cycles to queue ahead of each timed call: SHIELD_HOST_MARGIN x the slowest host time of up
    to `calls` calls (launching all of a call's kernels), at least LAUNCH_SHIELD_CYCLES, at most MAX_SHIELD_S.

    A call that launches several kernels with Python between them (a split-KV kernel and its merge,
    say) leaves the GPU idle between launches once the spin is used up; that idle time would sit inside
    the call's span (seen on H200: 112-157 µs for a 1-sequence paged decode whose kernels take a few µs). A
    call that waits for the GPU (reads a length back, say) cannot be covered by any spin: it keeps the least."""
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
        inputs = next_inputs()
        torch.cuda._sleep(int(cycles_per_s * ahead_s))
        t0 = time.perf_counter()
        call(**inputs)
        host.append(time.perf_counter() - t0)
        torch.cuda.synchronize()
    if max(host) > 0.5 * ahead_s:  # the call waited for the queued spin: it synchronises
        return LAUNCH_SHIELD_CYCLES
    return max(LAUNCH_SHIELD_CYCLES, int(min(SHIELD_HOST_MARGIN * max(host), MAX_SHIELD_S) * cycles_per_s))


def time_calls(call, input_sets: list[dict], *, refresh=None, warmup: int = 3, min_calls: int = 10,
               max_calls: int = 200, budget_s: float = 0.5, flush=None, markers=None, after_call=None,
               warmup_s: float = 0.05, settle_tolerance: float = 0.02, settle_blocks: int = 10, retries: int = 1,
               slow_call_s: float = 0.02, benchmarks=None) -> TimedCalls:
    """CUDA-event seconds per call of `call(**inputs)` over the reported run, cycling through `input_sets`;
    `refresh()` (optional) returns a new list of sets with fresh contents whenever every set has been used
    once (it may reuse the list), so with it every call runs on a set no earlier call has touched.

    Each timed call runs as: spin (`shield_cycles`), `markers.start()` (the L2 flush), start event, the call,
    end event, `markers.end()`, then `after_call(inputs, output)` (the worker keeps samples of outputs there,
    outside the markers). `markers` defaults to a plain flush of `flush` (FlushMarkers).

    Before measuring, the GPU is kept busy for `warmup_s`, then blocks of 10 timed calls run until two in a row
    agree within `settle_tolerance` (at most `settle_blocks`, bounded by the budget): an idle GPU runs at a
    fraction of its clock for a while, and a 4 µs kernel timed then reads 5-6x slower (seen on H200, 3.6 vs
    23.4 µs between two runs); its kernels run slower too, so kernel spans need the settling as events did.
    After measuring, a run whose first and second halves disagree by more than 3% is measured again (at most
    `retries` times) and the last run is returned.

    A call that takes longer than `slow_call_s` (a PyTorch reference looping over a thousand sequences takes
    ~1 s) keeps the GPU busy by itself and dwarfs any launch path: after two untimed calls it is timed over
    `min_calls` (or as many as fit the budget) with no shield calibration or warm-up, which would cost tens of
    such calls. Two, because a first call compiles, loads compiled kernels or autotunes (seen on H200: in a
    fresh worker every first call took longer than `slow_call_s`, and 316 of 436 problems, µs kernels among
    them, were timed as slow calls, with no shield or settling: CUDA events read 47-390 µs for 2-100 µs of
    kernels, and a split-KV decode's span held the host's launch gaps between its kernels). So is a call whose
    fresh input sets cost more than `slow_call_s` per call to draw (seen after the warm-up calls): `min_calls`
    calls, after the warm-up.

    `benchmarks()` (optional) counts the autotuning benchmarks run so far (harness/autotune_cache.py): the result's
    `benchmarked` is how many ran after the untimed first calls, whose work the profiler did not record.
    """
    import torch

    if markers is None:
        markers = FlushMarkers(flush if flush is not None else torch.empty(L2_FLUSH_BYTES, dtype=torch.int8,
                                                                             device="cuda"))
    state = {"sets": input_sets, "i": 0, "shield": LAUNCH_SHIELD_CYCLES, "refresh_s": 0.0}
    result = TimedCalls()

    def next_inputs() -> dict:
        i = state["i"]
        if i and i % len(state["sets"]) == 0 and refresh is not None:
            began = time.perf_counter()
            state["sets"] = refresh()
            state["refresh_s"] = time.perf_counter() - began
        state["i"] = i + 1
        return state["sets"][i % len(state["sets"])]

    def timed(n: int) -> list[float]:
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        for k in range(n):
            inputs = next_inputs()
            torch.cuda._sleep(state["shield"])
            markers.start()
            starts[k].record()
            out = call(**inputs)
            ends[k].record()
            markers.end()
            if after_call is not None:
                after_call(inputs, out)
            del out
        torch.cuda.synchronize()
        result.marked += n
        return [a.elapsed_time(b) / 1e3 for a, b in zip(starts, ends)]

    began = time.perf_counter()
    call(**next_inputs())
    torch.cuda.synchronize()
    call_s = result.first_s = time.perf_counter() - began
    if call_s > slow_call_s:  # a first call compiles, loads or autotunes: the next one says whether it is slow
        began = time.perf_counter()
        call(**next_inputs())
        torch.cuda.synchronize()
        call_s = time.perf_counter() - began
    counted = benchmarks() if benchmarks is not None else 0

    def done(times: list[float]) -> TimedCalls:
        result.extend(times)
        if benchmarks is not None:
            result.benchmarked = benchmarks() - counted
        return result

    if call_s > slow_call_s:
        return done(timed(int(min(max_calls, max(min_calls, budget_s / call_s)))))
    for _ in range(1, warmup):
        call(**next_inputs())
    torch.cuda.synchronize()
    if state["refresh_s"] / len(state["sets"]) > slow_call_s:
        # drawing fresh sets costs more per call than a slow call (a MoE problem's 11 GB of weights, two sets
        # at a time: ~0.7 s per draw on H200, so settling and calibration took 15 s of redrawn inputs): the
        # draws keep the GPU busy between calls, as a slow call does; timed as one
        return done(timed(min_calls))
    state["shield"] = shield_cycles(call, next_inputs)
    began = time.perf_counter()
    while time.perf_counter() - began < warmup_s:
        for _ in range(8):
            markers.warm()
            call(**next_inputs())
        torch.cuda.synchronize()
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
    return done(times)


def gpu_profiler():
    """The profiler every candidate call on a GPU runs under (CUDA activity only: CUPTI kernel, memcpy and
    memset records on all streams), so checked and timed calls see the same profiler state."""
    from torch.profiler import ProfilerActivity, profile

    return profile(activities=[ProfilerActivity.CUDA])


def kineto_records(prof) -> dict:
    """The GPU work records of a finished profile in a compact, JSON-able form for the parent:
    {"names": [...], "kinds": [...], "rows": [[correlation_id, linked_correlation_id, start_ns, end_ns, stream,
    name index, kind index], ...]} (spans.records_from_rows reads it back)."""
    from torch.autograd import DeviceType

    names: dict[str, int] = {}
    kinds: dict[str, int] = {}
    rows = []
    for e in prof.profiler.kineto_results.events():
        if e.device_type() != DeviceType.CUDA or e.is_user_annotation():
            continue
        kind = _activity_kind(e)
        if kind not in GPU_WORK:
            continue
        rows.append([int(e.correlation_id()), int(e.linked_correlation_id()), int(e.start_ns()), int(e.end_ns()),
                     int(e.device_resource_id()), names.setdefault(e.name(), len(names)),
                     kinds.setdefault(kind, len(kinds))])
    return {"names": list(names), "kinds": list(kinds), "rows": rows}


def _activity_kind(event) -> str:
    """CUPTI's activity kind ("kernel", "gpu_memcpy", "gpu_memset") of a device record. torch 2.11's _KinetoEvent
    has no activity_type(): there the kind is read from CUPTI's names ("Memcpy DtoD (...)", "Memset (Device)")."""
    kind = getattr(event, "activity_type", None)
    if kind is not None:
        return kind()
    name = event.name()
    if name.startswith(("Memcpy", "[CUDA memcpy")):
        return "gpu_memcpy"
    if name.startswith(("Memset", "[CUDA memset")):
        return "gpu_memset"
    return "kernel"
