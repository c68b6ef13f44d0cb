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


def _tables(text: str) -> list[list[tuple[str, str, str, str]]]:
    """Every markdown table of `text` whose rows name a column in backticks, as (column, type, unit, description)
    rows in order ("—" is no unit; an escaped pipe is part of its cell)."""
    tables, rows = [], None
    for line in text.splitlines() + [""]:
        if not line.startswith("|"):
            if rows:
                tables.append(rows)
            rows = None
            continue
        cells = [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line.strip()[1:-1])]
        rows = [] if rows is None else rows
        if re.fullmatch(r"`[^`]+`", cells[0]):
            rows.append((cells[0].strip("`"), cells[1], "" if cells[2] == "—" else cells[2], cells[3]))
    return tables


def type_name(t) -> str:
    """An Arrow type as docs/tables.md writes it: large and plain strings and lists alike (polars writes large ones)."""
    return str(t).replace("large_", "").replace("item: ", "").replace("element: ", "")


def documented(schema) -> list[tuple[str, str, str, str]]:
    """A described Arrow schema's rows, as docs/tables.md should list them."""
    return [(f.name, type_name(f.type), (f.metadata or {}).get(b"unit", b"").decode(),
             (f.metadata or {}).get(b"description", b"").decode()) for f in schema]


def written_tables() -> dict[str, object]:
    """Every table hotshape writes to Parquet, by where it is written, from its package's schema module."""
    import polars as pl

    from ingest import schema as ingest_schema
    from ingest.field_metadata import described
    from kernels_eval.agent.audit import ITERATIONS, PROBLEMS
    from kernels_eval.results_schema import RESULTS
    from release.schema import TABLES
    from weighting import schema as weighting_schema

    def weighting(columns: dict):
        return described(pl.DataFrame(schema=columns).to_arrow().schema, weighting_schema.COLUMNS)

    return {**{f"release {name}": schema for name, schema in TABLES.items()}, "results": RESULTS,
            **{f"ingest {name}": getattr(ingest_schema, name)
               for name in ("TRACES", "OP_SHAPE_TIME", "CLASSIFIED_EVENTS", "PROVENANCE", "CAPTURES")},
            "weighting FLEET_WEIGHTS": weighting(weighting_schema.FLEET_WEIGHTS),
            "weighting HOT_PROBLEMS": weighting(weighting_schema.HOT_PROBLEMS),
            "optimize ITERATIONS": ITERATIONS, "optimize PROBLEMS": PROBLEMS}


def test_tables_doc_lists_every_written_table_as_its_schema_describes_it():
    """docs/tables.md has, for each table hotshape writes, one table with its columns in order, each with the
    type, unit and description its Parquet field metadata carries; and no table that is none of them."""
    from ingest.field_metadata import UNITS

    docs = _tables((REPO / "docs" / "tables.md").read_text())
    code = {name: documented(schema) for name, schema in written_tables().items()}
    for name, rows in code.items():
        assert rows in docs, f"docs/tables.md: no table lists {name} as its schema does:\n" + "\n".join(map(str, rows))
        for column, _, unit, text in rows:
            assert text and unit in UNITS, f"{name}.{column}: description {text!r}, unit {unit!r}"
            if column.endswith("_ns"):
                assert unit == "ns", f"{name}.{column}: unit {unit!r}"
            elif column.endswith("_s"):
                assert unit == "s", f"{name}.{column}: unit {unit!r}"
    stray = [t[0][0] for t in docs if t not in code.values()]
    assert not stray, f"docs/tables.md: tables that match no written table, starting with columns {stray}"


def test_the_table_reader_reads_cells_and_escaped_pipes():
    text = "| column | type | unit | description |\n|---|---|---|---|\n| `a` | string | — | x \\| y |\n| `b_s` | double | s | z |\n"
    assert _tables(text) == [[("a", "string", "", "x | y"), ("b_s", "double", "s", "z")]]
