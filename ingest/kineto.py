"""Kineto Chrome-trace reader: a `.json`/`.json.gz` profiler trace into typed event columns.

Handles every format generation seen in the wild: PyTorch <= 1.13 (`async_cpu_to_gpu` flows,
`Profiler Event Index`), integer µs timestamps (PyTorch 2.0 era), absolute float µs carrying ns
fractions, relative µs plus `baseTimeNanoseconds` (>= 2.4), ROCm `hip*` runtime rows under
`cuda_runtime`, traces without flow events, and integers beyond int64 in args.
"""

from __future__ import annotations

from dataclasses import dataclass
from operator import attrgetter
from pathlib import Path

import msgspec
import polars as pl

from ingest.kineto_json import (
    GPU,
    GPU_ARGS,
    LAUNCH,
    LAUNCH_ARGS,
    OP_ARGS,
    RANGE,
    ROLES,
    Event,
    Malformed,
    OpArgs,
    Phase,
    TAGGED_DOCUMENT,
    decode_document,
    first_float_ts,
    name_of,
    names,
    needs_exact_time,
)
from ingest.kineto_fields import (
    GpuFields,
    LaunchFields,
    field,
    gpu_fields,
    launch_fields,
    no_none,
    range_fields,
    sort_roles,
)
from ingest.kineto_split import Helper, head_text
from ingest.limits import LIMIT_EVENTS_ENV, limits
from ingest.tracefile import TraceBytes, TraceError, trace_id_of  # noqa: F401  (TraceError, trace_id_of re-exported)


@dataclass(slots=True)
class GpuActivities:
    """Every kernel, memcpy and memset as the GPU ran it: one entry per activity, in file order."""

    name: list[str]
    category: list[str]  # kernel | memcpy | memset
    ts_ns: pl.Series  # Int64
    dur_ns: pl.Series  # Int64
    device: list[int]
    stream: list[int]
    correlation: list[int | None]
    external_id: list[int | None]
    graph_node: list[bool]  # kineto >= 2026 marks kernels replayed from a CUDA graph with `graph id`


@dataclass(slots=True)
class LaunchRows:
    """Runtime/driver calls that launched GPU work, in file order."""

    name: list[str]
    thread: list[tuple]  # (pid, tid)
    ts_ns: pl.Series  # Int64
    external_id: list[int | None]
    row_of: dict[int, int]  # correlation -> its row (the last one written, if repeated)


@dataclass(slots=True)
class CpuRanges:
    """CPU ops and annotations, in file order: the candidates for a launch's enclosing stack.

    Times are columns; names and args are read from the decoded events only for the rows that
    enclose a launch, a fraction of them.
    """

    ts_ns: pl.Series  # Int64
    end_ns: pl.Series  # Int64
    thread_rows: dict[tuple, pl.Series]  # (pid, tid) -> that thread's rows
    events: list[Event]  # the decoded events, one per row

    def names(self, rows: list[int]) -> list[str]:
        """The names of the given ranges; Malformed if one is not a string."""
        return no_none(names(list(map(attrgetter("name"), map(self.events.__getitem__, rows)))))


@dataclass(slots=True)
class KinetoTrace:
    """The parts of a Kineto trace that attribution needs, as columns; nothing else is kept."""

    path: str
    trace_id: str
    activities: GpuActivities
    launches: LaunchRows
    ranges: CpuRanges
    events: int = 0

    def range_names(self, rows: list[int]) -> list[str]:
        """Names of the given CPU ranges, or a TraceError naming one whose name is not a string."""
        try:
            return self.ranges.names(rows)
        except Malformed:
            _raise_first_problem(Path(self.path), list(map(self.ranges.events.__getitem__, rows)))
            raise

    def op_args(self, rows: list[int]) -> list[OpArgs]:
        """External id and raw shape args of the given CPU ranges, or a TraceError naming a malformed one."""
        events = list(map(self.ranges.events.__getitem__, rows))
        try:
            return OP_ARGS.column(field(events, "args"))
        except Malformed:
            for event in events:
                OP_ARGS.of(self.path, event)
            raise


