"""Kineto Chrome-trace reader: a `.json`/`.json.gz` profiler trace into typed event columns.

Handles every format generation seen in the wild: PyTorch <= 1.13 (`async_cpu_to_gpu` flows,
`Profiler Event Index`), integer µs timestamps (PyTorch 2.0 era), absolute float µs carrying ns
fractions, relative µs plus `baseTimeNanoseconds` (>= 2.4), ROCm `hip*` runtime rows under
`cuda_runtime`, traces without flow events, and integers beyond int64 in args.
"""

from __future__ import annotations

from dataclasses import dataclass, field as dataclass_field
from operator import attrgetter
from pathlib import Path

import polars as pl

from ingest.kineto_events import read_pieces
from ingest.kineto_fields import GpuFields, LaunchFields, gpu_fields, launch_fields, range_fields, sort_roles
from ingest.kineto_json import (GPU, GPU_ARGS, LAUNCH, LAUNCH_ARGS, NULL_JSON, OP_ARGS, RANGE, ROLES, Event,
                                Malformed, OpArgs, Phase, name_of, names)
from ingest.tracefile import TraceError, check_file_size, file_chunks, file_trace_id, inflate_chunks, is_plain_local, read_trace_file, trace_id_of


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
    grid: list[list[int] | None]  # the launch's [x, y, z] blocks where the trace gives them


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

    Times are columns; a range's category, the JSON text of its name and its shape args are kept per row (equal
    texts one object), its name decoded only for the rows that enclose a launch, a fraction of them.
    """

    ts_ns: pl.Series  # Int64
    end_ns: pl.Series  # Int64
    thread_rows: dict[tuple, pl.Series]  # (pid, tid) -> that thread's rows
    cat: list  # kineto_json.Category members
    name: list[bytes]  # JSON text of each name
    args: list[OpArgs | TraceError]  # External id and shape args; the error of a range whose args are malformed

    def names(self, rows: list[int]) -> list[str]:
        """The names of the given ranges; Malformed if one is not a string."""
        return no_none(names(list(map(self.name.__getitem__, rows))))


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
            for row in rows:
                try:
                    names([self.ranges.name[row]])
                except Malformed:
                    text = self.ranges.name[row].decode(errors="replace")
                    raise TraceError(self.path, f"CPU event at ts={self.ranges.ts_ns[row]} ns has a name that is "
                                                f"not a string: {text}") from None
            raise

    def op_args(self, rows: list[int]) -> list[OpArgs]:
        """External id and raw shape args of the given CPU ranges, or a TraceError naming a malformed one."""
        args = list(map(self.ranges.args.__getitem__, rows))
        for a in args:
            if isinstance(a, TraceError):
                raise a
        return args


def no_none(values: list) -> list[str]:
    return [n or "" for n in values] if None in values else values


def to_ns(value) -> int:
    """Kineto µs (int, float, or Decimal for absolute-time traces) as integer ns."""
    if type(value) is int:
        return value * 1000
    if type(value) is float:
        return round(value * 1000)
    return int(value * 1000)


def read_kineto(path: str | Path, raw: bytes | None = None, trace_id: str | None = None) -> KinetoTrace:
    """A Kineto trace file (its bytes `raw` where read already) read into columns of GPU activities, launch rows
    and CPU ranges; its JSON is inflated and decoded a piece at a time (ingest/kineto_events.py), so memory holds
    what is kept of the events, not the text."""
    if raw is None and is_plain_local(path):
        # a plain JSON file is streamed from the disk: its size never has to fit in memory (issue: bad input)
        check_file_size(path)
        trace_id = file_trace_id(path) if trace_id is None else trace_id
        stream, kept = read_pieces(path, lambda: file_chunks(path), lambda: _Columns(path))
    else:
        raw = read_trace_file(path) if raw is None else raw
        trace_id = trace_id_of(raw) if trace_id is None else trace_id
        stream, kept = read_pieces(path, lambda: inflate_chunks(path, raw), lambda: _Columns(path))
    base_ns = int(stream.base_time) if stream.base_time is not None else 0
    try:
        activities = _activities(kept.gpu, base_ns)
        launches = _launches(kept.launch, base_ns)
        ranges = kept.ranges(base_ns)
    except OverflowError:
        raise TraceError(path, "timestamps beyond the range of int64 ns") from None
    if not activities.name:
        raise TraceError(path, "no GPU activity (no kernel, memcpy or memset events)")
    return KinetoTrace(str(path), trace_id, activities, launches, ranges, events=stream.events)


@dataclass
class _Columns:
    """What is kept of a trace's events, a decoded piece at a time (add): plain columns of its GPU activities and
    launch rows, and of its CPU ranges their times, threads, categories, name texts and shape args, each distinct
    text one object (a trace repeats its ops' shapes every step)."""

    path: str | Path
    gpu: GpuFields = dataclass_field(default_factory=lambda: GpuFields(*([] for _ in GpuFields._fields)))
    launch: LaunchFields = dataclass_field(default_factory=lambda: LaunchFields(*([] for _ in LaunchFields._fields)))
    columns: list = dataclass_field(default_factory=lambda: [[] for _ in range(7)])
    texts: dict = dataclass_field(default_factory=lambda: {bytes(NULL_JSON): NULL_JSON})

    def add(self, events: list) -> None:
        gpu, launch, cpu = sort_roles(events)
        try:
            taken = (gpu_fields(gpu) if gpu else None, launch_fields(launch) if launch else None,
                     range_fields(cpu) if cpu else None)
            times = [(c.ts, c.dur) for c in taken[:2] if c is not None] + ([taken[2][2:4]] if cpu else [])
            if any(_bad_times(ts, dur) for ts, dur in times):
                raise Malformed
        except Malformed:
            _raise_first_problem(self.path, events)
            raise
        for kept, columns in zip((self.gpu, self.launch), taken):
            if columns is not None:
                for column, values in zip(kept, columns):
                    column.extend(values)
        if cpu:
            self._add_ranges(cpu, taken[2])

    def _add_ranges(self, cpu: list[Event], columns: list[list]) -> None:
        pid, tid, ts, dur, cat, name, args = columns
        texts = self.texts
        name = list(map(bytes, name))
        try:
            decoded = OP_ARGS.column(args)
        except Malformed:  # kept per range, raised only if attribution reads that range
            decoded = [_one_args(self.path, event) for event in cpu]
        ok = [a for a in decoded if not isinstance(a, TraceError)]
        shape_texts = []
        for field_name in ("dims", "types", "concrete"):
            values = list(map(bytes, map(attrgetter(field_name), ok)))
            shape_texts.append(list(map(texts.setdefault, values, values)))
        kept = list(map(OpArgs, map(attrgetter("external_id"), ok), *shape_texts))
        if len(ok) < len(decoded):
            kept.reverse()
            kept = [a if isinstance(a, TraceError) else kept.pop() for a in decoded]
        for column, values in zip(self.columns, (pid, tid, ts, dur, cat, list(map(texts.setdefault, name, name)), kept)):
            column.extend(values)

    def ranges(self, base_ns: int) -> CpuRanges:
        pid, tid, ts, dur, cat, name, args = self.columns[:7]
        start_ns, dur_ns = _times(ts, dur, base_ns)
        return CpuRanges(ts_ns=start_ns, end_ns=start_ns + dur_ns, thread_rows=_rows_by_thread(pid, tid), cat=cat,
                         name=name, args=args)


def _bad_times(ts: list, dur: list) -> bool:
    """Whether a column of times misses one or holds a negative duration (checked a piece at a time)."""
    return None in ts or None in dur or min(dur) < 0


def _one_args(path, event: Event) -> OpArgs | TraceError:
    try:
        return OP_ARGS.of(path, event)
    except TraceError as exc:
        return exc


_LIMIT_US = 9 * 10**15  # ns of µs beyond it come near the end of int64 (year 2255 in epoch time)


def _activities(f: GpuFields, base_ns: int) -> GpuActivities:
    ts_ns, dur_ns = _times(f.ts, f.dur, base_ns)
    return GpuActivities(f.name, f.category, ts_ns, dur_ns, f.device, f.stream, f.correlation, f.external_id,
                         f.graph_node, f.grid)


def _launches(f: LaunchFields, base_ns: int) -> LaunchRows:
    row_of = dict(zip(f.correlation, range(len(f.correlation))))
    row_of.pop(None, None)
    return LaunchRows(name=f.name, thread=list(zip(f.pid, f.tid)), ts_ns=_times(f.ts, f.dur, base_ns)[0],
                      external_id=f.external_id, row_of=row_of)


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
