"""Schemas of every table the ingest package writes, and their validation.

Columns are declared once, in polars dtypes (kernel_events is built in polars). The Arrow schemas
that writers and `validate` use, KERNEL_EVENTS, TRACES, CLASSIFIED_EVENTS and OP_SHAPE_TIME, are
derived from them on first use: reading a trace then loads neither pyarrow nor the numpy that
pyarrow imports, a tenth of a second of a fresh process.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

if TYPE_CHECKING:
    import pyarrow as pa

KERNEL_EVENT_COLUMNS = {
    "trace_id": pl.String,
    "kernel": pl.String,
    "category": pl.String,  # kernel | memcpy | memset
    "ts_ns": pl.Int64,  # absolute epoch ns (baseTimeNanoseconds applied)
    "dur_ns": pl.Int64,
    "device": pl.Int32,
    "stream": pl.Int64,
    "correlation": pl.Int64,
    "launch": pl.String,  # runtime/driver row name, null when no launch row in the window
    "op": pl.String,  # innermost cpu_op enclosing the launch
    "op_chain": pl.List(pl.String),  # enclosing cpu_op/user_annotation names, outermost first
    "op_chain_args": pl.String,  # JSON list aligned with op_chain: {dims, types, concrete} or null
    "input_dims": pl.String,  # JSON of `op`'s Input Dims
    "input_types": pl.String,  # JSON of `op`'s Input type
    "concrete_inputs": pl.String,  # JSON of `op`'s Concrete Inputs
    "annotation": pl.String,  # innermost user_annotation (step / record_function) enclosing the launch
    "graph_launch": pl.Boolean,  # replayed from a CUDA/HIP graph launch
    "graph_kernel_index": pl.Int32,  # order of the activity within its graph launch
    "external_id_agrees": pl.Boolean,  # cross-check of `External id` against the op; null when absent
    "attribution": pl.String,  # catalogue.vocabulary.ATTRIBUTIONS (CLASSIFIED_ATTRIBUTIONS once classified)
}

CATEGORIES = ("kernel", "memcpy", "memset")

TRACE_COLUMNS = {
    "trace_id": pl.String,
    "path": pl.String,  # relative to the trace root, forward slashes
    "gpu_ns": pl.Int64,  # all GPU activity time T_p
    "attributed_ns": pl.Int64,
    "unattributed_ns": pl.Int64,
    "kernels": pl.Int64,
    "events": pl.Int64,
}

# kernel_events after ingest.classify.classify_events: the operator, its shape key and the phase.
CLASSIFIED_EVENT_COLUMNS = KERNEL_EVENT_COLUMNS | {
    "operator": pl.String,  # canonical operator (ingest/taxonomy.yaml `operators`), `other` if none
    "shape": pl.String,  # canonical JSON of the operator's kwargs ("{}" when nothing is known)
    "phase": pl.String,  # catalogue.vocabulary.ROW_PHASES
    "phase_rule": pl.String,  # annotation:vllm|annotation:sglang|annotation:range|annotation:bracket|shape:attention|shape:step|graph:full_graph_decode|none
}

OP_SHAPE_TIME_COLUMNS = {
    "trace_id": pl.String,
    "operator": pl.String,
    "shape": pl.String,
    "phase": pl.String,
    "gpu_ns": pl.Int64,
    "calls": pl.Int64,
}

_ARROW_SCHEMAS = {
    "KERNEL_EVENTS": KERNEL_EVENT_COLUMNS,
    "TRACES": TRACE_COLUMNS,
    "CLASSIFIED_EVENTS": CLASSIFIED_EVENT_COLUMNS,
    "OP_SHAPE_TIME": OP_SHAPE_TIME_COLUMNS,
}


def __getattr__(name: str) -> pa.Schema:
    """The Arrow schemas (KERNEL_EVENTS, ...), built from the columns above when first asked for."""
    if name not in _ARROW_SCHEMAS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import pyarrow as pa

    arrow = {pl.String: pa.string(), pl.Int64: pa.int64(), pl.Int32: pa.int32(), pl.Boolean: pa.bool_()}
    arrow[pl.List(pl.String)] = pa.list_(pa.string())
    schema = globals()[name] = pa.schema([(column, arrow[dtype]) for column, dtype in _ARROW_SCHEMAS[name].items()])
    return schema


def conform(frame: pl.DataFrame, columns: dict, name: str) -> pl.DataFrame:
    """The frame as `columns` (a *_COLUMNS dict) lists them, cast; the polars twin of `validate`
    (no Arrow round trip, so classification never imports pyarrow)."""
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise ValueError(f"{name}: missing columns {missing}")
    return frame.select(pl.col(c).cast(dtype) for c, dtype in columns.items())


def validate(table: pa.Table, schema: pa.Schema, name: str) -> pa.Table:
    """The table cast to `schema`, or a ValueError naming the table and the missing columns."""
    missing = [f.name for f in schema if f.name not in table.column_names]
    if missing:
        raise ValueError(f"{name}: missing columns {missing}")
    return table.select(schema.names).cast(schema)
