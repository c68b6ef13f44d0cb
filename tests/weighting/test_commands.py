"""`hotshape drift OLD NEW` on release directories and weights files."""

from __future__ import annotations

import hashlib
import json

import polars as pl
import pytest

from pipelines.cli import main
from test_selection import not_memory
from weighting.drift import compare
from weighting.fleet import load_fleet
from weighting.selection import Policy, select_hot
from weighting.weights import fleet_weights

ACC = {"H200", "MI300X", "B200"}


def release(path, versions: list[pl.DataFrame]):
    """A release directory with a manifest and weights v1..vN keyed by an opaque problem id."""
    def pid(o, s):
        return hashlib.sha256(f"{o}|{s}".encode()).hexdigest()[:16]

    rows = {}
    for v, sel in enumerate(versions, 1):
        for o, s in zip(sel["operator"], sel["shape"]):
            rows[pid(o, s)] = o
        w = sel.select(pl.struct("operator", "shape").map_elements(lambda r: pid(r["operator"], r["shape"]), return_dtype=pl.String).alias("problem_id"),
                       "weight", "weight_prefill", "weight_decode", "weight_mixed")
        (path / "public" / "weights").mkdir(parents=True, exist_ok=True)
        w.write_parquet(path / "public" / "weights" / f"v{v}.parquet")
    pl.DataFrame({"problem_id": list(rows), "operator": list(rows.values())}).write_parquet(path / "public" / "manifest.parquet")
    return path


@pytest.fixture(scope="module")
def selections(planted_fleet):
    root, fleet_yaml, traces, ost, _ = planted_fleet
    fw = fleet_weights(ost, traces, load_fleet(fleet_yaml, root, accelerators=ACC))
    a, _ = select_hot(fw, Policy(coverage_target=0.6, shape_cap=3), is_benchmarkable=not_memory)
    b, _ = select_hot(fw, Policy(), is_benchmarkable=not_memory)
    return a, b


def test_drift_between_release_directories_uses_latest_weights(selections, tmp_path, capsys):
    a, b = selections
    old = release(tmp_path / "r1", [a])
    new = release(tmp_path / "r2", [a, b])  # latest is v2 = b
    html = tmp_path / "out" / "drift.html"
    assert main(["drift", str(old), str(new), "--json", "--html", str(html)]) == 0
    out = json.loads(capsys.readouterr().out)
    want = compare(a, b)
    assert out["old"] == "r1/v1" and out["new"] == "r2/v2"
    assert out["total_variation"] == pytest.approx(want.total_variation, rel=1e-12)
    assert out["js_divergence"] == pytest.approx(want.js_divergence, rel=1e-12)
    assert len(out["newly_hot"]) == len(want.newly_hot) > 0
    assert {m["operator"] for m in out["operators"]} == set(b["operator"])
    assert html.read_text().startswith("<!DOCTYPE html>")


def test_drift_between_two_weight_versions_of_one_release(selections, tmp_path, capsys):
    a, b = selections
    r = release(tmp_path / "r", [a, b])
    assert main(["drift", str(r / "public/weights/v1.parquet"), str(r / "public/weights/v2.parquet")]) == 0
    text = capsys.readouterr().out
    assert "drift r/v1 → r/v2" in text and "total_variation" in text and "newly hot" in text


def test_same_weights_have_no_drift(selections, tmp_path, capsys):
    a, _ = selections
    r = release(tmp_path / "r", [a])
    assert main(["drift", str(r), str(r), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["total_variation"] == 0.0 and out["newly_hot"] == [] and out["newly_cold"] == []


def test_bad_input_is_a_clear_error(tmp_path, capsys):
    assert main(["drift", str(tmp_path / "missing.parquet"), str(tmp_path)]) == 2
    assert "missing.parquet: no such weights file" in capsys.readouterr().err
    pl.DataFrame({"problem_id": ["x"], "weight": [1.0]}).write_parquet(tmp_path / "w.parquet")
    assert main(["drift", str(tmp_path / "w.parquet"), str(tmp_path / "w.parquet")]) == 2
    assert "no column 'operator'" in capsys.readouterr().err
