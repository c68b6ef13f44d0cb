"""pipelines.sqlite_files on a real sqlite Dagster instance: held keeps the WAL alive between Dagster's connections,
its connections commit with synchronous=NORMAL, and everything is in the database files once it is left; the
batching event log stores a run's batches of materialisations as Dagster's own stores them one by one."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import dagster as dg
from sqlalchemy import text

from dagster._serdes import deserialize_value

from pipelines.sqlite_files import BatchingSqliteEventLogStorage, held, open_instance

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


# every index table column that does not hold an id, a timestamp, a run id or a whole serialised event
INDEX_ROWS = {
    "event_logs": "dagster_event_type, step_key, asset_key, partition",
    "asset_keys": "asset_key",
    "asset_event_tags": "asset_key, key, value",
    "asset_check_executions": "asset_key, check_name, partition, execution_status",
    "dynamic_partitions": "partitions_def_name, partition",
}


def _ingest_run(home, instance, store, monkeypatch, batch_size: str) -> dict[str, list]:
    """One batch run of every example trace partition (kernel_events, op_shape_time, their check) on `instance`;
    the index's rows, each table sorted, and the latest materialisation's partition per asset."""
    from tests.pipelines.conftest import batch_run

    monkeypatch.setenv("DAGSTER_EVENT_BATCH_SIZE", batch_size)
    keys = store.trace_keys()
    assert batch_run(instance, store).success
    latest = {name: instance.get_latest_materialization_event(dg.AssetKey(name)).asset_materialization.partition
              for name in ("kernel_events", "op_shape_time")}
    partitions = {name: sorted(instance.get_materialized_partitions(dg.AssetKey(name))) for name in latest}
    instance.dispose()
    with sqlite3.connect(home / "history" / "runs" / "index.db") as conn:
        rows = {t: sorted(conn.execute(f"SELECT {cols} FROM {t}").fetchall(), key=repr) for t, cols in INDEX_ROWS.items()}
        last = conn.execute("SELECT asset_key, last_materialization FROM asset_keys WHERE last_materialization "
                            "IS NOT NULL ORDER BY asset_key").fetchall()
    records = {key: deserialize_value(value) for key, value in last}
    rows["last"] = {key: (r.storage_id, r.event_log_entry.dagster_event.partition) for key, r in records.items()}
    run_file = next(p for p in (home / "history" / "runs").glob("*.db") if p.name != "index.db")
    with sqlite3.connect(run_file) as conn:  # the run's own file: its events in the order they were stored
        rows["run"] = conn.execute("SELECT dagster_event_type, step_key, asset_key, partition FROM event_logs "
                                   "WHERE dagster_event_type IS NOT NULL ORDER BY id").fetchall()
    return {"rows": rows, "latest": latest, "partitions": partitions, "keys": keys, "last": rows.pop("last")}


def test_a_batch_of_materialisations_is_stored_as_dagster_stores_it_one_by_one(tmp_path, monkeypatch):
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    from tests.pipelines.conftest import example_store

    connects = {"count": 0}

    def count(*_):
        connects["count"] += 1

    event.listen(Engine, "connect", count)
    try:
        (tmp_path / "dagster").mkdir()
        theirs = _ingest_run(tmp_path / "dagster", dg.DagsterInstance.from_config(str(tmp_path / "dagster")),
                             example_store(tmp_path / "out-dagster"), monkeypatch, "0")
        one_by_one, connects["count"] = connects["count"], 0
        (tmp_path / "batching").mkdir()
        instance = open_instance(tmp_path / "batching")
        assert isinstance(instance.event_log_storage, BatchingSqliteEventLogStorage)
        ours = _ingest_run(tmp_path / "batching", instance, example_store(tmp_path / "out-batching"), monkeypatch,
                           "10000")
        batched = connects["count"]
    finally:
        event.remove(Engine, "connect", count)
    keys = ours["keys"]
    assert len(keys) >= 5 and ours["partitions"] == {"kernel_events": sorted(keys), "op_shape_time": sorted(keys)}
    assert ours["rows"]["run"].count(("ASSET_MATERIALIZATION", "kernel_events", '["kernel_events"]', keys[0])) == 1
    assert ours == theirs  # the same rows in the index, the same events in the same order in the run's file
    # each asset's row names the same latest materialisation (the same storage id and partition) as Dagster's
    assert ours["last"] == theirs["last"] and len(ours["last"]) == 2
    # one by one: a connection to the run's file, one to the index and one to ask for the tag table, per event (two
    # materialisations and a check per partition); batched: two per batch, the table asked for once
    assert one_by_one - batched >= 5 * len(keys), (batched, one_by_one)


def test_open_instance_swaps_only_dagsters_default_sqlite_and_postgres_storage(tmp_path):
    """Dagster's default sqlite storage gets the batching event log (Postgres: tests/pipelines/test_postgres.py);
    storage configured part by part is opened as it is."""
    from dagster._core.storage.event_log import SqliteEventLogStorage

    (tmp_path / "sqlite").mkdir()
    instance = open_instance(tmp_path / "sqlite")
    assert instance.get_ref().storage_data.class_name == "BatchingSqliteStorage"
    assert instance.get_ref().storage_data.config_yaml == f"base_dir: {tmp_path / 'sqlite'}\n"
    assert type(instance.event_log_storage) is BatchingSqliteEventLogStorage
    instance.dispose()
    parts = tmp_path / "parts"
    parts.mkdir()
    (parts / "dagster.yaml").write_text(
        "event_log_storage:\n  module: dagster._core.storage.event_log\n  class: SqliteEventLogStorage\n"
        f"  config:\n    base_dir: {parts / 'events'}\n")
    instance = open_instance(parts)
    assert type(instance.event_log_storage) is SqliteEventLogStorage
    instance.dispose()


@dg.asset
def _one() -> int:
    return 1


def test_kept_connections_stay_few_survive_threads_and_a_wipe(tmp_path):
    """One kept connection per file: the index's and the latest KEPT run files'; four threads storing events at once
    get through Dagster's lock; what was written is what Dagster's own classes read back; a wipe (which deletes
    the run files) closes them first and the next run writes a new file."""
    from concurrent.futures import ThreadPoolExecutor

    instance = open_instance(tmp_path)
    storage = instance.event_log_storage
    runs = [dg.materialize([_one], instance=instance).run_id for _ in range(BatchingSqliteEventLogStorage.KEPT + 3)]
    assert len(storage._engines) <= BatchingSqliteEventLogStorage.KEPT + 1 and "index" in storage._engines

    def observe(i: int) -> None:
        for j in range(10):
            instance.report_runless_asset_event(dg.AssetObservation(asset_key=f"thread_{i}", metadata={"j": j}))

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(observe, range(4)))
    instance.dispose()
    theirs = dg.DagsterInstance.from_config(str(tmp_path))  # Dagster's own sqlite classes on the same files
    assert all(any(e.dagster_event_type == dg.DagsterEventType.RUN_SUCCESS for e in theirs.all_logs(r)) for r in runs)
    observed = [theirs.fetch_observations(dg.AssetKey(f"thread_{i}"), limit=100).records for i in range(4)]
    assert [len(records) for records in observed] == [10, 10, 10, 10]
    theirs.dispose()

    instance = open_instance(tmp_path)
    dg.materialize([_one], instance=instance)
    instance.wipe()
    # (the runless events' file, ".db", is left by Dagster's wipe too: its glob skips names that start with a dot)
    assert [p.name for p in (tmp_path / "history" / "runs").glob("*.db") if p.name != ".db"] == ["index.db"]
    again = dg.materialize([_one], instance=instance)
    assert again.success and (tmp_path / "history" / "runs" / f"{again.run_id}.db").is_file()
    assert instance.get_latest_materialization_event(dg.AssetKey("_one")).run_id == again.run_id
    instance.dispose()


def test_a_planned_check_of_many_partitions_is_stored_as_dagster_stores_it(tmp_path):
    """The planned event of a check over a run's partition range: one row per partition, each holding the event, as
    Dagster's storage writes them (ours serialises the event once, not once per row)."""
    from dagster._core.storage.event_log import SqliteEventLogStorage

    from tests.pipelines.conftest import batch_run, example_store

    (tmp_path / "home").mkdir()
    instance = open_instance(tmp_path / "home")
    store = example_store(tmp_path / "out")
    keys = store.trace_keys()
    run = batch_run(instance, store, selection=["kernel_events"])
    [planned] = instance.get_records_for_run(run.run_id, of_type=dg.DagsterEventType.ASSET_CHECK_EVALUATION_PLANNED).records
    instance.dispose()
    tables = {}
    for name, cls in (("theirs", SqliteEventLogStorage), ("ours", BatchingSqliteEventLogStorage)):
        storage = cls(str(tmp_path / name))
        storage._store_asset_check_evaluation_planned(planned.event_log_entry, planned.storage_id)
        storage.dispose()
        with sqlite3.connect(tmp_path / name / "index.db") as conn:
            tables[name] = conn.execute("SELECT asset_key, check_name, partition, run_id, execution_status, "
                                        "evaluation_event, evaluation_event_timestamp, evaluation_event_storage_id "
                                        "FROM asset_check_executions ORDER BY partition").fetchall()
    assert len(tables["ours"]) == len(keys) >= 5 and tables["ours"] == tables["theirs"]


