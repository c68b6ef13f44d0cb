"""The project's own example fleet, end to end: ingest → fleet weights → selection → intervals."""

from __future__ import annotations

import math
import warnings

import polars as pl
import pytest

from weighting.fleet import FleetWarning, load_fleet
from weighting.selection import select_hot
from weighting.uncertainty import weight_intervals
from weighting.weights import fleet_weights


def test_example_fleet_end_to_end(examples_dir, tmp_path):
    output = pytest.importorskip("ingest.output")
    pytest.importorskip("ingest.classify")
    root = examples_dir / "traces"
    if not (examples_dir / "fleet.yaml").exists() or not root.exists():
        pytest.skip("examples/ has no fleet.yaml and traces")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fleet = load_fleet(examples_dir / "fleet.yaml", root)
        output.write_ingest(sorted(root.rglob("*.json.gz")), tmp_path, root=root)
        traces = pl.read_parquet(tmp_path / "traces.parquet")
        ost = pl.read_parquet(tmp_path / "op_shape_time.parquet")
        fw = fleet_weights(ost, traces, fleet)
    notes = [str(w.message) for w in caught if issubclass(w.category, FleetWarning)]
    # capture traces beside the profiles are not "unclaimed"; only phase_mix mismatches may warn
    assert all("phase_mix" in n for n in notes), notes
    selected, report = select_hot(fw)
    assert abs(math.fsum(selected["weight"].to_list()) - 1.0) <= 1e-12
    assert 0 < report["coverage_of_fleet"] <= 1
    assert report["n_operators"] >= 3
    # fleet_share sums to the attributed fraction of fleet time: at most 1, and here nearly all of it
    assert 0.5 < fw["fleet_share"].sum() <= 1 + 1e-12
    ci = weight_intervals(ost, traces, fleet, selected, n_boot=100, seed=0)
    assert (ci["n_deployments"] >= 1).all() and (ci["n_profiles"] >= 1).all()
    assert ((ci["weight_lo"] <= ci["weight"] + 1e-12) | (ci["weight_se"] > 0)).all()
