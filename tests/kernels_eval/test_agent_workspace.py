"""Agent workspaces carry nothing sealed (the release's leak check, which refuses a leaking one) and a fresh
agent folder self-checks on CPU through the evaluator (`hotshape check`)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from kernels_eval.agent import workspace as ws

REFERENCE = Path(__file__).resolve().parents[2] / "examples" / "submissions" / "triton_reference"


@pytest.fixture(scope="module")
def release(atrex_dir, tmp_path_factory):
    from release.atrex import import_atrex

    out = tmp_path_factory.mktemp("agent") / "release"
    import_atrex(atrex_dir, out)
    return out


def _sealed(release) -> set[str]:
    from release.bundle import read_release
    from release.sealing import public_vocabulary, sealed_strings, split_exempt

    r = read_release(release)
    return split_exempt(sealed_strings(r.sealed("provenance")), public_vocabulary(r.manifest))[0]


def test_workspace_holds_the_contract_and_public_problems_and_nothing_sealed(release, tmp_path):
    summary = ws.build_workspace(release, tmp_path / "ws", ops=["rms_norm", "silu_and_mul"])
    assert summary["leak_check"]["ok"] and summary["leak_check"]["sealed_strings"] > 10
    folder = tmp_path / "ws" / "rms_norm"
    assert sorted(p.name for p in folder.iterdir()) == ["README.md", "contract.json", "problems.json", "reference.py"]
    contract = json.loads((folder / "contract.json").read_text())
    assert contract["outputs"] == ["out"] and contract["tolerance"] == {"atol": 0.02, "rtol": 0.02}
    assert contract["signatures"]["forward"].startswith("def forward(self, x: torch.Tensor, weight")
    assert contract["dtypes"] and contract["smoke_shapes"]
    problems = json.loads((folder / "problems.json").read_text())
    assert len(problems) == 56 and abs(sum(p["weight"] for p in problems) - 0.025) < 0.01
    assert "hotshape check rms_norm.py --op rms_norm" in (folder / "README.md").read_text()
    text = "".join(p.read_text() for p in (tmp_path / "ws").rglob("*") if p.is_file()).lower()
    assert not [s for s in _sealed(release) if s.lower() in text]
    assert "roofline" not in text.replace("roofline score", "")  # no roofline figures or files


def test_atrex_layout_has_the_public_fields_only(release, tmp_path):
    ws.build_workspace(release, tmp_path / "a", ops=["rms_norm"], layout="atrex")
    data = tmp_path / "a" / "data"
    shapes = json.loads((data / "rms_norm" / "shapes.json").read_text())
    assert len(shapes) == 56 and set(shapes["0"]) == {"init_kwargs", "input_kwargs"}
    meta = json.loads((data / "rms_norm" / "metadata.json").read_text())
    assert "origin" not in meta and "production_performance" not in json.dumps(meta)
    assert not (data / "rms_norm" / "roofline.json").exists()
    assert "rms_norm" in json.loads((data / "operator_importance.json").read_text())["operators"]


def test_a_leaking_workspace_is_refused_and_not_written(release, tmp_path, monkeypatch):
    from kernels_eval.agent.contract import reference_path

    # the reference file as it is, docstring included: it names the upstream project the semantics follow
    monkeypatch.setattr(ws, "reference_source", lambda op: reference_path(op).read_text())
    with pytest.raises(ws.WorkspaceLeak, match="reference.py"):
        ws.build_workspace(release, tmp_path / "leaky", ops=["rms_norm"])
    assert not (tmp_path / "leaky").exists() and not list(tmp_path.glob(".leaky*"))


def test_a_fresh_agent_folder_self_checks_on_cpu(release, tmp_path, capsys):
    from pipelines.cli import main

    ws.build_workspace(release, tmp_path / "ws", ops=["rms_norm"])
    mine = tmp_path / "ws" / "rms_norm" / "rms_norm.py"
    shutil.copy(REFERENCE / "rms_norm.py", mine)
    assert main(["check", str(mine), "--op", "rms_norm", "--device", "cpu"]) == 0
    assert "PASS" in capsys.readouterr().out
    broken = tmp_path / "broken.py"
    broken.write_text(mine.read_text().replace("/ n_cols + eps", "/ n_cols * 1.1 + eps"))
    assert main(["check", str(broken), "--op", "rms_norm", "--device", "cpu", "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] is False and out["verdicts"][0]["stage"] == "correctness"
