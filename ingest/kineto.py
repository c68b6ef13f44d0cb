"""Kineto Chrome-trace reader: a `.json`/`.json.gz` profiler trace into typed event lists.

Handles every format generation seen in the wild: PyTorch <= 1.13 (`async_cpu_to_gpu` flows,
`Profiler Event Index`), integer µs timestamps (PyTorch 2.0 era), absolute float µs carrying ns
fractions, relative µs plus `baseTimeNanoseconds` (>= 2.4), ROCm `hip*` runtime rows under
`cuda_runtime`, traces without flow events, and integers beyond int64 in args.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import orjson

# GPU-side activity categories, current and pre-2.0 spellings.
GPU_CATEGORIES = {
    "kernel": "kernel",
    "gpu_memcpy": "memcpy",
    "gpu_memset": "memset",
    "Kernel": "kernel",
    "Memcpy": "memcpy",
    "Memset": "memset",
}
# Rows that launch GPU work and carry its `correlation` (CUDA runtime/driver; ROCm uses cuda_runtime too).
LAUNCH_CATEGORIES = {"cuda_runtime", "cuda_driver", "Runtime"}
# CPU ranges that can enclose a launch: ops and record_function/step annotations.
OP_CATEGORIES = {"cpu_op", "Operator"}
ANNOTATION_CATEGORIES = {"user_annotation"}


class TraceError(ValueError):
    """A trace file that cannot be read, with the file and the problem named."""

    def __init__(self, path: str | Path, problem: str):
        super().__init__(f"{path}: {problem}")
        self.path = str(path)
        self.problem = problem


@dataclass(slots=True)
class GpuActivity:
    """One kernel, memcpy or memset as the GPU ran it."""

    name: str
    category: str
    ts_ns: int
    dur_ns: int
    device: int
    stream: int
    correlation: int | None
    external_id: int | None
    graph_node: bool  # kineto >= 2026 marks kernels replayed from a CUDA graph with `graph id`


@dataclass(slots=True)
class CpuRange:
    """One CPU-side op or annotation on a thread: the candidates for a launch's enclosing stack."""

    name: str
    is_op: bool
    ts_ns: int
    end_ns: int
    external_id: int | None
    args: dict | None  # Input Dims / Input type / Concrete Inputs only, for ops that have them


@dataclass(slots=True)
class LaunchRow:
    """A runtime/driver call that launched GPU work, keyed by its correlation id."""

    name: str
    thread: tuple
    ts_ns: int
    dur_ns: int
    external_id: int | None


@dataclass(slots=True)
class KinetoTrace:
    """The parts of a Kineto trace that attribution needs; nothing else is kept."""

    path: str
    trace_id: str
    activities: list[GpuActivity]
    launches: dict[int, LaunchRow]
    ranges: dict[tuple, list[CpuRange]] = field(default_factory=dict)  # per (pid, tid)
    events: int = 0


def to_ns(value) -> int:
    """Kineto µs (int, or float with ns fractions) as integer ns, exact to the float's precision."""
    if type(value) is int:
        return value * 1000
    whole = int(value)
    # Splitting keeps absolute epoch µs (~1.7e15) exact: whole*1000 would overflow float precision.
    return whole * 1000 + round((value - whole) * 1000)


def trace_id_of(raw: bytes) -> str:
    """The content address of a trace file: first 16 hex digits of its sha256."""
    return hashlib.sha256(raw).hexdigest()[:16]


