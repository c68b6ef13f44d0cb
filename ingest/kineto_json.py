"""Kineto's trace JSON as msgspec types: the event fields and args that ingest reads.

msgspec skips every field not named here without building Python objects for it, and `args`
stay raw JSON until an event's category says they are needed; that is what makes a 100 MB
trace cheap to decode.
"""

from __future__ import annotations

import enum
from decimal import Decimal
from pathlib import Path
from typing import Any, ClassVar, Union

import msgspec

from ingest.plain import plain
from ingest.tracefile import TraceError

# GPU-side activity categories, current and pre-2.0 spellings, with the kind each one is.
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
# Categories nothing reads, listed so that decoding them allocates nothing (see Interned).
OTHER_CATEGORIES = (
    "python_function", "ac2g", "fwdbwd", "async_cpu_to_gpu", "gpu_user_annotation", "cpu_instant_event",
    "overhead", "cuda_sync", "Trace", "external_correlation", "cuda_profiler_range", "glow_runtime",
    "mtia_runtime", "mtia_ccp_events", "hpu_op", "xpu_runtime", "xpu_driver", "privateuse1_runtime",
    "privateuse1_driver", "collective_comm", "Python", "Memory",
)  # fmt: skip


class Interned(str, enum.Enum):
    """A string field decoded to shared objects that are equal and hash like their strings: a
    trace repeats a few phases and categories 250k times, and a new string per event costs a
    tenth of its decoding time and memory. A value not listed decodes to OTHER."""

    @classmethod
    def _missing_(cls, value):
        return cls.OTHER


class Phase(Interned):
    # Every phase of the Chrome trace event format.
    B, E, X, i, I, C, b, n, e, s, t, f, P, O, N, D, M, V, v, R, c = "BEXiICbnestfPONDMVvRc"
    OTHER = "\0"


Category = Interned(
    "Category",
    [(name, name) for name in (*GPU_CATEGORIES, *LAUNCH_CATEGORIES, *OP_CATEGORIES, *ANNOTATION_CATEGORIES)]
    + [(name, name) for name in OTHER_CATEGORIES]
    + [("OTHER", "\0")],
)

# The role of an event, decided by one lookup of its category: which columns it joins. Lookups
# are keyed by the decoded members themselves, which they hit by identity.
GPU, LAUNCH, RANGE = "gpu", "launch", "range"
ROLES = (
    dict.fromkeys(map(Category, GPU_CATEGORIES), GPU)
    | dict.fromkeys(map(Category, LAUNCH_CATEGORIES), LAUNCH)
    | dict.fromkeys(map(Category, OP_CATEGORIES | ANNOTATION_CATEGORIES), RANGE)
)
GPU_KINDS = {Category(name): kind for name, kind in GPU_CATEGORIES.items()}
IS_OP = frozenset(map(Category, OP_CATEGORIES))
NULL_JSON = msgspec.Raw(b"null")
_Scalar = Union[int, str, None]


class _Fields(msgspec.Struct, gc=False):
    """The fields ingest reads of an event, whatever its phase is decoded as."""

    cat: Union[Category, None] = None
    # JSON text: most events (python_function stacks, flows, ops that launch nothing) are never named in
    # a table, and a string for each costs a sixth of the decoding; `names` decodes a column of them.
    name: msgspec.Raw = NULL_JSON
    pid: _Scalar = None
    tid: _Scalar = None
    ts: Union[int, float, None] = None
    dur: Union[int, float, None] = None
    args: msgspec.Raw = msgspec.Raw(b"")


class Event(_Fields, gc=False):
    ph: Phase = Phase.OTHER


class Document(msgspec.Struct, gc=False):
    """The document around the events: kineto_events decodes its fields with the array emptied."""

    traceEvents: list[Event]
    baseTimeNanoseconds: Union[int, float, None] = None


class XEvent(_Fields, gc=False, tag_field="ph", tag="X"):
    """An Event of phase X (a complete event: every activity, launch and range that ingest reads), as the
    phase-tagged decode gives it; `ph` is the tag."""

    ph: ClassVar[Phase] = Phase.X


def _not_x(phase: Phase) -> type:
    # An event of another phase (flows, metadata, instants: ~30% of a trace's events) decodes to a struct
    # without fields: nothing reads them, and each field of each one was an object to allocate and free.
    return msgspec.defstruct(f"_{phase.name}Event", [], gc=False, tag_field="ph", tag=phase.value,
                             namespace={"ph": phase, "cat": None, "__annotations__": {"ph": ClassVar[Phase],
                                                                                       "cat": ClassVar[None]}})


_TaggedEvent = Union[(XEvent, *(_not_x(p) for p in Phase if p not in (Phase.X, Phase.OTHER)))]


class _ExactEvent(Event):
    # Absolute epoch µs (~1.7e15) with ns fractions need 19 significant digits, more than a
    # float64 holds (PyTorch nightlies of 2024 wrote them): read those timestamps as decimals.
    ts: Union[Decimal, None] = None
    dur: Union[Decimal, None] = None


class GpuArgs(msgspec.Struct, gc=False):
    external_id: Union[int, None] = msgspec.field(default=None, name="External id")
    correlation: Union[int, None] = None
    device: _Scalar = None
    stream: _Scalar = None
    graph_id: _Scalar = msgspec.field(default=None, name="graph id")
    grid: Any = None  # [x, y, z] blocks as the launch wrote them; anything else is read as none (kineto_fields)


