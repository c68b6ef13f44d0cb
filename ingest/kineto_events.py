"""A Kineto trace's events decoded a piece at a time, as its text is inflated: memory holds one piece of JSON.

The text comes in steps (tracefile.inflate_chunks). The start of the `traceEvents` array is found in the first
steps (a candidate key is proven by decoding everything before it as the start of a document); then each
piece of the array, cut after the last `},` of what has been inflated so far, is decoded on its own as a JSON
array. A cut inside a string makes the piece fail to decode (a JSON string cannot hold a raw `"`), and the
piece then waits for more text, up to MAX_EVENT_BYTES more; a piece that still fails names the problem. At the
end, the array's closing `]` is the one after which the rest decodes as the document's remainder, which also
gives `baseTimeNanoseconds` wherever the document writes it.

A trace whose first float timestamp is absolute epoch time with no base time is read again with exact
(decimal) timestamps (kineto_json.needs_exact_time).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import msgspec

from ingest.kineto_json import (EVENT_LIST, EXACT_EVENT_LIST, TAGGED_EVENT_LIST, Document, first_float_ts,
                                needs_exact_time)
from ingest.limits import LIMIT_EVENTS_ENV, MAX_EVENT_BYTES, limits
from ingest.plain import plain
from ingest.tracefile import TraceError

_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_START = re.compile(rb"\s*([\[{])")
_DOCUMENT = msgspec.json.Decoder(Document)
_AT_EVENT = re.compile(r"`\$\[(\d+)\]")
_AT_BYTE = re.compile(r"\(byte (\d+)\)")
T = TypeVar("T")
_ARRAY_END_TRIES = 4096  # `]` tried from the end of the text (a log array of strings may follow the events)


class EventStream:
    """The events of one trace's text, a decoded piece at a time (iterate it once); `base_time` and `exact`
    once iterated: the document's baseTimeNanoseconds, and whether the pieces were read with exact timestamps
    (a stream whose `needs_exact` is set after iterating must be read again with exact=True)."""

    def __init__(self, path: str | Path, chunks: Iterator[bytes], exact: bool = False):
        self.path = path
        self._chunks = iter(chunks)
        self.exact = exact
        self.base_time = None
        self.events = 0
        self.needs_exact = False
        self._first_ts = None
        self._offset = 0  # bytes of text before the piece being cut
        self._bound = limits().max_events

    def __iter__(self) -> Iterator[list]:
        try:
            head, text, bare = self._find_array()
            yield from self._pieces(head, text, bare)
        except RecursionError:  # msgspec's, past its nesting depth
            raise TraceError(self.path, "invalid JSON (nested too deeply to read)") from None
        if not self.exact and self.base_time is None and needs_exact_time(self._first_ts):
            self.needs_exact = True

    # ---- the start of the array ---------------------------------------------------------------------
    def _find_array(self) -> tuple[bytes, bytes, bool]:
        """(what comes before the array's first event: the document's opening, its own fields; the text after
        the `[`; whether the document is a bare array)."""
        text = b""
        searched = 0
        for chunk in self._chunks:
            text = text + chunk if text else chunk
            start = _START.match(text)
            if start is None:
                if text.strip():
                    break  # not JSON's object or array: the decode below names it
                continue
            if start.group(1) == b"[":
                self._offset = start.end()
                return b"", text[start.end():], True
            for found in _KEY.finditer(text, max(0, searched - 64)):
                head = text[:found.start()]
                try:
                    msgspec.json.decode(head + b'"traceEvents":[]}')
                except (msgspec.DecodeError, RecursionError):
                    continue
                self._offset = found.end()
                return head, text[found.end():], False
            searched = len(text)
            if len(text) > MAX_EVENT_BYTES:
                raise TraceError(self.path, f"no `traceEvents` list within the first {MAX_EVENT_BYTES} bytes of "
                                            "the document")
        self._whole_error(text)
        raise TraceError(self.path, "not a profiler trace: no `traceEvents` list at the top level")

    def _whole_error(self, text: bytes) -> None:
        """The error of a short document without a `traceEvents` array: invalid JSON, or not a trace."""
        try:
            _DOCUMENT.decode(text)
        except msgspec.ValidationError:
            raise TraceError(self.path, "not a profiler trace: no `traceEvents` list at the top level") from None
        except msgspec.DecodeError as exc:
            raise TraceError(self.path, f"invalid JSON ({exc})") from None

    # ---- the array, a piece at a time ---------------------------------------------------------------
    def _pieces(self, head: bytes, text: bytes, bare: bool) -> Iterator[list]:
        waited = 0  # bytes read since the last piece decoded
        for chunk in self._chunks:
            # One copy of the text per step: `[`, what the last piece left and the new text; the comma after the
            # piece's last event is overwritten by the `]` that closes it, and the piece decoded in place.
            data = bytearray().join((b"[", text, chunk))
            waited += len(chunk)
            cut = data.rfind(b"},")
            if cut < 0:
                if waited > MAX_EVENT_BYTES:
                    raise TraceError(self.path, f"an event longer than {MAX_EVENT_BYTES} bytes, the bound on one "
                                                "event's JSON text")
                text = bytes(memoryview(data)[1:])
                continue
            data[cut + 1] = ord("]")
            events = self._decode(memoryview(data)[:cut + 2], final=waited > MAX_EVENT_BYTES)
            if events is None:  # the cut was inside a string (or an array after traceEvents): wait for more text
                data[cut + 1] = ord(",")
                text = bytes(memoryview(data)[1:])
                continue
            yield events
            del events
            self._offset += cut + 1
            text = bytes(memoryview(data)[cut + 2:])
            waited = len(text)
        yield self._last(head, text, bare)

    def _last(self, head: bytes, text: bytes, bare: bool) -> list:
        """The events before the array's closing `]`: the last `]` after which the rest decodes as the document's
        remainder (read for its base time) and before which the events decode (a log array may follow them)."""
        end = len(text)
        for _ in range(_ARRAY_END_TRIES):
            end = text.rfind(b"]", 0, end)
            if end < 0:
                break
            rest = text[end + 1:]
            if bare:
                if rest.strip():
                    continue
            else:
                try:
                    document = _DOCUMENT.decode(head + b'"traceEvents":[]' + rest)
                except msgspec.ValidationError as exc:  # (a DecodeError too: caught first)
                    raise TraceError(self.path, f"malformed trace document ({exc})") from None
                except msgspec.DecodeError:
                    continue
            try:
                events = self._typed(b"".join((b"[", memoryview(text)[:end], b"]")))
            except msgspec.ValidationError as exc:
                raise TraceError(self.path, f"malformed trace event ({self._placed(exc)})") from None
            except msgspec.DecodeError:
                continue
            if not bare:
                self.base_time = document.baseTimeNanoseconds
            return self._counted(events)
        try:  # no `]` after which the document ends: name what is wrong with the text
            msgspec.json.decode(head + (b"[" if bare else b'"traceEvents":[') + text)
        except msgspec.DecodeError as exc:
            raise TraceError(self.path, f"invalid JSON ({self._placed(exc)})") from None
        raise TraceError(self.path, "invalid JSON (the traceEvents list does not end where the document does)")

    def _decode(self, piece: bytes, final: bool) -> list | None:
        """The events of one piece of the array; None where it does not parse and more text may mend it."""
        try:
            events = self._typed(piece)
        except msgspec.ValidationError as exc:
            raise TraceError(self.path, f"malformed trace event ({self._placed(exc)})") from None
        except msgspec.DecodeError as exc:
            if not final:
                return None
            raise TraceError(self.path, f"invalid JSON ({self._placed(exc)})") from None
        return self._counted(events)

    def _counted(self, events: list) -> list:
        self.events += len(events)
        if self.events > self._bound:
            raise TraceError(self.path, f"more than {self._bound} events, the bound on a trace's events "
                                        f"({LIMIT_EVENTS_ENV} raises it)")
        if self._first_ts is None:
            self._first_ts = first_float_ts(events)
        return events

    def _typed(self, piece: bytes) -> list:
        if self.exact:
            return EXACT_EVENT_LIST.decode(piece)
        if not plain():
            # Tuned for speed: events decoded by their phase (kineto_json.TAGGED_EVENT_LIST); the plain version is
            # the Event decode, which also reads a phase outside the format's (oracle: tests/ingest/test_fast_paths.py)
            try:
                return TAGGED_EVENT_LIST.decode(piece)
            except msgspec.ValidationError:
                pass
        return EVENT_LIST.decode(piece)

    def _placed(self, exc: Exception) -> str:
        """msgspec's message with its event index and byte offset counted from the start of the document."""
        text = _AT_EVENT.sub(lambda m: f"`$.traceEvents[{self.events + int(m.group(1))}]", str(exc))
        return _AT_BYTE.sub(lambda m: f"(byte {self._offset + int(m.group(1)) - 1})", text)


def read_pieces(path: str | Path, chunks: Callable[[], Iterator[bytes]], taker: Callable[[], T]) -> tuple[EventStream, T]:
    """Every piece of the trace's events handed to `taker()`'s `add` in file order; the stream, iterated, and the
    taker. chunks() gives the text's steps; a trace read again with exact timestamps is read by a new taker."""
    stream, taken = EventStream(path, chunks()), taker()
    for events in stream:
        taken.add(events)
    if stream.needs_exact:
        stream, taken = EventStream(path, chunks(), exact=True), taker()
        for events in stream:
            taken.add(events)
    return stream, taken
