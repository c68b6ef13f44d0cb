"""The checks on evaluation_results and scores pass on a real CPU evaluation and fail when its files are broken;
the evaluation's metadata counts every problem per operator."""

from __future__ import annotations

import json
import shutil
from types import SimpleNamespace

import dagster as dg
import polars as pl
import pytest

from kernels_eval.results_schema import read_results
from kernels_eval.results_store import write_results
from pipelines.commands import materialize_all
from pipelines.defs.kernels_eval import (every_problem_evaluated, fallbacks_counted_as_native,
                                         no_fallback_counted_as_native, s_agg_in_range, score_faults,
                                         score_weights_sum_to_one)
from tests.conftest import REPO
from tests.pipelines.conftest import definition_metadata, dense_store

TRACES = ["llama3-8b-compiled/eager.json.gz", "llama3-8b/eager.json.gz"]  # both dense deployments


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory):
    """Two traces → release, and the honest submission evaluated on CPU and scored: (store, instance)."""
    tmp = tmp_path_factory.mktemp("evaluated")
    shutil.copytree(REPO / "tests" / "adversarial" / "honest", tmp / "submissions" / "honest")
    store = dense_store(tmp, TRACES, submissions=str(tmp / "submissions"))
    with dg.instance_for_test() as inst:
        summary = materialize_all(store, inst)
        assert "honest" in summary["scores"], summary
        yield store, inst


def _check(store, check) -> tuple[dg.AssetCheckResult, bool]:
    """The check's own function on the `honest` partition of `store`'s files, and whether it blocks. (materialize()
    cannot run a partitioned check alone in dagster 1.13: it wants one partitions definition over the selection.)"""
    [spec] = check.check_specs
    return check.op.compute_fn.decorated_fn(SimpleNamespace(partition_key="honest"), store), spec.blocking


def _latest_evaluation(instance, check_name: str):
    key = dg.AssetCheckKey(dg.AssetKey("scores" if check_name in ("weights_sum_to_one", "s_agg_in_range")
                                       else "evaluation_results"), check_name)
    return instance.event_log_storage.get_asset_check_execution_history(key, limit=1)[0]


@pytest.mark.parametrize("name", ["every_problem_evaluated", "no_fallback_counted_as_native", "weights_sum_to_one",
                                  "s_agg_in_range"])
def test_result_checks_pass_on_a_real_evaluation(evaluated, name):
    _, inst = evaluated
    assert _latest_evaluation(inst, name).status.value == "SUCCEEDED"


def test_the_evaluation_metadata_counts_every_problem_per_operator(evaluated):
    store, inst = evaluated
    [record] = inst.fetch_materializations(dg.AssetRecordsFilter(asset_key=dg.AssetKey("evaluation_results"),
                                                                 asset_partitions=["honest"]), limit=1).records
    meta = record.asset_materialization.metadata
    rows = pl.from_arrow(read_results(store.results_file("honest")))
    table = [r.data for r in meta["operators"].records]
    per_op = rows.group_by("operator").agg(pl.len().alias("n"), (pl.col("stage") == "done").sum().alias("done"))
    assert {t["operator"]: (t["problems"], t["done"]) for t in table} == {
        op: (n, done) for op, n, done in per_op.iter_rows()}
    assert all(t["problems"] == t["done"] + sum(v for k, v in t.items() if k.startswith("failed_")) for t in table)
    schema = definition_metadata("evaluation_results")["dagster/column_schema"]
    assert {c.name for c in schema.schema.columns} >= {"problem_id", "stage", "native"}
    assert meta["run"].value == rows["run"].max() and run_jobs(inst) >= {"evaluate_submission"}


def run_jobs(instance) -> set[str]:
    return {r.job_name for r in instance.get_runs()}


def test_every_problem_evaluated_fails_when_a_problem_has_no_row(evaluated, tmp_path):
    store, _ = evaluated
    copy = dense_store(tmp_path, TRACES)
    shutil.copytree(store.out, copy.out, dirs_exist_ok=True)
    rows = pl.from_arrow(read_results(copy.results_file("honest"))).to_dicts()
    write_results(rows[1:], copy.results_file("honest"), append=False)
    evaluation, blocking = _check(copy, every_problem_evaluated)
    assert not evaluation.passed and evaluation.metadata["missing"].value == 1 and not blocking


def test_a_fallback_counted_as_native_fails_the_blocking_check(evaluated, tmp_path):
    store, _ = evaluated
    copy = dense_store(tmp_path, TRACES)
    shutil.copytree(store.out, copy.out, dirs_exist_ok=True)
    rows = pl.from_arrow(read_results(copy.results_file("honest"))).to_dicts()
    rows[0] |= {"native": True, "native_fraction": None, "fallbacks": ["aten::mm x1"]}
    write_results(rows, copy.results_file("honest"), append=False)
    assert fallbacks_counted_as_native(pl.DataFrame(rows[:1]))["problem_id"].to_list() == [rows[0]["problem_id"]]
    evaluation, blocking = _check(copy, no_fallback_counted_as_native)
    assert not evaluation.passed and evaluation.metadata["miscounted"].value == 1 and blocking


def test_gpu_rows_below_the_native_share_are_fallbacks_counted_as_native(evaluated):
    store, _ = evaluated
    rows = pl.from_arrow(read_results(store.results_file("honest"))).head(2).with_columns(
        pl.Series("native", [True, True]), pl.Series("native_fraction", [0.5, 0.99]),
        pl.Series("fallbacks", [["kernel:x 50%"], ["kernel:y 1%"]]))
    assert fallbacks_counted_as_native(rows)["native_fraction"].to_list() == [0.5]


def test_score_checks_fail_on_a_weight_sum_or_an_s_agg_out_of_range(evaluated, tmp_path):
    store, _ = evaluated
    [path] = list(store.scores_dir("honest").glob("*.json"))
    [scored] = json.loads(path.read_text())
    assert score_faults([scored]) == ([], [])
    assert score_faults([scored | {"W_op": {k: 2 * v for k, v in scored["W_op"].items()}}])[0] == ["cpu"]
    assert score_faults([scored | {"S_agg": 0.0}])[1] == ["cpu"]  # CPU: not measured is null, never 0
    assert score_faults([scored | {"S_agg": 1.5, "performance_measured": True}])[1] == ["cpu"]
    assert score_faults([scored | {"S_agg": 0.25, "performance_measured": True}]) == ([], [])

    copy = dense_store(tmp_path, TRACES)
    shutil.copytree(store.out, copy.out, dirs_exist_ok=True)
    [copied] = list(copy.scores_dir("honest").glob("*.json"))
    copied.write_text(json.dumps([scored | {"S_agg": 0.0}]))
    evaluation, blocking = _check(copy, s_agg_in_range)
    assert not evaluation.passed and blocking
    evaluation, _ = _check(copy, score_weights_sum_to_one)
    assert evaluation.passed
