"""Everything the tests, benchmarks and docs read is inside the checkout: a fresh clone runs the whole suite
with no test skipped for missing data, and the design and style documents are in docs/."""

from __future__ import annotations

import re
import subprocess

from tests.conftest import ATREX, EXAMPLES, PUBLIC_TRACES, REPO

# A path that climbs out of the checkout: "../x" in text, or a parent of the repository root in code.
OUTSIDE = re.compile(r"(?<![\w./])\.\./(?!\.)[\w-]+|REPO\.parent\b|parents\[\d\]\.parent\b|/ \"shared\"")


def _tracked() -> list[str]:
    out = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    untracked = subprocess.run(["git", "ls-files", "--others", "--exclude-standard"], cwd=REPO, capture_output=True,
                               text=True, check=True).stdout.split()
    return sorted(set(out + untracked))


def test_nothing_points_outside_the_checkout():
    hits = []
    for rel in _tracked():
        if (not rel.endswith((".py", ".md", ".sh", ".plan", ".toml", ".yaml", ".txt")) or rel == "tests/docs/test_checkout.py"
                or rel.startswith(("tests/fixtures/traces/", "examples/atrex-bench/"))):
            continue
        path = REPO / rel
        if not path.is_file():
            continue
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            for m in OUTSIDE.finditer(line):
                # a markdown link one folder up from docs/ or a results folder stays inside the checkout
                target = (path.parent / m.group(0)).resolve() if m.group(0).startswith("..") else None
                if target is not None and REPO in target.parents:
                    continue
                hits.append(f"{rel}:{n}: {m.group(0)}")
    assert not hits, "paths outside the checkout:\n" + "\n".join(hits)


def test_the_finder_sees_a_path_outside():
    assert OUTSIDE.search("Read `../shared/DESIGN.md` first") and OUTSIDE.search('REPO.parent / "shared"')


def test_the_test_data_is_in_the_checkout_with_its_provenance():
    for root in (PUBLIC_TRACES, ATREX, EXAMPLES):
        assert REPO in root.parents
    assert (PUBLIC_TRACES / "SOURCES.md").is_file() and (ATREX / "SOURCES.md").is_file()
    assert "Apache License" in (ATREX / "LICENSE").read_text() and "Apache License" in (REPO / "LICENSE").read_text()
    # the 30 operators' shapes, metadata and roofline, and every trace SOURCES.md lists
    assert len(list((ATREX / "data").glob("*/shapes.json"))) == 30
    listed = re.findall(r"^\| ([\w./-]+\.(?:json\.gz|json|sqlite|csv)) \|", (PUBLIC_TRACES / "SOURCES.md").read_text(), re.M)
    assert len(listed) >= 25
    missing = [name for name in listed if not any(PUBLIC_TRACES.rglob(name.split("/")[-1]))]
    assert not missing, missing


def test_design_and_style_are_in_docs():
    agents = (REPO / "AGENTS.md").read_text()
    assert "`docs/DESIGN.md`" in agents and "`docs/STYLE.md`" in agents
    assert (REPO / "docs" / "DESIGN.md").is_file() and (REPO / "docs" / "STYLE.md").is_file()
