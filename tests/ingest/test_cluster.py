"""Ingest on a real Dask scheduler and two worker processes (loopback): same release bytes as a local build; a
worker SIGKILLed mid-batch loses nothing and duplicates nothing; a trace that kills its workers is quarantined
and the other traces of its batch are not."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("distributed")

from distributed.diagnostics.plugin import WorkerPlugin  # noqa: E402

from flow.build import build_release  # noqa: E402
from release.bundle import read_release  # noqa: E402

DASK = Path(sys.executable).with_name("dask")
REPO = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 90


class Cluster:
    """A `dask scheduler` and `dask worker` processes, each in its own process group."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.scheduler_file = folder / "scheduler.json"
        self.workers: list[subprocess.Popen] = []
        # one retry of a task whose worker died, then KilledWorker (what ingest.cluster documents)
        env = os.environ | {"DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES": "1"}
        self.scheduler = self._start([DASK, "scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
                                      "--scheduler-file", self.scheduler_file], "scheduler", env)
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self.scheduler_file.is_file():
            assert self.scheduler.poll() is None, (folder / "scheduler.log").read_text()
            assert time.monotonic() < deadline, "scheduler did not start"
            time.sleep(0.1)
        self.address = json.loads(self.scheduler_file.read_text())["address"]

    def _start(self, argv, name: str, env=None) -> subprocess.Popen:
        log = open(self.folder / f"{name}.log", "wb")
        # the repository on the path: a test can hand the workers a function of this module
        env = (env or os.environ) | {"PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
        return subprocess.Popen([str(a) for a in argv], stdout=log, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True, cwd=REPO)

    def add_workers(self, n: int) -> None:
        from distributed import Client

        for _ in range(n):
            self.workers.append(self._start(
                [DASK, "worker", "--scheduler-file", self.scheduler_file, "--host", "127.0.0.1", "--nworkers", "1",
                 "--nthreads", "1", "--memory-limit", "2GB", "--no-dashboard", "--name", f"w{len(self.workers)}"],
                f"worker{len(self.workers)}"))
        with Client(self.address, timeout=START_TIMEOUT_S) as client:
            client.wait_for_workers(len(self.workers), timeout=START_TIMEOUT_S)

    @staticmethod
    def kill(proc: subprocess.Popen, sig=signal.SIGKILL) -> None:
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass

    def stop(self) -> None:
        for proc in [*self.workers, self.scheduler]:
            self.kill(proc, signal.SIGTERM)
        deadline = time.monotonic() + 10
        for proc in [*self.workers, self.scheduler]:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.kill(proc)
                proc.wait(10)


@pytest.fixture
def cluster(tmp_path):
    """A scheduler and two single-threaded worker processes on 127.0.0.1, stopped after the test."""
    c = Cluster(tmp_path)
    try:
        c.add_workers(2)
        yield c
    finally:
        c.stop()


def _files(release: Path) -> dict[str, bytes]:
    return {"release.json": (release / "release.json").read_bytes(), **read_release(release).all_files()}


@pytest.fixture(scope="module")
def local_release(examples_dir, tmp_path_factory):
    """The example release built in this process (jobs=1), its store beside it."""
    out = tmp_path_factory.mktemp("local") / "examples"
    build_release(examples_dir / "traces", examples_dir / "fleet.yaml", out, store=out.with_name("store"), jobs=1)
    return out


def test_a_release_built_on_dask_workers_is_the_local_build_byte_for_byte(cluster, examples_dir, local_release, tmp_path):
    out = tmp_path / "examples"
    build_release(examples_dir / "traces", examples_dir / "fleet.yaml", out, store=tmp_path / "store",
                  cluster=cluster.address)
    local, remote = _files(local_release), _files(out)
    assert sorted(remote) == sorted(local)
    assert [k for k in local if local[k] != remote[k]] == []


def _assert_store_is_the_local_one(store: Path, local_store: Path) -> None:
    from ingest.store import TraceStore

    ts, local = TraceStore(store), TraceStore(local_store)
    assert ts.trace_ids() == local.trace_ids() and ts.quarantined() == []
    for table in ("kernel_events", "op_shape_time", "provenance"):
        names = sorted(p.name for p in (store / table).glob("*.parquet"))  # temporary files start with "."
        assert names == [f"{t}.parquet" for t in local.trace_ids()]
        assert [n for n in names if (store / table / n).read_bytes() != Path(local.root, table, n).read_bytes()] == []
    assert ts.paths().equals(local.paths())


def test_a_worker_killed_mid_batch_loses_and_duplicates_nothing(cluster, examples_dir, local_release, tmp_path):
    from distributed import Client

    import ingest.store
    from ingest.cluster import _key
    from ingest.discovery import discover
    from ingest.tracefile import trace_id_of

    traces = discover([str(examples_dir / "traces")])
    # the four example traces with graph replays (a capture_traces/ beside them) are one batch (1.0 MB of files),
    # sent once the client has parsed their capture traces; the other two are another batch
    graphs = sorted((p for p in traces if (p.parent / "capture_traces").is_dir()), key=lambda p: -p.stat().st_size)
    assert len(graphs) == 4 and sum(p.stat().st_size for p in graphs) < ingest.store.BATCH_BYTES
    batch = [f"{trace_id_of(p.read_bytes())}.json" for p in graphs]
    out, store = tmp_path / "examples", tmp_path / "store"
    key = _key([(name[:-5], (str(store),)) for name in batch])  # a task's first field: the store's URL
    errors: list[BaseException] = []

    def build():
        try:
            build_release(examples_dir / "traces", examples_dir / "fleet.yaml", out, store=store,
                          cluster=cluster.address)
        except BaseException as exc:  # noqa: BLE001 - re-raised by the test below
            errors.append(exc)

    def slow_puts() -> None:
        """In each worker: a second after each trace's tables are stored, so that the kill below lands between
        the batch's first stored trace and its last however fast the parsing is (it once did not)."""
        import ingest.store

        put = ingest.store.TraceStore._put

        def _put(self, result, aggregated):
            summary = put(self, result, aggregated)
            time.sleep(1.0)
            return summary

        ingest.store.TraceStore._put = _put

    with Client(cluster.address, timeout=START_TIMEOUT_S) as client:
        client.run(slow_puts)
        names = {addr: w["name"] for addr, w in client.scheduler_info()["workers"].items()}
        runner = threading.Thread(target=build)
        runner.start()
        deadline = time.monotonic() + 120
        while not any((store / "summaries" / name).is_file() for name in batch):
            assert runner.is_alive() and time.monotonic() < deadline, errors or "no trace reached the store"
            time.sleep(0.02)
        busy = [names[addr] for addr, keys in client.processing().items() if key in keys]
        stored = {n: (p.stat().st_ino, p.stat().st_mtime_ns) for n in batch if (p := store / "summaries" / n).is_file()}
        assert len(busy) == 1, (busy, client.processing())
        cluster.kill(cluster.workers[int(busy[0][1:])])  # the worker parsing the batch, and its nanny
    runner.join(300)
    assert not runner.is_alive() and not errors, errors
    assert 0 < len(stored) < len(batch), f"{len(stored)} of its traces were stored before the kill: not mid-batch"

    _assert_store_is_the_local_one(store, local_release.with_name("store"))
    # the traces stored before the kill were skipped when the batch ran again, not parsed and written twice
    assert {n: (store / "summaries" / n).stat().st_ino for n in stored} == {n: ino for n, (ino, _) in stored.items()}
    assert {n: (store / "summaries" / n).stat().st_mtime_ns for n in stored} == {n: t for n, (_, t) in stored.items()}
    local_files, remote = _files(local_release), _files(out)
    assert [k for k in local_files if local_files[k] != remote.get(k)] == [] and sorted(remote) == sorted(local_files)


def test_hotshape_ingest_sends_its_parses_to_the_scheduler_in_the_environment(cluster, examples_dir, local_release,
                                                                               tmp_path, monkeypatch):
    from distributed import Client

    from ingest.store import TraceStore
    from pipelines.cli import main

    monkeypatch.setenv("HOTSHAPE_DASK_SCHEDULER", cluster.address)
    assert main(["ingest", str(examples_dir / "traces"), "--out", str(tmp_path / "store"), "--json"]) == 0
    assert TraceStore(tmp_path / "store").trace_ids() == TraceStore(local_release.with_name("store")).trace_ids()
    with Client(cluster.address, timeout=30) as client:  # the parses ran there
        prefixes = client.run_on_scheduler(lambda dask_scheduler: sorted(dask_scheduler.task_prefixes))
    assert any(p.startswith("hotshape-ingest") for p in prefixes), prefixes


def test_workers_read_the_traces_and_write_the_store_at_file_urls(cluster, examples_dir, local_release, tmp_path):
    from distributed import Client

    from ingest.store import TraceStore
    from pipelines.cli import main

    # file:// is a URL every process on this host reads the same way (memory:// would be each worker's own)
    traces, store = f"file://{examples_dir / 'traces'}", f"file://{tmp_path / 'store'}"
    assert main(["ingest", traces, "--out", store, "--cluster", cluster.address, "--json"]) == 0
    with Client(cluster.address, timeout=30) as client:  # the parses ran there
        prefixes = client.run_on_scheduler(lambda dask_scheduler: sorted(dask_scheduler.task_prefixes))
    assert any(p.startswith("hotshape-ingest") for p in prefixes), prefixes

    ts, local = TraceStore(store), TraceStore(local_release.with_name("store"))
    assert ts.trace_ids() == local.trace_ids() and ts.quarantined() == []
    # names are relative to the folder named, as for a path; the graph traces' replays were explained by
    # the capture traces beside them (read through the URL too): the same tables, byte for byte
    assert sorted(ts.paths()["path"]) == sorted(p.relative_to(examples_dir / "traces").as_posix()
                                                 for p in (examples_dir / "traces").rglob("*.json.gz")
                                                 if "capture_traces" not in p.parts)
    for table in ("kernel_events", "op_shape_time", "provenance"):
        assert [t for t in ts.trace_ids() if (tmp_path / "store" / table / f"{t}.parquet").read_bytes()
                != Path(local.file(table, t)).read_bytes()] == []
    assert sorted(p.name for p in (tmp_path / "store" / "captures").glob("*.parquet")) == \
        sorted(p.name for p in Path(local.root, "captures").glob("*.parquet")) != []


class DiesAtTrace(WorkerPlugin):
    """A worker plugin, so on every worker and on each one its nanny starts again: the worker process dies
    when it comes to parse the trace whose path ends with `suffix` (as one that needs more memory than the
    worker has), and parses every other trace as ingest.store does."""

    name = "dies-at-trace"

    def __init__(self, suffix: str):
        self.suffix = suffix

    def setup(self, worker):
        import ingest.store

        parse, suffix = ingest.store._parse_one, self.suffix

        def dying(task, store):
            if task[1].endswith(suffix):
                os._exit(1)
            return parse(task, store)

        ingest.store._parse_one = dying


def test_a_trace_whose_workers_die_twice_is_quarantined_and_its_batch_is_not(cluster, examples_dir, local_release,
                                                                             tmp_path):
    from distributed import Client

    from ingest.discovery import discover
    from ingest.store import TraceStore
    from ingest.tracefile import trace_id_of

    traces = discover([str(examples_dir / "traces")])
    # the second trace of the batch of the four with graph replays (longest first)
    poison = examples_dir / "traces" / "llama3-8b" / "eager.json.gz"
    graphs = [p for p in traces if (p.parent / "capture_traces").is_dir()]
    assert sorted(graphs, key=lambda p: -p.stat().st_size)[1] == poison
    with Client(cluster.address, timeout=START_TIMEOUT_S) as client:
        client.register_plugin(DiesAtTrace("llama3-8b/eager.json.gz"))
    store = TraceStore(tmp_path / "store")
    report = store.ingest(traces, cluster=cluster.address)

    local = TraceStore(local_release.with_name("store"))
    bad = trace_id_of(poison.read_bytes())
    assert sorted(report.parsed) == local.trace_ids() and bad in local.trace_ids()
    # the batch died twice at the poison trace; its other traces were sent again one by one, each stored
    assert store.trace_ids() == [t for t in local.trace_ids() if t != bad]
    reason = store.quarantine_reason(bad)
    assert "KilledWorker" in reason and "died twice" in reason, reason
    assert [q["reason"] for q in store.quarantined()] == [reason]
    for table in ("kernel_events", "op_shape_time", "provenance"):
        assert [t for t in store.trace_ids() if Path(store.file(table, t)).read_bytes()
                != Path(local.file(table, t)).read_bytes()] == []


def test_a_task_key_names_its_traces_and_its_store():
    """A scheduler answers a key it still holds with that key's result, without running the task again (seen:
    a test's ingest reported a trace done that its store never got, the key's result being an earlier test's
    ingest of the same traces into another store, on the same scheduler)."""
    from ingest.cluster import _key

    def batch(store: str, *tids: str) -> list:
        return [(t, (store, f"/traces/{t}.json.gz", f"{t}.json.gz", (), None)) for t in tids]

    assert _key(batch("/s/a", "t1", "t2")) == _key(batch("/s/a", "t1", "t2"))  # one store: run once
    assert _key(batch("/s/a", "t1", "t2")) != _key(batch("/s/b", "t1", "t2"))
    assert _key(batch("/s/a", "t1")) != _key(batch("s3://bucket/a", "t1"))
    assert _key(batch("/s/a", "t1", "t2")) != _key(batch("/s/a", "t1", "t3"))
    assert len({_key(batch("/s/a", "t1")), _key(batch("/s/a", "t1", "t2"))}) == 2
