"""Polars schemas of every table the weighting package writes, their columns' descriptions, and their validation."""

from __future__ import annotations

import polars as pl

from ingest.schema import COLUMNS as INGEST_COLUMNS

# Per (operator, shape, phase): Σ_d card_hours_d · share_d, and that over Σ_d card_hours_d.
FLEET_WEIGHTS = {
    "operator": pl.String,
    "shape": pl.String,  # canonical JSON of the operator's kwargs
    "phase": pl.String,  # prefill | decode | mixed | unknown
    "fleet_card_hours": pl.Float64,
    "fleet_share": pl.Float64,  # of all fleet GPU time, attributed or not
    "n_profiles": pl.Int64,  # profiles with time in this row
    "n_deployments": pl.Int64,
}

PHASE_WEIGHTS = ("weight_prefill", "weight_decode", "weight_mixed")

# One row per selected problem (operator, shape); `weight` sums to 1 over the table, and each
# weight_<phase> sums to 1 over the table (or is all 0 when the selection has no time in it).
HOT_PROBLEMS = {
    "operator": pl.String,
    "shape": pl.String,
    "weight": pl.Float64,
    "weight_prefill": pl.Float64,
    "weight_decode": pl.Float64,
    "weight_mixed": pl.Float64,
    "fleet_card_hours": pl.Float64,  # all phases, unknown included
    "fleet_share": pl.Float64,
    "operator_rank": pl.Int64,  # 1 = the operator's hottest shape
}

# Bootstrap confidence interval of each selected problem's weight.
WEIGHT_UNCERTAINTY = {
    "operator": pl.String,
    "shape": pl.String,
    "weight": pl.Float64,
    "weight_lo": pl.Float64,
    "weight_hi": pl.Float64,
    "weight_se": pl.Float64,
    "n_profiles": pl.Int64,  # distinct profiles with time in the problem, any phase
    "n_deployments": pl.Int64,
}

DRIFT_STATUSES = ("kept", "newly_hot", "newly_cold")

DRIFT_PROBLEMS = {
    "problem_id": pl.String,
    "operator": pl.String,
    "weight_old": pl.Float64,
    "weight_new": pl.Float64,
    "delta": pl.Float64,
    "status": pl.String,  # see DRIFT_STATUSES
}

DRIFT_OPERATORS = {
    "operator": pl.String,
    "weight_old": pl.Float64,
    "weight_new": pl.Float64,
    "delta": pl.Float64,
}


# Each column's description and unit (ingest.field_metadata), carried in the field metadata of the Parquet files
# written from these tables (fleet_weights.parquet, hot_problems.parquet); docs/tables.md lists the same.
COLUMNS = {
    **{c: INGEST_COLUMNS[c] for c in ("operator", "shape", "phase")},
    "fleet_card_hours": ("Σ over deployments of card_hours × the row's share of the deployment's GPU time", "card-hour"),
    "fleet_share": ("fleet_card_hours over all fleet card-hours: the row's share of fleet GPU time, attributed or not",
                    "fraction"),
    "n_profiles": ("profiles with time in the row", "count"),
    "n_deployments": ("deployments with time in the row", "count"),
    "weight": ("the problem's share of the selected fleet GPU time (card-hour weighted); sums to 1", "fraction"),
    **{p: (f"weight restricted to {p.removeprefix('weight_')}-phase fleet time; sums to 1, or all 0 without it",
           "fraction") for p in PHASE_WEIGHTS},
    "operator_rank": ("rank of the shape within its operator, 1 = the operator's hottest", "count"),
    "weight_lo": ("lower end of the percentile bootstrap interval of weight (resampled profiles)", "fraction"),
    "weight_hi": ("upper end of the percentile bootstrap interval of weight", "fraction"),
    "weight_se": ("standard error of weight over the bootstrap replicates", "fraction"),
    "problem_id": ("the release's problem id", ""),
    "weight_old": ("weight in the older version", "fraction"),
    "weight_new": ("weight in the newer version", "fraction"),
    "delta": ("weight_new - weight_old", "fraction"),
    "status": ("kept, newly_hot or newly_cold", ""),
}


def validate(frame: pl.DataFrame, schema: dict, name: str) -> pl.DataFrame:
    """The frame with exactly `schema`'s columns in order and types, or a ValueError naming table and columns."""
    missing = [c for c in schema if c not in frame.columns]
    if missing:
        raise ValueError(f"{name}: missing columns {missing}")
    out = frame.select([pl.col(c).cast(t, strict=True) for c, t in schema.items()])
    nulls = [c for c in schema if out[c].null_count()]
    if nulls:
        raise ValueError(f"{name}: null values in columns {nulls}")
    return out
