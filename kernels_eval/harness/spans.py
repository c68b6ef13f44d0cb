"""GPU time of each timed call from the profiler's activity records (no torch import).

The timing loop launches two kernels of the evaluator's own around every timed call: a start marker (the L2
flush) right before it and an end marker right after it, on the calling stream. CUPTI numbers every launch
and copy in host order (its correlation id), so a call's records are those strictly between its two markers
in that order, on whatever stream they ran. A call's time is the span from its first record's start to its
last record's end: gaps between its own kernels count, the host's launch path before its first kernel does
not (as under CUDA-graph replay, which is how decode runs in production). An operator whose call waits on the
host mid-call (catalogue.vocabulary.TIMING_RULES: device_busy) is timed by the union of its records instead.

Records are plain tuples here so that the rule is tested on records built in the test and on records
derived from real Kineto traces; kernels_eval.harness.worker turns the profiler's events into them.
"""

from __future__ import annotations

from typing import NamedTuple

START_MARKER = "_hotshape_l2_flush"
END_MARKER = "_hotshape_call_end"
# Kineto's names of the GPU activities that occupy a stream (CUPTI kernel, memcpy and memset records);
# synchronisation and annotation records on the GPU timeline are not work.
GPU_WORK = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})
# CUPTI timestamps of two kernels on one stream may touch; allow this much overlap before calling a record
# unordered with the calling stream.
ORDER_SLACK_NS = 500


class Record(NamedTuple):
    """One GPU activity: CUPTI correlation id (host launch order), start/end (ns), stream, name, kind."""

    corr: int
    start_ns: int
    end_ns: int
    stream: int
    name: str
    kind: str = "kernel"


class SpanError(ValueError):
    """The records do not yield one span per timed call; the message says why (the timing is refused)."""


def call_windows(records: list[Record], calls: int, start: str = START_MARKER,
                 end: str = END_MARKER) -> tuple[list[list[Record]], list[Record], list[tuple[Record, Record]]]:
    """(records of each call, records between and after the calls, (start, end) marker pair of each call).

    The markers must alternate start, end, start, ... in correlation order and number `calls` each;
    anything else (a candidate launching a kernel of a marker's name, a lost record) is refused."""
    ordered = sorted((r for r in records if r.kind in GPU_WORK), key=lambda r: r.corr)
    if len({r.corr for r in ordered}) != len(ordered):
        raise SpanError("kernel records could not be attributed to calls: correlation ids repeat")
    windows: list[list[Record]] = []
    outside: list[Record] = []
    pairs: list[tuple[Record, Record]] = []
    opened: Record | None = None
    for r in ordered:
        if r.name == start:
            if opened is not None:
                raise SpanError(f"kernel records could not be attributed to calls: two start markers in a row "
                                f"(correlation {opened.corr} and {r.corr})")
            opened = r
            windows.append([])
        elif r.name == end:
            if opened is None:
                raise SpanError(f"kernel records could not be attributed to calls: an end marker without a start "
                                f"(correlation {r.corr})")
            pairs.append((opened, r))
            opened = None
        elif opened is not None:
            windows[-1].append(r)
        elif windows:  # before the first start marker: warm-up calls, which are not timed
            outside.append(r)
    if opened is not None or len(pairs) != calls:
        raise SpanError(f"kernel records could not be attributed to calls: {len(windows)} start and {len(pairs)} "
                        f"end markers for {calls} timed calls")
    return windows, outside, pairs


def call_spans(windows: list[list[Record]], pairs: list[tuple[Record, Record]]) -> list[int]:
    """Nanoseconds from each call's first record's start to its last record's end.

    Refused when a call ran no GPU work, when its work totals zero time, or when a record ran outside its
    call's place on the calling stream (before the start marker finished or after the end marker began):
    work on another stream that the call did not order with its own, which the markers cannot bracket."""
    spans = []
    for k, (window, (first, last)) in enumerate(zip(windows, pairs)):
        if not window:
            raise SpanError(f"timed call {k} launched no GPU work (no kernel records between its markers)")
        busy = sum(r.end_ns - r.start_ns for r in window)
        if busy <= 0:
            raise SpanError(f"timed call {k}'s kernels total zero time")
        for r in window:
            if r.start_ns < first.end_ns - ORDER_SLACK_NS or r.end_ns > last.start_ns + ORDER_SLACK_NS:
                raise SpanError(f"timed call {k} ran {r.name!r} on stream {r.stream} outside its place on the "
                                f"calling stream (work not ordered with the calling stream: not joined before "
                                f"return, or started before the call)")
        spans.append(max(r.end_ns for r in window) - min(r.start_ns for r in window))
    return spans


def call_busy(windows: list[list[Record]]) -> list[int]:
    """Nanoseconds each call kept the device busy: the union of its records' intervals (a stream's records one
    after another add up; records overlapping on two streams count once). Unlike the span, a gap in which the GPU
    waited for the host (a size read back mid-call, then the next launch) does not count: the measurement rule of
    an operator with data-dependent output sizes (catalogue.vocabulary.TIMING_RULES, docs/reproducibility.md)."""
    busy = []
    for window in windows:
        total, reach = 0, None
        for start, end in sorted((r.start_ns, r.end_ns) for r in window):
            if reach is None or start >= reach:
                total += end - start
                reach = end
            elif end > reach:
                total += end - reach
                reach = end
        busy.append(total)
    return busy


def time_by_name(windows: list[list[Record]]) -> dict[str, float]:
    """Microseconds per record name, summed over the windows (adoption's input)."""
    us: dict[str, float] = {}
    for window in windows:
        for r in window:
            us[r.name] = us.get(r.name, 0.0) + (r.end_ns - r.start_ns) / 1e3
    return us


def outside_owned(outside: list[Record], owned: set[str]) -> list[str]:
    """Names of the submission's own kernels that ran between or after the timed calls (work deferred past a
    call's return, where no marker brackets it)."""
    return sorted({r.name for r in outside if r.name in owned})


def records_from_rows(table: dict, key: str = "correlation_id") -> list[Record]:
    """Records from timing.kineto_records' table, ordered by `key` (correlation_id or linked_correlation_id)."""
    column = {"correlation_id": 0, "linked_correlation_id": 1}[key]
    names, kinds = table["names"], table["kinds"]
    return [Record(int(r[column]), int(r[2]), int(r[3]), int(r[4]), str(names[r[5]]), str(kinds[r[6]]))
            for r in table["rows"]]


def attribute(table: dict, calls: int):
    """call_windows over the records ordered by CUPTI's correlation id, or by the linked correlation id where
    the first does not order them (profiler builds differ in which field carries it on GPU records); the
    error names both attempts when neither does."""
    errors = []
    for key in ("correlation_id", "linked_correlation_id"):
        try:
            return call_windows(records_from_rows(table, key), calls)
        except SpanError as exc:
            errors.append(f"by {key}: {exc}")
    raise SpanError("kernel records could not be attributed to calls (" + "; ".join(errors) + ")")
