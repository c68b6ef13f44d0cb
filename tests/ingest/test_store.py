"""The trace store: each trace parsed once, the same bytes under two names one profile, capture traces
parsed once per store, nothing of a trace visible until all of it is written, local and fsspec URLs."""

from __future__ import annotations

import gzip
import shutil
import uuid

import polars as pl
import pytest
import yaml

from ingest.output import write_ingest
from ingest.store import TraceStore
from ingest.tracefile import trace_id_of
from tests.conftest import EXAMPLES

TRACES = EXAMPLES / "traces"
GRAPH = "llama3-8b/graph.json.gz"
EAGER = "llama3-8b-compiled/eager.json.gz"


def _copy(root, rel, as_rel=None):
    dest = root / (as_rel or rel)
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(TRACES / rel, dest)
    sidecars = (TRACES / rel).parent / "capture_traces"
    if sidecars.is_dir() and not (dest.parent / "capture_traces").exists():
        shutil.copytree(sidecars, dest.parent / "capture_traces")
    return dest


def _regzipped(src, dest, mtime):
    """The same trace text with other gzip header bytes: another profile's file, by content address."""
    dest.write_bytes(gzip.compress(gzip.decompress(src.read_bytes()), mtime=mtime))
    return dest


def test_a_second_ingest_parses_nothing(tmp_path):
    paths = [_copy(tmp_path / "t", GRAPH), _copy(tmp_path / "t", EAGER)]
    store = TraceStore(tmp_path / "store")
    first = store.ingest(paths, jobs=1)
    second = store.ingest(paths, jobs=1)
    assert sorted(first.parsed) == sorted(first.ids.values()) and len(first.parsed) == 2
    assert second.parsed == [] and second.captures_parsed == [] and sorted(second.reused) == sorted(first.parsed)
    assert store.trace_ids() == sorted(first.parsed)


def test_the_same_bytes_under_two_names_are_one_profile_with_both_names(tmp_path):
    root = tmp_path / "t"
    a, b = _copy(root, EAGER, "x/a.json.gz"), _copy(root, EAGER, "x/b.json.gz")
    out = tmp_path / "store"
    summary = write_ingest([a, b], out, root=root, jobs=1)
    store = TraceStore(out)
    tid = trace_id_of(a.read_bytes())
    assert summary["parsed"] == 1 and [t["trace_id"] for t in summary["traces"]] == [tid]
    assert store.paths().rows() == [("x/a.json.gz", tid), ("x/b.json.gz", tid)]
    traces = pl.read_parquet(out / "traces.parquet")
    assert traces.height == 1 and int(pl.read_parquet(out / "op_shape_time.parquet")["gpu_ns"].sum()) == traces["gpu_ns"][0]


def test_a_release_counts_the_same_bytes_under_two_names_once(tmp_path):
    """Regression: the same trace under two names made build fail ("attributes more ns than its gpu_ns")."""
    from flow.build import build_release

    root = tmp_path / "t"
    _copy(root, EAGER, "x/a.json.gz"), _copy(root, EAGER, "x/b.json.gz")
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(yaml.safe_dump({"window": {"start": "2026-11-01", "end": "2026-11-30"}, "deployments": [
        {"id": "d", "model": "m", "framework": "f", "accelerator": "H200", "card_hours": 10, "traces": ["x/*.json.gz"]}]}))
    summary = build_release(root, fleet, tmp_path / "rel")
    assert summary["problems"] > 0


def test_a_capture_trace_is_parsed_once_per_store(tmp_path):
    root = tmp_path / "t"
    graph = _copy(root, GRAPH)
    store = TraceStore(tmp_path / "store")
    first = store.ingest([graph], jobs=1)
    assert len(first.captures_parsed) == 1
    # Two more profiles of the same deployment, beside the same capture_traces/: no capture parsed again.
    more = [_regzipped(graph, graph.with_name(f"graph-{i}.json.gz"), mtime=i + 1) for i in range(2)]
    second = store.ingest(more, jobs=1)
    assert len(second.parsed) == 2 and second.captures_parsed == [] and second.captures_reused == first.captures_parsed
    # The graph replays were explained from the stored capture exactly as from the file.
    by_attribution = [store.summary(t).by_attribution for t in [*first.parsed, *second.parsed]]
    assert by_attribution[0].get("graph_capture", 0) > 0 and all(b == by_attribution[0] for b in by_attribution)


