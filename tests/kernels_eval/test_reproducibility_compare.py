"""benchmarks/reproducibility.py: two runs' movements per problem, per operator and in S_agg, and issue 39's bar
judged on them, against figures worked out by hand."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import load_script

from .test_scoring import V1, FakeRelease, frame, row

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "reproducibility.py"
FIRST = {"a1": 2.0, "a2": 4.0, "a3": 1.0, "g1": 10.0}


@pytest.fixture(scope="module")
def script():
    return load_script(SCRIPT)


def runs(second: dict[str, float]):
    return frame([row(p, t=t) for p, t in FIRST.items()]), frame([row(p, t=t) for p, t in second.items()])


def test_runs_that_agree_within_the_bands_meet_the_bar(script):
    found = script.compare(*runs({"a1": 2.01, "a2": 4.0, "a3": 1.0, "g1": 10.05}), FakeRelease({1: V1}))
    assert found["problems"] == 4 and found["within"] == {"1%": 4, "3%": 4, "10%": 4}
    # S_op(rms_norm) = median(1/2.01, 1/4, 1) = 1/2.01; S_op(gemm) = 1/10.05; the first run's S_agg is 0.34
    assert found["S_agg"] == pytest.approx([0.34, 0.6 / 2.01 + 0.4 / 10.05])
    assert found["S_agg_deviation"] == pytest.approx(1 - (0.6 / 2.01 + 0.4 / 10.05) / 0.34)
    assert all(found["bar"].values())
    assert any(line.startswith("  met: S_agg within 1%") for line in script.lines(found))


def test_one_problem_that_moved_by_a_fifth_misses_the_bar_and_is_named(script):
    found = script.compare(*runs({"a1": 2.4, "a2": 4.0, "a3": 1.0, "g1": 10.0}), FakeRelease({1: V1}))
    assert found["within"] == {"1%": 3, "3%": 3, "10%": 3}
    assert found["largest"][0][:3] == ["a1", "rms_norm", pytest.approx(0.2)]
    assert found["S_op"]["rms_norm"][2] == pytest.approx(1 / 6)  # 0.5 -> 1/2.4: a 16.7% move
    assert found["bar"] == {"S_agg within 1%": False, "every S_op within 3%": False,
                            "95% of problems within 3%": False, "no problem beyond 10%": False}
    assert "  MISSED: no problem beyond 10%" in script.lines(found)


def test_a_run_in_parts_is_its_parts_rows_together_and_a_problem_in_two_parts_is_refused(script):
    parts = {"p1.parquet": frame([row("a1", t=2.0), row("a2", t=4.0)]), "p2.parquet": frame([row("g1", t=10.0)])}
    whole = script.run_frame("p1.parquet,p2.parquet", lambda path: parts[path.name])
    assert sorted(whole["problem_id"].to_list()) == ["a1", "a2", "g1"]
    parts["p3.parquet"] = frame([row("a2", t=4.1)])
    with pytest.raises(SystemExit, match="p1.parquet,p3.parquet: problem a2 is in more than one part"):
        script.run_frame("p1.parquet,p3.parquet", lambda path: parts[path.name])
