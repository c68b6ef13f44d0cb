"""`hotshape build` and `refresh` on bad input from the data side: one line naming the file and the problem,
exit 2, and nothing created (no release, no trace store) — a glob out of the root, a missing root, a deep
fleet.yaml, a fleet whose every trace is unreadable, an --out that exists."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import yaml

from tests.conftest import REPO

SOURCE = "hta/triton_example/triton_example.json.gz"


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "pipelines.cli", *map(str, args)], capture_output=True, text=True,
                          cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})


def _fleet(path, traces):
    path.write_text(yaml.safe_dump({"deployments": [{"id": "chat", "model": "m", "framework": "f",
                                                     "accelerator": "H200", "card_hours": 10, "traces": traces}]}))
    return path


@pytest.fixture
def layout(tmp_path, public_traces):
    (tmp_path / "root/a").mkdir(parents=True)
    (tmp_path / "outside").mkdir()
    (tmp_path / "root/a/one.json.gz").write_bytes((public_traces / SOURCE).read_bytes())
    (tmp_path / "outside/secret.json.gz").write_bytes((public_traces / SOURCE).read_bytes())
    return tmp_path


def _made(tmp_path) -> set[str]:
    return {p.name for p in tmp_path.iterdir()} - {"root", "outside", "fleet.yaml", "deep.yaml"}


def _one_line(proc, *parts):
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and proc.stdout == "", proc.stderr
    for part in parts:
        assert part in proc.stderr, proc.stderr


def test_a_glob_out_of_the_root_builds_nothing(layout):
    proc = _cli("build", "--traces", layout / "root", "--fleet", _fleet(layout / "fleet.yaml", ["../outside/*.json.gz"]),
                "--out", layout / "rel")
    _one_line(proc, "fleet.yaml", "'../outside/*.json.gz'", "leaves the trace root")
    assert _made(layout) == set()


def test_a_missing_root_is_blamed(layout):
    proc = _cli("build", "--traces", layout / "nowhere", "--fleet", _fleet(layout / "fleet.yaml", ["a/*.json.gz"]),
                "--out", layout / "rel")
    _one_line(proc, f"{layout / 'nowhere'}: the trace root does not exist")
    assert _made(layout) == set()


def test_a_deep_fleet_is_named(layout):
    deep = layout / "deep.yaml"
    deep.write_text("deployments: " + "[" * 200_000 + "]" * 200_000)
    proc = _cli("build", "--traces", layout / "root", "--fleet", deep, "--out", layout / "rel")
    _one_line(proc, f"{deep}: nested too deeply")
    assert _made(layout) == set()


def test_a_fleet_of_unreadable_traces_leaves_no_store(layout):
    (layout / "root/a/one.json.gz").write_bytes(b"\x1f\x8b\x08 not really gzip")
    proc = _cli("build", "--traces", layout / "root", "--fleet", _fleet(layout / "fleet.yaml", ["a/*.json.gz"]),
                "--out", layout / "rel")
    _one_line(proc, "could be read")
    assert _made(layout) == set()


def test_an_existing_out_is_refused_before_any_trace_is_read(layout):
    (layout / "rel").mkdir()
    (layout / "rel/keep.txt").write_text("mine")
    proc = _cli("build", "--traces", layout / "root", "--fleet", _fleet(layout / "fleet.yaml", ["a/*.json.gz"]),
                "--out", layout / "rel")
    _one_line(proc, f"{layout / 'rel'}: already exists")
    assert _made(layout) == {"rel"} and (layout / "rel/keep.txt").read_text() == "mine"
