"""One large Kineto trace read on two cores: a helper process decodes its GPU side while this one imports.

libkineto's exporter writes a trace's CPU ranges (ops, annotations) first and its GPU activities, runtime
rows and flows after them. `hotshape ingest` of one large trace asks its prefetch (ingest/tracefile.py) for a
helper: once the worker thread has gunzipped the file it forks a process that shares the text and the modules
already imported, finds the comma where that first block ends (`split_at`), decodes everything after it and
sends back the plain columns of its GPU activities and launch rows (ingest/kineto_fields.py). Meanwhile this
process finishes importing polars and its own modules, then decodes only the part before the comma
(ingest/kineto.py `read_split`).

Why a process: decoding and column building hold the GIL, and so does importing; a thread would only take
turns with the imports. Why a fork of the reading thread: a fresh interpreter would start, import and gunzip
the file again, more work than it saves on two cores. The forked helper imports nothing (the main thread may
hold an import's lock) and leaves by os._exit. What crosses between the two is small (a few hundred thousand
ints and the kernel names); the CPU ranges, whose raw args are most of a trace's bytes, stay where they were
decoded.

Nothing here decides a result: `split_at` only proposes a comma; each side's decode proves it (the part
before it parses as a document whose `traceEvents` hold only CPU ranges, the part after it as the rest of
the array holding none), and anything else (no such comma, a helper that failed, a malformed event, exact
timestamps) makes the reader decode the whole file as before, which also names any problem. Tuned for
speed; the plain version is the whole-file decode (oracle: tests/ingest/test_kineto_split.py).
"""

from __future__ import annotations

import ctypes
import marshal
import os
import re
import signal
import struct
import sys
import warnings

import msgspec

from ingest.kineto_fields import gpu_fields, launch_fields, sort_roles
from ingest.kineto_json import (
    ANNOTATION_CATEGORIES,
    GPU_CATEGORIES,
    LAUNCH_CATEGORIES,
    OP_CATEGORIES,
    DECODED_DOCUMENT,
    Malformed,
    first_float_ts,
)

# The first event of the block after the CPU ranges names one of these categories.
_GPU_SIDE_CATEGORIES = frozenset(c.encode() for c in (*GPU_CATEGORIES, *LAUNCH_CATEGORIES))
_GPU_SIDE = re.compile(rb'"cat"\s*:\s*"(?:' + b"|".join(map(re.escape, sorted(_GPU_SIDE_CATEGORIES))) + rb')"')
_CATEGORY = re.compile(rb'"cat"\s*:\s*"([^"\\]*)"')
_RANGE_CATEGORIES = frozenset(c.encode() for c in (*OP_CATEGORIES, *ANNOTATION_CATEGORIES))
_WINDOW = 2**16
_HEAD_END = b"]}"  # closes the traceEvents array and the document after the last CPU range
_TAIL_START = b'{"traceEvents":['  # opens them again before the first event after the comma
MIN_TEXT_BYTES = 16 * 2**20  # a smaller trace is read faster than a helper process starts and answers
_PROTOCOL = 1


def split_at(text: bytes) -> int | None:
    """The offset of the comma before the first event of a GPU or launch category, or None where there is none
    (whitespace alone may stand between that comma and the event's brace).

    In a trace laid out as libkineto writes it, a binary search over the categories named at a few dozen
    offsets narrows where that block begins to a stretch of _WINDOW bytes, searched from its start: about a
    millisecond for 60 MB, where a search from the file's start takes 20. Elsewhere the comma found may not
    be the first block's end; the decodes that follow tell (the part before it holds GPU events then)."""
    lo, hi = 0, len(text)
    while hi - lo > _WINDOW:
        mid = (lo + hi) // 2
        side = _side_at(text, mid, hi)
        if side is None:
            break
        lo, hi = (lo, mid) if side else (mid, hi)
    found = _GPU_SIDE.search(text, lo)
    if found is None:
        return None
    brace = text.rfind(b"{", 0, found.start())
    comma = text.rfind(b",", 0, brace)
    if comma < 0 or text[comma + 1:brace].strip():
        return None
    return comma


def _side_at(text: bytes, start: int, end: int) -> bool | None:
    """Whether the first category named after `start` that tells (a CPU range's, or a GPU activity's or launch
    row's) is of the GPU side; None where none does before `end`."""
    for found in _CATEGORY.finditer(text, start, end):
        category = found.group(1)
        if category in _GPU_SIDE_CATEGORIES:
            return True
        if category in _RANGE_CATEGORIES:
            return False
    return None


def head_text(text: bytes, at: int) -> bytes:
    """The document up to the comma at `at`, its array and object closed."""
    return b"".join((memoryview(text)[:at], _HEAD_END))


