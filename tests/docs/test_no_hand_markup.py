"""No module builds HTML or SVG by hand: pages are jinja2 templates shipped as package data (autoescaped) and
charts are matplotlib's own output (weighting/pages.py). Regression: the drift page's charts were SVG strings with
guessed label widths that ran past a 1,400 px window, and three pages concatenated markup around escaped cells."""

from __future__ import annotations

import ast
import fnmatch
import re
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: pip's own TOML reader (every venv has pip)
    from pip._vendor import tomli as tomllib

from tests.catalogue.test_layering import FLOORS

REPO = Path(__file__).resolve().parents[2]
# `<path>`, `<text>`, `<b>` are left out: usage messages use them as placeholders.
TAG = re.compile(r"<\s*/?\s*(!doctype|html|head|body|style|script|svg|rect|polyline|table|tr|td|th|img|h[1-6]|p|div|"
                 r"span|code|pre|ul|li)(?=[\s/>]|$)", re.I)


def markup_literals(path: Path, root: Path = REPO) -> list[str]:
    """`file:line text` of every string literal (f-string parts included) in `path` holding an HTML/SVG tag."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and TAG.search(node.value):
            found.append(f"{path.relative_to(root)}:{node.lineno} {TAG.search(node.value).group(0)}")
    return found


def test_no_module_writes_a_tag():
    found = [hit for package in FLOORS for path in sorted((REPO / package).rglob("*.py"))
             for hit in markup_literals(path)]
    assert found == [], "markup belongs in a package's templates/ folder (weighting/pages.py renders it)"


def test_a_hand_built_chart_is_caught(tmp_path):
    """The scan would have caught the old drift report and the score report's tables."""
    module = tmp_path / "old.py"
    module.write_text("def bars(w):\n    return f'<svg width=\"{w}\">' + '</svg>'\n"
                      "def row(c):\n    return \"<tr>\" + \"\".join(f\"<td>{x}</td>\" for x in c)\n")
    assert sorted(hit.split(" ", 1)[1] for hit in markup_literals(module, tmp_path)) == ["</svg", "</td", "<svg", "<td",
                                                                                       "<tr"]


def test_every_template_is_package_data_and_rendered_escaped():
    """Each templates/*.html ships with its package (pyproject's package-data), and the one environment that renders
    them autoescapes, so a candidate's or a trace's name is text."""
    from weighting.pages import _environment, render

    globs = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["*"]
    templates = [p for package in FLOORS for p in sorted((REPO / package).rglob("templates/*"))]
    assert {p.parent.parent.name for p in templates} >= {"weighting", "kernels_eval"}
    for path in templates:
        rel = path.relative_to(path.parent.parent).as_posix()
        assert any(fnmatch.fnmatch(rel, g) for g in globs), f"{path} is not package data in pyproject.toml"
    assert _environment(str(REPO / "kernels_eval" / "templates")).autoescape is True
    page = render("base.html", title='<script>x("y")</script>')
    assert "&lt;script&gt;x(&#34;y&#34;)&lt;/script&gt;" in page and "<script>" not in page
