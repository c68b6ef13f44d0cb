"""benchmarks/run_references.py on the CPU for two small operators: one CSV row per catalogue shape."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from tests.conftest import load_script

pytest.importorskip("torch")

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "run_references.py"


def test_run_references_writes_one_row_per_shape(atrex_dir, tmp_path):
    module = load_script(SCRIPT)
    out = tmp_path / "refs.csv"
    rc = module.main(["--device", "cpu", "--ops", "moe_topk_gating_softmax,fused_qk_rmsnorm",
                      "--atrex-dir", str(atrex_dir), "--out", str(out)])
    rows = list(csv.DictReader(out.open()))
    assert rc == 0 and len(rows) == 10 + 4
    assert {r["status"] for r in rows} == {"ok"}
    first = next(r for r in rows if r["operator"] == "moe_topk_gating_softmax" and r["shape_id"] == "0")
    # 1 token x 128 experts, top 8: outputs [1, 8]; 4*128 bytes read.
    assert first["outputs"] == "topk_weights:float32:1x8 topk_ids:int32:1x8" and first["bytes_read"] == "512"
    assert float(first["t_roofline_s"]) > 0