class LaunchArgs(msgspec.Struct, gc=False):
    external_id: Union[int, None] = msgspec.field(default=None, name="External id")
    correlation: Union[int, None] = None


class OpArgs(msgspec.Struct, gc=False):
    """What attribution reads from a CPU op's args: its id and its shape args as raw JSON."""

    external_id: Union[int, None] = msgspec.field(default=None, name="External id")
    dims: msgspec.Raw = msgspec.field(default=NULL_JSON, name="Input Dims")
    types: msgspec.Raw = msgspec.field(default=NULL_JSON, name="Input type")
    concrete: msgspec.Raw = msgspec.field(default=NULL_JSON, name="Concrete Inputs")


class Malformed(Exception):
    """Some event of a column is malformed; a per-event pass names the first one."""


class Args:
    """One type of event args, decoded a whole column per call (one JSON array: per-event
    decoder calls cost more than the decoding) or one event at a time to name a bad one."""

    def __init__(self, kind: type):
        self._one = msgspec.json.Decoder(kind)
        self._column = msgspec.json.Decoder(list[kind])

    def column(self, raws: list[msgspec.Raw]) -> list:
        """The decoded args of many events; Malformed if any is."""
        if not all(raws):
            raws = [raw if raw else b"{}" for raw in raws]
        try:
            return self._column.decode(_json_array(raws))
        except (msgspec.ValidationError, msgspec.DecodeError):
            raise Malformed from None

    def of(self, path: str | Path, event: Event):
        """One event's decoded args, or a TraceError naming the event."""
        try:
            return self._one.decode(event.args or b"{}")
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            raise TraceError(path, f"event {name_of(event)!r} at ts={event.ts} has malformed args ({exc})") from None


GPU_ARGS, LAUNCH_ARGS, OP_ARGS = Args(GpuArgs), Args(LaunchArgs), Args(OpArgs)


def _json_array(items: list) -> bytes:
    # One copy of the items, where b"[" + b",".join(items) + b"]" makes three.
    if len(items) < 2:
        return b"[%b]" % items[0] if items else b"[]"
    return b",".join([b"[%b" % items[0], *items[1:-1], b"%b]" % items[-1]])

_NAMES = msgspec.json.Decoder(list[Union[str, None]])
_NAME = msgspec.json.Decoder(Union[str, None])


def names(raws: list[msgspec.Raw]) -> list[str | None]:
    """Event names from their JSON text, a whole column per call; Malformed if one is not a string (or null).

    Tuned for speed: a column of long names (kernels: a few dozen templated names, hundreds of characters
    each, over many thousand activities) decodes each distinct text once, and its rows share the string;
    the plain version is names_plain (oracle: tests/ingest/test_fast_paths.py)."""
    if plain() or len(raws) < _DISTINCT_MIN_ROWS or sum(map(len, raws)) < _DISTINCT_MIN_CHARS * len(raws):
        return names_plain(raws)
    # Raw texts compare but do not hash: each is compared with the distinct texts of its length seen so far,
    # up to a few of them (a column of many distinct names of one length decodes the rest row by row).
    distinct: list[msgspec.Raw] = []
    of_length: dict[int, list[int]] = {}
    place = []
    for raw in raws:
        seen = of_length.setdefault(len(raw), [])
        for k in seen:
            if distinct[k] == raw:
                place.append(k)
                break
        else:
            if len(seen) < _DISTINCT_PER_LENGTH:
                seen.append(len(distinct))
            place.append(len(distinct))
            distinct.append(raw)
    decoded = names_plain(distinct)
    return list(map(decoded.__getitem__, place))


_DISTINCT_MIN_ROWS = 1000
_DISTINCT_MIN_CHARS = 64  # mean JSON text per name below which a plain decode is as fast
_DISTINCT_PER_LENGTH = 16


def names_plain(raws: list[msgspec.Raw]) -> list[str | None]:
    """names, every row decoded on its own."""
    try:
        return _NAMES.decode(_json_array(raws))
    except (msgspec.ValidationError, msgspec.DecodeError):
        raise Malformed from None


def name_of(event: Event) -> str | None:
    """One event's name; its JSON text where that is not a string (for messages about the event)."""
    try:
        return _NAME.decode(event.name)
    except (msgspec.ValidationError, msgspec.DecodeError):
        return bytes(event.name).decode(errors="replace")


# The decoders of a piece of the traceEvents array (kineto_events.py): events decoded by their phase (the fast
# one), every event alike (the plain one, which also reads a phase outside the format's), and exact timestamps.
TAGGED_EVENT_LIST = msgspec.json.Decoder(list[_TaggedEvent])
EVENT_LIST = msgspec.json.Decoder(list[Event])
EXACT_EVENT_LIST = msgspec.json.Decoder(list[_ExactEvent])
# Timestamps beyond this many µs are absolute epoch time, where float64 drops the ns digits.
_FLOAT_EXACT_LIMIT_US = 4e12


def first_float_ts(events: list) -> float | None:
    """The timestamp of the first phase-X event whose timestamp is a float (None: there is none)."""
    for event in events:
        if event.ph is Phase.X and type(event.ts) is float:
            return event.ts
    return None


def needs_exact_time(first_ts: float | None) -> bool:
    """Whether a trace without a base time, whose first float timestamp is `first_ts`, must be read with exact
    (decimal) timestamps: absolute epoch µs whose ns digits a float drops."""
    return first_ts is not None and first_ts > _FLOAT_EXACT_LIMIT_US
