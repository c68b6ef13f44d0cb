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

import polars as pl

from ingest.kineto_json import (
    GPU,
    GPU_ARGS,
    GPU_KINDS,
    LAUNCH,
    LAUNCH_ARGS,
    OP_ARGS,
    RANGE,
    ROLES,
    Event,
    Malformed,
    OpArgs,
    Phase,
    decode_document,
    name_of,
    names,
)
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
        return _no_none(names(list(map(attrgetter("name"), map(self.events.__getitem__, rows)))))


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
            return OP_ARGS.column(_field(events, "args"))
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
    doc = decode_document(path, text)
    del text
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


_LIMIT_US = 9 * 10**15  # ns of µs beyond it come near the end of int64 (year 2255 in epoch time)
_FIELDS = ("name", "cat", "pid", "tid", "ts", "dur", "args")
_LAUNCH_FIELDS = ("name", "pid", "tid", "ts", "dur", "args")
_RANGE_FIELDS = ("pid", "tid", "ts", "dur")


def _columns(events: list, base_ns: int) -> tuple[GpuActivities, LaunchRows, CpuRanges]:
    # Per-event Python work is what a 100 MB trace costs; here there is one loop that sorts events
    # by role, then whole columns are converted at once.
    gpu, launch, cpu = [], [], []
    append_to = {GPU: gpu.append, LAUNCH: launch.append, RANGE: cpu.append}
    append_of = {cat: append_to[role] for cat, role in ROLES.items()}.get
    x = Phase.X
    for event in events:
        append = append_of(event.cat)
        if append is not None and event.ph is x:
            append(event)

    name, cat, pid, tid, ts, dur, raw = _fields(gpu, _FIELDS)
    args = GPU_ARGS.column(raw)
    ts_ns, dur_ns = _times(ts, dur, base_ns)
    activities = GpuActivities(
        name=name,
        category=list(map(GPU_KINDS.__getitem__, cat)),
        ts_ns=ts_ns,
        dur_ns=dur_ns,
        device=_ids(_field(args, "device"), pid),
        stream=_ids(_field(args, "stream"), tid),
        correlation=_field(args, "correlation"),
        external_id=_field(args, "external_id"),
        graph_node=list(map(bool, _field(args, "graph_id"))),
    )

    name, pid, tid, ts, dur, raw = _fields(launch, _LAUNCH_FIELDS)
    args = LAUNCH_ARGS.column(raw)
    correlation = _field(args, "correlation")
    row_of = dict(zip(correlation, range(len(correlation))))
    row_of.pop(None, None)
    launches = LaunchRows(
        name=name,
        thread=list(zip(pid, tid)),
        ts_ns=_times(ts, dur, base_ns)[0],
        external_id=_field(args, "external_id"),
        row_of=row_of,
    )

    pid, tid, ts, dur = _fields(cpu, _RANGE_FIELDS)
    start_ns, dur_ns = _times(ts, dur, base_ns)
    ranges = CpuRanges(ts_ns=start_ns, end_ns=start_ns + dur_ns, thread_rows=_rows_by_thread(pid, tid), events=cpu)
    return activities, launches, ranges


def _fields(events: list, fields: tuple[str, ...]) -> list[list]:
    columns = [_field(events, f) for f in fields]
    if fields[0] == "name":
        columns[0] = _no_none(names(columns[0]))
    return columns


def _field(items: list, name: str) -> list:
    return list(map(attrgetter(name), items))


def _ids(values: list, fallbacks: list) -> list[int]:
    """Device or stream ids: ints as written, else parsed from a string, else the event's pid/tid."""
    if set(map(type, values)) <= {int}:
        return values
    return [v if type(v) is int else _int(v, _int(f, 0)) for v, f in zip(values, fallbacks)]


def _no_none(names: list) -> list[str]:
    return [n or "" for n in names] if None in names else names


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


def _int(value, fallback):
    if type(value) is int:
        return value
    if isinstance(value, str):
        try:
            return int(value, 0)
        except ValueError:
            return fallback
    return fallback


