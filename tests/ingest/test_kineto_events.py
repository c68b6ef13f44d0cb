"""A trace's events read a piece at a time (ingest/kineto_events.py) are the events of the whole text: whatever the
step the text comes in, wherever a cut falls (inside a string that holds `},`, before an array written after the
events), whatever the document puts around the array; and a trace's memory grows with what is kept of its events,
not with its JSON (measured in a process of its own)."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys

import polars as pl
import pytest

from ingest import tracefile
from ingest.kineto import TraceError
from ingest.pipeline import read_events
from tests.conftest import REPO
from tests.fixtures.cut_trace import load

EXAMPLE = REPO / "examples" / "traces" / "qwen3-30b-a3b" / "eager.json.gz"


def _read(path, monkeypatch, step: int) -> pl.DataFrame:
    monkeypatch.setattr(tracefile, "CHUNK_BYTES", step)
    return read_events(path)


@pytest.mark.parametrize("step", [997, 4096, 65536, 2**20])
def test_every_step_reads_the_events_of_the_whole_text(monkeypatch, step):
    whole = _read(EXAMPLE, monkeypatch, 2**31)
    assert _read(EXAMPLE, monkeypatch, step).equals(whole)


def _variant(tmp_path, edit, name="variant.json.gz", text=None):
    doc = load(EXAMPLE)
    doc = (edit(doc) or doc) if edit else doc
    path = tmp_path / name
    path.write_bytes(gzip.compress(text(doc) if text else json.dumps(doc).encode(), 1))
    return path


def test_strings_holding_cut_marks_and_arrays_after_the_events_read_as_written(tmp_path, monkeypatch):
    def edit(doc):
        for e in doc["traceEvents"]:
            if e.get("cat") == "cpu_op":
                e["args"]["note"] = '"}, {"ph": "X", "cat": "kernel"}, ] "traceEvents": ['
        tail = {"logs": ["INFO [1]", "a}, {b", "]"], "deviceProperties": [{"id": 0}, {"id": 1}]}
        return {"traceEvents": doc["traceEvents"], **tail, "baseTimeNanoseconds": doc.get("baseTimeNanoseconds")}

    path = _variant(tmp_path, edit)
    whole = _read(path, monkeypatch, 2**31)
    assert whole.drop("trace_id").equals(_read(EXAMPLE, monkeypatch, 2**31).drop("trace_id"))
    for step in (512, 3000, 50_000):
        assert _read(path, monkeypatch, step).equals(whole), step


@pytest.mark.parametrize("layout", ["base-time-first", "bare-array", "indented", "compact"])
def test_documents_laid_out_otherwise_read_alike(tmp_path, monkeypatch, layout):
    source = _read(EXAMPLE, monkeypatch, 2**31).drop("trace_id")

    def text(doc):
        if layout == "base-time-first":
            return json.dumps({"baseTimeNanoseconds": doc["baseTimeNanoseconds"], "traceEvents": doc["traceEvents"]}).encode()
        if layout == "bare-array":  # the format's other form: no base time, so timestamps are the file's
            return json.dumps(doc["traceEvents"]).encode()
        if layout == "indented":
            return json.dumps(doc, indent=3).encode()
        return json.dumps(doc, separators=(",", ":")).encode()

    path = _variant(tmp_path, None, text=text)
    for step in (700, 2**31):
        got = _read(path, monkeypatch, step).drop("trace_id")
        if layout == "bare-array":
            base = load(EXAMPLE).get("baseTimeNanoseconds") or 0
            got = got.with_columns(pl.col("ts_ns") + base)
        assert got.equals(source), (layout, step)


def test_absolute_timestamps_without_base_time_are_read_again_exactly(tmp_path, monkeypatch):
    def edit(doc):
        doc.pop("baseTimeNanoseconds", None)
        for e in doc["traceEvents"]:
            if isinstance(e.get("ts"), float):
                e["ts"] = e["ts"] + 1_700_000_000_000_000.125

    path = _variant(tmp_path, edit)
    doc = json.loads(gzip.decompress(path.read_bytes()), parse_float=__import__("decimal").Decimal)
    first = next(e for e in doc["traceEvents"] if e.get("cat") == "kernel" and e.get("ph") == "X")
    for step in (4096, 2**31):
        events = _read(path, monkeypatch, step)
        assert events["ts_ns"][0] == int(first["ts"] * 1000)


@pytest.mark.parametrize("how, problem", [
    ("truncated", "invalid JSON"), ("no-array-end", "invalid JSON"), ("bad-event", "malformed trace event"),
    ("no-events-key", "not a profiler trace"), ("not-json", "invalid JSON"),
])
def test_damage_anywhere_is_named_at_any_step(tmp_path, monkeypatch, how, problem):
    text = gzip.decompress(EXAMPLE.read_bytes())
    damaged = {
        "truncated": text[: len(text) * 2 // 3],
        "no-array-end": text.replace(b"]", b""),
        "bad-event": text.replace(b'"dur": ', b'"dur": "x", "y": ', 1),
        "no-events-key": text.replace(b'"traceEvents"', b'"events"'),
        "not-json": b"<html>not a trace</html>",
    }[how]
    path = tmp_path / f"{how}.json.gz"
    path.write_bytes(gzip.compress(damaged, 1))
    for step in (4096, 2**31):
        monkeypatch.setattr(tracefile, "CHUNK_BYTES", step)
        with pytest.raises(TraceError) as info:
            read_events(path)
        assert info.value.path == str(path) and info.value.problem.startswith(problem), (step, info.value.problem)


def test_one_event_longer_than_its_bound_is_named_before_the_text_is_read(tmp_path, monkeypatch):
    from ingest import kineto_events

    monkeypatch.setattr(kineto_events, "MAX_EVENT_BYTES", 2**20)
    monkeypatch.setattr(tracefile, "CHUNK_BYTES", 2**18)
    path = tmp_path / "long.json.gz"
    path.write_bytes(gzip.compress(b'{"traceEvents": [{"ph": "i", "ts": 1}, {"ph": "X", "name": "' + b"a" * 2**23
                                   + b'", "cat": "kernel", "ts": 1, "dur": 1}]}', 1))
    with pytest.raises(TraceError, match=r"an event longer than 1048576 bytes"):
        read_events(path)


def _peak_rss_of_ingest(trace, tmp_path, env=None) -> tuple[int, subprocess.CompletedProcess]:
    code = ("import json, sys; from benchmarks.ingest_memory import peak_rss; "
            "rss, wall, p = peak_rss([sys.executable, '-m', 'pipelines.cli', 'ingest', sys.argv[1], '--out', sys.argv[2]], "
            "json.loads(sys.argv[3])); print(json.dumps([rss, p.returncode, p.stderr]))")
    out = subprocess.run([sys.executable, "-c", code, str(trace), str(tmp_path / "store"), json.dumps(env or {})],
                         capture_output=True, text=True, cwd=REPO, check=True, env={"PYTHONPATH": str(REPO), "PATH": ""})
    rss, rc, err = json.loads(out.stdout)
    return rss, subprocess.CompletedProcess([], rc, "", err)


def test_memory_grows_with_what_is_kept_not_with_the_json(tmp_path):
    """A 1 GiB-inflating gzip of one string stays well under 1 GB and is named; a million events of a real trace
    cost the process less than its JSON text and 256 MiB (the reader that held the text took 804 MiB for 311 MiB
    of JSON, this one 418; each kernel's launch grid, kept since the grid column, costs ~65 MiB more per million
    events: 442 MiB without it, 512 with it)."""
    from benchmarks.big_trace import write_big_trace, write_bomb

    bomb = tmp_path / "bomb.json.gz"
    write_bomb(2**30, bomb)
    rss, proc = _peak_rss_of_ingest(bomb, tmp_path / "a")
    assert rss < 600 * 2**20, rss
    assert f"quarantined  {bomb}: an event longer than" in proc.stderr
    big = tmp_path / "big.json.gz"
    write_big_trace(EXAMPLE, 1_000_000, big)
    text_bytes = len(gzip.decompress(big.read_bytes()))
    rss, proc = _peak_rss_of_ingest(big, tmp_path / "b")
    assert proc.returncode == 0, proc.stderr
    assert rss < 256 * 2**20 + text_bytes, (rss, text_bytes)


def test_the_plain_switch_runs_every_plain_twin_to_the_same_rows(monkeypatch):
    """HOTSHAPE_PLAIN=1 (ingest/plain.py) runs the plain twin of each fast path, and the rows come out the same."""
    from ingest import attribution, classify, columns, graphs, taxonomy
    from ingest.pipeline import ingest_trace

    path = REPO / "examples" / "traces" / "llama3-8b" / "graph.json.gz"
    fast = ingest_trace(path).events
    called = set()
    twins = [(attribution, "chain_ids_plain"), (classify, "every_row"), (columns, "repeated_plain"),
             (graphs, "align_replays"), (taxonomy.Taxonomy, "_forward_plain")]
    for owner, name in twins:
        real = getattr(owner, name)
        monkeypatch.setattr(owner, name, lambda *a, _real=real, _name=name, **k: called.add(_name) or _real(*a, **k))
    monkeypatch.setenv("HOTSHAPE_PLAIN", "1")
    taxonomy._default.cache_clear()
    plain = ingest_trace(path).events
    assert called == {name for _, name in twins}
    assert fast.height > 1000 and plain.equals(fast)


@pytest.mark.parametrize("where", ["in-an-event", "before-the-events", "after-the-events"])
def test_json_nested_a_million_deep_is_one_line_naming_the_file(tmp_path, where):
    deep = b"[" * 1_000_000 + b"]" * 1_000_000
    event = b'{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 1%s}'
    text = {"in-an-event": b'{"traceEvents": [' + event % (b', "args": ' + deep) + b"]}",
            "before-the-events": b'{"x": ' + deep + b', "traceEvents": [' + event % b"" + b"]}",
            "after-the-events": b'{"traceEvents": [' + event % b"" + b'], "x": ' + deep + b"}"}[where]
    path = tmp_path / "deep.json.gz"
    path.write_bytes(gzip.compress(text, 1))
    with pytest.raises(TraceError, match=r"deep.json.gz: invalid JSON \(nested too deeply to read\)"):
        read_events(path)
