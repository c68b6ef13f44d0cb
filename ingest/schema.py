"""Arrow schemas of every table the ingest package writes, and their validation."""

from __future__ import annotations

import pyarrow as pa

KERNEL_EVENTS = pa.schema(
    [
        ("trace_id", pa.string()),
        ("kernel", pa.string()),
        ("category", pa.string()),  # kernel | memcpy | memset
        ("ts_ns", pa.int64()),  # absolute epoch ns (baseTimeNanoseconds applied)
        ("dur_ns", pa.int64()),
        ("device", pa.int32()),
        ("stream", pa.int64()),
        ("correlation", pa.int64()),
        ("launch", pa.string()),  # runtime/driver row name, null when no launch row in the window
        ("op", pa.string()),  # innermost cpu_op enclosing the launch
        ("op_chain", pa.list_(pa.string())),  # enclosing cpu_op/user_annotation names, outermost first
        ("op_chain_args", pa.string()),  # JSON list aligned with op_chain: {dims, types, concrete} or null
        ("input_dims", pa.string()),  # JSON of `op`'s Input Dims
        ("input_types", pa.string()),  # JSON of `op`'s Input type
        ("concrete_inputs", pa.string()),  # JSON of `op`'s Concrete Inputs
        ("annotation", pa.string()),  # innermost user_annotation (step / record_function) enclosing the launch
        ("graph_launch", pa.bool_()),  # replayed from a CUDA/HIP graph launch
        ("graph_kernel_index", pa.int32()),  # order of the activity within its graph launch
        ("external_id_agrees", pa.bool_()),  # cross-check of `External id` against the op; null when absent
        ("attribution", pa.string()),  # see ATTRIBUTIONS
    ]
)

# direct: launch row found and enclosed by a CPU op.
# graph_replay: replayed from a graph launch (the launch's own op stack is kept, not the kernel's).
# launch_only: launch row found, but no CPU op encloses it on the launching thread.
# unattributed: no launch row with this correlation in the window.
ATTRIBUTIONS = ("direct", "graph_replay", "launch_only", "unattributed")
# Rows whose launching op (and so its shapes) is known: directly, or through a graph-capture trace.
ATTRIBUTED = ("direct", "graph_capture")
CATEGORIES = ("kernel", "memcpy", "memset")


def validate(table: pa.Table, schema: pa.Schema, name: str) -> pa.Table:
    """The table cast to `schema`, or a ValueError naming the table and the missing columns."""
    missing = [f.name for f in schema if f.name not in table.column_names]
    if missing:
        raise ValueError(f"{name}: missing columns {missing}")
    return table.select(schema.names).cast(schema)

TRACES = pa.schema(
    [
        ("trace_id", pa.string()),
        ("path", pa.string()),  # relative to the trace root, forward slashes
        ("gpu_ns", pa.int64()),  # all GPU activity time T_p
        ("attributed_ns", pa.int64()),
        ("unattributed_ns", pa.int64()),
        ("kernels", pa.int64()),
        ("events", pa.int64()),
    ]
)

# kernel_events after ingest.classify.classify_events: the operator, its shape key and the phase.
CLASSIFIED_EVENTS = pa.schema(
    list(KERNEL_EVENTS)
    + [
        ("operator", pa.string()),  # canonical operator (ingest/taxonomy.yaml `operators`), `other` if none
        ("shape", pa.string()),  # canonical JSON of the operator's kwargs ("{}" when nothing is known)
        ("phase", pa.string()),  # see PHASES
        ("phase_rule", pa.string()),  # annotation:vllm|annotation:sglang|annotation:range|annotation:bracket|shape:attention|graph:full_graph_decode|none
    ]
)
PHASES = ("prefill", "decode", "mixed", "unknown")
# Classification rewrites `graph_replay`: graph_capture (aligned with a capture-trace launch, whose
# op and shapes the row inherits) or name_rule (operator from the kernel name only).
CLASSIFIED_ATTRIBUTIONS = ("direct", "graph_capture", "name_rule", "launch_only", "unattributed")

OP_SHAPE_TIME = pa.schema(
    [
        ("trace_id", pa.string()),
        ("operator", pa.string()),
        ("shape", pa.string()),
        ("phase", pa.string()),
        ("gpu_ns", pa.int64()),
        ("calls", pa.int64()),
    ]
)
