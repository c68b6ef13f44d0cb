"""weighting never imports torch, even when it asks the evaluator's registry what is benchmarkable."""

from __future__ import annotations

import subprocess
import sys

CODE = """
import sys
import weighting.fleet, weighting.weights, weighting.selection, weighting.uncertainty
import weighting.concentration, weighting.drift, weighting.drift_report
import polars as pl
from weighting.selection import select_hot
shape = '{"eps":1e-06,"hidden_size":1024,"token_count":2500}'
rows = [("rms_norm", shape, "decode", 3.0), ("communication", "{}", "decode", 1.0)]
fw = pl.DataFrame([dict(operator=o, shape=s, phase=p, fleet_card_hours=t, fleet_share=t / 4,
                        n_profiles=1, n_deployments=1) for o, s, p, t in rows])
selected, _ = select_hot(fw)  # asks the registry about operators and shapes
assert selected["operator"].to_list() == ["rms_norm"], selected
print("torch" in sys.modules, "dagster" in sys.modules)
"""


def test_weighting_does_not_import_torch_or_dagster():
    out = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"], out.stderr
