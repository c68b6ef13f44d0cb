"""On CI (`CI` set, as `.ci/run` runs), every component the tests drive for real is there: a missing one fails here
instead of turning its tests into skips."""

from __future__ import annotations

import importlib.util
import os
import shutil

import pytest

from kernels_eval.harness import sandbox
from tests.pipelines.conftest import _pg_bin

on_ci = pytest.mark.skipif(not os.environ.get("CI"), reason="a developer's machine may lack a component; CI may not")


@on_ci
def test_the_sandbox_runs():
    assert sandbox.check_bwrap() is None


@on_ci
def test_a_headless_browser_is_installed():
    assert shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


@on_ci
def test_postgres_server_binaries_are_installed():
    assert _pg_bin() is not None


@on_ci
@pytest.mark.parametrize("module", ["torch", "triton", "distributed", "jsonschema", "dagster_postgres", "isal"])
def test_the_test_extra_is_installed(module):
    assert importlib.util.find_spec(module) is not None, f"{module} is missing: pip install -e '.[test]'"
