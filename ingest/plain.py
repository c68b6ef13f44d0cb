"""The one switch that runs every plain twin of ingest's fast paths: `HOTSHAPE_PLAIN=1`.

Code tuned for speed keeps a clear plain version beside it and asks `plain()` which one to run; the suite runs
tests/ingest twice, once with the switch on (see the README's test command), so every plain twin stays the oracle
of its fast path.
"""

from __future__ import annotations

import os

PLAIN_ENV = "HOTSHAPE_PLAIN"


def plain() -> bool:
    """Whether the plain versions run instead of the fast paths (read at each call: tests flip it)."""
    return os.environ.get(PLAIN_ENV, "") not in ("", "0")
