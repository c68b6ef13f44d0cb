"""Schemas of every table the ingest package writes, and their validation.

Columns are declared once, in polars dtypes (kernel_events is built in polars), and described once, in
COLUMNS. The Arrow schemas that writers and `validate` use, KERNEL_EVENTS, TRACES, CLASSIFIED_EVENTS,
OP_SHAPE_TIME, PROVENANCE and CAPTURES, are derived from them on first use: reading a trace then loads
neither pyarrow nor the numpy that pyarrow imports, a tenth of a second of a fresh process.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl
from ingest.arrow_schema import described_schema
from ingest.field_metadata import described

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
    "grid": pl.List(pl.Int64),  # the launch's [x, y, z] blocks (Kineto's `grid`); null where the trace has none
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
    "phase_rule": pl.String,  # annotation:vllm|annotation:sglang|annotation:range|annotation:bracket|shape:attention|shape:step|kernels:*|graph:full_graph_decode|none
}

OP_SHAPE_TIME_COLUMNS = {
    "trace_id": pl.String,
    "operator": pl.String,
    "shape": pl.String,
    "phase": pl.String,
    "gpu_ns": pl.Int64,
    "calls": pl.Int64,
}

# The trace store's provenance/<trace_id>.parquet: GPU time per operator × shape × raw op × raw kernel.
PROVENANCE_COLUMNS = {
    "trace_id": pl.String,
    "operator": pl.String,
    "shape": pl.String,
    "op": pl.String,
    "kernel": pl.String,
    "gpu_ns": pl.Int64,
}

# A parsed graph-capture trace (ingest.graphs.read_capture; the store's captures/<sha16>.parquet).
CAPTURE_COLUMNS = {
    "window": pl.String,
    "seq": pl.Int64,
    "ts_ns": pl.Int64,
    "kernel": pl.String,
    "step": pl.String,
    "op_chain": pl.List(pl.String),
    "op_chain_args": pl.String,
}

# Each column's description and unit (ingest.field_metadata), carried in the field metadata of every Parquet
# file the package writes; docs/tables.md lists the same. One meaning per word; NOTES narrow it for one table.
COLUMNS = {
    "trace_id": ("first 16 hex digits of the sha256 of the trace file's bytes", ""),
    "kernel": ("kernel (or memcpy / memset) name; null when the trace does not give it", ""),
    "category": ("kernel, memcpy or memset", ""),
    "ts_ns": ("start of the activity, absolute epoch (the trace's baseTimeNanoseconds applied)", "ns"),
    "dur_ns": ("duration of the activity", "ns"),
    "device": ("GPU index", ""),
    "stream": ("stream id", ""),
    "correlation": ("correlation id linking the activity to its launch", ""),
    "launch": ("runtime/driver launch row name (null without one in the window)", ""),
    "op": ("innermost CPU op enclosing the launch", ""),
    "op_chain": ("enclosing CPU ops and user annotations, outermost first", ""),
    "op_chain_args": ("JSON list aligned with op_chain: each op's dims, types and concrete inputs, or null", ""),
    "input_dims": ("JSON of op's Input Dims", ""),
    "input_types": ("JSON of op's Input type", ""),
    "concrete_inputs": ("JSON of op's Concrete Inputs", ""),
    "annotation": ("innermost user annotation (step / record_function) enclosing the launch", ""),
    "graph_launch": ("replayed from a CUDA/HIP graph launch", ""),
    "graph_kernel_index": ("order of the activity within its graph launch", ""),
    "external_id_agrees": ("the trace's External id agrees with the op (null when absent)", ""),
    "grid": ("the launch's [x, y, z] grid of blocks as the trace wrote it (null where it has none)", ""),
    "attribution": ("how the row reached its op: direct, graph_replay (before classification), graph_capture, "
                    "name_rule, launch_only or unattributed", ""),
    "operator": ("canonical operator (ingest/taxonomy.yaml), other if none", ""),
    "shape": ("canonical JSON of the operator's kwargs ({} when nothing is known)", ""),
    "phase": ("prefill, decode, mixed or unknown", ""),
    "phase_rule": ("which rule decided the phase (annotation:*, shape:*, kernels:* (ingest/step_kernels.yaml), graph:full_graph_decode or none)", ""),
    "path": ("trace file name relative to the trace root, forward slashes", ""),
    "gpu_ns": ("GPU time of the row's activities (kernels, memcpys, memsets)", "ns"),
    "attributed_ns": ("GPU time attributed to an op (direct or through a graph-capture trace)", "ns"),
    "unattributed_ns": ("the rest of the GPU time: gpu_ns = attributed_ns + unattributed_ns exactly", "ns"),
    "kernels": ("GPU activities (kernels, memcpys, memsets) of the profile", "count"),
    "events": ("trace events read", "count"),
    "calls": ("GPU activities in the row", "count"),
    "window": ("capture_<bs>_<mode> range with its start, to tell repeated windows apart", ""),
    "seq": ("launch order within the window", "count"),
    "step": ("alignment token: the kernel name, memcpy or memset", ""),
}
NOTES = {
    "TRACES": {"gpu_ns": ("all GPU activity time of the profile (T_p)", "ns")},
    "CAPTURES": {"ts_ns": ("launch time, absolute epoch", "ns"),
                 "op_chain": ("ops and annotations inside the window enclosing the launch, outermost first", "")},
}

_ARROW_SCHEMAS = {
    "KERNEL_EVENTS": KERNEL_EVENT_COLUMNS,
    "TRACES": TRACE_COLUMNS,
    "CLASSIFIED_EVENTS": CLASSIFIED_EVENT_COLUMNS,
    "OP_SHAPE_TIME": OP_SHAPE_TIME_COLUMNS,
    "PROVENANCE": PROVENANCE_COLUMNS,
    "CAPTURES": CAPTURE_COLUMNS,
}


def descriptions(table: str) -> dict[str, tuple[str, str]]:
    """{column: (description, unit)} of ingest table `table` (KERNEL_EVENTS, TRACES, ...)."""
    return COLUMNS | NOTES.get(table, {})


def __getattr__(name: str) -> pa.Schema:
    """The Arrow schemas (KERNEL_EVENTS, ...), built from the columns above when first asked for, each column
    described in its field metadata."""
    if name not in _ARROW_SCHEMAS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import pyarrow as pa

    arrow = {pl.String: pa.string(), pl.Int64: pa.int64(), pl.Int32: pa.int32(), pl.Boolean: pa.bool_()}
    arrow[pl.List(pl.String)] = pa.list_(pa.string())
    arrow[pl.List(pl.Int64)] = pa.list_(pa.int64())
    plain = pa.schema([(column, arrow[dtype]) for column, dtype in _ARROW_SCHEMAS[name].items()])
    schema = globals()[name] = described(plain, descriptions(name))
    return schema


def parquet(frame: pl.DataFrame, table: str) -> bytes:
    """`frame` as the Parquet bytes of ingest table `table`: zstd, no statistics, its columns described in the
    footer's Arrow schema (the data pages are what polars writes without it)."""
    import io

    buf = io.BytesIO()
    frame.write_parquet(buf, compression="zstd", statistics=False, arrow_schema=described_schema(frame, descriptions(table)))
    return buf.getvalue()


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