def load_document(path: str | Path, raw: bytes | None = None) -> dict:
    """The parsed JSON document of a trace file, or a TraceError saying why it cannot be."""
    path = Path(path)
    if raw is None:
        raw = path.read_bytes()
    data = raw
    if raw[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(raw)
        except (EOFError, OSError, zlib.error) as exc:
            raise TraceError(path, f"truncated or corrupt gzip ({exc})") from None
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        # orjson stops at integers beyond 64 bits; the stdlib parser reads them as Python ints.
        try:
            doc = json.loads(data)
        except (ValueError, UnicodeDecodeError):
            raise TraceError(path, f"invalid JSON ({exc})") from None
    if isinstance(doc, list):  # the Chrome trace format also allows a bare event array
        doc = {"traceEvents": doc}
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise TraceError(path, "not a profiler trace: no `traceEvents` list at the top level")
    return doc


def _duration(path, event, kind) -> int:
    dur = event.get("dur")
    if dur is None:
        raise TraceError(path, f"{kind} event {event.get('name')!r} at ts={event.get('ts')} has no duration")
    if dur < 0:
        raise TraceError(path, f"{kind} event {event.get('name')!r} at ts={event.get('ts')} has negative duration {dur}")
    return to_ns(dur)


def _int_or_none(value):
    if value is None:
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


_SHAPE_ARGS = (("Input Dims", "dims"), ("Input type", "types"), ("Concrete Inputs", "concrete"))


def read_kineto(path: str | Path) -> KinetoTrace:
    """A Kineto trace file read into GPU activities, launch rows and per-thread CPU ranges."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise TraceError(path, f"cannot read ({exc.strerror})") from None
    trace_id = trace_id_of(raw)
    doc = load_document(path, raw)
    del raw
    base = doc.get("baseTimeNanoseconds")
    base_ns = int(base) if isinstance(base, (int, float)) else 0
    events = doc["traceEvents"]
    activities: list[GpuActivity] = []
    launches: dict[int, LaunchRow] = {}
    ranges: dict[tuple, list[CpuRange]] = {}
    for event in events:
        if not isinstance(event, dict) or event.get("ph") != "X":
            continue
        cat = event.get("cat")
        if cat in GPU_CATEGORIES:
            args = event.get("args") or {}
            ts = event.get("ts")
            if ts is None:
                raise TraceError(path, f"GPU event {event.get('name')!r} has no timestamp")
            graph_id = args.get("graph id")
            activities.append(
                GpuActivity(
                    name=str(event.get("name", "")),
                    category=GPU_CATEGORIES[cat],
                    ts_ns=base_ns + to_ns(ts),
                    dur_ns=_duration(path, event, "GPU"),
                    device=_int_or_none(args.get("device", event.get("pid"))) or 0,
                    stream=_int_or_none(args.get("stream", event.get("tid"))) or 0,
                    correlation=_int_or_none(args.get("correlation")),
                    external_id=_int_or_none(args.get("External id")),
                    graph_node=bool(graph_id),
                )
            )
        elif cat in LAUNCH_CATEGORIES:
            args = event.get("args") or {}
            correlation = _int_or_none(args.get("correlation"))
            if correlation is None:
                continue
            launches[correlation] = LaunchRow(
                name=str(event.get("name", "")),
                thread=(event.get("pid"), event.get("tid")),
                ts_ns=base_ns + to_ns(event.get("ts", 0)),
                dur_ns=_duration(path, event, "launch"),
                external_id=_int_or_none(args.get("External id")),
            )
        elif cat in OP_CATEGORIES or cat in ANNOTATION_CATEGORIES:
            args = event.get("args") or {}
            start = base_ns + to_ns(event.get("ts", 0))
            shape_args = None
            if "Input Dims" in args:
                shape_args = {key: args.get(name) for name, key in _SHAPE_ARGS}
            ranges.setdefault((event.get("pid"), event.get("tid")), []).append(
                CpuRange(
                    name=str(event.get("name", "")),
                    is_op=cat in OP_CATEGORIES,
                    ts_ns=start,
                    end_ns=start + _duration(path, event, "CPU"),
                    external_id=_int_or_none(args.get("External id")),
                    args=shape_args,
                )
            )
    if not activities:
        raise TraceError(path, "no GPU activity (no kernel, memcpy or memset events)")
    return KinetoTrace(
        path=str(path),
        trace_id=trace_id,
        activities=activities,
        launches=launches,
        ranges=ranges,
        events=len(events),
    )
