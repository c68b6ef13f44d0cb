"""Every command that takes operator names answers a typo the same way: one line naming it, the nearest names
(`kernels_eval.selection.did_you_mean`), exit 2, nothing done; and feedback names each problem by its shape as well
as its id."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipelines.cli import main

HONEST = Path(__file__).resolve().parents[1] / "adversarial" / "honest"


@pytest.fixture(scope="module")
def release(atrex_dir, tmp_path_factory) -> Path:
    from release.atrex import import_atrex

    out = tmp_path_factory.mktemp("names") / "release"
    import_atrex(atrex_dir, out)
    return out


def _one_line(err: str, command: str, name: str, suggestion: str) -> None:
    # export-flashinfer says first what it checked of the release (as eval and score do), then the error
    lines = [line for line in err.strip().splitlines() if not line.startswith("release ")]
    assert len(lines) == 1 and lines[0].startswith(f"hotshape {command}: "), err
    assert f"no operator {name!r} (did you mean {suggestion}" in lines[0], err
    assert "Error(" not in err and "Traceback" not in err  # a sentence, never a Python repr


@pytest.mark.parametrize("command", [
    lambda r, tmp: ["check", str(HONEST / "rms_norm.py"), "--op", "rms_nrom", "--device", "cpu"],
    lambda r, tmp: ["workspace", str(r), "--out", str(tmp / "ws"), "--ops", "rms_nrom"],
    lambda r, tmp: ["feedback", str(HONEST), "--release", str(r), "--ops", "rms_nrom", "--device", "cpu", "--no-sandbox"],
    lambda r, tmp: ["optimize", "--op", "rms_nrom", "--release", str(r), "--from", str(HONEST / "rms_norm.py"),
                    "--out", str(tmp / "opt"), "--device", "cpu", "--no-sandbox"],
    lambda r, tmp: ["eval", str(HONEST), "--release", str(r), "--ops", "rms_nrom", "--out", str(tmp / "res.parquet"),
                    "--device", "cpu", "--no-sandbox"],
    lambda r, tmp: ["export-flashinfer", str(r), "--out", str(tmp / "fi"), "--ops", "rms_nrom"],
], ids=["check", "workspace", "feedback", "optimize", "eval", "export-flashinfer"])
def test_an_operator_typo_is_one_line_with_the_nearest_names(command, release, tmp_path, capsys):
    """Regression: feedback --ops gemn (any name) exited 0 printing nothing; check and workspace printed a KeyError repr."""
    argv = command(release, tmp_path)
    assert main(argv) == 2
    _one_line(capsys.readouterr().err, argv[0], "rms_nrom", "rms_norm")
    assert not any(tmp_path.iterdir())  # nothing written


def test_feedback_names_each_problem_by_its_shape(release, capsys):
    from release.bundle import read_release

    manifest = read_release(release).manifest
    row = manifest.filter(manifest["operator"] == "rms_norm").row(0, named=True)
    assert main(["feedback", str(HONEST), "--release", str(release), "--ops", "rms_norm", "--problems",
                 row["problem_id"], "--device", "cpu", "--no-sandbox"]) == 0
    out = capsys.readouterr().out
    import json

    kwargs = {**json.loads(row["init_kwargs"]), **json.loads(row["input_kwargs"])}
    first = out.splitlines()[0]
    assert first.startswith(f"{row['problem_id']} rms_norm [")
    assert all(f"{k}={v}" in first for k, v in kwargs.items()), first
    assert main(["feedback", str(HONEST), "--release", str(release), "--ops", "rms_norm", "--problems",
                 row["problem_id"], "--device", "cpu", "--no-sandbox", "--json"]) == 0
    (record,) = json.loads(capsys.readouterr().out)
    assert {**record["init_kwargs"], **record["input_kwargs"]} == kwargs