def _tail_columns(text: bytes, at: int) -> tuple | None:
    """The columns of the events after the comma at `at`: GpuFields and LaunchFields as plain tuples of lists,
    the document's baseTimeNanoseconds where it follows the array, the number of events after the comma and
    the first float timestamp of a phase-X event among them; None where that part does not parse, holds a
    CPU range or a malformed event. Called in the helper: it opens the part's document in the text itself."""
    try:
        doc = DECODED_DOCUMENT.decode(_tail_in_place(text, at))
    except (msgspec.ValidationError, msgspec.DecodeError):
        return None
    gpu, launch, cpu = sort_roles(doc.traceEvents)
    if cpu:
        return None
    try:
        columns = tuple(gpu_fields(gpu, decoded=True)), tuple(launch_fields(launch, decoded=True))
    except Malformed:
        return None
    return (*columns, doc.baseTimeNanoseconds, len(doc.traceEvents), first_float_ts(doc.traceEvents))


def _tail_in_place(text: bytes, at: int) -> memoryview:
    """The events after the comma at `at` as a document of their own (what follows the array stays as written),
    without copying 30 MB: `{"traceEvents":[` written over the bytes just before the first event after the
    comma, the text viewed from there. Only in the helper: its text is its own copy of the reading
    process's pages (copy on write), read by nothing else, and the helper exits once it has answered. Events
    are decoded with their names and args (kineto_json.DecodedXEvent), so nothing decoded keeps a view of it."""
    start = at + 1 - len(_TAIL_START)
    if start < 0:
        raise msgspec.DecodeError("no room before the split")  # the caller reads the part as not parsing
    address = ctypes.cast(ctypes.c_char_p(text), ctypes.c_void_p).value
    ctypes.memmove(address + start, _TAIL_START, len(_TAIL_START))
    return memoryview(text)[start:]


def _serve(text: bytes, fd: int) -> None:
    """The helper's work: the split offset (8 bytes, -1 for none) as soon as it is known, then the marshalled
    answer, _tail_columns(...) with the offset first, or None."""
    at = split_at(text)
    _write_all(fd, struct.pack("<q", -1 if at is None else at))
    columns = _tail_columns(text, at) if at is not None else None
    _write_all(fd, marshal.dumps((_PROTOCOL, None if columns is None else (at, *columns))))


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


# Python 3.12+ warns at every fork of a process with threads (a lock another thread held stays held in the
# child). The helper is forked by the reading thread while the main thread imports; it takes no lock Python
# code could hold: it imports nothing, writes to its own pipe with os.write and leaves by os._exit.
warnings.filterwarnings("ignore", message=r".*use of fork\(\) may lead to deadlocks", category=DeprecationWarning,
                        module=__name__)


class Helper:
    """The helper process for one trace's text, forked by the thread that gunzipped it (so it shares the text
    and every module already imported, and imports nothing: the main thread may be importing); ask for its
    split, then its answer."""

    def __init__(self, text: bytes):
        read_fd, write_fd = os.pipe()
        pid = os.fork()
        if pid == 0:  # the helper: it never returns into the caller's code
            status = 1
            try:
                os.close(read_fd)
                _serve(text, write_fd)
                status = 0
            finally:
                os._exit(status)
        os.close(write_fd)
        self._pid = pid
        self._pipe = os.fdopen(read_fd, "rb")

    def split(self) -> int | None:
        """The comma the helper split the trace at; None where it found none or failed."""
        head = self._pipe.read(8)
        if len(head) != 8:
            self.cancel()
            return None
        at = struct.unpack("<q", head)[0]
        if at < 0:
            self.cancel()
            return None
        return at

    def answer(self) -> tuple | None:
        """The helper's columns (the offset, then what tail_columns gives); None where it has none or failed."""
        try:
            data = self._pipe.read()
            protocol, answer = marshal.loads(data)
        except (EOFError, ValueError, TypeError, OSError):
            answer, protocol = None, None
        finally:
            self.cancel()
        return answer if protocol == _PROTOCOL else None

    def cancel(self) -> None:
        """Stop the helper (where it still runs) and reap it."""
        if self._pid is None:
            return
        try:
            os.kill(self._pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        os.waitpid(self._pid, 0)
        self._pid = None
        self._pipe.close()


def start_helper(text: bytes) -> Helper | None:
    """A helper for a large trace's text on a system that forks; None where it would not pay or cannot start."""
    if len(text) < MIN_TEXT_BYTES or sys.platform != "linux":
        return None
    try:
        return Helper(text)
    except OSError:
        return None
