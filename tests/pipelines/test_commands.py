"""`hotshape run-pipeline`: the README's main command, on a project-local sqlite Dagster instance."""

from __future__ import annotations

import io
import json
import re
import shutil
import sys
from pathlib import Path

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

    # The graph's modules were frozen out of the collector's passes for the run (pipelines.commands.graph_loaded),
    # and are back in them for whatever this process does next.
    import gc

    assert gc.get_freeze_count() == 0 and gc.isenabled()

    # The human-readable form on a second run: nothing new, and it still says where things are.
    sys.stdout, sys.stderr = captured
    assert main(ARGS) == 0
    out = capsys.readouterr().out
    assert "already ingested  llama3-8b-compiled/eager.json.gz" in out
    assert "release: out/releases/hotshape (weights v1)" in out and "weights: unchanged since v1" in out
    assert re.search(r"scores:  out/scores/honest/hotshape-v1\.json  \(honest: S_agg\[cpu\] not measured, correct on "
                     r"\d+\.\d% of the weight; performance not measured \(S_i needs GPU timing\)\)", out)


def test_run_pipeline_fails_clearly_without_traces(project, capsys):
    assert main(["run-pipeline", "--traces", "nowhere", "--fleet", "fleet.yaml", "--out", "out", "--json",
                 "--progress"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.splitlines() == [
        "hotshape run-pipeline: nowhere: trace root is not a directory (--traces)"]
    assert not (project / "out").exists() and sorted(p.name for p in (project / ".dagster_home").iterdir()) == [
        "dagster.yaml"]


def test_a_fleet_typo_is_one_line_exit_2_before_any_work(project, capsys):
    """The real cause (a misspelt field, with its suggestion) in one line; no trace ingested, no run recorded."""
    (project / "fleet.yaml").write_text(
        "deployments:\n  - {id: batch-compiled, model: llama3-8b, framework: tc, accelerator: H200,"
        " card_hours: 2880, phase_mx: {prefill: 0.5, decode: 0.5}, traces: ['llama3-8b-compiled/*.json.gz']}\n")
    assert main(ARGS) == 2
    captured = capsys.readouterr()
    [line] = captured.err.splitlines()
    assert line.startswith("hotshape run-pipeline: fleet.yaml") and "phase_mx" in line and "phase_mix" in line, line
    assert captured.out == "" and not (project / "out").exists()
    assert sorted(p.name for p in (project / ".dagster_home").iterdir()) == ["dagster.yaml"]


def test_outside_a_checkout_the_new_home_gets_the_packaged_instance_config(project, capsys):
    """A directory with no ./.dagster_home: run-pipeline makes one holding the configuration of record (telemetry
    off, the pools), never a bare home that Dagster would fill with its defaults."""
    import pipelines

    shutil.rmtree(project / ".dagster_home")
    shutil.rmtree(project / "submissions")
    assert main(["run-pipeline", "--traces", "traces", "--fleet", "fleet.yaml", "--out", "out", "--submissions",
                 "none"]) == 0
    config = project / ".dagster_home" / "dagster.yaml"
    packaged = Path(pipelines.__file__).with_name("instance.yaml")
    assert config.is_file() and not config.is_symlink() and config.read_bytes() == packaged.read_bytes()
    assert "telemetry:\n  enabled: false" in config.read_text()
    # the checkout's home links to the same file, so there is one configuration of record
    assert (REPO / ".dagster_home" / "dagster.yaml").resolve() == packaged.resolve()
    assert "release: out/releases/hotshape (weights v1)" in capsys.readouterr().out


def test_bad_input_outside_a_checkout_creates_nothing(project, capsys):
    shutil.rmtree(project / ".dagster_home")
    before = sorted(p.name for p in project.iterdir())
    assert main(["run-pipeline", "--traces", "traces", "--fleet", "missing.yaml", "--out", "out"]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert "missing.yaml" in line
    assert sorted(p.name for p in project.iterdir()) == before


def test_an_edit_of_fleet_yaml_refreshes_the_weights_and_writes_the_drift_report(project, capsys, monkeypatch):
    """fleet.yaml is an observed input: new card-hours alone (no new trace) make weights v2 and its drift page. Each
    run-pipeline reads the fleet once for all its assets and checks (weighting.fleet.read_once), a new one anew."""
    from weighting import fleet as fleet_module

    reads, read = [], fleet_module._load_fleet
    monkeypatch.setattr(fleet_module, "_load_fleet", lambda *args: reads.append(args[2]) or read(*args))
    args = ["run-pipeline", "--traces", "traces", "--fleet", "fleet.yaml", "--out", "out", "--submissions", "none"]
    (project / "traces" / "llama3-8b" / "eager.json.gz").parent.mkdir()
    shutil.copy(EXAMPLE_TRACES / "llama3-8b" / "eager.json.gz", project / "traces" / "llama3-8b" / "eager.json.gz")
    fleet = ("deployments:\n  - {id: batch-compiled, model: llama3-8b, framework: tc, accelerator: H200,"
             " card_hours: 2880, traces: ['llama3-8b-compiled/*.json.gz']}\n"
             "  - {id: chat, model: llama3-8b, framework: hf, accelerator: H200, card_hours: CH,"
             " traces: ['llama3-8b/*.json.gz']}\n")
    (project / "fleet.yaml").write_text(fleet.replace("CH", "100"))
    assert main(args) == 0
    assert reads == [None]  # one reading (accelerators from the hardware table) for the input check and every asset
    assert main(args) == 0  # nothing changed: still v1, and the run says how to get new weights
    assert "weights: unchanged since v1 (no new trace, fleet.yaml as before); add traces or edit card-hours" in (
        capsys.readouterr().out)
    (project / "fleet.yaml").write_text(fleet.replace("CH", "46080"))
    assert main(args) == 0
    assert len(reads) == 3
    out, err = capsys.readouterr()
    assert "fleet.yaml changed since the latest weights" in out and "release: out/releases/hotshape (weights v2)" in out
    drift = project / "out" / "drift" / "hotshape-v2.html"
    assert "drift:   out/drift/hotshape-v2.html" in out and drift.is_file()
    from release.bundle import read_release

    rel = read_release(project / "out" / "releases" / "hotshape")
    assert rel.versions == [1, 2]
    # the chat deployment's card-hours grew 460x: its traces' operators gain weight, and the report says so
    assert rel.drift(2)["total_variation"] > 0.01
    # moves beyond the bootstrap intervals are a WARN check: a warning line, never "check failed"
    beyond = rel.drift(2)["beyond_interval"]
    assert "check failed" not in err
    assert ("warning: check weight_drift:moves_within_intervals did not pass" in err) == bool(
        beyond["problems"] or beyond["operators"])
    instance = dg.DagsterInstance.from_config(str(project / ".dagster_home"))
    try:
        observed = instance.get_latest_data_version_record(dg.AssetKey("fleet_file"))
        assert observed is not None
    finally:
        instance.dispose()


def test_the_graph_is_loaded_frozen_with_the_collector_off_and_left_as_found(monkeypatch):
    """graph_loaded: the graph's modules load with no collection walking them and stay out of the collector's
    passes while the body runs; on leaving, the collector is as it was."""
    import gc

    from pipelines.commands import graph_loaded

    seen = []
    monkeypatch.setitem(sys.modules, "pipelines.definitions", None)  # imported afresh inside, watched below
    monkeypatch.delitem(sys.modules, "pipelines.definitions")
    import builtins

    real_import = builtins.__import__

    def watched(name, *args, **kwargs):
        if name == "pipelines.definitions":
            seen.append(gc.isenabled())
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", watched)
    with graph_loaded():
        inside = (gc.isenabled(), gc.get_freeze_count())
    assert seen == [False] and inside[0] and inside[1] > 10_000
    assert gc.get_freeze_count() == 0 and gc.isenabled()


def test_workers_start_ahead_only_for_new_traces_worth_a_parallel_parse(tmp_path, monkeypatch):
    """workers_ahead: a pool for a trace root with two or more files the store never saw, holding PARALLEL_MIN_BYTES
    between them; none for fewer bytes, for files the store has seen (a second run), or for no trace root."""
    from ingest import store as store_module
    from ingest.store import TraceStore, drop_pool_ahead
    from pipelines.commands import workers_ahead

    root = tmp_path / "traces"
    for rel in ("llama3-8b-compiled/eager.json.gz", "deepseek-v2-lite/eager.json.gz"):
        (root / rel).parent.mkdir(parents=True)
        shutil.copy(EXAMPLE_TRACES / rel, root / rel)
    size = sum(p.stat().st_size for p in root.rglob("*.json.gz"))
    monkeypatch.setattr(store_module, "PARALLEL_MIN_BYTES", size + 1)
    assert workers_ahead(root, tmp_path / "out") is None
    monkeypatch.setattr(store_module, "PARALLEL_MIN_BYTES", size)
    pool = workers_ahead(root, tmp_path / "out")
    assert pool is not None and pool.executor is not None and not (tmp_path / "out").exists()  # nothing made
    drop_pool_ahead(pool)
    keys = sorted(p.relative_to(root).as_posix() for p in root.rglob("*.json.gz"))
    TraceStore(tmp_path / "out" / "store").ingest([root / k for k in keys], keys, jobs=1)
    assert workers_ahead(root, tmp_path / "out") is None  # both seen
    assert workers_ahead(tmp_path / "nowhere", tmp_path / "out") is None


def test_the_exit_is_frozen_unless_triton_is_loaded():
    """exit_frozen (run at run-pipeline's exit): everything frozen, so that the interpreter's last collections skip
    it; not with Triton loaded, whose nanobind bindings would print every instance still alive as a leak."""
    import gc

    from pipelines.commands import exit_frozen

    try:
        exit_frozen({"triton._C.libtriton": object()})
        assert gc.get_freeze_count() == 0
        exit_frozen({"polars": object()})
        assert gc.get_freeze_count() > 10_000
    finally:
        gc.unfreeze()
