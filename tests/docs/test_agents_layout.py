"""AGENTS.md's Layout names every package module, and every module it names exists.

In a package's paragraph of the Layout block a module is named by its file name (`store.py`) or its path below
the package (`harness/runner.py`, `defs/jobs.py`); `dir/<op>.py` stands for every module in `dir/` (one per
operator). `__init__.py` files need no naming.
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("catalogue", "ingest", "weighting", "release", "flow", "kernels_eval", "pipelines")
MODULE = re.compile(r"(?<![\w./<>-])((?:[\w<>]+/)*[\w<>]+\.py)\b")
NOT_IN_PACKAGE = ("tests/", "benchmarks/", "examples/", "docs/")


def layout_sections(agents: str) -> dict[str, str]:
    """Each top-level folder of the Layout block with its paragraph (the lines up to the next folder)."""
    block = agents.split("## Layout", 1)[1].split("```", 2)[1]
    sections: dict[str, str] = {}
    folder = None
    for line in block.splitlines():
        head = re.match(r"^([\w<>/]+?)/\s", line)
        if head:
            folder = head.group(1)
            sections[folder] = ""
        if folder is not None:
            sections[folder] += line + "\n"
    return sections


def layout_mismatches(root: Path, agents: str) -> list[str]:
    """What the Layout names that is not there, and the package modules it does not name."""
    sections = layout_sections(agents)
    problems = [f"{p}/: no paragraph in AGENTS.md's Layout" for p in PACKAGES if p not in sections]
    for package in PACKAGES:
        text = sections.get(package, "")
        base = root / package
        every = {path.relative_to(base).as_posix() for path in base.rglob("*.py") if "__pycache__" not in path.parts}
        modules = {m for m in every if not m.endswith("__init__.py")}
        named = {name for name in MODULE.findall(text) if not name.startswith(NOT_IN_PACKAGE)}
        covered = set()
        for name in sorted(named):
            if "<" in name:
                folder = name.split("<", 1)[0].rstrip("/")  # operators/<op>/shapes.py: all under operators/
                found = {m for m in every if m.startswith(folder + "/")}
            else:
                found = {m for m in every if m == name or m.endswith("/" + name)}
            if not found:
                problems.append(f"{package}/{name}: named in AGENTS.md's Layout but not in the tree")
            covered |= found
        problems += [f"{package}/{m}: not named in AGENTS.md's Layout" for m in sorted(modules - covered)]
    return problems


def test_agents_layout_matches_the_tree():
    assert layout_mismatches(REPO, (REPO / "AGENTS.md").read_text(encoding="utf-8")) == []


def test_a_missing_or_unnamed_module_is_caught(tmp_path):
    for package in PACKAGES:
        (tmp_path / package / "sub").mkdir(parents=True)
        (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / "ingest" / "store.py").write_text("")
    (tmp_path / "ingest" / "sub" / "a.py").write_text("")
    (tmp_path / "ingest" / "sub" / "b.py").write_text("")
    (tmp_path / "ingest" / "extra.py").write_text("")
    (tmp_path / "pipelines" / "sub" / "x.py").write_text("")
    agents = ("## Layout\n```\n" + "".join(f"{p}/    nothing here\n" for p in ("catalogue", "release", "flow", "kernels_eval"))
              + "ingest/  store.py (the store), gone.py, sub/<op>.py, tests/ingest/test_store.py\n"
              + "pipelines/  sub/x.py and docs/x.py\n```\n")
    assert layout_mismatches(tmp_path, agents) == [
        "weighting/: no paragraph in AGENTS.md's Layout",
        "ingest/gone.py: named in AGENTS.md's Layout but not in the tree",
        "ingest/extra.py: not named in AGENTS.md's Layout",
    ]
