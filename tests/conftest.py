"""Fixtures shared by every test package: where the public traces and reference data live."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("HOTSHAPE_SHARED", REPO.parent / "shared"))
PUBLIC_TRACES = SHARED / "traces" / "public"
ATREX = SHARED / "reference-data" / "atrex-bench"
EXAMPLES = REPO / "examples"


def load_script(path: Path, name: str | None = None):
    """A script that is not a package module (benchmarks/*.py) imported from its path."""
    spec = importlib.util.spec_from_file_location(name or path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _need(path: Path) -> Path:
    if not path.exists():
        pytest.skip(f"{path} is not present (set HOTSHAPE_SHARED to the shared material)")
    return path


@pytest.fixture(autouse=True)
def results_key_dir(tmp_path_factory, monkeypatch) -> Path:
    """A results key of the test session's own (HOTSHAPE_KEY_DIR), never the host's ~/.config/hotshape."""
    path = tmp_path_factory.getbasetemp() / "results-key"
    monkeypatch.setenv("HOTSHAPE_KEY_DIR", str(path))
    return path


@pytest.fixture(scope="session")
def public_traces() -> Path:
    """The public trace fixtures (../shared/traces/public)."""
    return _need(PUBLIC_TRACES)


@pytest.fixture(scope="session")
def atrex_dir() -> Path:
    """The published Atrex-Bench data (../shared/reference-data/atrex-bench)."""
    return _need(ATREX)


@pytest.fixture(scope="session")
def examples_dir() -> Path:
    """The project's own example traces and fleet.yaml."""
    return EXAMPLES
