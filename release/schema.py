"""Arrow schemas of every table a release holds, and their validation on write."""

from __future__ import annotations

import pyarrow as pa

PHASES = ("prefill", "decode", "mixed")

# public/manifest.parquet: what a problem is. kwargs and dtypes are canonical JSON objects.
MANIFEST = pa.schema(
    [
        ("problem_id", pa.string()),
        ("operator", pa.string()),
        ("init_kwargs", pa.string()),
        ("input_kwargs", pa.string()),
        ("dtypes", pa.string()),
    ]
)

# public/weights/vN.parquet: weight sums to 1 over the release's problems, and so does each
# weight_<phase> (the weights of the benchmark restricted to that phase's fleet time), or it is all
# 0 when the problems have no time in that phase. Same meaning as weighting's hot_problems.
WEIGHTS = pa.schema(
    [("problem_id", pa.string()), ("weight", pa.float64())]
    + [(f"weight_{p}", pa.float64()) for p in PHASES]
)

# public/intervals/vN.parquet: per problem of weights vN, the percentile bootstrap interval of its
# weight over profiles (resampled within each deployment; weighting.uncertainty, seeded), the
# replicates' standard error, and how many profiles / deployments have time in it. A problem
# with weight 0 in vN has [0, 0] and 0 support.
WEIGHT_INTERVALS = pa.schema([
    ("problem_id", pa.string()), ("operator", pa.string()), ("weight", pa.float64()),
    ("weight_lo", pa.float64()), ("weight_hi", pa.float64()), ("weight_se", pa.float64()),
    ("n_profiles", pa.int64()), ("n_deployments", pa.int64()),
])
# public/intervals/vN_operators.parquet: the same for W_op, the operator's total weight in vN.
OPERATOR_INTERVALS = pa.schema([
    ("operator", pa.string()), ("weight", pa.float64()),
    ("weight_lo", pa.float64()), ("weight_hi", pa.float64()), ("weight_se", pa.float64()),
])

# public/candidates/vN.parquet: shapes hot in the traces of vN that the release does not hold,
# proposed for the next minor release. share = their weight had they been selected.
CANDIDATES = pa.schema(
    [
        ("problem_id", pa.string()),
        ("operator", pa.string()),
        ("init_kwargs", pa.string()),
        ("input_kwargs", pa.string()),
        ("dtypes", pa.string()),
        ("share", pa.float64()),
    ]
)

# sealed/provenance.parquet: where each problem came from. Every string here is sealed.
PROVENANCE = pa.schema(
    [
        ("problem_id", pa.string()),
        ("source", pa.string()),  # "traces" | "atrex-bench"
        ("source_key", pa.string()),  # atrex: "<operator>/<shape id>"; traces: the shape JSON
        ("deployments", pa.list_(pa.string())),
        ("models", pa.list_(pa.string())),
        ("frameworks", pa.list_(pa.string())),
        ("raw_ops", pa.list_(pa.string())),
        ("kernels", pa.list_(pa.string())),
        ("trace_ids", pa.list_(pa.string())),
        ("trace_files", pa.list_(pa.string())),
        ("profile_gpu_ns", pa.list_(pa.int64())),  # aligned with trace_ids
        ("record", pa.string()),  # source-specific JSON kept verbatim (atrex shape + metadata)
    ]
)

# sealed/roofline.parquet: ours (from the operator registry) beside the published numbers.
ROOFLINE = pa.schema(
    [
        ("problem_id", pa.string()),
        ("hardware", pa.string()),
        ("flops", pa.int64()),
        ("bytes_read", pa.int64()),
        ("bytes_written", pa.int64()),
        ("path", pa.string()),
        ("t_roofline_s", pa.float64()),
        ("t_roofline_measured_s", pa.float64()),
        ("w_flops", pa.int64()),  # published semantic W (null when they give none)
        ("w_flops_dtype", pa.string()),  # the dtype key W was published under
        ("q_read", pa.int64()),
        ("q_write", pa.int64()),
        ("sol_time_ms", pa.float64()),
    ]
)

# sealed/atrex_operators.parquet: per-operator Atrex-Bench records kept verbatim for export.
ATREX_OPERATORS = pa.schema(
    [
        ("operator", pa.string()),
        ("importance", pa.string()),  # its operator_importance.json entry (JSON)
        ("metadata", pa.string()),  # its metadata.json without "shapes" (JSON)
        ("shape_ids", pa.list_(pa.string())),  # shape ids in their file order
    ]
)

TABLES = {
    "manifest": MANIFEST,
    "weights": WEIGHTS,
    "candidates": CANDIDATES,
    "intervals": WEIGHT_INTERVALS,
    "operator_intervals": OPERATOR_INTERVALS,
    "provenance": PROVENANCE,
    "roofline": ROOFLINE,
    "atrex_operators": ATREX_OPERATORS,
}


def validate(table: pa.Table, schema: pa.Schema, name: str) -> pa.Table:
    """The table cast to `schema` with its columns in order, or a ValueError naming what is wrong."""
    missing = [f.name for f in schema if f.name not in table.column_names]
    if missing:
        raise ValueError(f"{name}: missing columns {missing}")
    table = table.select(schema.names)
    try:
        return table.cast(schema)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
        raise ValueError(f"{name}: columns do not match the schema: {exc}") from exc
