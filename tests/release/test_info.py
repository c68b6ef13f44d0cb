"""release.json as a typed record: refused on write and on read with one line naming the file and the field;
the evaluator's read needs no msgspec."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pipelines.cli import main
from release.bundle import ReleaseError, read_release, write_bundle
from release.info import ReleaseInfo
from release.integrity import SUMS_FILE, info_digest, json_bytes, sha256sums

REPO = Path(__file__).resolve().parents[2]


def _copy(release: Path, to: Path) -> Path:
    """A plain copy of a release's current version (a release path is a symlink to it)."""
    import shutil

    shutil.copytree(release.resolve(), to)
    return to


def _edit(release: Path, change) -> Path:
    """Apply `change` to release.json's content and reseal it (digest, SHA256SUMS), as anyone can."""
    path = release / "release.json"
    info = json.loads(path.read_bytes())
    change(info)
    info["digest"] = info_digest(info)
    path.write_bytes(json_bytes(info))
    (release / SUMS_FILE).write_bytes(sha256sums(info["files"], path.read_bytes()))
    return path


def test_a_built_release_reads_as_a_typed_record(atrex_release):
    rel = read_release(atrex_release)
    assert isinstance(rel.meta, ReleaseInfo)
    assert rel.meta.counts.problems == rel.manifest.height == 440
    assert rel.meta.weights[0].file == "public/weights/v1.parquet" and rel.versions == [1]
    assert set(rel.meta.files) == set(json.loads((atrex_release / "release.json").read_bytes())["files"])


@pytest.mark.parametrize("change, problem", [
    (lambda i: i["weights"][0].update(version="1"), "Expected `int`, got `str` - at `$.weights[0].version`"),
    (lambda i: i.pop("counts"), "Object missing required field `counts`"),
    (lambda i: i["counts"].update(problem=1), "Object contains unknown field `problem` - at `$.counts`"),
])
def test_a_malformed_release_json_is_one_line_naming_the_file_and_the_field(atrex_release, tmp_path, change,
                                                                            problem, capsys):
    release = _copy(atrex_release, tmp_path / "r")
    path = _edit(release, change)
    with pytest.raises(ReleaseError) as exc:
        read_release(release)
    assert str(exc.value) == f"{path}: {problem}"
    assert main(["drift", str(release), str(release)]) == 2
    assert capsys.readouterr().err == f"hotshape drift: {path}: {problem}\n"
    assert main(["verify", str(release), "--allow-unsigned"]) == 2
    assert capsys.readouterr().err == f"hotshape verify: {path}: {problem}\n"


def test_a_malformed_info_is_never_written(tmp_path):
    with pytest.raises(ReleaseError, match=r"release\.json: .*`\$.counts.problems`"):
        write_bundle(tmp_path / "r", {"README.md": b"# card\n"},
                     {"name": "t", "version": "1.0", "parent": None, "created": "2026-11-01", "source": {"kind": "x"},
                      "key_source": "file", "counts": {"problems": "3", "operators": 2},
                      "roofline": {"ours": False}, "weights": []})
    assert list(tmp_path.iterdir()) == []


EVALUATOR_READ = """
import sys
class Blocked:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {"msgspec", "polars", "duckdb", "cryptography", "dagster"}:
            raise ImportError("not on the GPU machine: " + name)
sys.meta_path.insert(0, Blocked())
from kernels_eval.harness.release_view import read_release_view
view = read_release_view(sys.argv[1])
print(view.name, len(view.problems), view.digest == __import__("json").load(open(sys.argv[1] + "/release.json"))["digest"])
"""


def test_the_evaluator_reads_a_release_without_msgspec(atrex_release):
    run = subprocess.run([sys.executable, "-c", EVALUATOR_READ, str(atrex_release)], capture_output=True, text=True,
                         cwd=REPO)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == [read_release(atrex_release).name, "440", "True"]
