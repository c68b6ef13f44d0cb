"""The planted fleet shared by the weighting tests: cut real traces, ingested once per session."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).parent))
import planted  # noqa: E402

ACCELERATORS = {"H200", "H100", "H20", "B200", "MI300X", "XPU-A"}

# deployment → (accelerator, card-hours fields, globs); phase_mix is added from the data.
DEPLOYMENTS = {
    "chat-sglang": ("H200", {"card_hours": 1000}, ["sglang_decode/*.json.gz", "sglang_extend/*.json.gz"]),
    "serve-vllm": ("MI300X", {"cards": 8, "hours": 500}, ["vllm_decode/*.json.gz", "b200_eager/part*.json.gz"]),
    "train-misc": ("B200", {"card_hours": 250}, ["mi210/*.json.gz", "alexnet/**/*.json.gz"]),
}
CARD_HOURS = {"chat-sglang": 1000.0, "serve-vllm": 4000.0, "train-misc": 250.0}
DIR_OWNER = {
    "sglang_decode": "chat-sglang", "sglang_extend": "chat-sglang",
    "vllm_decode": "serve-vllm", "b200_eager": "serve-vllm",
    "mi210": "train-misc", "alexnet": "train-misc",
}


def write_fleet(path: Path, deployments: list[dict]) -> Path:
    """A fleet.yaml with these deployments (model/framework filled in)."""
    docs = [{"model": f"model-{d['id']}", "framework": "vllm", **d} for d in deployments]
    path.write_text(yaml.safe_dump({"window": {"start": "2026-10-01", "end": "2026-10-31"}, "deployments": docs}))
    return path


@pytest.fixture(scope="session")
def planted_fleet(public_traces, tmp_path_factory):
    """(trace root, fleet.yaml path, traces, op_shape_time, phase_mix by deployment) of the planted fleet."""
    base = tmp_path_factory.mktemp("planted")
    root = base / "traces"
    rels = planted.build_root(public_traces, root, list(planted.SOURCES))
    traces, ost = planted.ingest_root(root, rels, base / "ingested")
    mixes = {}
    deployments = []
    for dep_id, (acc, hours, globs) in DEPLOYMENTS.items():
        dirs = [d for d, owner in DIR_OWNER.items() if owner == dep_id]
        paths = [p for d in dirs for p in rels[d]]
        ids = set(traces.filter(traces["path"].is_in(paths))["trace_id"].to_list())
        present = sorted(set(ost.filter(ost["trace_id"].is_in(ids))["phase"].to_list()) - {"unknown"})
        entry = {"id": dep_id, "accelerator": acc, **hours, "traces": globs}
        if len(present) >= 2:
            # A split unlike the profiles' own, so the rescaling really moves time.
            raw = {p: float(i + 1) for i, p in enumerate(present)}
            mixes[dep_id] = {p: v / sum(raw.values()) for p, v in raw.items()}
            entry["phase_mix"] = mixes[dep_id]
        deployments.append(entry)
    fleet_yaml = write_fleet(base / "fleet.yaml", deployments)
    return root, fleet_yaml, traces, ost, mixes
