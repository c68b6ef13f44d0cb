"""Evaluation assets: one submission per partition → results (GPU pool), and scores under the latest weights."""

import json
import math
import warnings

import dagster as dg
import polars as pl

from catalogue.vocabulary import DONE, STAGES
from kernels_eval.eval_commands import eval_summary, evaluate_to
from kernels_eval.harness.adoption import NATIVE_SHARE
from kernels_eval.harness.release_view import read_release_view
from kernels_eval.harness.runner import EvalConfig, detect_hardware
from kernels_eval.results_schema import RESULTS, read_results
from kernels_eval.results_verify import check_results
from kernels_eval.run_summary import operator_summaries
from kernels_eval.scoring import score
from pipelines.defs.code_versions import code_version
from pipelines.defs.metadata import column_schema, path_value, rounded, table
from pipelines.defs.release import release_bundle
from pipelines.partitions import submissions
from pipelines.resources import HotshapeStore
from release.bundle import read_release


GPU_POOL = "gpu"  # one slot per GPU of the host (new_submission_sensor sizes it; docs/orchestration.md)


class EvaluationDevices(dg.Config):
    """The CUDA devices of one evaluation (empty: the worker's default GPU); several shard its operators."""

    devices: list[int] = []


@dg.asset(partitions_def=submissions, group_name="kernels_eval", kinds={"triton", "parquet"}, deps=[release_bundle],
          pool=GPU_POOL, code_version=code_version("kernels_eval", "release", "catalogue"),
          metadata={"dagster/column_schema": column_schema(RESULTS)})
def evaluation_results(context: dg.AssetExecutionContext, config: EvaluationDevices,
                       store: HotshapeStore) -> dg.MaterializeResult:
    """One row per problem of the release for a new run of one submission: compile, correctness, adoption, timing."""
    key, path = context.partition_key, store.results_file(context.partition_key)
    release = read_release_view(store.release_dir)
    hardware = detect_hardware(store.device, release.hardware_names)
    devices = list(config.devices) if store.device == "cuda" and config.devices else None
    config = EvalConfig(device=store.device, hardware=hardware)
    rows = evaluate_to(path, store.submission_path(key), release, config, devices=devices).rows  # signed, merged
    summary = eval_summary(rows)
    return dg.MaterializeResult(metadata=rounded({
        "dagster/row_count": len(rows), "run": config.run, "hardware": hardware, "device": store.device,
        "devices": ",".join(map(str, devices or [])) or "default", "compile_rate": summary["compile_rate"] or 0.0, "correct_rate": summary["correct_rate"] or 0.0,
        "native_rate": summary["native_rate"] or 0.0, "performance_measured": summary["performance_measured"],
        "operators": table(operator_table(rows), limit=40), "path": path_value(path),
    }))


def operator_table(rows: list[dict]) -> pl.DataFrame:
    """Per operator of a run: problems, done, failed in each stage, and the first failure (run_summary's counts)."""
    failed = [s for s in STAGES if s != DONE]
    return pl.DataFrame([{
        "operator": s.operator, "problems": s.problems, "done": s.done,
        **{f"failed_{stage}": s.failed.get(stage, 0) for stage in failed},
        "first_failure": "" if s.first_failure is None else
        f"{s.first_failure['stage']}: {(s.first_failure['error'] or '')[:160]}"} for s in operator_summaries(rows)],
        schema={"operator": pl.String, "problems": pl.Int64, "done": pl.Int64,
                **{f"failed_{stage}": pl.Int64 for stage in failed}, "first_failure": pl.String})


@dg.asset(partitions_def=submissions, group_name="kernels_eval", kinds={"polars", "json"},
          deps=[evaluation_results, release_bundle], code_version=code_version("kernels_eval", "release", "catalogue"))
def scores(context: dg.AssetExecutionContext, store: HotshapeStore) -> dg.MaterializeResult:
    """S_agg, per-operator S_op and stage rates of one submission under the release's latest weights (no GPU)."""
    key = context.partition_key
    release = read_release(store.release_dir)
    # rows this host signed against this release only; anything else fails the asset, naming the file
    results = check_results(store.results_file(key), release, submission=key).rows
    result = score(results, release)
    version = release.versions[-1]
    path = store.scores_dir(key) / f"{release.name}-v{version}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    first = result[0] if result else {}
    figures = {k: first[k] for k in ("S_agg", "S_problem_weighted", "coverage_weight") if first.get(k) is not None}
    # per phase: the score of a benchmark made only of that phase's fleet time (kernels_eval.scoring.aggregate)
    figures |= {f"S_agg_{p}": v for p, v in (first.get("S_agg_phase") or {}).items() if v is not None}
    s_op = pl.DataFrame({"operator": list(first.get("S_op", {})), "S_op": list(first.get("S_op", {}).values()),
                         "W_op": [first["W_op"][op] for op in first.get("S_op", {})]},
                        schema={"operator": pl.String, "S_op": pl.Float64, "W_op": pl.Float64})
    return dg.MaterializeResult(metadata=rounded({
        "weights_version": version, "hardware": first.get("hardware") or "none",
        **figures,
        "evaluated": first.get("evaluated", 0), "problems": first.get("problems", 0),
        "performance_measured": bool(first.get("performance_measured")),
        "S_op": table(s_op.sort("W_op", descending=True), limit=40),
        "path": path_value(path),
    }))


