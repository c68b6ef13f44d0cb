"""A piece of a Kineto trace's decoded events sorted by role and taken apart into plain columns (lists): what the
reader (ingest/kineto.py) keeps of each piece once its JSON is dropped."""

from __future__ import annotations

from operator import attrgetter
from typing import NamedTuple

from ingest.kineto_json import GPU, GPU_ARGS, GPU_KINDS, LAUNCH, LAUNCH_ARGS, RANGE, ROLES, Phase, names

_FIELDS = ("name", "cat", "pid", "tid", "ts", "dur", "args")
_LAUNCH_FIELDS = ("name", "pid", "tid", "ts", "dur", "args")
_RANGE_FIELDS = ("pid", "tid", "ts", "dur", "cat", "name", "args")


class GpuFields(NamedTuple):
    """Every kernel, memcpy and memset of a part of a trace, in file order; times in the trace's µs."""

    name: list[str]
    category: list[str]  # kernel | memcpy | memset
    ts: list
    dur: list
    device: list[int]
    stream: list[int]
    correlation: list[int | None]
    external_id: list[int | None]
    graph_node: list[bool]
    grid: list[tuple[int, int, int] | None]


class LaunchFields(NamedTuple):
    """The runtime/driver rows of a part of a trace, in file order; times in the trace's µs."""

    name: list[str]
    pid: list
    tid: list
    ts: list
    dur: list
    external_id: list[int | None]
    correlation: list[int | None]


def sort_roles(events: list) -> tuple[list, list, list]:
    """The phase-X events of each role (GPU activity, launch row, CPU range), each in file order."""
    # Per-event Python work is what a 100 MB trace costs: one loop sorts events by role, then whole
    # columns are taken at once.
    gpu, launch, cpu = [], [], []
    append_to = {GPU: gpu.append, LAUNCH: launch.append, RANGE: cpu.append}
    append_of = {cat: append_to[role] for cat, role in ROLES.items()}.get
    x = Phase.X
    for event in events:
        append = append_of(event.cat)
        if append is not None and event.ph is x:
            append(event)
    return gpu, launch, cpu


def gpu_fields(gpu: list) -> GpuFields:
    """The columns of GPU activity events; Malformed if a name or args are."""
    name, cat, pid, tid, ts, dur, args = fields(gpu, _FIELDS)
    args = GPU_ARGS.column(args)
    return GpuFields(
        name=name,
        category=list(map(GPU_KINDS.__getitem__, cat)),
        ts=ts,
        dur=dur,
        device=_ids(field(args, "device"), pid),
        stream=_ids(field(args, "stream"), tid),
        correlation=field(args, "correlation"),
        external_id=field(args, "external_id"),
        graph_node=list(map(bool, field(args, "graph_id"))),
        grid=_grids(field(args, "grid")),
    )


def launch_fields(launch: list) -> LaunchFields:
    """The columns of launch-row events; Malformed if a name or args are."""
    name, pid, tid, ts, dur, args = fields(launch, _LAUNCH_FIELDS)
    args = LAUNCH_ARGS.column(args)
    return LaunchFields(name, pid, tid, ts, dur, field(args, "external_id"), field(args, "correlation"))


def range_fields(cpu: list) -> list[list]:
    """pid, tid, ts, dur, category and the JSON texts of name and args of CPU-range events."""
    return fields(cpu, _RANGE_FIELDS)


def fields(events: list, names_of: tuple[str, ...]) -> list[list]:
    """One list per field of `events`; a `name` field first as strings (None as ""), decoded from its JSON text."""
    columns = [field(events, f) for f in names_of]
    if names_of[0] == "name":
        columns[0] = no_none(names(columns[0]))
    return columns


def field(items: list, name: str) -> list:
    return list(map(attrgetter(name), items))


def no_none(values: list) -> list[str]:
    return [n or "" for n in values] if None in values else values


def _ids(values: list, fallbacks: list) -> list[int]:
    """Device or stream ids: ints as written, else parsed from a string, else the event's pid/tid."""
    if set(map(type, values)) <= {int}:
        return values
    return [v if type(v) is int else _int(v, _int(f, 0)) for v, f in zip(values, fallbacks)]


def _grids(values: list) -> list[tuple[int, int, int] | None]:
    """Each event's launch grid (`_grid`), equal grids sharing one tuple: a trace launches a few distinct grids
    many times over, and a list per kernel is kept until attribution (tests/ingest/test_kineto_events.py)."""
    shared: dict[tuple, tuple] = {}
    return [None if grid is None else shared.setdefault(grid, grid) for grid in map(_grid, values)]


def _grid(value) -> tuple[int, int, int] | None:
    """A launch grid as three non-negative ints, else None (absent on HIP-graph and hipModuleLaunchKernel rows)."""
    if type(value) is list and len(value) == 3 and all(type(v) is int and 0 <= v < 2**31 for v in value):
        return tuple(value)
    return None


def _int(value, fallback):
    if type(value) is int:
        return value
    if isinstance(value, str):
        try:
            return int(value, 0)
        except ValueError:
            return fallback
    return fallback
