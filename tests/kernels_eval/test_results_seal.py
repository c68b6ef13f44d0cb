"""Sealed runs through the evaluator's own writer: appends keep every run whole, a merge repeated after a cut
(`--resume` re-merging its journal) seals the same rows again, and a deletion, an addition or a run removed with
its seal are each named (the `hotshape score` side is in test_results_integrity.py)."""

from __future__ import annotations

import json

import pyarrow.parquet as pq

from kernels_eval.results_key import host_key, sign_row
from kernels_eval.results_schema import read_results
from kernels_eval.results_seal import SEALS_KEY, broken_runs, read_seals
from kernels_eval.results_store import merge_rows


def _run(run: int, n: int, key) -> list[dict]:
    return [sign_row({"submission": "sub", "release": "rel", "run_id": f"r{run}", "run": run, "problem_id": f"p{i}",
                      "operator": "rms_norm", "hardware": "cpu", "device": "cpu", "file_sha256": "0" * 64,
                      "shape_kind": "smoke", "stage": "done" if i else "correctness", "compiled": True,
                      "correct": bool(i), "native": True, "native_fraction": None, "fallbacks": [], "error": None,
                      "max_abs_err": 0.0, "performance_measured": False, "t_measured_s": None, "t_p10_s": None,
                      "t_p90_s": None, "n_timed": None, "t_roofline_s": None, "roofline_fraction": None,
                      "t_reference_s": None, "speedup": None, "eval_s": 1.0,
                      "evaluated_at": "2026-12-04T00:00:00+00:00", "run_sealed": True}, key) for i in range(n)]


def _verified(path) -> dict:
    return broken_runs(read_results(path).to_pylist(), read_seals(path), host_key(create=False))


def test_appended_and_remerged_runs_stay_sealed(tmp_path):
    key = host_key()
    path = tmp_path / "results.parquet"
    merge_rows(_run(0, 3, key), path, key=key)
    merge_rows(_run(1, 4, key), path, key=key)
    merge_rows(_run(1, 4, key), path, skip_present=True, key=key)  # a cut merge done again by --resume
    assert read_results(path).num_rows == 7 and _verified(path) == {}
    doc = read_seals(path)
    assert sorted((s["run_id"], s["rows"]) for s in doc["runs"]) == [("r0", 3), ("r1", 4)]
    merge_rows([], path)  # a writer without the key keeps the seals it found
    assert _verified(path) == {}


def test_each_tampering_is_named(tmp_path):
    key = host_key()
    path = tmp_path / "results.parquet"
    merge_rows(_run(0, 3, key) + _run(1, 2, key), path, key=key)
    table = pq.read_table(path)
    meta = table.schema.metadata

    def write(rows, doc=None):
        out = tmp_path / "edited.parquet"
        kept = dict(meta) if doc is None else {**meta, SEALS_KEY: json.dumps(doc).encode()}
        pq.write_table(table.from_pylist(rows, schema=table.schema).replace_schema_metadata(kept), out)
        return _verified(out)

    rows = table.to_pylist()
    assert list(write(rows[1:]).values()) == ["run r0 (run 0 of sub on cpu): 2 rows where its seal signed 3 (rows "
                                              "deleted, added or replaced)"]
    added = write(rows + [sign_row({**rows[0], "problem_id": "p9"}, key)])
    assert "4 rows where its seal signed 3" in added[("sub", "cpu", "r0", 0)]
    gone = write([r for r in rows if r["run"] == 0])
    assert "none in the file (a run deleted)" in gone[("sub", "cpu", "r1", 1)]
    doc = read_seals(path)
    doc["runs"] = [s for s in doc["runs"] if s["run"] == 0]
    assert "file's seal over its runs does not verify" in write([r for r in rows if r["run"] == 0], doc)[
        ("sub", "cpu", "r0", 0)]
    doc = read_seals(path)
    doc["runs"][0]["rows"] = 2
    assert "its seal does not verify" in write(rows[1:], doc)[("sub", "cpu", "r0", 0)]
