"""The packages form floors: each imports only its own floor and those below (no upward import, no cycle)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# Ground floor first: catalogue → ingest → weighting → release → flow → kernels_eval → pipelines.
FLOORS = ("catalogue", "ingest", "weighting", "release", "flow", "kernels_eval", "pipelines")


def imported_modules(path: Path) -> list[tuple[str, int]]:
    """(absolute module name, line) of every import in a file, function-local ones included."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.module, node.lineno))
    return found


def upward_imports(root: Path) -> list[str]:
    """`file:line imports module` for every import of a higher floor's package under `root`."""
    bad = []
    for floor, package in enumerate(FLOORS):
        for path in sorted((root / package).rglob("*.py")):
            for module, line in imported_modules(path):
                top = module.split(".")[0]
                if top in FLOORS and FLOORS.index(top) > floor:
                    bad.append(f"{path.relative_to(root)}:{line} imports {module}")
    return bad


def test_no_package_imports_a_higher_floor():
    assert upward_imports(REPO) == []


def test_an_upward_import_is_caught(tmp_path):
    for package in FLOORS:
        (tmp_path / package).mkdir()
    (tmp_path / "weighting" / "late.py").write_text("def f():\n    from release.bundle import read_release\n")
    (tmp_path / "catalogue" / "top.py").write_text("import kernels_eval.registry\nimport yaml\n")
    assert upward_imports(tmp_path) == ["catalogue/top.py:1 imports kernels_eval.registry",
                                        "weighting/late.py:2 imports release.bundle"]


def test_catalogue_imports_only_the_standard_library_and_pyyaml():
    outside = sorted({(module, str(path.relative_to(REPO))) for path in (REPO / "catalogue").rglob("*.py")
                      for module, _ in imported_modules(path)
                      if module.split(".")[0] not in sys.stdlib_module_names | {"yaml", "catalogue"}})
    assert outside == []


BLOCKED = """
import sys
class Blocked:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {blocked!r}:
            raise ImportError("not on the GPU machine: " + name)
sys.meta_path.insert(0, Blocked())
"""


def test_catalogue_works_with_only_what_the_gpu_machine_has():
    blocked = {"polars", "duckdb", "msgspec", "cryptography", "orjson", "fsspec", "dagster", "numpy", "pyarrow",
               "torch", "triton"}
    code = BLOCKED.format(blocked=blocked) + (
        "import pkgutil, importlib, catalogue, catalogue.operators\n"
        "for m in pkgutil.walk_packages(catalogue.__path__, 'catalogue.'):\n"
        "    importlib.import_module(m.name)\n"
        "from catalogue.roofline import problem_roofline\n"
        "r = problem_roofline('rms_norm', {'eps': 1e-6}, {'token_count': 4, 'hidden_size': 8}, 'H200')\n"
        "print(r['flops'])\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [str(4 * (3 * 8 + 1))]  # rms_norm: 3 flops per element and one rsqrt per row


def test_the_evaluator_imports_with_only_what_the_gpu_machine_has():
    """The evaluator's modules reach catalogue (kernels_eval.registry re-exports its names) and release's integrity check,
    never polars, msgspec, duckdb or cryptography, which the GPU machine lacks."""
    blocked = {"polars", "duckdb", "msgspec", "cryptography", "orjson", "fsspec", "dagster"}
    code = BLOCKED.format(blocked=blocked) + (
        "import kernels_eval.eval_commands, kernels_eval.harness.runner, kernels_eval.harness.worker\n"
        "import kernels_eval.harness.release_view, release.integrity\n"
        "from kernels_eval import registry\n"
        "from catalogue import hardware, roofline\n"
        "print(registry.spec('rms_norm').input_keys, 'H200' in hardware.load_hardware(),\n"
        "      roofline.problem_roofline('rms_norm', {'eps': 1e-6}, {'token_count': 4, 'hidden_size': 8}, 'H200')['flops'])\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["('token_count',", "'hidden_size')", "True", str(4 * (3 * 8 + 1))]
