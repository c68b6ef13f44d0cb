"""What run-pipeline's Dagster event logs (sqlite: pipelines/sqlite_files.py; Postgres: pipelines/postgres_events.py)
do alike: a run's check evaluations held back and written together, a planned check's rows serialised once.

A check over a batch run's N trace partitions yields N evaluations in a row, and Dagster's event logs store each
on its own: its event row, then its planned row in asset_check_executions updated, each in its own transaction (on
sqlite a third for the run file's row), the event serialised twice. At 1,303 partitions that was ~3 s of a run
(benchmarks/dagster_event_cost.py). Here they are held back and written, as Dagster writes each, before the next use
of the storage's database: the next other event (the check step's output), any read through the storage (a reader in
this process finds them), another run's evaluation, dispose; in one transaction per database, each serialised once.
Another process (the webserver) sees them when the check step's next event is stored, as run-pipeline's batched
materialisations are seen at the end of their batch (DAGSTER_EVENT_BATCH_SIZE); a process killed in between loses
them with its step, which the next run checks again.

The check's planned event names the run's whole partition range and Dagster writes it into every partition's row,
serialising it once per row (N serialisations of N keys); here once. The rows are the same ones: the tests store a
real run's events through Dagster's classes and these and compare every table.

Both override private methods of dagster 1.13.27 and dagster-postgres 0.29.27 (pinned in pyproject): an upgrade must
rerun tests/pipelines/test_sqlite_files.py and tests/pipelines/test_postgres.py.
"""

from __future__ import annotations

import threading

from dagster._core.events import DagsterEventType
from dagster._core.storage.asset_check_execution_record import AssetCheckExecutionRecordStatus
from dagster._core.storage.event_log.schema import AssetCheckExecutionsTable, SqlEventLogStorageTable
from dagster._serdes import serialize_value
from sqlalchemy import and_, bindparam

EVENTS, CHECKS = SqlEventLogStorageTable, AssetCheckExecutionsTable
# the planned row of a check evaluation: (asset_key, check_name, run_id, partition) names it, as in Dagster's update
EVALUATED = {partitioned: CHECKS.update().where(and_(
    CHECKS.c.asset_key == bindparam("planned_asset_key"), CHECKS.c.check_name == bindparam("planned_check_name"),
    CHECKS.c.run_id == bindparam("planned_run_id"),
    CHECKS.c.partition == bindparam("planned_partition") if partitioned else CHECKS.c.partition.is_(None)))
    for partitioned in (True, False)}


class HeldCheckEvaluations:
    """Mixed into a Dagster SQL event log before it: check evaluations held back (the module's docstring says when
    they are written), planned rows serialised once, the tables it found remembered. The event log calls
    `_hold_checks()` in its constructor, `_write_pending()` before every use of its database, and writes a batch of
    held evaluations in `_write_evaluations(events, rows)`, with `_record_evaluations` for their check rows."""

    PENDING = 10_000  # evaluations held at most before they are written (run-pipeline's materialisation batch)

    def _hold_checks(self) -> None:
        self._tables: set[str] = set()
        self._pending: list = []  # check evaluations of one run, not written yet
        self._pending_lock = threading.RLock()
        self._writing_pending = False

    def has_table(self, table_name: str) -> bool:
        # asked before every asset and check event (a connection each); a table, once there, stays
        if table_name not in self._tables and super().has_table(table_name):
            self._tables.add(table_name)
        return table_name in self._tables

    def store_event(self, event) -> None:
        """A check's evaluation in a run is held back (the module's docstring says until when); every other event
        is stored as Dagster stores it, after the held ones."""
        dagster_event = event.dagster_event if event.is_dagster_event else None
        if (dagster_event is None or dagster_event.event_type != DagsterEventType.ASSET_CHECK_EVALUATION
                or not event.run_id or not self.supports_asset_checks):
            super().store_event(event)  # which connects: what is held is written first
            return
        with self._pending_lock:
            if self._pending and self._pending[0].run_id != event.run_id:
                self._write_pending()
            self._pending.append(event)
            if len(self._pending) >= self.PENDING:
                self._write_pending()

    def _write_pending(self) -> None:
        with self._pending_lock:
            if not self._pending or self._writing_pending:  # (writing them connects: this again, in this thread)
                return
            events, self._pending, self._writing_pending = self._pending, [], True
            try:
                self._write_evaluations(events, [self._event_to_row(event) for event in events])
            finally:
                self._writing_pending = False

    def _write_evaluations(self, events: list, rows: list[dict]) -> None:
        raise NotImplementedError

    @staticmethod
    def _record_evaluations(conn, events: list, rows: list[dict], ids: list[int]) -> None:
        # Dagster's _update_asset_check_evaluation (1.13.27) for each, on the caller's connection: the planned row
        # updated, or a row added when the run planned none. Partitioned rows are unique by (asset key, check, run,
        # partition) (idx_asset_check_executions_unique), so when one statement executed over all of them updates
        # as many rows as there are evaluations, every one found its row; otherwise each is done again on its own
        # (the same update twice leaves the same row)
        updates = []
        for event, row, event_id in zip(events, rows, ids):
            evaluation = event.dagster_event.event_specific_data
            target = evaluation.target_materialization_data
            values = dict(
                execution_status=(AssetCheckExecutionRecordStatus.SUCCEEDED if evaluation.passed
                                  else AssetCheckExecutionRecordStatus.FAILED).value,
                evaluation_event=row["event"], evaluation_event_timestamp=row["timestamp"],
                evaluation_event_storage_id=event_id,
                materialization_event_storage_id=target.storage_id if target else None,
                partition=evaluation.partition)
            names = dict(asset_key=evaluation.asset_key.to_string(), check_name=evaluation.check_name,
                         run_id=event.run_id)
            key = {f"planned_{name}": value for name, value in names.items()}
            if evaluation.partition is not None:
                key["planned_partition"] = evaluation.partition
            updates.append((evaluation.partition is not None, {**key, **values}, {**names, **values}))
        partitioned = [update for keyed, update, _ in updates if keyed]
        if len(partitioned) == len(updates) and conn.execute(EVALUATED[True], partitioned).rowcount == len(updates):
            return
        for keyed, update, insert in updates:
            if conn.execute(EVALUATED[keyed], update).rowcount == 0:
                conn.execute(CHECKS.insert(), insert)

    def _store_asset_check_evaluation_planned(self, event, event_id) -> None:
        # Dagster's (1.13.27), with the planned event serialised once for all its partitions' rows, not once per
        # row: the event names the run's whole partition range, so per row that is N serialisations of N keys
        planned = event.dagster_event.event_specific_data
        keys = planned.partitions_subset.get_partition_keys() if planned.partitions_subset else [None]
        serialized, timestamp = serialize_value(event), self._event_insert_timestamp(event)
        with self.index_connection() as conn:  # executed over the rows: no bound on the variables of one statement
            conn.execute(CHECKS.insert(), [
                dict(asset_key=planned.asset_key.to_string(), check_name=planned.check_name, partition=key,
                     run_id=event.run_id, execution_status=AssetCheckExecutionRecordStatus.PLANNED.value,
                     evaluation_event=serialized, evaluation_event_timestamp=timestamp,
                     evaluation_event_storage_id=event_id)
                for key in keys])