def to_ns(value) -> int:
    """Kineto µs (int, float, or Decimal for absolute-time traces) as integer ns."""
    if type(value) is int:
        return value * 1000
    if type(value) is float:
        return round(value * 1000)
    return int(value * 1000)


def read_kineto(source: str | Path | TraceBytes) -> KinetoTrace:
    """A Kineto trace file read into columns of GPU activities, launch rows and CPU ranges."""
    source = source if isinstance(source, TraceBytes) else TraceBytes(source)
    path = source.path
    trace_id, text = source.result()
    helper = source.take_helper()
    if helper is not None:
        trace = read_split(path, trace_id, text, helper)
        if trace is not None:
            return trace
    doc = decode_document(path, text)
    del text
    _check_events(path, len(doc.traceEvents))
    base = doc.baseTimeNanoseconds
    base_ns = int(base) if base is not None else 0
    try:
        activities, launches, ranges = _columns(doc.traceEvents, base_ns)
    except Malformed:
        _raise_first_problem(path, doc.traceEvents)
        raise
    except OverflowError:
        raise TraceError(path, "timestamps beyond the range of int64 ns") from None
    if not activities.name:
        raise TraceError(path, "no GPU activity (no kernel, memcpy or memset events)")
    return KinetoTrace(str(path), trace_id, activities, launches, ranges, events=len(doc.traceEvents))



def read_split(path: str | Path, trace_id: str, text: bytes, helper: Helper) -> KinetoTrace | None:
    """read_kineto's trace with its GPU activities and launch rows from the helper process that decoded the part
    after the CPU ranges meanwhile (ingest/kineto_split.py); None where that does not apply (read_kineto then
    decodes the whole file, and names any problem)."""
    at = helper.split()
    if at is None:
        return None
    try:
        head = TAGGED_DOCUMENT.decode(head_text(text, at))
    except (msgspec.ValidationError, msgspec.DecodeError):
        helper.cancel()
        return None
    gpu, launch, cpu = sort_roles(head.traceEvents)
    if gpu or launch:
        helper.cancel()
        return None
    answer = helper.answer()
    if answer is None or answer[0] != at:
        return None
    _, gpu_side, launch_side, tail_base, tail_events, tail_first_ts = answer
    base = head.baseTimeNanoseconds
    if base is not None and tail_base is not None:
        return None  # a document naming its base time twice: the whole-file decode reads it as written
    base = tail_base if base is None else base
    first_ts = first_float_ts(head.traceEvents)
    if base is None and needs_exact_time(tail_first_ts if first_ts is None else first_ts):
        return None
    base_ns = int(base) if base is not None else 0
    try:
        activities = _activities(GpuFields(*gpu_side), base_ns)
        launches = _launches(LaunchFields(*launch_side), base_ns)
        ranges = _ranges(cpu, base_ns)
    except (Malformed, OverflowError):
        return None
    if not activities.name:
        return None
    _check_events(path, len(head.traceEvents) + tail_events)
    return KinetoTrace(str(path), trace_id, activities, launches, ranges, events=len(head.traceEvents) + tail_events)


def _check_events(path, events: int) -> None:
    bound = limits().max_events
    if events > bound:
        raise TraceError(path, f"more than {bound} events, the bound on a trace's events ({LIMIT_EVENTS_ENV} raises it)")


_LIMIT_US = 9 * 10**15  # ns of µs beyond it come near the end of int64 (year 2255 in epoch time)


def _columns(events: list, base_ns: int) -> tuple[GpuActivities, LaunchRows, CpuRanges]:
    gpu, launch, cpu = sort_roles(events)
    return _activities(gpu_fields(gpu), base_ns), _launches(launch_fields(launch), base_ns), _ranges(cpu, base_ns)


def _activities(f: GpuFields, base_ns: int) -> GpuActivities:
    ts_ns, dur_ns = _times(f.ts, f.dur, base_ns)
    return GpuActivities(f.name, f.category, ts_ns, dur_ns, f.device, f.stream, f.correlation, f.external_id,
                         f.graph_node)


