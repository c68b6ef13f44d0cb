"""One way to run an operator through a library: the timed call, its outputs in the reference's form, and what
ran, in words. An operator's library path offers these in order of preference (kernels_eval/library/paths.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class Option:
    """`run()` is the timed call: only the library's kernels, on inputs prepared beforehand (untimed, e.g. a
    paged K/V cache gathered contiguous); `outputs(result)` maps what it returned to the reference's named
    outputs (untimed: a layout the library chose is not charged to it); `path` names what ran (a backend, a
    layout change made beforehand), and is unique among an operator's options."""

    path: str
    run: Callable[[], object]
    outputs: Callable[[object], dict]
