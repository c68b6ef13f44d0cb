"""run-pipeline's event log on a Postgres instance: Dagster's, with a run's check evaluations held back and written
together and a planned check's rows serialised once (pipelines/event_logs.py says how and why). Imported only when
the instance's storage is Postgres (pipelines/sqlite_files.open_instance)."""

from __future__ import annotations

from contextlib import contextmanager

from dagster_postgres import DagsterPostgresStorage, PostgresEventLogStorage
from dagster_postgres.event_log.event_log import CHANNEL_NAME
from dagster_postgres.utils import get_token_provider_from_config, pg_url_from_config
from sqlalchemy import text

from pipelines.event_logs import EVENTS, HeldCheckEvaluations


class BatchingPostgresEventLogStorage(HeldCheckEvaluations, PostgresEventLogStorage):
    """Dagster's Postgres event log with a run's check evaluations held back and planned rows serialised once;
    every other event as Dagster stores it."""

    def __init__(self, *args, **kwargs):
        self._hold_checks()
        super().__init__(*args, **kwargs)

    @contextmanager
    def _connect(self):
        self._write_pending()
        with super()._connect() as conn:
            yield conn

    def _write_evaluations(self, events: list, rows: list[dict]) -> None:
        # Dagster's store_event for each (the row, RETURNING its id; the NOTIFY it keeps for older readers; the check
        # row), in one transaction
        with self.index_transaction() as conn:
            ids = conn.execute(EVENTS.insert().returning(EVENTS.c.id, sort_by_parameter_order=True),
                               rows).scalars().all()
            conn.execute(text(f"SELECT pg_notify('{CHANNEL_NAME}', n) FROM unnest(CAST(:ids AS text[])) AS n"),
                         {"ids": [f"{row['run_id']}_{i}" for row, i in zip(rows, ids)]})
            self._record_evaluations(conn, events, rows, ids)

    def dispose(self) -> None:
        self._write_pending()
        super().dispose()


class BatchingPostgresStorage(DagsterPostgresStorage):
    """Dagster's Postgres storage (runs, schedules, event log) with the event log above."""

    def __init__(self, postgres_url: str, should_autocreate_tables: bool = True, inst_data=None, token_provider=None):
        super().__init__(postgres_url, should_autocreate_tables, inst_data, token_provider)
        self._event_log_storage.dispose()
        self._event_log_storage = BatchingPostgresEventLogStorage(postgres_url, should_autocreate_tables,
                                                                  token_provider=token_provider)

    @classmethod
    def from_config_value(cls, inst_data, config_value) -> BatchingPostgresStorage:
        return cls(pg_url_from_config(config_value), config_value.get("should_autocreate_tables", True), inst_data,
                   get_token_provider_from_config(config_value))
