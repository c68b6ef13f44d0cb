"""S_agg's interval from repeated timings (kernels_eval/score_interval.py) against an independent recomputation of
each repeat's S_agg from the definition, and the leaderboard's marks of ranks the intervals do not separate."""

from __future__ import annotations

import statistics

import pytest

from kernels_eval.leaderboard import UNSEPARATED, leaderboard, leaderboard_lines
from kernels_eval.score_display import score_lines
from kernels_eval.score_interval import not_separated
from kernels_eval.scoring import score

from .test_scoring import V1, FakeRelease, frame, row

W = {"a1": 0.2, "a2": 0.2, "a3": 0.2, "g1": 0.4}  # V1's weights; every roofline is 1 s
OPS = {"rms_norm": ("a1", "a2", "a3"), "gemm": ("g1",)}


def s_agg(times: dict[str, float]) -> float:
    """The definition, written out: S_i = 1 s / t (0 for a time under the 1 s roofline, which is refused, and for
    a failed problem); S_op = median S_i; S_agg = sum W_op S_op / sum W."""
    total = 0.0
    for pids in OPS.values():
        s_op = statistics.median(1.0 / times[p] if times.get(p) and times[p] >= 1.0 else 0.0 for p in pids)
        total += sum(W[p] for p in pids) * s_op
    return total / sum(W.values())


REPEATS = {"a1": [2.0, 4.0, 2.5], "a2": [4.0, 4.0, 4.0], "a3": [1.0, 2.0, 1.0], "g1": [10.0, 5.0, 8.0]}


def repeated(times: dict[str, list[float]], **kw) -> list[dict]:
    return [{**row(pid, t=statistics.median(ts), **kw), "t_repeats_s": ts} for pid, ts in times.items()]


def test_the_interval_spans_the_per_repeat_s_agg_of_eval_repeat():
    (s,) = score(frame(repeated(REPEATS)), FakeRelease({1: V1}))
    expected = [s_agg({p: ts[k] for p, ts in REPEATS.items()}) for k in range(3)]
    assert expected == pytest.approx([0.34, 0.23, 0.29])  # by hand: 0.6*0.5+0.4*0.1, 0.6*0.25+0.4*0.2, ...
    interval = s["S_agg_interval"]
    assert interval["repeats"] == 3 and interval["per_repeat"] == pytest.approx(expected)
    assert (interval["lo"], interval["hi"]) == pytest.approx((min(expected), max(expected)))
    # the headline scores each problem's median timing
    assert s["S_agg"] == pytest.approx(s_agg({p: statistics.median(ts) for p, ts in REPEATS.items()}))
    assert s["S_op_interval"] == {"rms_norm": pytest.approx([0.25, 0.5]), "gemm": pytest.approx([0.1, 0.2])}
    assert any("interval [0.2300, 0.3400] x3" in line for line in score_lines(s))


def test_runs_without_repeats_are_repeats_and_a_problem_timed_once_keeps_its_headline():
    # run 0 and run 1 of one submission: g1 was timed in run 0 only; a3 failed (not native) in run 1
    rows = [row("a1", t=2.0, run=0), row("a2", t=4.0, run=0), row("a3", t=1.0, run=0), row("g1", t=10.0, run=0),
            row("a1", t=1.0, run=1), row("a2", t=1.25, run=1), row("a3", t=1.0, run=1, native=False)]
    (s,) = score(frame(rows), FakeRelease({1: V1}))
    run0 = s_agg({"a1": 2.0, "a2": 4.0, "a3": 1.0, "g1": 10.0})
    run1 = s_agg({"a1": 1.0, "a2": 1.25, "a3": None, "g1": 10.0})  # a3 scores 0 in the run that failed it
    assert (run0, run1) == pytest.approx((0.34, 0.52))  # by hand: 0.6*0.5+0.4*0.1; 0.6*median(1, 0.8, 0)+0.04
    assert s["S_agg_interval"]["per_repeat"] == pytest.approx([run0, run1])
    assert (s["S_agg_interval"]["lo"], s["S_agg_interval"]["hi"]) == pytest.approx((run0, run1))


def test_one_timing_per_problem_has_no_interval():
    (s,) = score(frame([row("a1", t=2.0), row("g1", t=1.0)]), FakeRelease({1: V1}))
    assert s["S_agg_interval"] is None and s["S_op_interval"] is None
    assert any("interval one timing" in line for line in score_lines(s))


def test_overlapping_bounds_are_not_separated_and_a_point_only_overlaps_what_contains_it():
    entries = [{"S_agg": 0.32, "S_agg_interval": {"lo": 0.30, "hi": 0.34}},
               {"S_agg": 0.31, "S_agg_interval": {"lo": 0.305, "hi": 0.36}},
               {"S_agg": 0.20, "S_agg_interval": None},
               {"S_agg": 0.20, "S_agg_interval": None},
               {"S_agg": None}]
    assert not_separated(entries) == [[1], [0], [3], [2], []]


def test_the_leaderboard_marks_the_ranks_the_intervals_do_not_separate():
    # no repeat under its 1 s roofline: such a time refuses the whole row (kernels_eval/physics.py), not one repeat
    base = {"a1": 2.0, "a2": 4.0, "a3": 1.5, "g1": 10.0}
    close = {p: [t * f for f in (1.0, 1.03, 0.98)] for p, t in base.items()}
    closer = {p: [t * f for f in (1.01, 0.99, 1.02)] for p, t in base.items()}
    far = {p: [t * 4, t * 4.1] for p, t in base.items()}
    rows = (repeated(close, submission="close") + repeated(closer, submission="closer")
            + repeated(far, submission="far"))
    entries = leaderboard(frame(rows), FakeRelease({1: V1}))
    by_name = {e["submission"]: e for e in entries}
    # independent: each submission's bounds from its own per-repeat S_agg
    bounds = {}
    for name, times in (("close", close), ("closer", closer), ("far", far)):
        per = [s_agg({p: ts[k] for p, ts in times.items()}) for k in range(len(times["a1"]))]
        headline = s_agg({p: statistics.median(ts) for p, ts in times.items()})
        bounds[name] = (min(per + [headline]), max(per + [headline]))
        assert by_name[name]["S_agg_interval"]["per_repeat"] == pytest.approx(per)
    assert bounds["close"][0] <= bounds["closer"][1] and bounds["closer"][0] <= bounds["close"][1]
    assert bounds["far"][1] < min(bounds["close"][0], bounds["closer"][0])
    assert [e["submission"] for e in entries][2] == "far"
    top = {by_name["close"]["rank"], by_name["closer"]["rank"]}
    assert top == {1, 2}
    assert by_name["close"]["not_separated_from"] == [by_name["closer"]["rank"]]
    assert by_name["far"]["not_separated_from"] == []
    lines = leaderboard_lines(entries)
    ranked = lines[1:4]
    assert ranked[0].lstrip().startswith(f"1{UNSEPARATED}") and ranked[1].lstrip().startswith(f"2{UNSEPARATED}")
    assert ranked[2].lstrip().startswith("3 ")
    assert f"{UNSEPARATED}: S_agg intervals overlap, the spread measured does not separate ranks 1 and 2 (docs/reproducibility.md)" in lines


def test_the_html_report_states_the_interval():
    from kernels_eval.report import score_report
    from kernels_eval.scoring import problem_scores

    rows = frame(repeated(REPEATS))
    (s,) = score(rows, FakeRelease({1: V1}))
    assert "interval over repeats: [0.2300, 0.3400] x3" in score_report([s], problem_scores(rows), "scores")
