"""Arrow schemas of every table a release holds, and their validation on write."""

from __future__ import annotations

import pyarrow as pa

from catalogue.vocabulary import PHASES
from ingest.field_metadata import described

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
        ("published_flops", pa.int64()),  # published semantic W (null when they give none)
        ("published_flops_dtype", pa.string()),  # the dtype key W was published under
        ("published_bytes_read", pa.int64()),
        ("published_bytes_written", pa.int64()),
        ("published_t_sol_s", pa.float64()),
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

# Each column's description and unit, carried as Parquet field metadata (b"description", b"unit") in every
# release table (ingest.field_metadata, which lists the units); docs/tables.md lists the same (tests/docs).
COLUMNS = {
    "problem_id": ("keyed hash (HMAC) of the canonical problem; stable across weights versions", ""),
    "operator": ("canonical operator name (kernels_eval/operators/<operator>.py)", ""),
    "init_kwargs": ("canonical JSON of the arguments of the operator's Model.__init__", ""),
    "input_kwargs": ("canonical JSON of the arguments of the reference's make_inputs, which builds forward's inputs", ""),
    "dtypes": ("canonical JSON: argument name → dtype", ""),
    "weight": ("the problem's share of the selected fleet GPU time (card-hour weighted); sums to 1", "fraction"),
    **{f"weight_{p}": (f"weight restricted to {p}-phase fleet time; sums to 1, or all 0 without {p} time", "fraction")
       for p in PHASES},
    "weight_lo": ("lower end of the percentile bootstrap interval of weight (resampled profiles)", "fraction"),
    "weight_hi": ("upper end of the percentile bootstrap interval of weight", "fraction"),
    "weight_se": ("standard error of weight over the bootstrap replicates", "fraction"),
    "n_profiles": ("profiles with time in the problem", "count"),
    "n_deployments": ("deployments with time in the problem", "count"),
    "share": ("the weight the candidate would have had, had it been selected", "fraction"),
    "source": ("where the problem came from: traces | atrex-bench", ""),
    "source_key": ("atrex: <operator>/<shape id>; traces: the shape JSON", ""),
    "deployments": ("deployment ids with time in the problem (sealed)", ""),
    "models": ("models served by those deployments (sealed)", ""),
    "frameworks": ("serving frameworks of those deployments (sealed)", ""),
    "raw_ops": ("op names seen in the traces (sealed)", ""),
    "kernels": ("kernel names seen in the traces (sealed)", ""),
    "trace_ids": ("content addresses of the profiles with time in the problem (sealed)", ""),
    "trace_files": ("trace file paths, aligned with trace_ids (sealed)", ""),
    "profile_gpu_ns": ("GPU time of the problem per profile, aligned with trace_ids", "ns"),
    "record": ("source-specific JSON kept verbatim (atrex shape and metadata)", ""),
    "hardware": ("accelerator name, a key of catalogue/hardware.yaml", ""),
    "flops": ("floating-point operations of one call (catalogue/work/<operator>.py)", "FLOP"),
    "bytes_read": ("minimum bytes read from HBM by one call", "byte"),
    "bytes_written": ("minimum bytes written to HBM by one call", "byte"),
    "path": ("dtype path of the peak used (e.g. bf16_tensor)", ""),
    "t_roofline_s": ("max(flops / peak[path], bytes / HBM bandwidth), datasheet peaks", "s"),
    "t_roofline_measured_s": ("the same with the measured ceilings of the hardware table", "s"),
    "published_flops": ("Atrex-Bench's published semantic W (null when none)", "FLOP"),
    "published_flops_dtype": ("the dtype key published_flops was published under", ""),
    "published_bytes_read": ("Atrex-Bench's published semantic Q read", "byte"),
    "published_bytes_written": ("Atrex-Bench's published semantic Q written", "byte"),
    "published_t_sol_s": ("Atrex-Bench's published SOL time (their SOL_time_ms / 1000)", "s"),
    "importance": ("the operator's operator_importance.json entry (JSON)", ""),
    "metadata": ("the operator's metadata.json without shapes (JSON)", ""),
    "shape_ids": ("Atrex-Bench shape ids in their file order", ""),
}


MANIFEST, WEIGHTS, WEIGHT_INTERVALS, OPERATOR_INTERVALS, CANDIDATES, PROVENANCE, ROOFLINE, ATREX_OPERATORS = (
    described(t, COLUMNS) for t in (MANIFEST, WEIGHTS, WEIGHT_INTERVALS, OPERATOR_INTERVALS, CANDIDATES, PROVENANCE,
                                     ROOFLINE, ATREX_OPERATORS))

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