def _launches(f: LaunchFields, base_ns: int) -> LaunchRows:
    row_of = dict(zip(f.correlation, range(len(f.correlation))))
    row_of.pop(None, None)
    return LaunchRows(name=f.name, thread=list(zip(f.pid, f.tid)), ts_ns=_times(f.ts, f.dur, base_ns)[0],
                      external_id=f.external_id, row_of=row_of)


def _ranges(cpu: list, base_ns: int) -> CpuRanges:
    pid, tid, ts, dur = range_fields(cpu)
    start_ns, dur_ns = _times(ts, dur, base_ns)
    return CpuRanges(ts_ns=start_ns, end_ns=start_ns + dur_ns, thread_rows=_rows_by_thread(pid, tid), events=cpu)


def _times(ts: list, dur: list, base_ns: int) -> tuple[pl.Series, pl.Series]:
    """Start (base_ns added) and duration of each event in ns; Malformed if one is missing or negative."""
    start_ns, dur_ns = _ns(ts), _ns(dur, durations=True)
    if base_ns and len(start_ns) and not (-(2**63) <= start_ns.min() + base_ns <= start_ns.max() + base_ns < 2**63):
        raise OverflowError
    return start_ns + base_ns, dur_ns


def _ns(values: list, durations: bool = False) -> pl.Series:
    """Kineto µs values as Int64 ns, as to_ns gives them, a whole column at once where that is exact."""
    kinds = set(map(type, values))
    if kinds == {float} or kinds == {int}:
        us = pl.Series(values, dtype=pl.Float64 if kinds == {float} else pl.Int64, strict=False)
        if durations and us.min() < 0:
            raise Malformed
        # float64 arithmetic here is Python's own, and round-half-even is Python's round().
        if kinds == {float} and -_LIMIT_US < us.min() <= us.max() < _LIMIT_US:
            return (us * 1000).round(mode="half_to_even").cast(pl.Int64)
        if kinds == {int} and us.null_count() == 0 and -_LIMIT_US < us.min() <= us.max() < _LIMIT_US:
            return us * 1000
    if None in values or (durations and any(v < 0 for v in values)):
        raise Malformed
    try:  # decimals, ints and floats mixed, huge values: one at a time
        return pl.Series([to_ns(v) for v in values], dtype=pl.Int64)
    except TypeError:  # polars' word for beyond int64
        raise OverflowError from None


def _rows_by_thread(pid: list, tid: list) -> dict[tuple, pl.Series]:
    if len(set(pid)) <= 1 and len(set(tid)) <= 1:  # most traces: one thread runs every op
        return {(pid[0], tid[0]): pl.int_range(len(pid), eager=True)} if pid else {}
    rows: dict[tuple, list[int]] = {}
    for i, thread in enumerate(zip(pid, tid)):
        rows.setdefault(thread, []).append(i)
    return {thread: pl.Series(r, dtype=pl.Int64) for thread, r in rows.items()}


def _raise_first_problem(path: Path, events: list[Event]) -> None:
    """The TraceError of the first malformed event in file order (missing time, a name that is not a string,
    bad args)."""
    for event in events:
        role = ROLES.get(event.cat)
        if role is None or event.ph is not Phase.X:
            continue
        if event.dur is None or event.dur < 0 or event.ts is None:
            _reject(path, event, role)
        try:
            names([event.name])
        except Malformed:
            what = {RANGE: "CPU", LAUNCH: "launch"}.get(role, "GPU")
            raise TraceError(path, f"{what} event at ts={event.ts} has a name that is not a string: {name_of(event)}") from None
        if role is not RANGE:
            (GPU_ARGS if role is GPU else LAUNCH_ARGS).of(path, event)


def _reject(path, event, role) -> None:
    what = {RANGE: "CPU", LAUNCH: "launch"}.get(role, "GPU")
    if event.ts is None:
        raise TraceError(path, f"{what} event {name_of(event)!r} has no timestamp")
    if event.dur is None:
        raise TraceError(path, f"{what} event {name_of(event)!r} at ts={event.ts} has no duration")
    raise TraceError(path, f"{what} event {name_of(event)!r} at ts={event.ts} has negative duration {event.dur}")
