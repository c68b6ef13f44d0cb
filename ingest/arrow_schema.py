"""A polars frame's Arrow schema with described fields, for polars' Parquet writer, through nanoarrow.

`DataFrame.write_parquet(arrow_schema=...)` takes any object with `__arrow_c_schema__` (the Arrow PyCapsule
interface). nanoarrow builds one for the dtypes the ingest tables hold without importing pyarrow and numpy
(~0.1 s of every `hotshape ingest`); `export` answers None for any other dtype, and the caller goes the pyarrow
way. Oracle: tests/ingest/test_fast_paths.py (the same Parquet bytes as with pyarrow's schema, for every table).
"""

from __future__ import annotations

import nanoarrow as na
import polars as pl
from ingest.field_metadata import UNITS, frame_schema

# The Arrow types polars writes for each dtype (large strings and lists).
_TYPES = {pl.String: na.large_string, pl.Int64: na.int64, pl.Int32: na.int32, pl.Boolean: na.bool_,
          pl.Float64: na.float64, pl.UInt32: na.uint32}


def export(frame: pl.DataFrame, columns: dict[str, tuple[str, str]]) -> na.Schema | None:
    """`frame`'s schema described from `columns` ({column: (description, unit)}, as field_metadata.described
    takes them), or None when a column's dtype is not one this module spells (the caller then uses pyarrow)."""
    fields = {}
    for name, dtype in frame.schema.items():
        if name not in columns:
            raise KeyError(f"column {name!r} has no description")
        text, unit = columns[name]
        if unit not in UNITS:
            raise ValueError(f"column {name!r}: unit {unit!r} is not one of {UNITS}")
        base = dtype.base_type()
        if base in _TYPES:
            kind = _TYPES[base]()
        elif base is pl.List and dtype.inner.base_type() in _TYPES:
            kind = na.large_list(na.Schema(_TYPES[dtype.inner.base_type()](), name="item"))
        else:
            return None
        fields[name] = na.Schema(kind, name=name, metadata={"description": text, "unit": unit})
    return na.struct(fields, nullable=False)


def described_schema(frame: pl.DataFrame, columns: dict[str, tuple[str, str]]):
    """What `frame.write_parquet(arrow_schema=...)` takes to describe its columns from `columns`: built here,
    else (a dtype this module does not spell) by pyarrow."""
    schema = export(frame, columns)
    if schema is None:
        schema = frame_schema(frame, columns)
    return schema
