"""Kineto Chrome-trace reader: a `.json`/`.json.gz` profiler trace into typed event lists.

Handles every format generation seen in the wild: PyTorch <= 1.13 (`async_cpu_to_gpu` flows,
`Profiler Event Index`), integer µs timestamps (PyTorch 2.0 era), absolute float µs carrying ns
fractions, relative µs plus `baseTimeNanoseconds` (>= 2.4), ROCm `hip*` runtime rows under
`cuda_runtime`, traces without flow events, and integers beyond int64 in args.
"""

from __future__ import annotations

import gzip
import hashlib
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from decimal import Decimal
from typing import Union

import msgspec

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

# One lookup per event decides its role: a GPU category's value is its kind itself.
_RANGE_OP, _RANGE_ANNOTATION, _LAUNCH = "range:op", "range:annotation", "launch"
_KINDS = (
    dict(GPU_CATEGORIES)
    | dict.fromkeys(LAUNCH_CATEGORIES, _LAUNCH)
    | dict.fromkeys(OP_CATEGORIES, _RANGE_OP)
    | dict.fromkeys(ANNOTATION_CATEGORIES, _RANGE_ANNOTATION)
)


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
    raw_args: msgspec.Raw  # decoded only for ranges that end up enclosing a launch

    def args(self) -> "OpArgs":
        """The range's External id and raw shape args."""
        return _OP_ARGS.decode(self.raw_args) if self.raw_args else _NO_OP_ARGS


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
    """Kineto µs (int, float, or Decimal for absolute-time traces) as integer ns."""
    if type(value) is int:
        return value * 1000
    if type(value) is float:
        return round(value * 1000)
    return int(value * 1000)


def trace_id_of(raw: bytes) -> str:
    """The content address of a trace file: first 16 hex digits of its sha256."""
    return hashlib.sha256(raw).hexdigest()[:16]


# Typed decoding: msgspec skips every field not named here without building Python objects for
# it, and `args` stays raw JSON until an event's category says it is needed; that is what makes a
# 100 MB trace cheap to read.
NULL_JSON = msgspec.Raw(b"null")
_Scalar = Union[int, str, None]


class _Event(msgspec.Struct, gc=False):
    ph: str = ""
    cat: Union[str, None] = None
    name: Union[str, None] = None
    pid: _Scalar = None
    tid: _Scalar = None
    ts: Union[int, float, None] = None
    dur: Union[int, float, None] = None
    args: msgspec.Raw = msgspec.Raw(b"")


class _Document(msgspec.Struct, gc=False):
    traceEvents: list[_Event]
    baseTimeNanoseconds: Union[int, float, None] = None


class _ExactEvent(_Event):
    # Absolute epoch µs (~1.7e15) with ns fractions need 19 significant digits, more than a
    # float64 holds (PyTorch nightlies of 2024 wrote them): read those timestamps as decimals.
    ts: Union[Decimal, None] = None
    dur: Union[Decimal, None] = None


class _ExactDocument(msgspec.Struct, gc=False):
    traceEvents: list[_ExactEvent]
    baseTimeNanoseconds: Union[int, float, None] = None


class _GpuArgs(msgspec.Struct, gc=False):
    external_id: Union[int, None] = msgspec.field(default=None, name="External id")
    correlation: Union[int, None] = None
    device: _Scalar = None
    stream: _Scalar = None
    graph_id: _Scalar = msgspec.field(default=None, name="graph id")


class _LaunchArgs(msgspec.Struct, gc=False):
    external_id: Union[int, None] = msgspec.field(default=None, name="External id")
    correlation: Union[int, None] = None


class OpArgs(msgspec.Struct, gc=False):
    """What attribution reads from a CPU op's args: its id and its shape args as raw JSON."""

    external_id: Union[int, None] = msgspec.field(default=None, name="External id")
    dims: msgspec.Raw = msgspec.field(default=NULL_JSON, name="Input Dims")
    types: msgspec.Raw = msgspec.field(default=NULL_JSON, name="Input type")
    concrete: msgspec.Raw = msgspec.field(default=NULL_JSON, name="Concrete Inputs")


_DOCUMENT = msgspec.json.Decoder(_Document)
_EVENT_LIST = msgspec.json.Decoder(list[_Event])
_EXACT_DOCUMENT = msgspec.json.Decoder(_ExactDocument)
_EXACT_EVENT_LIST = msgspec.json.Decoder(list[_ExactEvent])
# Timestamps beyond this many µs are absolute epoch time, where float64 drops the ns digits.
_FLOAT_EXACT_LIMIT_US = 4e12
_GPU_ARGS = msgspec.json.Decoder(_GpuArgs)
_LAUNCH_ARGS = msgspec.json.Decoder(_LaunchArgs)
_OP_ARGS = msgspec.json.Decoder(OpArgs)
_NO_OP_ARGS = OpArgs()


