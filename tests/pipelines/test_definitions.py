"""The code location loads, holds the whole graph, and keeps torch and triton off its import path."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import dagster as dg

from pipelines.definitions import defs
from pipelines.resources import HotshapeStore, store_from_env
from tests.conftest import REPO


def test_definitions_load_with_every_asset_check_job_sensor_and_schedule():
    d = defs()
    dg.Definitions.validate_loadable(d)
    repo = d.get_repository_def()
    assert {k.to_user_string() for k in repo.asset_graph.get_all_asset_keys()} >= {
        "kernel_events", "op_shape_time", "fleet_weights", "release_bundle", "weight_drift", "evaluation_results", "scores"}
    checks = {f"{k.asset_key.to_user_string()}:{k.name}" for k in repo.asset_graph.asset_check_keys}
    assert checks >= {
        "kernel_events:gpu_time_conserved", "fleet_weights:weights_sum_to_one", "fleet_weights:coverage_above_floor",
        "fleet_weights:selected_problems_are_their_operators_work", "release_bundle:no_sealed_strings_in_public", "release_bundle:weights_sum_to_one",
        "release_bundle:every_selected_problem_has_roofline"}
    jobs = {j.name for j in repo.get_all_jobs()}
    assert {"ingest_trace", "refresh_weights", "evaluate_submission", "rescore"} <= jobs
    assert {s.name for s in repo.sensor_defs} == {"new_trace_sensor", "fleet_change_sensor", "new_submission_sensor",
                                                   "new_weights_sensor"}
    assert {s.name for s in repo.schedule_defs} == {"refresh_schedule", "rescore_schedule"}
    # The ingest job is partitioned by trace file; the refresh job is not.
    assert repo.get_job("ingest_trace").partitions_def.name == "trace_files"
    assert repo.get_job("refresh_weights").partitions_def is None
    assert repo.get_job("evaluate_submission").partitions_def.name == "submissions"
    # One evaluation step at a time per GPU: the evaluation sits in the `gpu` pool.
    pools = {key.to_user_string(): a.op.pool for a in repo.assets_defs_by_key.values() if a.is_executable for key in a.keys}
    assert pools["evaluation_results"] == "gpu" and pools["scores"] is None and pools["kernel_events"] is None


def test_importing_definitions_does_not_import_torch_or_triton():
    code = (
        "import sys, json; import pipelines.definitions as d; d.defs().get_repository_def().get_all_jobs();"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'triton'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


def test_store_reads_hotshape_environment_variables_when_definitions_load():
    store = store_from_env({"HOTSHAPE_TRACES": "/data/traces", "HOTSHAPE_COVERAGE_FLOOR": "0.8", "HOME": "/root"})
    assert (store.trace_root, store.coverage_floor, store.fleet) == ("/data/traces", 0.8, HotshapeStore().fleet)


def test_dagster_cli_finds_and_validates_the_code_location(tmp_path):
    """What `dagster dev` loads: the location named by [tool.dg] in pyproject.toml (like `dg check defs`)."""
    env = {**os.environ, "DAGSTER_HOME": str(tmp_path)}
    (tmp_path / "dagster.yaml").write_text((REPO / ".dagster_home" / "dagster.yaml").read_text())
    out = subprocess.run([str(Path(sys.executable).with_name("dagster")), "definitions", "validate"], cwd=REPO, env=env,
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "Validation successful for code location pipelines.definitions" in out.stderr + out.stdout


def _dg(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(Path(sys.executable).with_name("dg")), *args], cwd=REPO, capture_output=True, text=True,
                          env={k: v for k, v in os.environ.items() if k != "DAGSTER_HOME"})


def test_dg_checks_and_lists_the_definitions_as_the_readme_says():
    """`dg check defs` and `dg list defs` (dagster-dg-cli, pinned beside dagster) load the code location."""
    checked = _dg("check", "defs")
    assert checked.returncode == 0, checked.stderr[-2000:]
    assert "All definitions loaded successfully" in checked.stdout + checked.stderr
    listed = _dg("list", "defs", "--json")
    assert listed.returncode == 0, listed.stderr[-2000:]
    found = json.loads(listed.stdout)
    assets = {a["asset_key"]: a for a in found["assets"]}
    assert {"kernel_events", "fleet_weights", "release_bundle", "weight_drift", "evaluation_results", "scores"} <= set(assets)
    assert all(a["owners"] == [{"team": "hotshape"}] for a in assets.values())
    assert {"ingest_trace", "refresh_weights", "evaluate_submission", "rescore"} <= {j["name"] for j in found["jobs"]}


def test_the_documented_dagster_home_holds_the_instance_config_and_the_repo_root_none():
    """`dagster dev` warns "dagster.yaml ... will not be used" when the working directory holds one and
    DAGSTER_HOME names another directory: the repo root holds none, ./.dagster_home holds the one of record."""
    assert not (REPO / "dagster.yaml").exists() and not (REPO / "dagster.yml").exists()
    assert "concurrency:" in (REPO / ".dagster_home" / "dagster.yaml").read_text()
