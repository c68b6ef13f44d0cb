"""The Arrow schemas are derived from the polars column declarations, type for type."""

from __future__ import annotations

import polars as pl
import pyarrow as pa
import pytest

from ingest import schema


@pytest.mark.parametrize(
    "arrow, columns",
    [
        ("KERNEL_EVENTS", schema.KERNEL_EVENT_COLUMNS),
        ("TRACES", schema.TRACE_COLUMNS),
        ("CLASSIFIED_EVENTS", schema.CLASSIFIED_EVENT_COLUMNS),
        ("OP_SHAPE_TIME", schema.OP_SHAPE_TIME_COLUMNS),
    ],
)
def test_arrow_schema_is_the_columns_twin(arrow, columns):
    derived = getattr(schema, arrow)
    assert derived is getattr(schema, arrow)  # built once
    assert derived.names == list(columns)
    assert pl.from_arrow(derived.empty_table()).schema == pl.Schema(columns)
    # Plain (not large or view) Arrow strings and lists, as the parquet files have always held.
    assert {str(t) for t in derived.types} <= {"string", "int64", "int32", "bool", "list<item: string>", "list<item: int64>"}
    assert all(f.nullable for f in derived)


def test_kernel_events_arrow_schema_is_unchanged():
    """The columns written since the first release, spelled out."""
    assert schema.KERNEL_EVENTS.field("op_chain").type == pa.list_(pa.string())
    assert schema.KERNEL_EVENTS.field("device").type == pa.int32()
    assert schema.KERNEL_EVENTS.field("graph_kernel_index").type == pa.int32()
    assert schema.KERNEL_EVENTS.field("external_id_agrees").type == pa.bool_()


def test_unknown_names_are_attribute_errors():
    with pytest.raises(AttributeError):
        schema.NOT_A_SCHEMA  # noqa: B018
