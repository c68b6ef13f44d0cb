"""The Postgres configuration documented in dagster.yaml works against a real PostgreSQL server."""

from __future__ import annotations

import dagster as dg
import pytest

from pipelines.definitions import ASSETS, CHECKS
from tests.conftest import REPO
from tests.pipelines.conftest import QUIET, example_store

pytestmark = pytest.mark.postgres


def uncommented_postgres_block(text: str) -> str:
    """dagster.yaml with its commented-out `storage: postgres:` block switched on."""
    lines, on = [], False
    for line in text.splitlines():
        if line.startswith("# storage:"):
            on = True
        lines.append(line[2:] if on and line.startswith("# ") else line)
    assert on, "dagster.yaml has no commented `# storage:` block"
    return "\n".join(lines) + "\n"


def test_documented_postgres_storage_runs_the_pipeline(postgres_server, tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    (home / "dagster.yaml").write_text(uncommented_postgres_block((REPO / ".dagster_home" / "dagster.yaml").read_text()))
    for var, value in {"DAGSTER_PG_HOST": "127.0.0.1", "DAGSTER_PG_PORT": str(postgres_server.port),
                       "DAGSTER_PG_USER": "dagster", "DAGSTER_PG_PASSWORD": "unused-with-trust-auth",
                       "DAGSTER_PG_DB": postgres_server.database()}.items():
        monkeypatch.setenv(var, value)
    instance = dg.DagsterInstance.from_config(str(home))
    try:
        assert type(instance.run_storage).__name__ == "PostgresRunStorage"
        assert type(instance.event_log_storage).__name__ == "PostgresEventLogStorage"
        key = "llama3-8b-compiled/eager.json.gz"
        instance.add_dynamic_partitions("trace_files", [key])
        result = dg.materialize(ASSETS + CHECKS, selection=["kernel_events", "op_shape_time"], partition_key=key,
                                instance=instance, resources={"store": example_store(tmp_path / "out")}, run_config=QUIET)
        assert result.success
        assert instance.get_run_by_id(result.run_id).is_success
        assert instance.get_latest_materialization_event(dg.AssetKey("op_shape_time")).asset_materialization.partition == key
    finally:
        instance.dispose()


def _tables(url: str) -> dict[str, list]:
    """Every row of every table of a Postgres database, sorted, but the times a row was made at (the database's clock,
    not the event's) and the migrations' tables."""
    import sqlalchemy as sa

    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            out = {}
            for table in sa.inspect(conn).get_table_names():
                if table in ("secondary_indexes", "alembic_version"):
                    continue
                columns = [c["name"] for c in sa.inspect(conn).get_columns(table) if c["name"] != "create_timestamp"]
                names = ", ".join(f'"{c}"' for c in columns)
                out[table] = sorted(conn.execute(sa.text(f"SELECT {names} FROM {table}")).fetchall(), key=repr)
            return out
    finally:
        engine.dispose()


def test_a_run_replayed_into_ours_and_dagsters_postgres_event_log_leaves_the_same_tables(postgres_server, tmp_path,
                                                                                          monkeypatch):
    """Every event of a real batch run (materialisations in batches, the check's planned event, its evaluations with
    a failed one and one of a partition never planned) stored through Dagster's Postgres event log and through
    run-pipeline's (pipelines/postgres_events.py), each on a database of its own, in the same calls: every table holds
    the same rows, ids, timestamps and serialised events; run-pipeline's open_instance gives ours on Postgres."""
    from dagster_postgres import PostgresEventLogStorage

    from pipelines.postgres_events import BatchingPostgresEventLogStorage
    from pipelines.sqlite_files import open_instance
    from tests.pipelines.conftest import recorded_batch_run

    run_id, keys, calls = recorded_batch_run(tmp_path, monkeypatch)
    tables = {}
    for name, cls in (("theirs", PostgresEventLogStorage), ("ours", BatchingPostgresEventLogStorage)):
        url = postgres_server.url(postgres_server.database())
        storage = cls(url)
        for call in calls:
            storage.store_event_batch(call) if len(call) > 1 else storage.store_event(call[0])
        storage.dispose()
        tables[name] = _tables(url)
    for table, rows in tables["theirs"].items():
        assert tables["ours"][table] == rows, table
    assert set(tables["ours"]) == set(tables["theirs"])
    assert len(tables["ours"]["asset_check_executions"]) == len(keys) + 1
    assert sum(row[1] == run_id for row in tables["ours"]["event_logs"]) == sum(len(c) for c in calls)

    home = tmp_path / "home"
    home.mkdir()
    (home / "dagster.yaml").write_text(
        f"storage:\n  postgres:\n    postgres_url: {postgres_server.url(postgres_server.database())}\n")
    instance = open_instance(home)
    try:
        assert type(instance.event_log_storage) is BatchingPostgresEventLogStorage
        assert type(instance.run_storage).__name__ == "PostgresRunStorage"
    finally:
        instance.dispose()
