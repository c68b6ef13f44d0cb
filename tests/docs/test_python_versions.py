"""Every module parses with the grammar of the lowest supported Python (pyproject: requires-python >= 3.10): CI's
machine has only Debian's 3.11, so this is the check that no newer syntax slipped in."""

from __future__ import annotations

import ast

import pytest

from tests.conftest import REPO

PACKAGES = ("catalogue", "ingest", "weighting", "release", "flow", "kernels_eval", "pipelines", "tests", "benchmarks")
MODULES = sorted(p for pkg in PACKAGES for p in (REPO / pkg).rglob("*.py"))


def test_the_packages_are_found():
    assert len(MODULES) > 200


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(REPO)))
def test_module_parses_on_the_lowest_python(path):
    ast.parse(path.read_text(), filename=str(path), feature_version=(3, 10))


def test_a_newer_syntax_is_caught():
    with pytest.raises(SyntaxError):
        ast.parse("type Alias = int\n", feature_version=(3, 10))
