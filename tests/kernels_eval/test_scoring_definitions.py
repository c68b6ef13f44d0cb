"""S_op and per-phase S_agg as the guide defines them, checked against an independent recomputation in DuckDB SQL
from the results rows, the release's weights and its sealed roofline: S_op is the median of S_i over the
operator's problems with weight in the version (a problem at weight 0 does not move it), and S_agg of a phase is
the score of a benchmark made only of that phase's fleet time (per-phase W_op and per-phase S_op medians)."""

from __future__ import annotations

import json
import random

import duckdb
import polars as pl
import pytest

from catalogue.vocabulary import PHASES
from kernels_eval.results_schema import RESULTS, results_table
from kernels_eval.scoring import score

OPERATORS = ("rms_norm", "gemm", "silu_and_mul")


class Release:
    """What scoring reads of a release, made of generated problems, weights and roofline."""

    def __init__(self, problems: dict[str, str], weights: pl.DataFrame, roofline: pl.DataFrame) -> None:
        self.manifest = pl.DataFrame([{"problem_id": pid, "operator": op, "init_kwargs": "{}", "input_kwargs": "{}",
                                       "dtypes": "{}"} for pid, op in problems.items()])
        self._weights, self._roofline, self.versions = weights, roofline, [1]

    def sealed(self, name):
        return self._roofline if name == "roofline" else None

    def weights(self, version=None):
        return self._weights


def _case(seed: int):
    rng = random.Random(seed)
    problems = {f"p{i:02d}": OPERATORS[i % 3] for i in range(24)}
    raw = []
    for pid in problems:
        # a third of the problems have no time in a phase; a few have no weight at all in this version
        cols = {p: (0.0 if rng.random() < 0.35 else rng.random()) for p in PHASES}
        total = rng.random() if rng.random() > 0.15 else 0.0
        raw.append({"problem_id": pid, "weight": total, **{f"weight_{p}": (cols[p] if total else 0.0) for p in PHASES}})
    weights = pl.DataFrame(raw)
    weights = weights.with_columns([pl.col(c) / pl.col(c).sum() for c in ["weight", *(f"weight_{p}" for p in PHASES)]])
    roof = {pid: rng.uniform(1e-5, 1e-3) for pid in problems}
    roofline = pl.DataFrame([{"problem_id": pid, "hardware": "H200", "t_roofline_s": t} for pid, t in roof.items()])
    rows = []
    for pid, op in problems.items():
        if rng.random() < 0.1:
            continue  # never evaluated: S_i = 0
        for run in range(rng.choice((1, 1, 3))):
            ok = rng.random() > 0.2
            base = {f.name: None for f in RESULTS}
            base.update(submission="s", release="r", run_id=f"x{run}", run=run, problem_id=pid, operator=op,
                        hardware="H200", device="cuda", shape_kind="problem", stage="done" if ok else "correctness",
                        compiled=True, correct=ok, native=True, fallbacks=[], performance_measured=True,
                        t_measured_s=roof[pid] * rng.uniform(1.0, 20.0),  # never below the roofline (physics.py) t_roofline_s=99.0,  # the release's roofline is used
                        evaluated_at="2026-12-01T12:00:00+00:00")
            rows.append(base)
    return Release(problems, weights, roofline), pl.from_arrow(results_table(rows))


SQL = """
WITH runs AS (
    SELECT r.problem_id, r.run,
           CASE WHEN r.compiled AND r.correct AND r.native AND r.t_measured_s > 0
                THEN least(1.0, f.t_roofline_s / r.t_measured_s) ELSE 0.0 END AS s
    FROM results r JOIN roofline f ON f.problem_id = r.problem_id AND f.hardware = r.hardware
), s_i AS (
    SELECT problem_id, median(s) AS s_i FROM runs GROUP BY problem_id
), t AS (
    SELECT m.operator, w.*, coalesce(s_i.s_i, 0.0) AS s_i
    FROM weights w JOIN manifest m USING (problem_id) LEFT JOIN s_i USING (problem_id)
), per_op AS (
    SELECT operator, sum({col}) AS w_op, median(s_i) FILTER (WHERE {col} > 0) AS s_op FROM t GROUP BY operator
)
SELECT (SELECT sum(w_op * coalesce(s_op, 0)) / nullif(sum(w_op), 0) FROM per_op) AS s_agg,
       (SELECT json_group_object(operator, s_op) FROM per_op WHERE s_op IS NOT NULL) AS s_op
"""


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_s_op_and_per_phase_s_agg_match_an_sql_recomputation(seed):
    release, results = _case(seed)
    (got,) = score(results, release)
    con = duckdb.connect()
    for name, frame in (("results", results), ("roofline", release.sealed("roofline")),
                        ("weights", release.weights()), ("manifest", release.manifest)):
        con.register(name, frame.to_arrow())

    def sql(col):
        s_agg, s_op = con.execute(SQL.format(col=col)).fetchone()
        return s_agg, json.loads(s_op) if s_op else {}

    s_agg, s_op = sql("weight")
    assert got["S_agg"] == pytest.approx(s_agg, rel=1e-12)
    assert {k: v for k, v in got["S_op"].items() if v is not None} == pytest.approx(s_op, rel=1e-12)
    for phase in PHASES:
        s_agg, s_op = sql(f"weight_{phase}")
        assert got["S_agg_phase"][phase] == pytest.approx(s_agg, rel=1e-12), phase
        assert got["S_op_phase"][phase] == pytest.approx(s_op, rel=1e-12), phase


def test_a_problem_at_weight_zero_does_not_move_s_op():
    release, results = _case(4)
    zero = release.weights().filter(pl.col("weight") == 0)["problem_id"].to_list()
    assert zero
    (before,) = score(results, release)
    # the zero-weight problems now fail everywhere: nothing weighted changes
    failed = results.with_columns(pl.when(pl.col("problem_id").is_in(zero)).then(False).otherwise(pl.col("correct"))
                                  .alias("correct"))
    (after,) = score(failed, release)
    assert after["S_op"] == before["S_op"] and after["S_agg"] == before["S_agg"]
    assert after["S_agg_phase"] == before["S_agg_phase"]
