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


def test_a_merge_describes_every_column_and_keeps_an_older_files_rows(tmp_path: Path):
    """Results files carry each column's description and unit; one written before them (no field metadata) is
    rewritten with them by the next merge, its rows unchanged and still verifying."""
    from kernels_eval.results_store import merge_rows

    key = HostKey(tmp_path / "results.key", b"k" * 32)
    old = sign_row(_row(), key)
    bare = pa.schema([f.remove_metadata() for f in RESULTS])
    path = tmp_path / "results.parquet"
    pq.write_table(results_table([old]).cast(bare), path)
    assert pq.read_schema(path).field("t_measured_s").metadata is None
    merge_rows([sign_row({**_row(), "problem_id": "p2"}, key)], path)
    schema = pq.read_schema(path)
    assert [f.name for f in schema if not (f.metadata or {}).get(b"description")] == []
    assert schema.field("t_measured_s").metadata[b"unit"] == b"s"
    rows = read_results(path).to_pylist()
    assert [r["problem_id"] for r in rows] == ["p1", "p2"] and all(row_verifies(r, key) for r in rows)


def test_the_results_modules_import_neither_polars_nor_msgspec():
    """The GPU machine the evaluator runs on has pyarrow, not polars or msgspec."""
    import subprocess
    import sys

    code = ("import sys, kernels_eval.results_store, kernels_eval.results_schema\n"
            "print(sorted(m for m in ('polars', 'msgspec', 'duckdb', 'dagster') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[2], capture_output=True,
                         text=True, check=True).stdout
    assert out.strip() == "[]"
