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
