"""The bounds on one trace that ingest enforces while it reads, whatever the input (docs/bad-input.md).

A trace over a bound is quarantined with its file and the bound named; nothing reads past it. The defaults hold
the largest real profiles we know of (a ~40 MB gzip holding several million events inflates to ~1.5 GB) with
room to spare; the environment overrides them, so that the store's worker processes see the same bounds.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

LIMIT_BYTES_ENV = "HOTSHAPE_MAX_TRACE_BYTES"
LIMIT_EVENTS_ENV = "HOTSHAPE_MAX_TRACE_EVENTS"
DEFAULT_MAX_TEXT_BYTES = 4 * 2**30  # inflated JSON of one trace
DEFAULT_MAX_EVENTS = 12_000_000  # events of one trace (what is kept of them grows with their number)
MAX_EVENT_BYTES = 64 * 2**20  # one event's JSON text (the largest real one is a few kB of op args)


@dataclass(frozen=True)
class TraceLimits:
    """The bounds on one trace: its inflated JSON text in bytes, and its events."""

    max_text_bytes: int = DEFAULT_MAX_TEXT_BYTES
    max_events: int = DEFAULT_MAX_EVENTS


def _bound(name: str, default: int) -> int:
    text = os.environ.get(name, "").strip().replace("_", "")
    if not text:
        return default
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"{name}={os.environ[name]!r}: not a whole number") from None
    if value <= 0:
        raise ValueError(f"{name}={os.environ[name]!r}: must be positive")
    return value


def limits() -> TraceLimits:
    """The bounds in force: the defaults, or HOTSHAPE_MAX_TRACE_BYTES / HOTSHAPE_MAX_TRACE_EVENTS."""
    return TraceLimits(_bound(LIMIT_BYTES_ENV, DEFAULT_MAX_TEXT_BYTES), _bound(LIMIT_EVENTS_ENV, DEFAULT_MAX_EVENTS))
