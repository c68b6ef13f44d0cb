"""A large Kineto trace read on two cores (ingest/kineto_split.py) is the trace read whole: every real trace here
gives the same columns either way; a trace laid out otherwise, with exact timestamps or a malformed event on
the GPU side is read whole, with the whole reading's result or error; no helper process outlives its read."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
from pathlib import Path

import polars as pl
import pytest

from ingest import kineto, kineto_split
from ingest.kineto import TraceError, read_kineto, read_split
from ingest.tracefile import TraceBytes, decompress, trace_id_of

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
FIXTURES = REPO / "tests" / "fixtures" / "public"
LARGE = REPO / "benchmarks" / "data" / "qwen3-30b-a3b-moe.json.gz"  # 60 MB of JSON captured on an H200
ROCPROF_JSON = "rocprofv3"


def _traces(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*.json.gz") if "capture_traces" not in p.parts and ROCPROF_JSON not in p.name)


def _plain(trace) -> dict:
    """Every column of a KinetoTrace as plain values (CPU ranges' events by what the reader reads of them)."""
    a, l, r = trace.activities, trace.launches, trace.ranges
    return {
        "activities": [a.name, a.category, a.ts_ns.to_list(), a.dur_ns.to_list(), a.device, a.stream, a.correlation,
                       a.external_id, a.graph_node],
        "launches": [l.name, l.thread, l.ts_ns.to_list(), l.external_id, l.row_of],
        "ranges": [r.ts_ns.to_list(), r.end_ns.to_list(), {k: v.to_list() for k, v in r.thread_rows.items()},
                   [(e.cat, bytes(e.name), bytes(e.args), e.ts, e.dur, e.pid, e.tid) for e in r.events]],
        "events": trace.events, "trace_id": trace.trace_id,
    }


def _split_read(path: Path):
    """read_split on `path` with a helper forked for its text (whatever its size), and the helper's pid."""
    raw = path.read_bytes()
    text = decompress(path, raw)
    before = hashlib.sha256(text).digest()
    helper = kineto_split.Helper(text)
    pid = helper._pid
    trace = read_split(path, trace_id_of(raw), text, helper)
    assert hashlib.sha256(text).digest() == before  # the helper writes into its own copy of the text only
    return trace, pid


def _assert_reaped(pid: int) -> None:
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


@pytest.mark.parametrize("path", [LARGE, *_traces(EXAMPLES)], ids=lambda p: p.parent.name + "/" + p.name)
def test_a_trace_read_on_two_cores_is_the_trace_read_whole(path):
    trace, pid = _split_read(path)
    _assert_reaped(pid)
    assert trace is not None, "libkineto's layout (CPU ranges first) was not split"
    assert _plain(trace) == _plain(read_kineto(path))


@pytest.mark.parametrize("root", ["fixtures", "public"])
def test_real_traces_read_on_two_cores_or_whole_give_the_whole_reading(root, request):
    """Cut fixtures keep events in their source's order or not; either way the result is the whole reading."""
    split = 0
    for path in _traces(FIXTURES if root == "fixtures" else request.getfixturevalue("public_traces")):
        try:
            whole = _plain(read_kineto(path))
        except TraceError:
            continue
        trace, pid = _split_read(path)
        _assert_reaped(pid)
        split += trace is not None
        assert trace is None or _plain(trace) == whole, path
    assert split >= 3


def _variant(tmp_path: Path, edit) -> Path:
    doc = json.loads(gzip.decompress(LARGE.read_bytes()))
    edit(doc["traceEvents"])
    out = tmp_path / "variant.json.gz"
    out.write_bytes(gzip.compress(json.dumps(doc, indent=1).encode(), 1))
    return out


def _first(events: list, cat: str) -> int:
    return next(i for i, e in enumerate(events) if e.get("cat") == cat)


def _move_an_op_late(events: list) -> None:
    events.append(events.pop(_first(events, "cpu_op")))


def _move_a_kernel_early(events: list) -> None:
    events.insert(5, events.pop(_first(events, "kernel")))


@pytest.mark.parametrize("edit", [_move_an_op_late, _move_a_kernel_early], ids=["cpu-range-late", "kernel-early"])
def test_a_trace_laid_out_otherwise_is_read_whole(tmp_path, edit):
    path = _variant(tmp_path, edit)
    trace, pid = _split_read(path)
    _assert_reaped(pid)
    assert trace is None
    assert _plain(read_kineto(TraceBytes(path, kineto_split.Helper))) == _plain(read_kineto(path))


def test_a_malformed_gpu_event_gets_the_whole_readings_error(tmp_path):
    def negative_duration(events):
        [e for e in events if e.get("cat") == "kernel"][50]["dur"] = -3

    path = _variant(tmp_path, negative_duration)
    with pytest.raises(TraceError) as whole:
        read_kineto(path)
    with pytest.raises(TraceError) as split:
        read_kineto(TraceBytes(path, kineto_split.Helper))
    assert str(split.value) == str(whole.value) and "negative duration" in str(whole.value)


def test_absolute_timestamps_without_a_base_time_are_read_whole_and_exactly(tmp_path):
    def absolute(events):
        for e in events:
            if "ts" in e:
                e["ts"] = e["ts"] + 1_700_000_000_000_000.125

    path = _variant(tmp_path, lambda events: absolute(events))
    doc = json.loads(gzip.decompress(path.read_bytes()))
    doc.pop("baseTimeNanoseconds", None)
    path.write_bytes(gzip.compress(json.dumps(doc).encode(), 1))
    trace, pid = _split_read(path)
    _assert_reaped(pid)
    assert trace is None
    assert _plain(read_kineto(TraceBytes(path, kineto_split.Helper))) == _plain(read_kineto(path))


def test_the_split_is_found_where_libkinetos_cpu_block_ends():
    text = decompress(LARGE, LARGE.read_bytes())
    at = kineto_split.split_at(text)
    first_gpu_side = min(i for c in (b"kernel", b"cuda_runtime", b"cuda_driver", b"gpu_memcpy", b"gpu_memset")
                         if (i := text.find(b'"cat": "%s"' % c)) >= 0)
    assert text[at:at + 1] == b"," and at < first_gpu_side
    assert text.count(b'"cat"', at, first_gpu_side) == 0 and text.count(b"}", at, first_gpu_side) == 0
    assert text[text.rfind(b'"cat"', 0, at):].startswith(b'"cat": "cpu_op"')


def test_hotshape_ingest_of_one_large_trace_splits_it_and_stores_the_same_bytes(tmp_path, monkeypatch):
    from pipelines.cli import main

    answers = []
    real = kineto.read_split

    def recorded(*args):
        answers.append(real(*args))
        return answers[-1]

    monkeypatch.setattr(kineto, "read_split", recorded)
    assert main(["ingest", str(LARGE), "--out", str(tmp_path / "split")]) == 0
    assert len(answers) == 1 and answers[0] is not None
    monkeypatch.setattr(kineto_split, "MIN_TEXT_BYTES", 2**62)  # the same command, read whole
    assert main(["ingest", str(LARGE), "--out", str(tmp_path / "whole")]) == 0
    assert len(answers) == 1
    for table in ("kernel_events", "op_shape_time", "provenance"):
        files = [sorted((tmp_path / run / table).glob("*.parquet")) for run in ("split", "whole")]
        assert [hashlib.sha256(f.read_bytes()).digest() for f in files[0]] == \
               [hashlib.sha256(f.read_bytes()).digest() for f in files[1]]
    events = pl.read_parquet(tmp_path / "split" / "kernel_events")
    assert events.height > 19_000


@pytest.mark.parametrize("read_first", [False, True], ids=["dropped-at-once", "dropped-once-read"])
def test_a_prefetched_trace_no_reader_takes_leaves_no_helper(monkeypatch, read_first):
    from ingest import tracefile

    pids = []
    real = kineto_split.Helper.__init__

    def recorded(self, text):
        real(self, text)
        pids.append(self._pid)

    monkeypatch.setattr(kineto_split.Helper, "__init__", recorded)
    tracefile.prefetch(LARGE, split=True)
    if read_first:
        tracefile._PREFETCHED[str(LARGE)].result()
        assert len(pids) == 1
    tracefile.drop_prefetched()
    assert len(pids) == read_first
    for pid in pids:
        _assert_reaped(pid)
