"""The done-when checks on the project's own example traces (captured on an H200)."""

from __future__ import annotations

import hashlib
import math
import shutil

import pytest

from flow.build import build_release, refresh_release
from release.bundle import read_release


@pytest.fixture(scope="module")
def examples(examples_dir):
    if not (examples_dir / "fleet.yaml").exists():
        pytest.skip("examples/fleet.yaml is not present")
    return examples_dir


def _shas(root):
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def test_examples_build_is_leak_free_and_deterministic(examples, tmp_path):
    a = build_release(examples / "traces", examples / "fleet.yaml", tmp_path / "a", name="examples")
    build_release(examples / "traces", examples / "fleet.yaml", tmp_path / "b", name="examples")
    assert a["leak_check"]["ok"] and _shas(tmp_path / "a") == _shas(tmp_path / "b")
    public = b"".join(p.read_bytes() for p in (tmp_path / "a").rglob("*") if p.is_file()
                      and "sealed" not in p.relative_to(tmp_path / "a").parts).lower()
    for secret in (b"llama3-8b", b"qwen3-30b-a3b", b"hf-transformers", b"chat-dense-8b", b"eager.json.gz"):
        assert secret not in public


def test_examples_refresh_after_adding_a_trace(examples, tmp_path):
    root = tmp_path / "traces"
    shutil.copytree(examples / "traces", root)
    held_back = root / "llama3-8b" / "graph.json.gz"
    held_back.rename(tmp_path / "graph.json.gz")
    build_release(root, examples / "fleet.yaml", tmp_path / "rel", name="examples")
    before = read_release(tmp_path / "rel")
    (tmp_path / "graph.json.gz").rename(held_back)
    summary = refresh_release(tmp_path / "rel", root, examples / "fleet.yaml")
    rel = read_release(tmp_path / "rel")
    assert rel.versions == [1, 2] and rel.manifest.equals(before.manifest)
    assert abs(math.fsum(rel.weights(2)["weight"].to_list()) - 1) < 1e-12
    assert rel.drift(2) is not None and summary["leak_check"]["ok"]
    assert rel.weights(1).equals(before.weights(1))
