"""`hotshape run-pipeline`: the README's main command, on a project-local sqlite Dagster instance."""

from __future__ import annotations

import io
import json
import re
import shutil
import sys

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


def test_run_pipeline_materializes_everything_and_says_where_it_is(project, monkeypatch, capsys):
    # stdout and stderr into one stream, to see what reaches the terminal in the order it does
    terminal, captured = io.StringIO(), (sys.stdout, sys.stderr)
    monkeypatch.setattr(sys, "stdout", terminal)
    monkeypatch.setattr(sys, "stderr", terminal)
    assert main(ARGS + ["--json", "--progress"]) == 0
    lines = terminal.getvalue().splitlines()
    end = lines.index("{")  # the summary, printed once everything has run
    summary = json.loads("\n".join(lines[end:]))
    # each asset on stderr as it materialises (from Dagster's event stream), then its run's line, then the summary
    trace = re.escape("[llama3-8b-compiled/eager.json.gz]")
    expected = [
        rf"kernel_events {trace} \d+\.\d s: [1-9][\d,]* rows, parsed",
        rf"op_shape_time {trace} \d+\.\d s: [1-9][\d,]* rows, [1-9]\d* operators",
        rf"materialised {trace}: kernel_events, op_shape_time",
        r"fleet_weights \d+\.\d s: [1-9][\d,]* rows, [1-9]\d* problems, [1-9]\d* operators, "
        r"coverage \d+\.\d% of the fleet",
        r"release_bundle \d+\.\d s: [1-9][\d,]* rows, [1-9]\d* problems, [1-9]\d* operators, weights v1, "
        r"coverage \d+\.\d% of the fleet",
        r"weight_drift \d+\.\d s: weights v1, against nothing \(first version\)",
        r"materialised: fleet_weights, release_bundle, weight_drift",
        r"evaluation_results \[honest\] \d+\.\d s: [1-9]\d* rows, correct \d+%",
        r"scores \[honest\] \d+\.\d s: [1-9]\d* problems, weights v1, [1-9]\d* evaluated",
        r"materialised \[honest\]: evaluation_results, scores"]
    assert len(lines[:end]) == len(expected), lines[:end]
    for line, pattern in zip(lines[:end], expected):
        assert re.fullmatch(pattern, line), (line, pattern, lines[:end])
    # the seconds are each step's own: the evaluation (a worker process per operator file) is no instant
    assert float(re.search(r" (\d+\.\d) s", lines[7])[1]) > 0.5
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
    sys.stdout, sys.stderr = captured
    assert main(ARGS) == 0
    out = capsys.readouterr().out
    assert "already ingested  llama3-8b-compiled/eager.json.gz" in out
    assert "release: out/releases/hotshape (weights v1)" in out
    assert re.search(r"scores:  out/scores/honest/hotshape-v1\.json  \(honest: S_agg\[cpu\] n/a, correct on "
                     r"\d+\.\d% of the weight; performance not measured \(S_i needs GPU timing\)\)", out)


def test_run_pipeline_fails_clearly_without_traces(project, capsys):
    assert main(["run-pipeline", "--traces", "nowhere", "--fleet", "fleet.yaml", "--out", "out", "--json",
                 "--progress"]) == 1
    captured = capsys.readouterr()
    summary = json.loads(captured.out)
    assert summary["traces"] == [] and "release" not in summary and "error" in summary
    # the failed step as it fails, with the asset's own exception rather than Dagster's wrapper
    assert re.search(r"^failed fleet_weights \d+\.\d s: weighting\.fleet\.FleetError: fleet\.yaml: .* matches nothing",
                     captured.err, re.M), captured.err
