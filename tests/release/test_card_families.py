"""The release card names the GPU time no problem stands for: communication, copies, fills, backward work."""

from __future__ import annotations

import json
import re
import shutil

import yaml

from flow.build import build_release
from tests.conftest import REPO

DUALPIPE = REPO / "tests" / "fixtures" / "wild" / "deepseek_v3_dualpipe_h800.json.gz"


def test_card_and_release_json_report_communication(tmp_path):
    root = tmp_path / "root"
    (root / "chat").mkdir(parents=True)
    (root / "train").mkdir()
    shutil.copy(REPO / "examples" / "traces" / "llama3-8b" / "eager.json.gz", root / "chat" / "eager.json.gz")
    shutil.copy(DUALPIPE, root / "train" / "step.json.gz")
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(yaml.safe_dump({"window": {"start": "2026-11-01", "end": "2026-11-30"}, "deployments": [
        {"id": "chat", "model": "m1", "framework": "f1", "accelerator": "H200", "card_hours": 1000, "traces": ["chat/*.json.gz"]},
        {"id": "train", "model": "m2", "framework": "f2", "accelerator": "H200", "card_hours": 1000, "traces": ["train/*.json.gz"]},
    ]}))
    out = tmp_path / "rel"
    build_release(root, fleet, out, name="bench")
    report = json.loads((out / "release.json").read_text())["weights"][-1]["coverage_report"]
    # Half the fleet's card-hours are the DualPipe step, 45% of whose GPU time is DeepEP's all-to-all.
    assert 0.2 < report["not_benchmarked_communication"] < 0.25
    assert report["not_benchmarked_other"] > 0.1  # its backward chunks
    card = (out / "README.md").read_text()
    row = re.search(r"^\| communication \| ([0-9.]+) \|$", card, re.M)
    assert row and float(row.group(1)) == round(report["not_benchmarked_communication"], 4)
