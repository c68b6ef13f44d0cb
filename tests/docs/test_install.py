"""What each install gives: the core (no extra) runs the data commands with no Dagster, Dask, torch or Triton
importable; `[kernels]` adds check, feedback and eval without Dagster or Dask; `[eval]` is what the README's first
command installs for `run-pipeline`; `[test]` holds everything the tests drive. Checked by running the commands in
processes where the packages an install leaves out cannot be imported, and by reading pyproject.toml."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: pip's own TOML reader (every venv has pip)
    from pip._vendor import tomli as tomllib

from tests.conftest import ATREX, REPO

PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
HEAVY = {"dagster", "dagster_webserver", "dagster_postgres", "dagster_dg_cli", "dask", "distributed"}
KERNELS = {"torch", "triton", "safetensors"}
RUN = """
import importlib.abc, sys
BLOCKED = set(sys.argv[1].split(","))
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, Block())
from pipelines.cli import main
sys.exit(main(sys.argv[2:]))
"""


def hotshape_without(blocked: set[str], *args, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", RUN, ",".join(sorted(blocked)), *map(str, args)], cwd=cwd or REPO,
                          capture_output=True, text=True, timeout=600, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})


def _names(requirements: list[str]) -> set[str]:
    return {re.split(r"[<>=\[ ;]", r, maxsplit=1)[0].lower().replace("-", "_") for r in requirements}


def test_the_extras_fit_their_users():
    core = _names(PYPROJECT["project"]["dependencies"])
    extras = {k: _names(v) for k, v in PYPROJECT["project"]["optional-dependencies"].items()}
    assert not core & (HEAVY | KERNELS)  # a kernel author's core install: no Dagster, Dask or torch
    assert {"kernels", "dagster", "dask", "eval", "test"} <= set(extras)
    assert extras["kernels"] == KERNELS and extras["dask"] == {"dask", "distributed"}
    assert extras["dagster"] == {"dagster", "dagster_webserver", "dagster_postgres", "dagster_dg_cli"}
    # the README's `pip install -e '.[eval]'` then `hotshape run-pipeline`: the graph and the evaluator
    assert extras["eval"] >= extras["kernels"] | extras["dagster"]
    assert extras["test"] >= extras["kernels"] | extras["dagster"] | extras["dask"] | {"pytest", "jsonschema"}
    readme = (REPO / "README.md").read_text()
    assert "-e '.[eval]' && .venv/bin/hotshape run-pipeline" in readme and "-e '.[test]' && .venv/bin/python -m pytest" in readme
    assert "Apache License" in (REPO / "LICENSE").read_text() and "Version 2.0" in (REPO / "LICENSE").read_text()


def test_the_core_runs_the_data_commands_without_dagster_dask_or_torch(tmp_path):
    blocked = HEAVY | KERNELS
    done = hotshape_without(blocked, "import-atrex", ATREX, "--out", tmp_path / "rel")
    assert done.returncode == 0, done.stderr
    for args in (("verify", tmp_path / "rel", "--allow-unsigned"),
                 ("workspace", tmp_path / "rel", "--out", tmp_path / "ws", "--ops", "rms_norm"),
                 ("ingest", REPO / "examples" / "traces" / "llama3-8b" / "eager.json.gz", "--out", tmp_path / "store")):
        done = hotshape_without(blocked, *args)
        assert done.returncode == 0, (args, done.stderr)
    # a command that needs an extra says which, in one line
    done = hotshape_without(blocked, "check", REPO / "tests" / "adversarial" / "honest" / "rms_norm.py", "--op",
                            "rms_norm", "--device", "cpu", "--no-sandbox")
    assert done.returncode == 2 and "pip install 'hotshape[kernels]'" in done.stderr, done.stderr
    assert done.stderr.count("\n") == 1


@pytest.mark.slow
def test_kernels_extra_checks_a_file_without_dagster_or_dask():
    done = hotshape_without(HEAVY, "check", REPO / "tests" / "adversarial" / "honest" / "rms_norm.py", "--op",
                            "rms_norm", "--device", "cpu", "--no-sandbox")
    assert done.returncode == 0 and "PASS" in done.stdout, done.stderr


def test_ci_checks_the_lowest_and_the_highest_supported_python():
    classifiers = [c.rsplit(" ", 1)[1] for c in PYPROJECT["project"]["classifiers"]
                   if c.startswith("Programming Language :: Python :: 3.")]
    versions = sorted(classifiers, key=lambda v: tuple(map(int, v.split("."))))
    assert PYPROJECT["project"]["requires-python"] == f">={versions[0]}"
    ci = (REPO / ".ci" / "run").read_text()
    # the quick subset on each where its interpreter is on PATH; the lowest's grammar always (test_python_versions)
    assert f"LOWEST={versions[0]}" in ci and f"HIGHEST={versions[-1]}" in ci
    assert 'for version in "$LOWEST" "$HIGHEST"' in ci
    grammar = (REPO / "tests" / "docs" / "test_python_versions.py").read_text()
    assert f"feature_version=({versions[0].replace('.', ', ')})" in grammar
