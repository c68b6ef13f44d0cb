"""Fixtures shared by every test package: where the public traces and reference data live (in the checkout)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# Public traces of other projects (tests/fixtures/traces/SOURCES.md: provenance, licenses, what was cut).
PUBLIC_TRACES = REPO / "tests" / "fixtures" / "traces"
# The published Atrex-Bench data files (examples/atrex-bench/SOURCES.md, Apache-2.0).
ATREX = REPO / "examples" / "atrex-bench"
EXAMPLES = REPO / "examples"


def load_script(path: Path, name: str | None = None):
    """A script that is not a package module (benchmarks/*.py) imported from its path."""
    spec = importlib.util.spec_from_file_location(name or path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(autouse=True)
def results_key_dir(tmp_path_factory, monkeypatch) -> Path:
    """A results key of the test session's own (HOTSHAPE_KEY_DIR), never the host's ~/.config/hotshape."""
    path = tmp_path_factory.getbasetemp() / "results-key"
    monkeypatch.setenv("HOTSHAPE_KEY_DIR", str(path))
    return path


@pytest.fixture(scope="session")
def public_traces() -> Path:
    """The public trace fixtures (tests/fixtures/traces)."""
    return PUBLIC_TRACES


@pytest.fixture(scope="session")
def atrex_dir() -> Path:
    """The published Atrex-Bench data (examples/atrex-bench)."""
    return ATREX


@pytest.fixture(scope="session")
def examples_dir() -> Path:
    """The project's own example traces and fleet.yaml."""
    return EXAMPLES
