"""Weighting assets: fleet weights over every ingested trace, the hot problems, and their checks."""

import json
import math

import dagster as dg
import polars as pl

from ingest.output import write_parquet_atomic
from ingest.pipeline import traces_frame_from
from pipelines.defs.ingest import op_shape_time
from pipelines.defs.metadata import markdown_table, top_operators
from pipelines.resources import HotshapeStore
from weighting.concentration import summary as concentration
from weighting.fleet import load_fleet
from weighting.schema import PHASE_WEIGHTS
from weighting.selection import SUM_TOLERANCE, select_hot
from weighting.weights import fleet_weights as fleet_weights_of


def ingested_traces(store: HotshapeStore, fleet) -> tuple[pl.DataFrame, pl.DataFrame, list[str]]:
    """traces table and op_shape_time of the fleet's traces ingested so far, and the paths not yet ingested."""
    summaries, missing = [], []
    for path in sorted(fleet.assignment()):
        summary = store.read_summary(path)
        if summary is None or not store.op_shape_time_file(summary["trace_id"]).is_file():
            missing.append(path)
        else:
            summaries.append(summary)
    if not summaries:
        raise dg.Failure(f"none of the {len(missing)} traces {store.fleet} claims has been ingested yet")
    traces = traces_frame_from(summaries)
    ost = pl.concat([pl.read_parquet(store.op_shape_time_file(s["trace_id"])) for s in summaries], how="vertical_relaxed")
    return traces, ost, missing


@dg.asset(group_name="weighting", kinds={"polars", "parquet"}, deps=[op_shape_time])
def fleet_weights(context: dg.AssetExecutionContext, store: HotshapeStore) -> dg.MaterializeResult:
    """Card-hour-weighted fleet GPU time per operator × shape × phase, and the hot problems selected from it."""
    fleet = load_fleet(store.fleet, store.trace_root)
    traces, ost, missing = ingested_traces(store, fleet)
    weights = fleet_weights_of(ost, traces, fleet)
    selected, coverage = select_hot(weights, store.load_policy())
    out = store.weights_dir
    write_parquet_atomic(weights, out / "fleet_weights.parquet")
    write_parquet_atomic(selected, out / "hot_problems.parquet")
    (out / "coverage.json").write_text(json.dumps(coverage, indent=2, sort_keys=True, default=str) + "\n")
    ops = top_operators(selected, "weight").rename({"weight": "W_op"}).drop("share")
    shares = concentration(selected)
    return dg.MaterializeResult(metadata={
        "dagster/row_count": weights.height,
        "problems": selected.height,
        "operators": selected["operator"].n_unique(),
        "traces_used": traces.height,
        "traces_not_ingested": dg.MetadataValue.json(missing),
        "coverage_of_fleet": coverage["coverage_of_fleet"],
        "coverage_of_benchmarkable": coverage["coverage_of_benchmarkable"],
        "top_operators": markdown_table(ops),
        "concentration": dg.MetadataValue.json(shares),
        "path": dg.MetadataValue.path(str(out)),
    })


def weight_sums(weights: pl.DataFrame) -> dict[str, float]:
    """Exact (fsum) sum of `weight` and of each phase weight column present."""
    return {c: math.fsum(weights[c].to_list()) for c in ("weight", *PHASE_WEIGHTS) if c in weights.columns}


def sums_to_one(sums: dict[str, float], weights: pl.DataFrame) -> bool:
    """`weight` sums to 1, each phase column to 1 or is all 0, and nothing is negative or NaN."""
    finite = all(weights[c].is_not_nan().all() and (weights[c] >= 0).all() for c in sums)
    phases_ok = all(abs(s - 1.0) <= SUM_TOLERANCE or s == 0.0 for c, s in sums.items() if c != "weight")
    return finite and phases_ok and abs(sums.get("weight", 0.0) - 1.0) <= SUM_TOLERANCE


@dg.asset_check(asset=fleet_weights, name="weights_sum_to_one", blocking=True)
def hot_problem_weights_sum_to_one(store: HotshapeStore) -> dg.AssetCheckResult:
    """The selected problems' weights sum to 1 (within 1e-12), each phase column to 1 or 0."""
    selected = pl.read_parquet(store.weights_dir / "hot_problems.parquet")
    sums = weight_sums(selected)
    return dg.AssetCheckResult(passed=sums_to_one(sums, selected), metadata={f"sum_{c}": s for c, s in sums.items()})


@dg.asset_check(asset=fleet_weights)
def coverage_above_floor(store: HotshapeStore) -> dg.AssetCheckResult:
    """The selected problems cover at least `coverage_floor` of all fleet GPU time."""
    coverage = json.loads((store.weights_dir / "coverage.json").read_text())["coverage_of_fleet"]
    return dg.AssetCheckResult(passed=coverage >= store.coverage_floor, severity=dg.AssetCheckSeverity.WARN,
                               metadata={"coverage_of_fleet": coverage, "floor": store.coverage_floor})
