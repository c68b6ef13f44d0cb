"""A sqlite Dagster instance as `hotshape run-pipeline` writes to it: its files held open, and a batch of asset
events stored in one transaction per file.

Dagster's sqlite storages open a new connection for every event they store (one to the run's own file, one to the
cross-run index) and close it afterwards. The files are in WAL mode, and SQLite checkpoints the WAL into the
database and deletes it whenever the last connection to a file closes: every event then pays two checkpoints and a
new WAL, each with its fsync (18-34 ms per connection measured on the project's machine, ~60 ms per event).

While `held(directory)` is open, every sqlite file under `directory` that Dagster connects to gets:
- one more connection of ours, idle and outside any transaction, so that Dagster's connections are never the
  last and the WAL lives on between them (SQLite: "when the last connection to a database closes, that
  connection does a checkpoint and then deletes the WAL"); Dagster's webserver and daemon read and write beside it
  as before;
- `PRAGMA synchronous=NORMAL` on each of Dagster's connections (SQLAlchemy's "connect" event, the pattern its
  sqlite dialect documents for pragmas): in WAL mode a commit is then not synced on its own, only at checkpoints;
  the database cannot be corrupted by a crash, and what a power loss can cost is the last commits of a run,
  which the next run-pipeline repeats (a partition with no materialisation is ingested again).

On leaving, our connections close and the last one checkpoints the WAL into each database, as Dagster's would.
A Postgres instance is untouched (no sqlite file is connected to).

`open_instance(home)` gives the instance of `home`'s dagster.yaml; on Dagster's default sqlite storage its event log
is `BatchingSqliteEventLogStorage`: Dagster hands a run's asset materialisations to the storage in batches
(DAGSTER_EVENT_BATCH_SIZE, set by run-pipeline), and Dagster's sqlite event log stores a batch one event at a time,
each in its own connections to the run's file and to the index (and one more, per event, to ask whether the tag
table exists), each connection on an engine made for it. Ours stores a batch in one transaction per file and keeps
one connection per file it writes. A run of 80 partitions stores 160 materialisations: 0.6-0.7 s of the run that
way, 0.13 s in one transaction per file. Check evaluations are held back and written together, a planned check's
rows serialised once (pipelines/event_logs.py). The rows are the same ones, in the same order; the webserver and
daemon read them with Dagster's own classes. On a Postgres instance, open_instance gives pipelines/postgres_events.py's
event log.
"""

from __future__ import annotations

import sqlite3
import threading
from contextlib import contextmanager
from pathlib import Path

import dagster as dg
from dagster._core.events import DagsterEventType
from dagster._core.instance.ref import InstanceRef
from dagster._core.storage.event_log import SqliteEventLogStorage
from dagster._core.storage.event_log.sqlite.sqlite_event_log import INDEX_SHARD_NAME
from dagster._core.storage.sql import create_engine
from dagster._core.storage.sqlite import SQLITE_BUSY_TIMEOUT_SECONDS
from dagster._core.storage.sqlite_storage import DagsterSqliteStorage, _event_logs_directory
from dagster._serdes import ConfigurableClassData
from sqlalchemy.engine import Engine
from sqlalchemy.pool import StaticPool

from pipelines.event_logs import EVENTS, HeldCheckEvaluations

# what Dagster's instance machinery (dagster 1.13) names its default sqlite storage
DAGSTER_SQLITE = ("dagster._core.storage.sqlite_storage", "DagsterSqliteStorage")
BATCHED = {DagsterEventType.ASSET_MATERIALIZATION, DagsterEventType.ASSET_OBSERVATION}


class _Held:
    """Our idle connection per database file, opened on Dagster's first connection to it."""

    def __init__(self, directory: Path):
        self.directory = directory
        self.lock = threading.Lock()
        self.connections: dict[str, sqlite3.Connection] = {}
        self.in_wal: set[str] = set()

    def on_connect(self, dbapi_connection, connection_record) -> None:
        if not isinstance(dbapi_connection, sqlite3.Connection):
            return
        rows = dbapi_connection.execute("PRAGMA database_list").fetchall()
        path = next((file for _, name, file in rows if name == "main"), "")
        if not path or not Path(path).is_relative_to(self.directory):
            return
        dbapi_connection.execute("PRAGMA synchronous=NORMAL")
        with self.lock:
            if path in self.in_wal:
                return
            held = self.connections.get(path)
            if held is None:
                held = self.connections[path] = sqlite3.connect(path, isolation_level=None, check_same_thread=False,
                                                                timeout=30)
            # our connection shares the WAL once it has read the file in WAL mode (Dagster switches a new file
            # to WAL on its first connection, after this one opened; the pragma answers from the last read)
            held.execute("SELECT count(*) FROM sqlite_master").fetchall()
            if held.execute("PRAGMA journal_mode").fetchone()[0] == "wal":
                self.in_wal.add(path)

    def close(self) -> None:
        with self.lock:
            for connection in self.connections.values():
                connection.close()
            self.connections.clear()


@contextmanager
def held(directory):
    """While open, sqlite files under `directory` stay open between Dagster's connections, which commit with
    synchronous=NORMAL (the module's docstring says why)."""
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    state = _Held(Path(directory).resolve())
    event.listen(Engine, "connect", state.on_connect)
    try:
        yield state
    finally:
        event.remove(Engine, "connect", state.on_connect)
        state.close()


