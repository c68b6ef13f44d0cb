"""The user docs: every relative link in README.md and docs/*.md resolves, and docs/tables.md lists every column
of every table hotshape writes, with the unit release Parquet files carry in their field metadata."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
# [text](target) and [text]: target; code spans are dropped first so `a[i](x)` in code is not a link.
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)|^\s*\[[^\]]+\]:\s*(\S+)", re.M)


def _links(path: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
    text = re.sub(r"`[^`\n]*`", "", text)
    return [a or b for a, b in LINK.findall(text)]


def _anchors(path: Path) -> set[str]:
    """GitHub's heading anchors of a markdown file."""
    out = set()
    for line in path.read_text().splitlines():
        m = re.match(r"#{1,6}\s+(.*)", line)
        if m:
            slug = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
            out.add(slug)
    return out


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.relative_to(REPO).as_posix())
def test_relative_links_resolve(doc):
    broken = []
    for target in _links(doc):
        if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
            continue
        file, _, anchor = target.partition("#")
        dest = (doc.parent / file).resolve() if file else doc
        if not dest.exists():
            broken.append(target)
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            broken.append(target)
    assert not broken, f"{doc.relative_to(REPO)}: links to nothing: {broken}"


def test_the_link_finder_sees_links():
    assert "docs/guide.md" in _links(REPO / "README.md")
    assert {"tables.md", "results.md", "fleet.schema.json"} <= set(_links(REPO / "docs" / "guide.md"))


def _rows(text: str) -> dict[str, list[str]]:
    """`column` → its table row's cells, for every row of every table in a markdown text (a cell may name
    several columns: `t_p10_s`, `t_p90_s`)."""
    rows: dict[str, list[str]] = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and cells and "`" in cells[0]:
            for name in re.findall(r"`([^`]+)`", cells[0]):
                rows.setdefault(name, cells)
    return rows


def test_tables_doc_lists_every_release_column_with_its_metadata_unit():
    from release.schema import TABLES

    rows = _rows((REPO / "docs" / "tables.md").read_text())
    for name, schema in TABLES.items():
        for field in schema:
            assert field.name in rows, f"docs/tables.md: release table {name}: no row for {field.name}"
            unit = field.metadata[b"unit"].decode() or "—"
            assert rows[field.name][2] == unit, f"docs/tables.md: {field.name}: unit {rows[field.name][2]!r} != {unit!r}"
            assert field.metadata[b"description"], f"release.schema: {name}.{field.name} has no description"
            if field.name.endswith("_s"):
                assert unit == "s", field.name


def test_tables_doc_lists_every_results_and_ingest_column():
    from ingest.schema import CLASSIFIED_EVENT_COLUMNS, OP_SHAPE_TIME_COLUMNS, TRACE_COLUMNS
    from kernels_eval.results_schema import RESULTS

    rows = _rows((REPO / "docs" / "tables.md").read_text())
    wanted = [f.name for f in RESULTS] + list(TRACE_COLUMNS) + list(OP_SHAPE_TIME_COLUMNS) + list(CLASSIFIED_EVENT_COLUMNS)
    missing = [c for c in wanted if c not in rows]
    assert not missing, f"docs/tables.md lacks columns {missing}"
    for name in rows:
        if name.endswith("_ns"):
            assert rows[name][2] == "ns", name
        elif name.endswith("_s") and name in {f.name for f in RESULTS}:
            assert rows[name][2] == "s", name
