"""Fixtures for the Dagster tests: Dagster instances (sqlite, or a real PostgreSQL server) and stores."""

from __future__ import annotations

import glob
import itertools
import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

import dagster as dg
import pytest

from pipelines.resources import HotshapeStore
from tests.conftest import EXAMPLES

EXAMPLE_TRACES = EXAMPLES / "traces"
EXAMPLE_FLEET = EXAMPLES / "fleet.yaml"
QUIET = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}


def example_store(out: Path, **fields) -> HotshapeStore:
    """A store reading examples/ and writing under `out`."""
    return HotshapeStore(**{"trace_root": str(EXAMPLE_TRACES), "fleet": str(EXAMPLE_FLEET), "out": str(out), **fields})


# Two of the example deployments, for tests that need a few real traces, not all five.
DENSE_FLEET = (
    "window: {start: 2026-11-01, end: 2026-11-30}\n"
    "deployments:\n"
    "  - {id: chat-dense-8b, model: llama3-8b, framework: hf, accelerator: H200, card_hours: 46080,"
    " traces: ['llama3-8b/*.json.gz']}\n"
    "  - {id: batch-compiled, model: llama3-8b, framework: tc, accelerator: H200, card_hours: 2880,"
    " traces: ['llama3-8b-compiled/*.json.gz']}\n"
)


def copy_traces(root: Path, rels: list[str]) -> Path:
    """Copy example traces (and every graph-capture sidecar directory) under `root`."""
    for rel in rels:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(EXAMPLE_TRACES / rel, root / rel)
    for sidecars in EXAMPLE_TRACES.glob("*/capture_traces"):
        if not (root / sidecars.relative_to(EXAMPLE_TRACES)).exists():
            shutil.copytree(sidecars, root / sidecars.relative_to(EXAMPLE_TRACES))
    return root


def dense_store(tmp_path: Path, rels: list[str], **fields) -> HotshapeStore:
    """A store over a copy of `rels` and the two dense deployments' fleet."""
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(DENSE_FLEET)
    root = copy_traces(tmp_path / "traces", rels)
    return HotshapeStore(**{"trace_root": str(root), "fleet": str(fleet), "out": str(tmp_path / "out"),
                            "submissions": str(tmp_path / "no-submissions"), **fields})


# ---- PostgreSQL: Debian's server binaries, started in a temporary directory on a free port ----------

def _pg_bin() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[4]))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).resolve().parent if initdb else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PostgresServer:
    """A throw-away PostgreSQL cluster; `database()` hands out a fresh empty database per call."""

    def __init__(self, bin_dir: Path):
        self.bin_dir, self.port = bin_dir, _free_port()
        # Not under pytest's basetemp: that is 0700 root-only, and the server must run as `postgres`
        # when the tests run as root (initdb refuses root).
        self.dir = Path(tempfile.mkdtemp(prefix="hotshape-pg-"))
        self.as_user: list[str] = []
        if os.geteuid() == 0:
            runuser = shutil.which("runuser")
            try:
                import pwd

                pg = pwd.getpwnam("postgres")
            except KeyError:
                pg = None
            if runuser is None or pg is None:
                pytest.skip("running as root without a `postgres` user and runuser to start the server as")
            os.chown(self.dir, pg.pw_uid, pg.pw_gid)
            self.as_user = [runuser, "-u", "postgres", "--"]
        self.data = self.dir / "data"
        self._names = itertools.count()

    def _run(self, *args: str) -> None:
        subprocess.run([*self.as_user, *args], check=True, capture_output=True, timeout=60)

    def start(self) -> "PostgresServer":
        self._run(str(self.bin_dir / "initdb"), "-D", str(self.data), "-A", "trust", "-U", "dagster", "--no-sync", "-E", "UTF8")
        options = f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -F"
        self._run(str(self.bin_dir / "pg_ctl"), "-D", str(self.data), "-o", options, "-l", str(self.dir / "log"), "-w", "start")
        return self

    def stop(self) -> None:
        try:
            self._run(str(self.bin_dir / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "stop")
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)

    def url(self, db: str) -> str:
        # +psycopg2: SQLAlchemy 2.1 takes a bare postgresql:// to mean psycopg 3, which is not installed.
        return f"postgresql+psycopg2://dagster@127.0.0.1:{self.port}/{db}"

    def database(self) -> str:
        """A new empty database's name."""
        import psycopg2

        name = f"hotshape_{next(self._names)}"
        conn = psycopg2.connect(host="127.0.0.1", port=self.port, user="dagster", dbname="postgres")
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE {name}")
        conn.close()
        return name