class BatchingSqliteEventLogStorage(HeldCheckEvaluations, SqliteEventLogStorage):
    """Dagster's sqlite event log, storing a batch of one run's materialisations (or observations) in one
    transaction on the run's file and one on the index, remembering the tables it found, and keeping one
    connection per file it writes (the index and the latest run files) instead of a new engine and connection for
    each use (1.1 against 0.4 ms each, three uses per event stored one at a time, a check evaluation say).

    Dagster holds the storage's lock for as long as a connection is in use, so one connection per file is never
    used by two threads at once; `wipe`, which deletes run files, and `dispose` close them first."""

    KEPT = 4  # run files whose connection is kept, besides the index's (a run-pipeline writes one run at a time)

    def __init__(self, base_dir: str, inst_data: ConfigurableClassData | None = None):
        self._engines: dict[str, Engine] = {}  # shard -> its engine of one kept connection, latest used last
        self._hold_checks()
        super().__init__(base_dir, inst_data)  # which connects to a new index file

    @contextmanager
    def _connect(self, shard: str):
        # Dagster's _connect (dagster 1.13.27), with the shard's engine kept instead of made and disposed each time,
        # and the check evaluations held back written first: whoever reads or writes the files finds them there
        self._write_pending()
        with self._db_lock:
            engine = self._engines.pop(shard, None)
            if engine is None:
                engine = create_engine(self.conn_string_for_shard(shard), poolclass=StaticPool,
                                       connect_args={"timeout": SQLITE_BUSY_TIMEOUT_SECONDS,
                                                     "check_same_thread": False})
                if shard not in self._initialized_dbs:
                    self._initdb(engine)
                    self._initialized_dbs.add(shard)
            self._engines[shard] = engine
            runs = [s for s in self._engines if s != INDEX_SHARD_NAME]
            for old in runs[:-self.KEPT]:
                self._engines.pop(old).dispose()
            with engine.connect() as conn, conn.begin():
                yield conn

    def _close_files(self) -> None:
        self._write_pending()
        with self._db_lock:
            for engine in self._engines.values():
                engine.dispose()
            self._engines.clear()

    def wipe(self) -> None:
        self._close_files()
        super().wipe()

    def dispose(self) -> None:
        self._close_files()
        super().dispose()

    def store_event_batch(self, events) -> None:
        """What store_event does for each event (the run's row, the index's mirror row, its tags and the asset's
        latest record), with one connection per file and one statement executed over the rows; other batches as
        Dagster stores them."""
        if (not events or len({e.run_id for e in events}) != 1
                or not {e.get_dagster_event().event_type for e in events} <= BATCHED):
            super().store_event_batch(events)
            return
        rows = [self._event_to_row(event) for event in events]
        with self.run_connection(events[0].run_id) as conn:
            conn.execute(EVENTS.insert(), rows)
        with self.index_transaction() as conn:
            ids = conn.execute(EVENTS.insert().returning(EVENTS.c.id, sort_by_parameter_order=True), rows).scalars().all()
            self._store_asset_event_tags(conn, events, ids)
            # An asset's row takes fixed columns from each event (the latest materialisation, run, time): written
            # for every event in turn, it ends as the last event of each kind left it. So only those are written.
            last = {(e.get_dagster_event().asset_key, e.get_dagster_event().event_type): i for i, e in enumerate(events)}
            for i in sorted(last.values()):
                self._store_asset_event(conn, events[i], ids[i])

    def _write_evaluations(self, events: list, rows: list[dict]) -> None:
        # the run's rows in its file, then the index's mirror rows and check rows in one transaction
        with self.run_connection(events[0].run_id) as conn:
            conn.execute(EVENTS.insert(), rows)
        with self.index_transaction() as conn:
            ids = conn.execute(EVENTS.insert().returning(EVENTS.c.id, sort_by_parameter_order=True), rows).scalars().all()
            self._record_evaluations(conn, events, rows, ids)


class BatchingSqliteStorage(DagsterSqliteStorage):
    """Dagster's sqlite storage (runs, schedules, event log under one base directory) with the batching event log."""

    def __init__(self, base_dir: str, inst_data: ConfigurableClassData | None = None):
        super().__init__(base_dir, inst_data)
        self._event_log_storage = BatchingSqliteEventLogStorage(_event_logs_directory(base_dir))

    @classmethod
    def from_config_value(cls, inst_data, config_value) -> BatchingSqliteStorage:
        return cls.from_local(inst_data=inst_data, **config_value)


def open_instance(home: str | Path) -> dg.DagsterInstance:
    """The instance `home`'s dagster.yaml configures; on Dagster's default sqlite storage with the batching event log
    above, on its Postgres storage with pipelines/postgres_events.py's (the same tables, the same rows). Storage
    configured otherwise (each part on its own, say) is opened as configured."""
    ref = InstanceRef.from_dir(str(home))
    data = ref.storage_data
    named = None if data is None else (data.module_name, data.class_name)
    if named == DAGSTER_SQLITE:
        ref = ref._replace(storage_data=ConfigurableClassData(__name__, BatchingSqliteStorage.__name__, data.config_yaml))
    elif named == ("dagster_postgres", "DagsterPostgresStorage"):
        ref = ref._replace(storage_data=ConfigurableClassData(
            "pipelines.postgres_events", "BatchingPostgresStorage", data.config_yaml))
    return dg.DagsterInstance.from_ref(ref)
