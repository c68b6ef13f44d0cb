"""Every shared word once: no package names or spells out again a tuple catalogue/vocabulary.py defines."""

from __future__ import annotations

import ast
from pathlib import Path

from catalogue import vocabulary

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("ingest", "weighting", "release", "flow", "kernels_eval", "pipelines")
WORDS = {name: value for name, value in vars(vocabulary).items() if name.isupper()}


def redefinitions(root: Path) -> list[str]:
    """`file:line NAME` for each assignment to a vocabulary name, or tuple of strings equal to a vocabulary tuple."""
    tuples = {value: name for name, value in WORDS.items() if isinstance(value, tuple)}
    found = []
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
                where = f"{path.relative_to(root)}:{getattr(node, 'lineno', 0)}"
                if isinstance(node, (ast.Assign, ast.AnnAssign)):
                    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                    found += [f"{where} {t.id}" for t in targets if isinstance(t, ast.Name) and t.id in WORDS]
                elif isinstance(node, ast.Tuple) and node.elts and all(
                        isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts):
                    value = tuple(e.value for e in node.elts)
                    if value in tuples:
                        found.append(f"{where} {tuples[value]}")
    return sorted(set(found))


def test_no_package_defines_a_shared_word_again():
    assert redefinitions(REPO) == []


def test_a_copied_word_is_caught(tmp_path):
    for package in PACKAGES:
        (tmp_path / package).mkdir()
    (tmp_path / "release" / "schema.py").write_text('PHASES = ("prefill", "decode", "mixed")\n')
    (tmp_path / "kernels_eval" / "tag.py").write_text('def tag(p):\n    return [x for x in ("prefill", "decode", "mixed") if p]\n')
    assert redefinitions(tmp_path) == ["kernels_eval/tag.py:2 PHASES", "release/schema.py:1 PHASES"]


def test_the_weight_phases_are_the_row_phases_but_unknown():
    assert vocabulary.ROW_PHASES == (*vocabulary.PHASES, vocabulary.UNKNOWN_PHASE)
    assert vocabulary.STAGES[-1] == vocabulary.DONE
    assert set(vocabulary.ATTRIBUTED) <= set(vocabulary.CLASSIFIED_ATTRIBUTIONS)