@pytest.fixture(scope="session")
def postgres_server():
    """A running PostgreSQL server; the test skips when the server binaries are not installed."""
    bin_dir = _pg_bin()
    if bin_dir is None or not (bin_dir / "pg_ctl").exists():
        pytest.skip("PostgreSQL server binaries not installed (apt-get install postgresql)")
    server = PostgresServer(bin_dir).start()
    yield server
    server.stop()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def instance(request):
    """A fresh Dagster instance: sqlite in a temp dir, and again on a real PostgreSQL server."""
    if request.param == "sqlite":
        with dg.instance_for_test() as inst:
            yield inst
        return
    server = request.getfixturevalue("postgres_server")
    overrides = {"storage": {"postgres": {"postgres_url": server.url(server.database())}}}
    with dg.instance_for_test(overrides=overrides) as inst:
        yield inst


@pytest.fixture(scope="session")
def materialized_on_sqlite(tmp_path_factory):
    """The whole graph materialized once on examples/ (sqlite): (store, summary, instance)."""
    from pipelines.commands import materialize_all

    tmp = tmp_path_factory.mktemp("pipeline")
    store = example_store(tmp / "out", submissions=str(tmp / "no-submissions"))
    with dg.instance_for_test() as inst:
        yield store, materialize_all(store, inst), inst


@pytest.fixture(scope="session")
def materialized(materialized_on_sqlite):
    """(store, summary) of the whole graph materialized once on examples/."""
    store, summary, _ = materialized_on_sqlite
    return store, summary


@pytest.fixture
def materialized_copy(materialized, tmp_path):
    """A private copy of the materialized outputs, free to tamper with."""
    store, _ = materialized
    out = tmp_path / "out"
    shutil.copytree(store.out, out)
    return example_store(out)


def definition_metadata(key: str) -> dict:
    """The metadata an asset's definition declares (its column schema and lineage: the same for every
    materialisation, so not repeated on each)."""
    from pipelines.definitions import ASSETS

    [spec] = [s for a in ASSETS for s in (a.specs if hasattr(a, "specs") else [a]) if s.key == dg.AssetKey(key)]
    return dict(spec.metadata)


def batch_run(instance: dg.DagsterInstance, store: HotshapeStore, selection=("kernel_events", "op_shape_time")):
    """One batch run (a partition range, as run-pipeline makes) of `selection` and its checks over every trace
    partition of `store`, on `instance`; its result."""
    from pipelines.definitions import ASSETS, CHECKS

    keys = store.trace_keys()
    instance.add_dynamic_partitions("trace_files", keys)
    return dg.materialize(ASSETS + CHECKS, selection=list(selection), instance=instance, resources={"store": store},
                          run_config=QUIET, tags={"dagster/asset_partition_range_start": keys[0],
                                                  "dagster/asset_partition_range_end": keys[-1]})


def recorded_batch_run(tmp_path: Path, monkeypatch) -> tuple[str, list[str], list[list]]:
    """The events of a real batch run of the example traces' partitions (kernel_events, op_shape_time and the
    check), as the calls that hand them to an event log: (run id, partition keys, calls). Consecutive
    materialisations are one call (a batch, as Dagster hands them over), every other event one call of its own. One
    evaluation is changed to a failed one and an evaluation of a partition the run never planned added after it."""
    from dagster_shared.record import copy

    from pipelines.sqlite_files import open_instance

    monkeypatch.setenv("DAGSTER_EVENT_BATCH_SIZE", "10000")
    (tmp_path / "recorded").mkdir()
    instance = open_instance(tmp_path / "recorded")
    store = example_store(tmp_path / "recorded-out")
    keys = store.trace_keys()
    run = batch_run(instance, store)
    entries = instance.all_logs(run.run_id)
    instance.dispose()
    evaluations = [i for i, e in enumerate(entries)
                   if e.dagster_event_type == dg.DagsterEventType.ASSET_CHECK_EVALUATION]
    assert len(evaluations) == len(keys) >= 5
    first = entries[evaluations[0]]
    evaluation = first.dagster_event.event_specific_data
    failed = first._replace(dagster_event=first.dagster_event._replace(
        event_specific_data=copy(evaluation, passed=False, partition=keys[1])))
    unplanned = first._replace(dagster_event=first.dagster_event._replace(
        event_specific_data=copy(evaluation, partition="not/planned.json")))
    entries = [*entries[:evaluations[1]], failed, unplanned, *entries[evaluations[1] + 1:]]
    calls, batch = [], []
    for entry in entries:
        if entry.dagster_event_type == dg.DagsterEventType.ASSET_MATERIALIZATION:
            batch.append(entry)
            continue
        calls += [batch] if batch else []
        calls.append([entry])
        batch = []
    assert max(len(c) for c in calls) == len(keys)
    return run.run_id, keys, calls