def test_a_killed_ingest_leaves_no_partial_trace(tmp_path, monkeypatch):
    path = _copy(tmp_path / "t", EAGER)
    store = TraceStore(tmp_path / "store")
    real_write, calls = TraceStore._write, []

    def dies_after_the_events(self, target, data):
        if "/op_shape_time/" in target:
            raise KeyboardInterrupt  # as if killed between a trace's files
        calls.append(target)
        return real_write(self, target, data)

    monkeypatch.setattr(TraceStore, "_write", dies_after_the_events)
    with pytest.raises(KeyboardInterrupt):
        store.ingest([path], jobs=1)
    tid = trace_id_of(path.read_bytes())
    assert any("/kernel_events/" in c for c in calls)
    assert not store.has(tid) and store.summary(tid) is None and store.trace_ids() == []
    monkeypatch.setattr(TraceStore, "_write", real_write)
    again = store.ingest([path], jobs=1)
    assert again.parsed == [tid] and store.conservation(tid)["passed"]


def test_a_killed_write_leaves_only_a_hidden_temporary_file(tmp_path, monkeypatch):
    store = TraceStore(tmp_path / "store")
    monkeypatch.setattr("os.replace", lambda *a: (_ for _ in ()).throw(KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        store.quarantine("0" * 16, "why")
    assert [p.name.startswith(".") for p in (tmp_path / "store" / "quarantine").iterdir()] == [True]
    assert not store.has("0" * 16)


@pytest.mark.parametrize("scheme", ["memory", "file"])
def test_a_store_at_an_fsspec_url(tmp_path, scheme):
    path = _copy(tmp_path / "t", GRAPH)
    url = f"memory://store-{uuid.uuid4().hex}" if scheme == "memory" else f"file://{tmp_path / 'store'}"
    store = TraceStore(url)
    report = store.ingest([path], ["llama3-8b/graph.json.gz"], jobs=1)
    [tid] = report.parsed
    assert store.trace_ids() == [tid] and store.conservation(tid)["passed"]
    ost = store.scan("op_shape_time", [tid]).collect()
    assert int(ost["gpu_ns"].sum()) == store.summary(tid).gpu_ns
    assert TraceStore(url).ingest([path], ["llama3-8b/graph.json.gz"], jobs=1).parsed == []
    assert store.write_views()["traces"][0]["path"] == "llama3-8b/graph.json.gz"


def test_a_plain_directory_store_is_the_one_fsspec_writes(tmp_path):
    """A directory path opens without fsspec (ingest.store.LocalFiles); file:// goes through fsspec: same files, same bytes."""
    paths = [_copy(tmp_path / "t", GRAPH), _copy(tmp_path / "t", EAGER)]
    plain, url = TraceStore(tmp_path / "plain"), TraceStore(f"file://{tmp_path / 'url'}")
    assert type(plain.fs).__name__ == "LocalFiles" and type(url.fs).__module__.startswith("fsspec")
    for store in (plain, url):
        store.ingest(paths, [GRAPH, EAGER], jobs=1)
        store.write_views()
    files = {name: sorted(p.relative_to(tmp_path / name) for p in (tmp_path / name).rglob("*") if p.is_file())
             for name in ("plain", "url")}
    assert files["plain"] == files["url"] and len(files["plain"]) > 10
    assert all((tmp_path / "plain" / f).read_bytes() == (tmp_path / "url" / f).read_bytes() for f in files["plain"])
    assert sorted(plain.ingest(paths, jobs=1).reused) == sorted(url.ingest(paths, jobs=1).reused) == plain.trace_ids()


def test_a_quarantined_trace_is_remembered_and_not_read_again(tmp_path):
    bad = tmp_path / "bad.json.gz"
    bad.write_bytes(gzip.compress(b'{"traceEvents": [')[:-6])
    store = TraceStore(tmp_path / "store")
    first = store.ingest([bad], jobs=1)
    tid = trace_id_of(bad.read_bytes())
    assert first.parsed == [tid] and store.summary(tid) is None and "gzip" in store.quarantine_reason(tid)
    assert store.ingest([bad], jobs=1).reused == [tid]
    assert store.quarantined() == [{"path": str(bad), "reason": store.quarantine_reason(tid)}]


def _files(root):
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and "paths" not in p.parts}


@pytest.mark.parametrize("jobs", [1, 2], ids=["here", "worker"])
def test_a_batch_writes_what_its_traces_written_one_by_one_write_and_a_bad_one_is_quarantined_alone(tmp_path, jobs):
    from ingest.store import _ingest_batch, batches

    good = [_copy(tmp_path / "t", GRAPH), _copy(tmp_path / "t", EAGER), _copy(tmp_path / "t", "qwen3-30b-a3b/eager.json.gz")]
    bad = tmp_path / "t" / "bad.json.gz"
    bad.write_bytes(gzip.compress(b'{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": '))
    paths = [good[0], bad, *good[1:]]
    batched = TraceStore(tmp_path / "batched")
    report = batched.ingest(paths, jobs=jobs)
    tids = [trace_id_of(p.read_bytes()) for p in paths]
    assert sorted(report.parsed) == sorted(tids)
    assert len(batches([(t, None) for t in tids], {t: 1 for t in tids})) == 1  # all four are one batch
    assert batched.trace_ids() == sorted(tids[:1] + tids[2:]) and "JSON" in batched.quarantine_reason(tids[1])
    alone = TraceStore(tmp_path / "alone")
    for p in paths:
        alone.ingest([p], jobs=1)
    assert _files(tmp_path / "batched") == _files(tmp_path / "alone")
    # a batch run again after its worker died leaves what the first attempt stored as it was
    before = _files(tmp_path / "batched")
    _ingest_batch([(t, (batched.url, str(p), str(p), (), None)) for t, p in zip(tids, paths)], batched)
    assert _files(tmp_path / "batched") == before


def test_a_trace_whose_tables_cannot_be_written_is_quarantined_and_its_batch_is_stored(tmp_path, monkeypatch):
    paths = [_copy(tmp_path / "t", GRAPH), _copy(tmp_path / "t", EAGER)]
    poison = trace_id_of(paths[0].read_bytes())
    real = TraceStore._put

    def refuses_one(self, result, aggregated):
        if result.summary["trace_id"] == poison:
            raise OverflowError("a value the writer cannot hold")
        return real(self, result, aggregated)

    monkeypatch.setattr(TraceStore, "_put", refuses_one)
    store = TraceStore(tmp_path / "store")
    store.ingest(paths, jobs=1)
    assert store.trace_ids() == [trace_id_of(paths[1].read_bytes())]
    assert store.quarantine_reason(poison) == "unexpected OverflowError while ingesting: a value the writer cannot hold"


def _watched_pool(monkeypatch, store_root):
    """Each local pool's start, with how many names the path index held then; the real pool still starts."""
    from ingest import store as store_module

    starts = []
    real = store_module._Pool.start

    def start(pool):
        if pool.executor is None:
            starts.append(len(list((store_root / "paths").glob("*.json"))))
        return real(pool)

    monkeypatch.setattr(store_module._Pool, "start", start)
    return starts


def test_the_pool_starts_while_the_rest_is_indexed_and_not_for_traces_the_store_has(tmp_path, monkeypatch):
    """Workers are spawned as soon as two traces to parse are known (jobs=2), before the other names are
    indexed; a second ingest, which parses nothing, starts none; the store is the one that one process writes."""
    paths = [_copy(tmp_path / "t", GRAPH), _copy(tmp_path / "t", EAGER), _copy(tmp_path / "t", "qwen3-30b-a3b/eager.json.gz"),
             _copy(tmp_path / "t", "deepseek-v2-lite/eager.json.gz")]
    starts = _watched_pool(monkeypatch, tmp_path / "pooled")
    calls = []
    pooled = TraceStore(tmp_path / "pooled")
    report = pooled.ingest(paths, jobs=2, meanwhile=lambda: calls.append(len(pooled.trace_ids())))
    assert starts == [2] and len(calls) == 1 and sorted(report.parsed) == pooled.trace_ids()
    assert sorted(pooled.ingest(paths, jobs=2, meanwhile=lambda: calls.append("again")).reused) == sorted(report.parsed)
    assert starts == [2] and len(calls) == 1
    alone = TraceStore(tmp_path / "alone")
    assert sorted(alone.ingest(paths, jobs=1, meanwhile=lambda: calls.append("one process")).parsed) == alone.trace_ids()
    assert starts == [2] and len(calls) == 1  # meanwhile is for the pool's idle parent only
    assert _files(tmp_path / "pooled") == _files(tmp_path / "alone")


def test_by_default_the_pool_starts_once_the_traces_to_parse_repay_it(tmp_path, monkeypatch):
    """jobs=None: workers once the traces the store lacks reach PARALLEL_MIN_BYTES, as default_jobs decides
    after indexing all of them; never for fewer bytes."""
    from ingest import store as store_module

    paths = [_copy(tmp_path / "t", GRAPH), _copy(tmp_path / "t", EAGER), _copy(tmp_path / "t", "qwen3-30b-a3b/eager.json.gz")]
    sizes = [p.stat().st_size for p in paths]
    monkeypatch.setattr(store_module.os, "cpu_count", lambda: 2)
    starts = _watched_pool(monkeypatch, tmp_path / "small")
    monkeypatch.setattr(store_module, "PARALLEL_MIN_BYTES", sum(sizes) + 1)
    TraceStore(tmp_path / "small").ingest(paths)
    assert starts == []
    starts = _watched_pool(monkeypatch, tmp_path / "large")
    monkeypatch.setattr(store_module, "PARALLEL_MIN_BYTES", sizes[0] + sizes[1])
    assert len(TraceStore(tmp_path / "large").ingest(paths).parsed) == 3
    assert starts == [2]


def test_a_pool_started_ahead_is_the_one_the_next_ingest_parses_on(tmp_path, monkeypatch):
    """start_pool_ahead: its workers start at once and parse the capture traces given; the next ingest on a pool of
    that size takes it (and starts no other, finds the capture traces stored, and shuts it down); a second pool
    ahead that no ingest takes is shut down by drop_pool_ahead; a capture trace that cannot be read is left to the
    ingest, which quarantines the traces that need it as before."""
    from ingest import store as store_module
    from ingest.store import drop_pool_ahead, start_pool_ahead

    from ingest.graphs import capture_traces_for

    paths = [_copy(tmp_path / "t", GRAPH), _copy(tmp_path / "t", EAGER), _copy(tmp_path / "t", "qwen3-30b-a3b/eager.json.gz")]
    captures = [c for p in paths for c in capture_traces_for(p)]
    ahead = start_pool_ahead(2, TraceStore(tmp_path / "store"), captures)
    assert ahead.executor is not None and store_module._AHEAD == [ahead] and len(ahead.ahead) == 1  # one task
    starts = _watched_pool(monkeypatch, tmp_path / "store")
    submitted = []
    real_submit = store_module._Pool.submit
    monkeypatch.setattr(store_module._Pool, "submit", lambda pool, fn, *a: (submitted.append(pool), real_submit(pool, fn, *a))[1])
    report = TraceStore(tmp_path / "store").ingest(paths, jobs=2)
    assert len(report.parsed) == 3 and set(submitted) == {ahead} and starts == []  # no pool of its own
    # the capture traces were parsed by the pool's workers before the ingest began: it found them stored
    assert len(captures) >= 2 and report.captures_parsed == [] and len(report.captures_reused) == len(set(captures))
    assert store_module._AHEAD == [] and ahead.executor._shutdown_thread  # taken, and shut down by the ingest
    drop_pool_ahead(ahead)  # taken: nothing to do
    unused = start_pool_ahead(2)
    drop_pool_ahead(unused)
    assert store_module._AHEAD == [] and unused.executor._shutdown_thread
    bad = _copy(tmp_path / "b", GRAPH)
    [capture] = capture_traces_for(bad)
    capture.write_bytes(b"{not json")
    start_pool_ahead(2, TraceStore(tmp_path / "bad-store"), [capture])
    report = TraceStore(tmp_path / "bad-store").ingest([bad, _copy(tmp_path / "b", EAGER)], jobs=2)
    reasons = {q["path"]: q["reason"] for q in TraceStore(tmp_path / "bad-store").quarantined()}
    assert store_module._AHEAD == [] and len(report.parsed) == 2 and list(reasons) == [str(bad)]
    assert "invalid JSON" in reasons[str(bad)]


def test_a_folders_capture_sidecar_is_read_once_and_its_error_quarantines_each_of_its_traces(tmp_path, monkeypatch):
    """capture_traces_for per folder is what it is per trace; a sidecar that cannot be read quarantines
    every trace beside it with its reason, as reading it for each of them would."""
    from ingest import graphs
    from ingest import store as store_module
    from ingest.store import _sidecar_captures

    a = _copy(tmp_path / "t", GRAPH)
    b = _regzipped(a, a.with_name("again.json.gz"), mtime=1)
    c = _copy(tmp_path / "t", EAGER)
    read = []
    real = graphs.capture_traces_for
    monkeypatch.setattr(store_module, "capture_traces_for", lambda p: read.append(p) or real(p))
    sidecars = {}
    assert [_sidecar_captures(p, sidecars) for p in (a, b, c)] == [real(a), real(b), real(c)]
    assert real(a) and read == [a, c]
    (a.parent / "capture_traces" / "execution_details.json").write_text("{not json")
    monkeypatch.setattr(store_module, "capture_traces_for", real)
    store = TraceStore(tmp_path / "store")
    report = store.ingest([a, b, c], jobs=1)
    ta, tb = trace_id_of(a.read_bytes()), trace_id_of(b.read_bytes())
    assert store.trace_ids() == [trace_id_of(c.read_bytes())] and sorted(report.parsed) == sorted([ta, tb, *store.trace_ids()])
    assert store.quarantine_reason(ta) == store.quarantine_reason(tb) and "invalid JSON" in store.quarantine_reason(ta)
