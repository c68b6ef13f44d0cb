"""Bad traces: a clear error naming the file and the problem; in a batch, quarantined, the rest ingested."""

from __future__ import annotations

import json
import subprocess
import sys

import polars as pl
import pytest

from ingest.kineto import TraceError
from ingest.pipeline import ingest_many, read_events
from tests.conftest import REPO
from tests.fixtures.cut_trace import cut_first_gpu, damage, load, save

SOURCE = "hta/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz"

EXPECTED_PROBLEM = {
    "truncated-gzip": "truncated or corrupt gzip",
    "invalid-json": "invalid JSON",
    "not-a-trace": "not a profiler trace",
    "no-gpu-activity": "no GPU activity",
    "negative-duration": "negative duration",
    "missing-duration": "has no duration",
    "malformed-op-args": "has malformed args",
}


@pytest.fixture
def good_trace(public_traces, tmp_path):
    """A small real trace: the first 30 GPU activities of the alexnet trace and their window."""
    return save(cut_first_gpu(load(public_traces / SOURCE), 30), tmp_path / "good.json.gz")


@pytest.mark.parametrize("how", sorted(EXPECTED_PROBLEM))
def test_each_damage_is_named_with_the_file(public_traces, tmp_path, how):
    bad = damage(public_traces / SOURCE, tmp_path / f"{how}.json.gz", how)
    with pytest.raises(TraceError) as info:
        read_events(bad)
    assert str(bad) in str(info.value)
    assert EXPECTED_PROBLEM[how] in info.value.problem


def test_a_bad_trace_is_quarantined_and_the_rest_ingested(public_traces, tmp_path, good_trace):
    bads = [damage(public_traces / SOURCE, tmp_path / f"{how}.json.gz", how) for how in sorted(EXPECTED_PROBLEM)]
    result = ingest_many([bads[0], good_trace, *bads[1:]], root=tmp_path)
    assert [r.summary["path"] for r in result.traces] == ["good.json.gz"]
    assert sorted(q["path"] for q in result.quarantined) == sorted(b.name for b in bads)
    reasons = {q["path"]: q["reason"] for q in result.quarantined}
    for how, problem in EXPECTED_PROBLEM.items():
        assert problem in reasons[f"{how}.json.gz"]


def test_cut_trace_keeps_what_it_cuts_exactly(public_traces, tmp_path, good_trace):
    """The derived fixture holds exactly 30 GPU activities and all of them stay linked."""
    events = read_events(good_trace)
    assert events.height == 30
    assert events.filter(pl.col("attribution") == "direct").height == 30


def test_cli_reports_quarantine_and_exit_status(public_traces, tmp_path, good_trace):
    bad = damage(public_traces / SOURCE, tmp_path / "broken.json.gz", "truncated-gzip")
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "pipelines.cli", "ingest", str(good_trace), str(bad), "--out", str(out), "--json"],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert [t["path"] for t in summary["traces"]] == [str(good_trace)]
    assert summary["quarantined"] == [{"path": str(bad), "reason": summary["quarantined"][0]["reason"]}]
    assert "truncated or corrupt gzip" in summary["quarantined"][0]["reason"]
    assert json.loads((out / "quarantined.json").read_text()) == summary["quarantined"]
    only_bad = subprocess.run(
        [sys.executable, "-m", "pipelines.cli", "ingest", str(bad), "--out", str(tmp_path / "o2")],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert only_bad.returncode == 1 and "broken.json.gz" in only_bad.stderr