def decompress(path: Path, raw: bytes) -> bytes:
    """The JSON text of a trace file's bytes, gunzipped when they are gzip."""
    if raw[:2] != b"\x1f\x8b":
        return raw
    try:
        return gzip.decompress(raw)
    except (EOFError, OSError, zlib.error) as exc:
        raise TraceError(path, f"truncated or corrupt gzip ({exc})") from None


def decode_document(path: Path, data: bytes) -> _Document:
    """The trace's events and base time, or a TraceError naming what is wrong with the JSON."""
    bare = data.lstrip()[:1] == b"["  # the Chrome trace format also allows a bare event array
    try:
        doc = _Document(traceEvents=_EVENT_LIST.decode(data)) if bare else _DOCUMENT.decode(data)
        if _needs_exact_time(doc):
            doc = _Document(traceEvents=_EXACT_EVENT_LIST.decode(data)) if bare else _EXACT_DOCUMENT.decode(data)
        return doc
    except msgspec.ValidationError as exc:
        text = str(exc)
        if "missing required field `traceEvents`" in text or (not bare and text.startswith("Expected `object`")):
            raise TraceError(path, "not a profiler trace: no `traceEvents` list at the top level") from None
        raise TraceError(path, f"malformed trace event ({exc})") from None
    except msgspec.DecodeError as exc:
        raise TraceError(path, f"invalid JSON ({exc})") from None


def _needs_exact_time(doc) -> bool:
    if doc.baseTimeNanoseconds is not None:
        return False
    for event in doc.traceEvents:
        if event.ph == "X" and type(event.ts) is float:
            return event.ts > _FLOAT_EXACT_LIMIT_US
    return False


def _reject(path, event, kind) -> None:
    what = {_RANGE_OP: "CPU", _RANGE_ANNOTATION: "CPU", _LAUNCH: "launch"}.get(kind, "GPU")
    if event.ts is None:
        raise TraceError(path, f"{what} event {event.name!r} has no timestamp")
    if event.dur is None:
        raise TraceError(path, f"{what} event {event.name!r} at ts={event.ts} has no duration")
    raise TraceError(path, f"{what} event {event.name!r} at ts={event.ts} has negative duration {event.dur}")


def _int(value, fallback):
    if type(value) is int:
        return value
    if isinstance(value, str):
        try:
            return int(value, 0)
        except ValueError:
            return fallback
    return fallback


def _decode_args(path, event, decoder):
    if not event.args:
        return decoder.decode(b"{}")
    try:
        return decoder.decode(event.args)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise TraceError(path, f"event {event.name!r} at ts={event.ts} has malformed args ({exc})") from None


def read_kineto(path: str | Path) -> KinetoTrace:
    """A Kineto trace file read into GPU activities, launch rows and per-thread CPU ranges."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise TraceError(path, f"cannot read ({exc.strerror})") from None
    trace_id = trace_id_of(raw)
    doc = decode_document(path, decompress(path, raw))
    del raw
    base = doc.baseTimeNanoseconds
    base_ns = int(base) if base is not None else 0
    activities: list[GpuActivity] = []
    launches: dict[int, LaunchRow] = {}
    ranges: dict[tuple, list[CpuRange]] = {}
    for event in doc.traceEvents:
        kind = _KINDS.get(event.cat)
        if kind is None or event.ph != "X":
            continue
        ts, dur = event.ts, event.dur
        if dur is None or dur < 0 or ts is None:
            _reject(path, event, kind)
        # Inlined to_ns for the common float case: this loop runs once per event of the trace.
        start = base_ns + (round(ts * 1000) if type(ts) is float else to_ns(ts))
        dur_ns = round(dur * 1000) if type(dur) is float else to_ns(dur)
        if kind is _RANGE_OP or kind is _RANGE_ANNOTATION:
            thread = (event.pid, event.tid)
            bucket = ranges.get(thread)
            if bucket is None:
                bucket = ranges[thread] = []
            bucket.append(CpuRange(event.name or "", kind is _RANGE_OP, start, start + dur_ns, event.args))
        elif kind is _LAUNCH:
            args = _decode_args(path, event, _LAUNCH_ARGS)
            if args.correlation is not None:
                launches[args.correlation] = LaunchRow(
                    event.name or "", (event.pid, event.tid), start, dur_ns, args.external_id
                )
        else:
            args = _decode_args(path, event, _GPU_ARGS)
            activities.append(
                GpuActivity(
                    name=event.name or "",
                    category=kind,
                    ts_ns=start,
                    dur_ns=dur_ns,
                    device=_int(args.device, _int(event.pid, 0)),
                    stream=_int(args.stream, _int(event.tid, 0)),
                    correlation=args.correlation,
                    external_id=args.external_id,
                    graph_node=bool(args.graph_id),
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
        events=len(doc.traceEvents),
    )