def _database(path: Path) -> dict[str, list]:
    """Every row of every table of a sqlite file, in rowid order, but the times a row or the file was made at (the
    migrations' table, `create_timestamp` columns: the database's clock, not the event's)."""
    with sqlite3.connect(path) as conn:
        out = {}
        for (table,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name != 'secondary_indexes'"):
            columns = [c for (_, c, *_) in conn.execute(f"PRAGMA table_info({table})") if c != "create_timestamp"]
            names = ", ".join(f'"{c}"' for c in columns)
            out[table] = conn.execute(f"SELECT {names} FROM {table} ORDER BY rowid").fetchall()
        return out


def test_a_run_replayed_into_ours_and_dagsters_storage_leaves_the_same_files(tmp_path, monkeypatch):
    """Every event of a real batch run (the example traces' partitions: materialisations in batches, the check's
    planned event and one evaluation per partition, one of them failed, and among them one evaluation of a
    partition the run never planned) stored through Dagster's sqlite event log and through ours, in the same calls:
    every table of the index and of the run's file holds the same rows, ids, timestamps and serialised events."""
    from dagster._core.storage.event_log import SqliteEventLogStorage

    from tests.pipelines.conftest import recorded_batch_run

    run_id, keys, calls = recorded_batch_run(tmp_path, monkeypatch)
    files = {}
    for name, cls in (("theirs", SqliteEventLogStorage), ("ours", BatchingSqliteEventLogStorage)):
        storage = cls(str(tmp_path / name))
        for call in calls:
            storage.store_event_batch(call) if len(call) > 1 else storage.store_event(call[0])
        storage.dispose()
        files[name] = {p.name: _database(p) for p in sorted((tmp_path / name).glob("*.db"))}
    assert set(files["ours"]) == {"index.db", f"{run_id}.db"}
    for file, tables in files["theirs"].items():
        for table, rows in tables.items():
            assert files["ours"][file][table] == rows, (file, table)
        assert set(files["ours"][file]) == set(tables)
    checks = files["ours"]["index.db"]["asset_check_executions"]
    assert len(checks) == len(keys) + 1  # one per planned partition, and the unplanned one added
    statuses = {row[3]: row[5] for row in checks}  # partition -> execution_status
    assert statuses[keys[1]] == "FAILED" and statuses[keys[0]] == "SUCCEEDED" and "not/planned.json" in statuses


def test_held_back_check_evaluations_are_read_in_process_and_written_at_the_next_event(tmp_path):
    """A check evaluation stored in ours is read back at once through the same storage (any read writes what is
    held first), and Dagster's own class on the same files, another process's view, finds it once the run's next
    event is stored, or another run's evaluation (which is held in its turn), or the storage is disposed."""
    from dagster._core.storage.event_log import SqliteEventLogStorage

    from pipelines.definitions import ASSETS, CHECKS
    from tests.pipelines.conftest import QUIET, example_store

    (tmp_path / "home").mkdir()
    instance = open_instance(tmp_path / "home")
    store = example_store(tmp_path / "out")
    [key, *_] = keys = store.trace_keys()
    instance.add_dynamic_partitions("trace_files", keys)
    run = dg.materialize(ASSETS + CHECKS, selection=["kernel_events"], instance=instance, resources={"store": store},
                         run_config=QUIET, tags={"dagster/partition": key})
    entries = instance.all_logs(run.run_id)
    instance.dispose()
    [evaluation] = [e for e in entries if e.dagster_event_type == dg.DagsterEventType.ASSET_CHECK_EVALUATION]
    after = entries[entries.index(evaluation) + 1]
    check_key = dg.AssetCheckKey(dg.AssetKey("kernel_events"), "gpu_time_conserved")

    def evaluated(storage) -> list:
        return [r.status.value for r in storage.get_asset_check_execution_history(check_key, limit=10)]

    ours = BatchingSqliteEventLogStorage(str(tmp_path / "db"))
    ours.store_event(entries[0])
    ours.store_event(evaluation)
    theirs = SqliteEventLogStorage(str(tmp_path / "db"))
    assert evaluated(theirs) == []  # held back: not in the files yet
    ours.store_event(evaluation._replace(run_id="another-run"))  # another run's: the first run's are written first
    assert evaluated(theirs) == ["SUCCEEDED"] and theirs.get_logs_for_run("another-run") == []
    ours.store_event(after)
    assert evaluated(theirs) == ["SUCCEEDED"] * 2 and len(theirs.get_logs_for_run("another-run")) == 1
    ours.store_event(evaluation._replace(run_id="a-third-run"))
    assert evaluated(ours) == ["SUCCEEDED"] * 3  # read in-process: written first
    assert len(theirs.get_logs_for_run("a-third-run")) == 1
    ours.store_event(evaluation._replace(run_id="a-fourth-run"))
    ours.dispose()  # what is held is written before the files close
    assert len(theirs.get_logs_for_run("a-fourth-run")) == 1 and len(evaluated(theirs)) == 4
    theirs.dispose()
