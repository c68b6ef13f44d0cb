"""pipelines.sqlite_files.held on a real sqlite Dagster instance: the WAL lives on between Dagster's connections,
its connections commit with synchronous=NORMAL, and everything is in the database files once it is left."""

from __future__ import annotations

import sqlite3

import dagster as dg
from sqlalchemy import text

from pipelines.sqlite_files import held

KEYS = [f"trace-{i}.json.gz" for i in range(5)]


def _write(home) -> dg.DagsterInstance:
    instance = dg.DagsterInstance.from_config(str(home))
    for key in KEYS:  # one connection (opened, committed, closed) per write, as for every event
        instance.add_dynamic_partitions("trace_files", [key])
    return instance


def test_without_it_every_connection_checkpoints_and_deletes_the_wal(tmp_path):
    instance = _write(tmp_path)
    index = tmp_path / "history" / "runs" / "index.db"
    assert index.is_file() and not index.with_name("index.db-wal").exists()  # the last close checkpointed it
    with instance.event_log_storage.index_connection() as conn:
        assert conn.execute(text("PRAGMA synchronous")).scalar() == 2  # FULL: a sync per commit
    instance.dispose()


def test_held_keeps_the_wal_and_leaves_everything_in_the_database(tmp_path):
    index = tmp_path / "history" / "runs" / "index.db"
    with held(tmp_path) as files:
        instance = _write(tmp_path)
        assert index.with_name("index.db-wal").stat().st_size > 0  # no checkpoint at each of Dagster's closes
        assert str(index) in files.in_wal and str(tmp_path / "history" / "runs.db") in files.in_wal
        with instance.event_log_storage.index_connection() as conn:
            assert conn.execute(text("PRAGMA synchronous")).scalar() == 1  # NORMAL
        instance.dispose()
    # left: our connections closed, the last one checkpointed the WAL into the file and removed it
    assert not index.with_name("index.db-wal").exists()
    with sqlite3.connect(index) as conn:
        stored = [k for (k,) in conn.execute("SELECT partition FROM dynamic_partitions ORDER BY partition")]
    assert stored == sorted(KEYS)
    again = dg.DagsterInstance.from_config(str(tmp_path))  # and Dagster reads them as before
    assert sorted(again.get_dynamic_partitions("trace_files")) == sorted(KEYS)
    with again.event_log_storage.index_connection() as conn:
        assert conn.execute(text("PRAGMA synchronous")).scalar() == 2  # the listener is gone
    again.dispose()


def test_files_outside_the_directory_are_left_alone(tmp_path):
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "home").mkdir()
    with held(tmp_path / "elsewhere") as files:
        instance = _write(tmp_path / "home")
        with instance.event_log_storage.index_connection() as conn:
            assert conn.execute(text("PRAGMA synchronous")).scalar() == 2
        instance.dispose()
    assert files.in_wal == set() and not (tmp_path / "home" / "history" / "runs" / "index.db-wal").exists()
