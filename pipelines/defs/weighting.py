"""Weighting assets: fleet weights over the trace partitions that passed their checks, the hot problems, and their checks."""

import json
import math
import os
from concurrent.futures import ThreadPoolExecutor

import dagster as dg
import polars as pl

from pipelines.defs.fleet import FLEET_VERSION, fleet_file, fleet_version
from pipelines.defs.ingest import op_shape_time
from pipelines.defs.code_versions import code_version
from pipelines.defs.lineage import column_lineage
from pipelines.defs.metadata import column_schema, path_value, rounded, table, top_operators
from pipelines.resources import HotshapeStore
from weighting.concentration import summary as concentration
from weighting.fleet import load_fleet
from weighting.schema import COLUMNS as WEIGHTING_COLUMNS
from weighting.schema import FLEET_WEIGHTS, PHASE_WEIGHTS
from flow.build import load_mined, mine_store, save_mined
from ingest.tracefile import file_trace_id
from release.admission import MIN_OWN_WORK_SHARE, own_work
from weighting.selection import SUM_TOLERANCE


GATE = dg.AssetCheckKey(dg.AssetKey("kernel_events"), "gpu_time_conserved")


def entering_traces(instance: dg.DagsterInstance, store: HotshapeStore, fleet) -> tuple[dict[str, str], list[dict]]:
    """File name → trace_id of the fleet's traces whose op_shape_time partition is materialised and whose
    gpu_time_conserved check passed on its latest kernel_events; the others as {path, trace_id, reason}."""
    done = instance.get_materialized_partitions(dg.AssetKey("op_shape_time"))
    checks = {i.partition_key: i for i in instance.event_log_storage.get_asset_check_partition_info([GATE])}
    traces = store.trace_store()
    names = sorted(fleet.assignment())
    with ThreadPoolExecutor(max_workers=max(1, min(4, os.cpu_count() or 1))) as hashing:  # sha256 frees the GIL
        now = dict(zip(names, hashing.map(
            lambda name: file_trace_id(store.trace_path(name)) if store.trace_path(name).is_file() else None, names)))
    ids, left_out = {}, []
    for name in names:
        check = checks.get(name)
        # AssetCheckExecutionRecordStatus is not exported by dagster 1.13: compared by value.
        status = check.latest_execution_status.value if check is not None else None
        trace_id = now[name]  # the file's bytes as they are now
        if status == "FAILED":
            reason = "gpu_time_conserved failed"
        elif name not in done:
            reason = "op_shape_time not materialised"
        elif status != "SUCCEEDED":
            reason = "gpu_time_conserved not run"
        elif not check.is_current:
            reason = "gpu_time_conserved not run on the latest kernel_events"
        elif trace_id is None or traces.summary(trace_id) is None:
            reason = "file changed since its kernel_events was materialised"
        else:
            ids[name] = trace_id
            continue
        left_out.append({"path": name, "trace_id": trace_id, "reason": reason})
    if not ids:
        raise dg.Failure(f"none of the {len(left_out)} traces {store.fleet} claims can enter: {left_out[:3]}")
    return ids, left_out


@dg.asset(group_name="weighting", kinds={"polars", "parquet"}, deps=[op_shape_time, fleet_file],
          code_version=code_version("flow", "weighting", "release", "ingest", "catalogue"),
          metadata={"dagster/column_schema": column_schema(FLEET_WEIGHTS, WEIGHTING_COLUMNS),
                    "dagster/column_lineage": column_lineage("fleet_weights")})
def fleet_weights(context: dg.AssetExecutionContext, store: HotshapeStore) -> dg.MaterializeResult:
    """Card-hour-weighted fleet GPU time per operator × shape × phase, and the hot problems selected from it,
    over the trace partitions that passed their checks (computed once; release_bundle builds from it)."""
    version = fleet_version(store)
    fleet = load_fleet(store.fleet, store.trace_root)
    ids, left_out = entering_traces(context.instance, store, fleet)
    mined = mine_store(store.trace_store(), fleet, ids, store.load_policy(), left_out=left_out)
    save_mined(mined, store.weights_dir)
    selected, coverage = mined.selected, mined.coverage
    ops = top_operators(selected, "weight").rename({"weight": "W_op"}).drop("share")
    shares = concentration(selected)
    return dg.MaterializeResult(metadata=rounded({
        "dagster/row_count": mined.fleet_weights.height,
        FLEET_VERSION: version,
        "problems": selected.height,
        "operators": selected["operator"].n_unique(),
        "traces_used": mined.traces.height,
        "traces_left_out": dg.MetadataValue.json({q["path"]: q["reason"] for q in left_out}),
        "coverage_of_fleet": coverage["coverage_of_fleet"],
        "coverage_of_benchmarkable": coverage["coverage_of_benchmarkable"],
        "top_operators": table(ops),
        "concentration": dg.MetadataValue.json(rounded(shares)),
        "path": path_value(store.weights_dir),
    }))


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


@dg.asset_check(asset=fleet_weights, blocking=True)
def selected_problems_are_their_operators_work(store: HotshapeStore) -> dg.AssetCheckResult:
    """Each selected problem has at least MIN_OWN_WORK_SHARE of its GPU time in kernels whose role fits its
    operator (no cast, copy, fill or collective making a GEMM or attention problem); the others are named."""
    mined = load_mined(store.weights_dir, store.trace_store(), load_fleet(store.fleet, store.trace_root))
    shares = own_work(mined.selected, mined.by_kernel)
    refused = shares.filter(pl.col("own_share") < MIN_OWN_WORK_SHARE)
    return dg.AssetCheckResult(passed=refused.height == 0, metadata=rounded({
        "threshold": MIN_OWN_WORK_SHARE, "problems": shares.height, "refused": refused.height,
        "lowest_own_share": float(shares["own_share"].min()) if shares.height else 1.0,
        "refused_problems": table(refused.select("operator", "shape", "own_share", "foreign"))}))
