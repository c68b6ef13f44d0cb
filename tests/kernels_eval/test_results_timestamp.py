"""evaluated_at is a typed UTC timestamp; results files that hold it as text still read, and their rows still verify."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from kernels_eval.results_key import HostKey, row_verifies, sign_row
from kernels_eval.results_schema import RESULTS, read_results, results_table


def _row() -> dict:
    row = {f.name: None for f in RESULTS}
    row.update(submission="sub", release="rel", run_id="r0", run=0, problem_id="p1", operator="rms_norm",
               hardware="cpu", device="cpu", stage="done", compiled=True, correct=True, native=True, fallbacks=[],
               evaluated_at=datetime.now(timezone.utc).isoformat(timespec="seconds"))  # as the runner writes it
    return row


def test_written_typed_and_signature_survives(tmp_path: Path):
    key = HostKey(tmp_path / "results.key", b"k" * 32)
    row = sign_row(_row(), key)
    table = results_table([row])
    assert pa.types.is_timestamp(table.schema.field("evaluated_at").type)
    pq.write_table(table, tmp_path / "new.parquet")
    back = read_results(tmp_path / "new.parquet").to_pylist()[0]
    assert back["evaluated_at"] == datetime.fromisoformat(row["evaluated_at"])
    assert row_verifies(back, key)


def test_a_file_from_before_the_type_reads_as_the_same_instant(tmp_path: Path):
    key = HostKey(tmp_path / "results.key", b"k" * 32)
    row = sign_row(_row(), key)
    old_schema = pa.schema([f if f.name != "evaluated_at" else pa.field("evaluated_at", pa.string()) for f in RESULTS])
    pq.write_table(pa.Table.from_pylist([row], schema=old_schema), tmp_path / "old.parquet")
    back = read_results(tmp_path / "old.parquet")
    assert back.schema.field("evaluated_at").type == pa.timestamp("s", tz="UTC")
    assert back.to_pylist()[0]["evaluated_at"] == datetime.fromisoformat(row["evaluated_at"])
    assert row_verifies(back.to_pylist()[0], key)
