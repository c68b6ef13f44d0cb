"""`hotshape run-pipeline`: the README's main command, on a project-local sqlite Dagster instance."""

from __future__ import annotations

import json
import re
import shutil

import dagster as dg
import pytest

from pipelines.cli import main
from tests.conftest import REPO
from tests.pipelines.conftest import EXAMPLE_TRACES


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A working directory like a fresh clone's: .dagster_home/dagster.yaml, one small trace, a fleet, a submission."""
    (tmp_path / ".dagster_home").mkdir()
    shutil.copy(REPO / ".dagster_home" / "dagster.yaml", tmp_path / ".dagster_home" / "dagster.yaml")
    rel = "llama3-8b-compiled/eager.json.gz"
    (tmp_path / "traces" / rel).parent.mkdir(parents=True)
    shutil.copy(EXAMPLE_TRACES / rel, tmp_path / "traces" / rel)
    (tmp_path / "fleet.yaml").write_text(
        "deployments:\n  - {id: batch-compiled, model: llama3-8b, framework: tc, accelerator: H200,"
        " card_hours: 2880, traces: ['llama3-8b-compiled/*.json.gz']}\n")
    shutil.copytree(REPO / "tests" / "adversarial" / "honest", tmp_path / "submissions" / "honest")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    return tmp_path


ARGS = ["run-pipeline", "--traces", "traces", "--fleet", "fleet.yaml", "--out", "out", "--submissions", "submissions"]


def test_run_pipeline_materializes_everything_and_says_where_it_is(project, capsys):
    assert main(ARGS + ["--json", "--progress"]) == 0
    captured = capsys.readouterr()
    summary = json.loads(captured.out)  # progress goes to stderr, one line per run as it ends
    assert captured.err.splitlines() == [
        "materialised [llama3-8b-compiled/eager.json.gz]: kernel_events, op_shape_time",
        "materialised: fleet_weights, release_bundle, weight_drift",
        "materialised [honest]: evaluation_results, scores"]
    assert summary["release"] == "out/releases/hotshape" and summary["weights_version"] == 1
    assert (project / summary["release"] / "release.json").is_file()
    scores = summary["scores"]["honest"]
    [scored] = json.loads((project / scores["path"]).read_text())
    assert scored["submission"] == "honest" and scored["hardware"] == "cpu" and not scored["performance_measured"]
    assert scores["correct_weight"] == {"cpu": scored["rates"]["correct"]["weighted"]}
    assert (project / scores["results"]).is_file()
    assert summary["checks"]["release_bundle:no_sealed_strings_in_public"] is True

    # History persists in ./.dagster_home, whose dagster.yaml is the project's own.
    home = project / ".dagster_home"
    assert summary["dagster_home"] == str(home)
    assert (home / "dagster.yaml").read_text() == (REPO / ".dagster_home" / "dagster.yaml").read_text()
    instance = dg.DagsterInstance.from_config(str(home))
    try:
        assert len(instance.get_runs()) == 3  # ingest one trace, refresh, evaluate + score
        # the jobs the sensors and schedules launch, by name (no __ephemeral_asset_job__)
        assert sorted(r.job_name for r in instance.get_runs()) == ["evaluate_submission", "ingest_trace", "refresh_weights"]
        assert instance.get_dynamic_partitions("submissions") == ["honest"]
    finally:
        instance.dispose()

    # The human-readable form on a second run: nothing new, and it still says where things are.
    assert main(ARGS) == 0
    out = capsys.readouterr().out
    assert "already ingested  llama3-8b-compiled/eager.json.gz" in out
    assert "release: out/releases/hotshape (weights v1)" in out
    assert re.search(r"scores:  out/scores/honest/hotshape-v1\.json  \(honest: S_agg\[cpu\] n/a, correct on "
                     r"\d+\.\d% of the weight; performance not measured \(S_i needs GPU timing\)\)", out)


def test_run_pipeline_fails_clearly_without_traces(project, capsys):
    assert main(["run-pipeline", "--traces", "nowhere", "--fleet", "fleet.yaml", "--out", "out", "--json"]) == 1
    summary = json.loads(capsys.readouterr().out)
    assert summary["traces"] == [] and "release" not in summary and "error" in summary
