"""weighting never imports torch, even when it asks the evaluator's registry what is benchmarkable."""

from __future__ import annotations

import subprocess
import sys

CODE = """
import sys
import weighting.fleet, weighting.weights, weighting.selection, weighting.uncertainty
import weighting.concentration, weighting.drift, weighting.drift_report, weighting.commands
import polars as pl
from weighting.selection import select_hot
rows = [("rms_norm", "{}", "decode", 3.0), ("communication", "{}", "decode", 1.0)]
fw = pl.DataFrame([dict(operator=o, shape=s, phase=p, fleet_card_hours=t, fleet_share=t / 4,
                        n_profiles=1, n_deployments=1) for o, s, p, t in rows])
try:
    selected, _ = select_hot(fw)
except ImportError:
    pass
print("torch" in sys.modules, "dagster" in sys.modules)
"""


def test_weighting_does_not_import_torch_or_dagster():
    out = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"], out.stderr
