"""Metadata the Dagster UI shows: tables, column schemas, rounded figures and inline plots."""

from __future__ import annotations

import base64
import math
import re
from typing import TYPE_CHECKING

import dagster as dg
import polars as pl

from ingest import field_metadata

if TYPE_CHECKING:
    import pyarrow as pa

DIGITS = 4  # significant digits of every float an asset reports; the files keep full precision


def rounded(value):
    """`value` with floats (also inside plain dicts and lists) to DIGITS significant digits; MetadataValues as given."""
    if type(value) is float:
        return value if not math.isfinite(value) or value == 0.0 else float(f"{value:.{DIGITS}g}")
    if type(value) is dict:
        return {k: rounded(v) for k, v in value.items()}
    if type(value) in (list, tuple):
        return [rounded(v) for v in value]
    return value


def _type(dtype: pl.DataType) -> str:
    return "float" if dtype.is_float() else "int" if dtype.is_integer() else "bool" if dtype == pl.Boolean else "string"


def table(frame: pl.DataFrame, limit: int = 15) -> dg.MetadataValue:
    """The first `limit` rows of `frame` as a Dagster table (floats rounded; other values as strings)."""
    def cell(value, dtype):
        return rounded(float(value)) if dtype.is_float() and value is not None else \
            value if value is None or isinstance(value, (int, bool)) else str(value)

    dtypes = frame.schema
    records = [dg.TableRecord({c: cell(v, dtypes[c]) for c, v in row.items()})
               for row in frame.head(limit).iter_rows(named=True)]
    schema = dg.TableSchema(columns=[dg.TableColumn(c, _type(t)) for c, t in dtypes.items()])
    return dg.MetadataValue.table(records=records, schema=schema)


def markdown_table(frame: pl.DataFrame, limit: int = 15) -> dg.MetadataValue:
    """The first `limit` rows of `frame` as a markdown table (floats rounded; text escaped), for the metadata of
    one partition of many: the UI renders it as a table, and it is one string in the event, where a Dagster table
    is an object per cell and column that a batch of N partitions serialises N times on write and again on every
    read of the run's materialisations (about 2.5x the time per event: benchmarks/README.md)."""
    return markdown_rows(dict(frame.schema), frame.head(limit).iter_rows())


def markdown_rows(schema: dict[str, pl.DataType], rows) -> dg.MetadataValue:
    """markdown_table of `rows` (tuples in the order of `schema`, {column: polars dtype}), all of them: for a few rows
    per partition of many, made without a frame (1,303 small frames cost a batch run ~0.3 s)."""
    def cell(value, dtype) -> str:
        if value is None:
            return ""
        if dtype.is_float():
            return f"{rounded(float(value))}"
        return str(value) if dtype.is_integer() else markdown_text(str(value))  # markdown_text escapes `|` too

    dtypes = list(schema.values())
    lines = ["| " + " | ".join(markdown_text(c) for c in schema) + " |", "|" + "---|" * len(schema)]
    lines += ["| " + " | ".join(cell(v, dtype) for v, dtype in zip(row, dtypes)) + " |" for row in rows]
    return dg.MetadataValue.md("\n".join(lines))


def column_schema(schema: pa.Schema | dict, columns: dict | None = None) -> dg.MetadataValue:
    """A table's `dagster/column_schema` from its package's schema module (an Arrow schema, or a polars
    {column: dtype} dict and that module's COLUMNS): each column's type, and its description and unit where the
    field metadata carries them."""
    if isinstance(schema, dict):
        schema = pl.DataFrame(schema=schema).to_arrow().schema
    if columns is not None:
        schema = field_metadata.described(schema, columns)
    def described(field: pa.Field) -> str | None:
        meta = field.metadata or {}
        text, unit = meta.get(b"description", b"").decode(), meta.get(b"unit", b"").decode()
        return markdown_text(f"{text} [{unit}]" if unit else text) or None

    return dg.MetadataValue.table_schema(dg.TableSchema(columns=[
        dg.TableColumn(f.name, str(f.type), description=described(f)) for f in schema]))


# Characters that markdown (the UI renders column descriptions as markdown) would read as markup anywhere in a line:
# `<operator>` is an HTML tag to it, `__init__` bold, `&lt;` an entity. Each is escaped with a backslash, which
# CommonMark allows before any ASCII punctuation; those that are markup only at a line's start are escaped there.
MARKDOWN_SPECIAL = frozenset("\\`*_[]<>|~&")
MARKDOWN_LINE_START = frozenset("#+-=")


def markdown_text(text: str) -> str:
    """`text` with every character markdown would read as markup escaped, so that the UI shows it as written."""
    escaped = "".join(f"\\{c}" if c in MARKDOWN_SPECIAL else c for c in text)
    escaped = re.sub(r"^(\d+)([.)])", r"\1\\\2", escaped)  # "1. x" would start a numbered list
    return f"\\{escaped}" if escaped[:1] in MARKDOWN_LINE_START else escaped


def path_value(path) -> dg.MetadataValue:
    """A file or directory as path metadata, absolute (the UI's copy button gives a path that works anywhere)."""
    from pathlib import Path

    return dg.MetadataValue.path(str(Path(path).resolve()))


def png_markdown(png: bytes, title: str) -> dg.MetadataValue:
    """A PNG plot embedded in markdown, so the UI shows it without a file server."""
    return dg.MetadataValue.md(f"![{title}](data:image/png;base64,{base64.b64encode(png).decode()})")


def top_operators(frame: pl.DataFrame, time_col: str, limit: int = 10) -> pl.DataFrame:
    """Operators by total `time_col`, hottest first, with their share of the total."""
    total = frame[time_col].sum() or 1
    return (
        frame.group_by("operator").agg(pl.col(time_col).sum())
        .with_columns((pl.col(time_col) / total).alias("share"))
        .sort([time_col, "operator"], descending=[True, False]).head(limit)
    )


def top_operators_by(frame: pl.DataFrame, by: str, time_col: str, limit: int = 10) -> pl.DataFrame:
    """`top_operators` of each `by` group of `frame` in one pass: `by`, operator, `time_col`, share of the group's
    total, each group's hottest first."""
    total = pl.col(time_col).sum().over(by)
    return (
        frame.group_by(by, "operator").agg(pl.col(time_col).sum())
        .with_columns((pl.col(time_col) / pl.when(total == 0).then(1).otherwise(total)).alias("share"))
        .sort([by, time_col, "operator"], descending=[False, True, False])
        .group_by(by, maintain_order=True).head(limit)
    )


def add_partition_metadata(context: dg.AssetExecutionContext, by_partition: dict[str, dict]) -> None:
    """Each partition's own materialisation metadata in a run of many partitions (the UI's page per trace), added
    in one pass.

    `context.add_asset_metadata(partition_key=)` checks each key against the run's partition range, which it
    resolves in the instance on every call (dagster 1.13.27): N queries of N keys for a batch of N partitions,
    most of a 1,303-profile run. The keys here are the run's own, so they go to the step's metadata without it.
    """
    from dagster._core.execution.context.metadata_logging import AssetMetadataHandle, OutputMetadataAccumulator

    step = context.op_execution_context.get_step_execution_context()
    added = {AssetMetadataHandle(asset_key=context.asset_key, partition_key=k): m for k, m in by_partition.items()}
    step._metadata_accumulator = OutputMetadataAccumulator(  # a private field: see the docstring
        per_output_metadata={**step._metadata_accumulator.per_output_metadata, **added})  # noqa: SLF001
