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


def _bomb(path, text_bytes: int):
    """A gzip whose text is one JSON string of `text_bytes` bytes inside a trace document: a few kB on disk."""
    import zlib

    packer = zlib.compressobj(9, wbits=31)
    block = b"a" * 2**20
    parts = [packer.compress(b'{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "')]
    parts += [packer.compress(block) for _ in range(text_bytes // len(block))]
    parts += [packer.compress(b'", "ts": 1, "dur": 1}]}'), packer.flush()]
    path.write_bytes(b"".join(parts))
    return path


def test_a_trace_inflating_past_the_bound_is_refused_naming_file_and_bound(tmp_path, monkeypatch):
    bomb = _bomb(tmp_path / "bomb.json.gz", 64 * 2**20)
    monkeypatch.setenv("HOTSHAPE_MAX_TRACE_BYTES", str(8 * 2**20))
    with pytest.raises(TraceError) as info:
        read_events(bomb)
    assert str(bomb) in str(info.value) and str(8 * 2**20) in info.value.problem
    assert "HOTSHAPE_MAX_TRACE_BYTES" in info.value.problem


def test_a_plain_json_file_over_the_bound_is_not_read(tmp_path, monkeypatch, good_trace):
    import gzip

    plain = tmp_path / "plain.json"
    plain.write_bytes(gzip.decompress(good_trace.read_bytes()))
    monkeypatch.setenv("HOTSHAPE_MAX_TRACE_BYTES", str(plain.stat().st_size - 1))
    with pytest.raises(TraceError, match=r"plain.json: file of \d+ bytes, over the bound"):
        read_events(plain)
    monkeypatch.setenv("HOTSHAPE_MAX_TRACE_BYTES", str(plain.stat().st_size))
    assert read_events(plain).height == 30


def _cli(*args, env=None):
    import os

    return subprocess.run([sys.executable, "-m", "pipelines.cli", *map(str, args)], capture_output=True, text=True,
                          cwd=REPO, env={**os.environ, **(env or {})})


def test_cli_quarantines_a_bomb_naming_the_file_and_the_bound(tmp_path, good_trace):
    bomb = _bomb(tmp_path / "bomb.json.gz", 64 * 2**20)
    proc = _cli("ingest", good_trace, bomb, "--out", tmp_path / "out", env={"HOTSHAPE_MAX_TRACE_BYTES": "8000000"})
    assert proc.returncode == 0, proc.stderr
    [line] = [x for x in proc.stderr.splitlines() if "bomb" in x]
    assert line.startswith(f"quarantined  {bomb}: inflates to more than 8000000 bytes")


def test_cli_of_a_missing_file_is_one_line_exit_2_and_no_store(tmp_path, good_trace):
    for named in ([tmp_path / "nope.json.gz"], [good_trace, tmp_path / "nope.json.gz"]):
        proc = _cli("ingest", *named, "--out", tmp_path / "store")
        assert proc.returncode == 2
        assert proc.stderr == f"hotshape ingest: {tmp_path / 'nope.json.gz'}: no such file or directory\n"
        assert not (tmp_path / "store").exists()


def test_cli_with_a_malformed_bound_is_one_line_exit_2(tmp_path, good_trace):
    proc = _cli("ingest", good_trace, "--out", tmp_path / "store", env={"HOTSHAPE_MAX_TRACE_BYTES": "lots"})
    assert proc.returncode == 2 and proc.stderr == "hotshape ingest: HOTSHAPE_MAX_TRACE_BYTES='lots': not a whole number\n"
    assert not (tmp_path / "store").exists()


def test_a_capture_sidecar_naming_a_file_outside_its_folder_is_refused(tmp_path, good_trace):
    from ingest.graphs import capture_traces_for

    folder = tmp_path / "run"
    (folder / "capture_traces").mkdir(parents=True)
    trace = folder / "profile.json.gz"
    trace.write_bytes(good_trace.read_bytes())
    (tmp_path / "secret.json.gz").write_bytes(good_trace.read_bytes())
    sidecar = folder / "capture_traces" / "execution_details.json"
    for name in ("../../secret.json.gz", "/etc/passwd"):
        sidecar.write_text(json.dumps([{"file": name}]))
        with pytest.raises(TraceError) as info:
            capture_traces_for(trace)
        assert info.value.path == str(sidecar) and repr(name) in info.value.problem
    (folder / "capture_traces" / "link.json.gz").symlink_to(tmp_path / "secret.json.gz")
    sidecar.write_text(json.dumps([{"file": "link.json.gz"}]))
    with pytest.raises(TraceError, match="'link.json.gz' is a link out of its folder"):
        capture_traces_for(trace)


def test_a_trace_over_the_bound_on_events_is_refused_naming_it(monkeypatch, good_trace):
    import gzip

    events = len(json.loads(gzip.decompress(good_trace.read_bytes()))["traceEvents"])
    monkeypatch.setenv("HOTSHAPE_MAX_TRACE_EVENTS", str(events - 1))
    with pytest.raises(TraceError, match=rf"good.json.gz: more than {events - 1} events"):
        read_events(good_trace)
    monkeypatch.setenv("HOTSHAPE_MAX_TRACE_EVENTS", str(events))
    assert read_events(good_trace).height == 30


def test_a_folder_given_to_ingest_never_yields_a_link_out_of_it(tmp_path, good_trace):
    from ingest.discovery import discover

    folder = tmp_path / "dump"
    (folder / "a").mkdir(parents=True)
    (folder / "a/one.json.gz").write_bytes(good_trace.read_bytes())
    (folder / "a/alias.json.gz").symlink_to(folder / "a/one.json.gz")
    (folder / "a/out.json.gz").symlink_to(good_trace)  # good_trace lies outside the folder
    assert discover([str(folder)]) == [folder / "a/alias.json.gz", folder / "a/one.json.gz"]


def test_a_plain_json_trace_is_streamed_from_the_disk_to_the_same_rows(tmp_path, monkeypatch, good_trace):
    """A plain (not gzip) local trace is read a block at a time: the whole file is never in memory, and its rows and
    trace id are those of the same text gzipped."""
    import gzip

    from ingest import tracefile

    plain = tmp_path / "plain.json"
    plain.write_bytes(gzip.decompress(good_trace.read_bytes()))
    gz_rows = read_events(good_trace)

    def whole_file(name):
        raise AssertionError(f"{name} read whole")

    monkeypatch.setattr(tracefile, "read_file", whole_file)
    monkeypatch.setattr(tracefile, "CHUNK_BYTES", 4096)  # many blocks, each decoded as it is read
    rows = read_events(plain)
    assert rows.drop("trace_id").equals(gz_rows.drop("trace_id"))
    assert rows["trace_id"][0] == tracefile.trace_id_of(plain.read_bytes())
