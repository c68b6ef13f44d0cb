"""Evaluation assets: one submission per partition → results (GPU pool), and scores under the latest weights."""

import json

import dagster as dg
import polars as pl

from kernels_eval.results_verify import check_results
from kernels_eval.scoring import score
from pipelines.defs.metadata import markdown_table
from pipelines.defs.release import release_bundle
from pipelines.partitions import submissions
from pipelines.resources import HotshapeStore
from release.bundle import read_release


GPU_POOL = "gpu"  # one slot per GPU of the host (new_submission_sensor sizes it; docs/orchestration.md)


class EvaluationDevices(dg.Config):
    """The CUDA devices of one evaluation (empty: the worker's default GPU); several shard its operators."""

    devices: list[int] = []


@dg.asset(partitions_def=submissions, group_name="kernels_eval", kinds={"triton", "parquet"}, deps=[release_bundle],
          pool=GPU_POOL)
def evaluation_results(context: dg.AssetExecutionContext, config: EvaluationDevices,
                       store: HotshapeStore) -> dg.MaterializeResult:
    """One row per problem of the release for a new run of one submission: compile, correctness, adoption, timing."""
    # The harness spawns one worker process per operator file; torch and triton load there, not here.
    from kernels_eval.eval_commands import eval_summary, evaluate_to
    from kernels_eval.harness.release_view import read_release_view
    from kernels_eval.harness.runner import EvalConfig, detect_hardware

    key, path = context.partition_key, store.results_file(context.partition_key)
    release = read_release_view(store.release_dir)
    hardware = detect_hardware(store.device, release.hardware_names)
    devices = list(config.devices) if store.device == "cuda" and config.devices else None
    config = EvalConfig(device=store.device, hardware=hardware)
    rows = evaluate_to(path, store.submission_path(key), release, config, devices=devices).rows  # signed, merged
    summary = eval_summary(rows)
    stages = pl.DataFrame(rows).group_by("operator").agg(pl.col("stage").first(), pl.len().alias("problems"),
                                                         pl.col("error").first()).sort("operator")
    return dg.MaterializeResult(metadata={
        "dagster/row_count": len(rows), "run": config.run, "hardware": hardware, "device": store.device,
        "devices": ",".join(map(str, devices or [])) or "default", "compile_rate": summary["compile_rate"] or 0.0, "correct_rate": summary["correct_rate"] or 0.0,
        "native_rate": summary["native_rate"] or 0.0, "performance_measured": summary["performance_measured"],
        "operators": markdown_table(stages, limit=40), "path": dg.MetadataValue.path(str(path)),
    })


@dg.asset(partitions_def=submissions, group_name="kernels_eval", kinds={"polars", "json"},
          deps=[evaluation_results, release_bundle])
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
    s_op = pl.DataFrame({"operator": list(first.get("S_op", {})), "S_op": list(first.get("S_op", {}).values()),
                         "W_op": [first["W_op"][op] for op in first.get("S_op", {})]},
                        schema={"operator": pl.String, "S_op": pl.Float64, "W_op": pl.Float64})
    return dg.MaterializeResult(metadata={
        "weights_version": version, "hardware": first.get("hardware") or "none",
        **figures,
        "evaluated": first.get("evaluated", 0), "problems": first.get("problems", 0),
        "performance_measured": bool(first.get("performance_measured")),
        "S_op": markdown_table(s_op.sort("W_op", descending=True), limit=40),
        "path": dg.MetadataValue.path(str(path)),
    })
