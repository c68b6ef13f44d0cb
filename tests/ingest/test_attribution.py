"""The vectorised enclosure search against its definition, computed by brute force.

Real traces (test_kineto's brute-force chains) are nearly always properly nested; these cases
add what clock skew and coarse clocks produce: overlapping, identical, zero-length and
touching ranges, and points at range edges.
"""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from ingest.attribution import enclosing_stacks, enclosures
from ingest.graphs import Range


def brute_force(starts, ends, points) -> list[list[int]]:
    """Per point, the ranges with start <= t < end, outermost first: by start, longest first, then index."""
    return [
        sorted((i for i in range(len(starts)) if starts[i] <= t < ends[i]), key=lambda i: (starts[i], -ends[i], i))
        for t in points
    ]


def found_stacks(starts, ends, points) -> list[list[int]]:
    found = enclosures(*(pl.Series(v, dtype=pl.Int64) for v in (starts, ends, points)))
    stacks: list[list[int]] = [[] for _ in points]
    for p, r in zip(found["point"].to_list(), found["range"].to_list()):
        stacks[p].append(r)
    return stacks


def nested(rng, n: int) -> tuple[list[int], list[int]]:
    """A properly nested family, as op stacks on one thread are: ranges opened and closed like
    brackets, time advancing by 0-2 between (so starts and ends often coincide)."""
    starts, ends, open_ = [], [], []
    t = 0
    while len(starts) < n or open_:
        if len(starts) < n and (not open_ or rng.random() < 0.55):
            open_.append(len(starts))
            starts.append(t)
            ends.append(None)
        else:
            ends[open_.pop()] = t
        t += int(rng.integers(0, 3))
    return starts, ends


@pytest.mark.parametrize("seed", range(40))
def test_random_ranges_match_brute_force(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 60))
    span = int(rng.choice([20, 200, 10_000]))  # a small span makes ties and identical ranges common
    if seed % 2:
        starts, ends = nested(rng, n)
    else:  # overlaps without nesting, zero-length ranges
        starts = rng.integers(0, span, n).tolist()
        ends = [s + int(d) for s, d in zip(starts, rng.integers(0, span // 2 + 1, n))]
    points = rng.integers(0, max(ends, default=0) + 5, int(rng.integers(0, 40))).tolist() + starts[:3] + ends[:3]
    assert found_stacks(starts, ends, points) == brute_force(starts, ends, points)


def test_edges_ties_and_skew():
    """A point at a range's start is inside it, at its end outside; identical ranges keep input order."""
    starts = [0, 0, 10, 10, 10, 15, 30, 5]
    ends = [100, 100, 20, 20, 30, 40, 30, 12]  # #6 has zero length; #5 overlaps #2/#3 without nesting
    points = [0, 10, 12, 19, 20, 30, 99, 100, 5, 15]
    assert found_stacks(starts, ends, points) == brute_force(starts, ends, points)
    assert found_stacks(starts, ends, [10])[0] == [0, 1, 7, 4, 2, 3]


def test_enclosing_stacks_keeps_its_contract():
    """nsys and graph-capture readers pass range objects and keyed points, and get every key back."""
    ranges = [Range("outer", False, 0, 100, None), Range("op", True, 10, 20, None), Range("late", True, 50, 60, None)]
    stacks = enclosing_stacks(ranges, [(15, "a"), (20, "b"), (200, "c"), (55, "d")])
    assert stacks == {"a": (0, 1), "b": (0,), "c": (), "d": (0, 2)}
