"""The pages users open (drift, score report, leaderboard): every chart carries a title and both axis labels, and a
hostile name (an operator, a deployment, a submission or hardware name with markup or quotes) is text on the page,
never markup. Names come from traces and from candidates' results files: both are untrusted."""

from __future__ import annotations

import html
from html.parser import HTMLParser

import polars as pl
import pytest

from tests.kernels_eval.test_scoring import V1, FakeRelease, frame, row

from kernels_eval.leaderboard import leaderboard, leaderboard_html, leaderboard_plot
from kernels_eval.report import contribution_plot, roofline_plot, score_report
from kernels_eval.scoring import problem_scores, score
from weighting.drift import compare
from weighting.drift_report import bars_before_after, bars_movers, lorenz_plot, render_html

HOSTILE = ["<script>alert(1)</script>", '"><img src=x onerror="alert(2)">', "it's <b>bold</b> & \"quoted\""]


class Tags(HTMLParser):
    """Every start tag and its attributes, as a browser's parser sees them."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict]] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))


def assert_inert(page: str, names: list[str]) -> None:
    """No script, no event handler, no image but the charts' data, and each name shown escaped."""
    parser = Tags()
    parser.feed(page)
    assert not [t for t, _ in parser.tags if t in ("script", "iframe", "object", "embed")]
    assert not [(t, a) for t, attrs in parser.tags for a in attrs if a.startswith("on")]
    assert all(attrs.get("src", "").startswith("data:image/svg+xml;base64,") for t, attrs in parser.tags if t == "img")
    for name in names:
        assert name not in page
        assert html.escape(name).replace("&#x27;", "&#39;").replace("&quot;", "&#34;") in page, name


def assert_labelled(fig) -> None:
    for ax in fig.axes:
        assert ax.get_title() and ax.get_xlabel() and ax.get_ylabel(), (ax.get_title(), ax.get_xlabel(), ax.get_ylabel())


def hostile_drift():
    ops = [HOSTILE[0], HOSTILE[1]]
    old = pl.DataFrame({"problem_id": ["p0", "p1", "p2"], "operator": [ops[0], ops[0], ops[1]], "weight": [0.5, 0.3, 0.2]})
    new = pl.DataFrame({"problem_id": ["p1", "p2", "p3"], "operator": [ops[0], ops[1], ops[1]], "weight": [0.2, 0.5, 0.3]})
    return compare(old, new)


def test_drift_charts_are_labelled():
    for fig in (bars_before_after([("gemm", 0.5, 0.4), ("rms_norm", 0.5, 0.6)], "v1", "v2"),
                bars_movers([("gemm m=8", 0.1), ("rms_norm token_count=4", -0.1)]),
                lorenz_plot([("v1", "#000", [0.2, 0.8]), ("v2", "#00f", [0.5, 0.5])])):
        assert_labelled(fig)


def test_drift_page_shows_hostile_names_as_text():
    report = hostile_drift()
    causes = {"p3": f"deployment {HOSTILE[2]} (alone +30.00 pt): card-hours 10 → 40"}
    page = render_html(report, HOSTILE[2], "v2", labels={"p2": f"{HOSTILE[1]} m=8"}, causes=causes,
                       beyond={"problems": ["p3"], "operators": [HOSTILE[0]], "rule": HOSTILE[0]})
    assert_inert(page, HOSTILE)


@pytest.fixture(scope="module")
def hostile_scores():
    """Scores of a timed run whose submission and hardware names are hostile, with operators renamed hostile (what
    a release built from hostile trace names would hold)."""
    rows = [row(p, t=2.0, submission=HOSTILE[1], hardware="H200") for p in ("a1", "a2", "a3", "g1")]
    rows += [row(p, t=4.0, submission=HOSTILE[2], hardware="H200") for p in ("a1", "a2", "a3", "g1")]
    rows = frame(rows)
    renamed = {"rms_norm": HOSTILE[0], "gemm": HOSTILE[2]}
    scores = score(rows, FakeRelease({1: V1}))
    for s in scores:
        s["operators"] = {renamed[op]: r for op, r in s["operators"].items()}
    per_problem = problem_scores(rows).with_columns(pl.col("operator").replace(renamed))
    return rows, scores, per_problem


def test_score_charts_are_labelled(hostile_scores):
    _, scores, per_problem = hostile_scores
    untimed = {**scores[0], "S_agg": None}
    for fig in (contribution_plot(scores[0]), contribution_plot(untimed), roofline_plot(per_problem, scores[0])):
        assert_labelled(fig)


def test_score_report_shows_hostile_names_as_text(hostile_scores):
    _, scores, per_problem = hostile_scores
    page = score_report(scores, per_problem, f"Scores of {HOSTILE[0]}")
    assert page.count('<img class="chart"') == 4  # contribution and roofline per submission
    assert_inert(page, HOSTILE)


def test_leaderboard_chart_is_labelled_and_its_page_shows_hostile_names_as_text(hostile_scores):
    rows, _, _ = hostile_scores
    entries = leaderboard(rows, FakeRelease({1: V1}))
    assert [e["submission"] for e in entries] == [HOSTILE[1], HOSTILE[2]]
    assert_labelled(leaderboard_plot(entries))
    untimed = [{**e, "S_agg": None} for e in entries]
    assert_labelled(leaderboard_plot(untimed))
    page = leaderboard_html(entries, f"Leaderboard on {HOSTILE[2]}")
    assert_inert(page, HOSTILE[1:])
    assert leaderboard_plot([]) is None and "<img" not in leaderboard_html([], "empty")


@pytest.mark.slow
def test_score_report_and_leaderboard_have_no_chart_clipped_in_chromium(hostile_scores, tmp_path):
    """Each chart measured where headless Chromium lays it out, at 1,400 and 700 px (tests/chromium.py); the names
    here are the hostile ones, the longest a results file gives."""
    from tests.chromium import clipped

    rows, scores, per_problem = hostile_scores
    score_page = tmp_path / "score.html"
    score_page.write_text(score_report(scores, per_problem, "Scores"), encoding="utf-8")
    board = tmp_path / "leaderboard.html"
    board.write_text(leaderboard_html(leaderboard(rows, FakeRelease({1: V1})), "Leaderboard"), encoding="utf-8")
    assert clipped(score_page) == [] and clipped(board) == []


def test_the_library_sections_show_hostile_names_as_text(hostile_scores):
    """The score report's library line (kernels_eval/library/display.py → templates/library.html) escapes too."""
    _, scores, per_problem = hostile_scores
    op = HOSTILE[0]
    vs = {"coverage_weight": 0.6, "S_agg_submission_covered": 0.5, "S_agg_library": 0.4, "toward_roofline": 0.1667,
          "operators": {op: {"W_op": 0.6, "S_op_submission": 0.5, "S_op_library": 0.4, "toward_roofline": 0.1667,
                             "path": HOSTILE[1], "why_none": None}},
          "problems": [{"problem_id": "a1", "operator": op, "weight": 0.2, "t_roofline_s": 1.0, "t_library_s": 2.5,
                        "t_submission_s": 2.0, "S_library": 0.4, "S_submission": 0.5, "toward_roofline": 0.1667}]}
    library = {"hardware": HOSTILE[2], "S_agg": None, "measured": False, "coverage_weight": 0.6, "W_op": {op: 0.6},
               "S_op": {op: None}, "path": {op: HOSTILE[1]}, "why_none": {}}
    page = score_report([{**scores[0], "vs_library": vs}], per_problem, "Scores", [library])
    assert "Against the library" in page and "per problem" in page
    assert_inert(page, HOSTILE)
