"""String columns of values that repeat (kernel names, shapes, operators), built from their distinct values.

Tuned for speed. A large trace's 22k kernel rows hold ~70 distinct names of ~380 characters: built from
the Python list, the column holds 8 MB of string bytes that every later group-by hashes and the Parquet
writer reads again; gathered from the distinct values, its rows share one small buffer (polars' string
views), which the frame library builds, hashes and writes 2-3x faster. The values are the same, and so are
the Parquet files written from them. The plain version is `repeated_plain` (oracle:
tests/ingest/test_fast_paths.py).
"""

from __future__ import annotations

import polars as pl

from ingest.plain import plain

def repeated(name: str, values: list[str | None]) -> pl.Series:
    """A String column of `values`, its rows gathered from the distinct values."""
    if plain() or len(values) < _GATHER_MIN_ROWS:  # the gather's fixed cost is more than a small column saves
        return repeated_plain(name, values)
    index = dict.fromkeys(values)
    if len(index) * 4 > len(values):  # mostly distinct: nothing to share
        return repeated_plain(name, values)
    place = dict(zip(index, range(len(index))))
    return pl.Series(name, list(index), dtype=pl.String).gather(pl.Series(list(map(place.__getitem__, values)), dtype=pl.UInt32))


_GATHER_MIN_ROWS = 4096


def repeated_plain(name: str, values: list[str | None]) -> pl.Series:
    """`repeated`, built from the list as it is."""
    return pl.Series(name, values, dtype=pl.String)
