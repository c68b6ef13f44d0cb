"""Each column's description and unit as Arrow field metadata (b"description", b"unit"): how every Parquet file
hotshape writes says what its columns are (`pyarrow.parquet.read_schema(FILE).field(NAME).metadata`).

Each package's schema module keeps one `COLUMNS` dict, {column: (description, unit)}, beside its tables' names
and types, and passes its schemas (or, for polars writers, `frame_schema`) through `described`; docs/tables.md
lists the same (tests/docs/test_docs.py). pyarrow only: the evaluator imports it where polars is absent.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa

# "fraction": of a total that is 1; "ratio": of two quantities of one unit; "": names, ids, flags, JSON and
# timestamps (their type carries the unit). Times are seconds, or the unit the name ends in (_ns).
UNITS = ("", "s", "ns", "FLOP", "byte", "count", "card-hour", "fraction", "ratio")


def described(schema: pa.Schema, columns: dict[str, tuple[str, str]]) -> pa.Schema:
    """`schema` with each field's description and unit from `columns` as its metadata; a KeyError names a
    column `columns` lacks, a ValueError a unit outside UNITS."""
    import pyarrow as pa

    fields = []
    for f in schema:
        if f.name not in columns:
            raise KeyError(f"column {f.name!r} has no description")
        text, unit = columns[f.name]
        if unit not in UNITS:
            raise ValueError(f"column {f.name!r}: unit {unit!r} is not one of {UNITS}")
        fields.append(f.with_metadata({b"description": text.encode(), b"unit": unit.encode()}))
    return pa.schema(fields, metadata=schema.metadata)


def frame_schema(frame, columns: dict[str, tuple[str, str]]) -> pa.Schema:
    """A polars frame's own Arrow schema (the large strings and lists polars writes), described from `columns`:
    what `DataFrame.write_parquet(arrow_schema=...)` takes, so only the footer's schema gains the metadata."""
    return described(frame.head(0).to_arrow().schema, columns)