def _submission_check(**kwargs):
    """dg.asset_check per submission partition. Partition-aware checks are a preview API in dagster 1.13 (pinned
    in pyproject); they check the run's own partition, so the warning is silenced here only (as in ingest.py)."""
    def wrap(fn):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", dg.PreviewWarning)
            return dg.asset_check(partitions_def=submissions, **kwargs)(fn)
    return wrap


def latest_run(store: HotshapeStore, key: str) -> pl.DataFrame:
    """The rows of the submission's latest run (the hardware of its highest run number) in its results file."""
    rows = pl.from_arrow(read_results(store.results_file(key))).filter(pl.col("submission") == key)
    if rows.is_empty():
        return rows
    last = rows.sort("run").row(-1, named=True)
    return rows.filter((pl.col("hardware") == last["hardware"]) & (pl.col("run") == last["run"]))


def fallbacks_counted_as_native(rows: pl.DataFrame) -> pl.DataFrame:
    """Rows marked native although fallback compute ran (CPU: any fallback named) or the submission's kernels
    hold less than NATIVE_SHARE of the GPU time: problem_id, operator, native_fraction, fallbacks."""
    leaked = pl.col("native_fraction").is_null() & (pl.col("fallbacks").list.len().fill_null(0) > 0)
    short = pl.col("native_fraction").is_not_null() & (pl.col("native_fraction") < NATIVE_SHARE)
    return (rows.filter(pl.col("native").fill_null(False) & (leaked | short))
            .select("problem_id", "operator", "native_fraction", pl.col("fallbacks").list.join("; ")))


@_submission_check(asset=evaluation_results)
def every_problem_evaluated(context: dg.AssetCheckExecutionContext, store: HotshapeStore) -> dg.AssetCheckResult:
    """The latest run holds a row for every problem of the release."""
    manifest = read_release(store.release_dir, verify=False).manifest
    run = latest_run(store, context.partition_key)
    missing = manifest.join(run.select("problem_id"), on="problem_id", how="anti").select("problem_id", "operator")
    return dg.AssetCheckResult(passed=missing.is_empty(), metadata={
        "problems": manifest.height, "evaluated": run["problem_id"].n_unique() if run.height else 0,
        "missing": missing.height, "problems_missing": table(missing.sort("operator", "problem_id"))})


@_submission_check(asset=evaluation_results, blocking=True)
def no_fallback_counted_as_native(context: dg.AssetCheckExecutionContext, store: HotshapeStore) -> dg.AssetCheckResult:
    """No row of the latest run is marked native while PyTorch/library fallbacks did its work."""
    run = latest_run(store, context.partition_key)
    wrong = fallbacks_counted_as_native(run)
    return dg.AssetCheckResult(passed=wrong.is_empty(), metadata={
        "native": int(run["native"].fill_null(False).sum()) if run.height else 0, "miscounted": wrong.height,
        "rows_miscounted": table(wrong)})


def score_faults(by_hardware: list[dict]) -> tuple[list[str], list[str]]:
    """(hardware whose W_op do not sum to 1, hardware whose S_agg is outside [0, 1] or set although
    nothing was timed, or null although something was) of one scores file."""
    sums_off, out_of_range = [], []
    for s in by_hardware:
        if abs(math.fsum(s["W_op"].values()) - 1.0) > 1e-9:
            sums_off.append(s["hardware"])
        agg = s["S_agg"]
        if (agg is None) == bool(s["performance_measured"]) or (agg is not None and not 0.0 <= agg <= 1.0):
            out_of_range.append(s["hardware"])
    return sums_off, out_of_range


def _scores_file(store: HotshapeStore, key: str) -> list[dict]:
    release = read_release(store.release_dir, verify=False)
    return json.loads((store.scores_dir(key) / f"{release.name}-v{release.versions[-1]}.json").read_text())


@_submission_check(asset=scores, name="weights_sum_to_one", blocking=True)
def score_weights_sum_to_one(context: dg.AssetCheckExecutionContext, store: HotshapeStore) -> dg.AssetCheckResult:
    """The operator weights W_op a score used sum to 1 (within 1e-9), on every hardware."""
    by_hardware = _scores_file(store, context.partition_key)
    sums_off, _ = score_faults(by_hardware)
    return dg.AssetCheckResult(passed=not sums_off, metadata={
        "sum_W_op": dg.MetadataValue.json({s["hardware"]: math.fsum(s["W_op"].values()) for s in by_hardware})})


@_submission_check(asset=scores, blocking=True)
def s_agg_in_range(context: dg.AssetCheckExecutionContext, store: HotshapeStore) -> dg.AssetCheckResult:
    """S_agg lies in [0, 1] where performance was measured, and is null (not measured) where it was not."""
    by_hardware = _scores_file(store, context.partition_key)
    _, out_of_range = score_faults(by_hardware)
    return dg.AssetCheckResult(passed=not out_of_range, metadata={
        "S_agg": dg.MetadataValue.json({s["hardware"]: rounded(s["S_agg"]) for s in by_hardware}),
        "hardware_out_of_range": dg.MetadataValue.json(out_of_range)})
