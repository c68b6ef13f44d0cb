"""Scoring: S_i, S_op (median), S_agg = Σ W_op S_op, variants and rates, on hand-computed small cases."""

from __future__ import annotations

import json

import polars as pl
import pytest

from kernels_eval.results_schema import RESULTS, read_results, results_table
from kernels_eval.results_store import write_results
from kernels_eval.scoring import problem_scores, score

RMS = ({"eps": 1e-6}, {"token_count": 4096, "hidden_size": 4096})
GEMM = ({"scaling": "none"}, {"m": 8192, "n": 8192, "k": 8192, "dtype": "bf16", "scaling": "none"})
PROBLEMS = {"a1": ("rms_norm", RMS), "a2": ("rms_norm", RMS), "a3": ("rms_norm", RMS), "g1": ("gemm", GEMM)}


class FakeRelease:
    """What scoring reads of a release: manifest, weights(version), versions, the sealed roofline (each
    problem 1 s on H200 and H100 unless `roofline` says otherwise)."""

    def __init__(self, weights: dict[int, dict[str, tuple]], roofline: dict[str, float] | None = None) -> None:
        self.manifest = pl.DataFrame([
            {"problem_id": pid, "operator": op, "init_kwargs": json.dumps(i), "input_kwargs": json.dumps(x),
             "dtypes": "{}"} for pid, (op, (i, x)) in PROBLEMS.items()])
        self._weights = weights
        self.versions = sorted(weights)
        roofline = {pid: 1.0 for pid in PROBLEMS} | (roofline or {})
        self._roofline = pl.DataFrame([{"problem_id": pid, "hardware": hw, "t_roofline_s": t}
                                       for pid, t in roofline.items() for hw in ("H200", "H100")])

    def sealed(self, name):
        return self._roofline if name == "roofline" else None

    def weights(self, version=None):
        v = self.versions[-1] if version is None else int(str(version).lstrip("v"))
        return pl.DataFrame([{"problem_id": p, "weight": w[0], "weight_prefill": w[1], "weight_decode": w[2],
                              "weight_mixed": 0.0} for p, w in self._weights[v].items()])


# v1: rms_norm W = 0.6, gemm W = 0.4; prefill only gemm + a1, decode only a2 + a3.
V1 = {"a1": (0.2, 0.5, 0.0), "a2": (0.2, 0.0, 0.5), "a3": (0.2, 0.0, 0.5), "g1": (0.4, 0.5, 0.0)}
V2 = {"a1": (0.05, 0.1, 0.0), "a2": (0.05, 0.0, 0.5), "a3": (0.1, 0.0, 0.5), "g1": (0.8, 0.9, 0.0)}


def row(pid, *, t=None, roof=1.0, compiled=True, correct=True, native=True, run=0, submission="s", hardware="H200"):
    op = PROBLEMS[pid][0]
    base = {f.name: None for f in RESULTS}
    base.update(submission=submission, release="r", run_id="x", run=run, problem_id=pid, operator=op,
                hardware=hardware, device="cuda", shape_kind="problem",
                stage="done" if compiled and correct and native else "adoption", compiled=compiled,
                correct=correct, native=native, fallbacks=[], performance_measured=t is not None, t_measured_s=t,
                t_roofline_s=roof, evaluated_at="2026-12-01T12:00:00+00:00")
    return base


def frame(rows):
    return pl.from_arrow(results_table(rows))


def test_s_i_is_capped_roofline_fraction_and_zero_unless_compiled_correct_native():
    rows = [row("a1", t=2.0), row("a2", t=0.5), row("a3", t=4.0, native=False), row("g1", t=1.0, correct=False)]
    got = {r["problem_id"]: r["s_i"] for r in problem_scores(frame(rows)).to_dicts()}
    assert got == {"a1": 0.5, "a2": 1.0, "a3": 0.0, "g1": 0.0}


def test_s_agg_is_operator_weight_times_median_and_per_problem_variant():
    rows = [row("a1", t=2.0), row("a2", t=4.0), row("a3", t=1.0), row("g1", t=10.0)]
    (s,) = score(frame(rows), FakeRelease({1: V1}))
    # S_op(rms_norm) = median(0.5, 0.25, 1.0) = 0.5; S_op(gemm) = 0.1
    assert s["S_op"] == pytest.approx({"rms_norm": 0.5, "gemm": 0.1})
    assert s["S_agg"] == pytest.approx(0.6 * 0.5 + 0.4 * 0.1)
    assert s["S_problem_weighted"] == pytest.approx(0.2 * (0.5 + 0.25 + 1.0) + 0.4 * 0.1)
    # prefill: W_rms = 0.5 (a1 only: S_op,prefill = 0.5), W_gemm = 0.5; decode: W_rms = 1 over a2 and a3, whose
    # median is S_op,decode = median(0.25, 1.0) = 0.625 (a1 has no decode time: it does not count there)
    assert s["S_agg_phase"]["prefill"] == pytest.approx(0.5 * 0.5 + 0.5 * 0.1)
    assert s["S_agg_phase"]["decode"] == pytest.approx(0.625)
    assert s["S_op_phase"]["decode"] == pytest.approx({"rms_norm": 0.625})
    assert s["S_agg_phase"]["mixed"] is None
    assert s["S_problem_weighted_phase"]["prefill"] == pytest.approx(0.5 * 0.5 + 0.5 * 0.1)


def test_rescoring_under_another_weights_version_needs_only_the_results():
    rows = [row("a1", t=2.0), row("a2", t=4.0), row("a3", t=1.0), row("g1", t=10.0)]
    release = FakeRelease({1: V1, 2: V2})
    (v1,) = score(frame(rows), release, "v1")
    (v2,) = score(frame(rows), release)
    assert v1["weights_version"] == "v1" and v2["weights_version"] == "v2"
    assert v2["S_agg"] == pytest.approx(0.2 * 0.5 + 0.8 * 0.1)
    assert v1["S_agg"] != pytest.approx(v2["S_agg"])


def test_rates_weighted_and_unweighted_and_missing_problems_count_as_not_compiled():
    rows = [row("a1", t=1.0), row("a2", t=1.0, native=False), row("g1", t=None, compiled=False, correct=False,
                                                                       native=False)]
    (s,) = score(frame(rows), FakeRelease({1: V1}))
    assert s["evaluated"] == 3 and s["problems"] == 4
    assert s["coverage_weight"] == pytest.approx(0.8)
    assert s["rates"]["compile"] == {"unweighted": 0.5, "weighted": pytest.approx(0.4)}
    assert s["rates"]["native"] == {"unweighted": 0.25, "weighted": pytest.approx(0.2)}


def test_median_over_runs_and_bound_breakdown():
    rows = [row("a1", t=1.0, run=0), row("a1", t=2.0, run=1), row("a1", t=4.0, run=2), row("g1", t=2.0)]
    per = {r["problem_id"]: r for r in problem_scores(frame(rows)).to_dicts()}
    assert per["a1"]["s_i"] == 0.5 and per["a1"]["runs"] == 3
    (s,) = score(frame(rows), FakeRelease({1: V1}))
    assert s["bound"]["memory"]["problems"] == 3 and s["bound"]["compute"]["problems"] == 1
    assert s["bound"]["compute"]["s_weighted"] == pytest.approx(0.5)
    assert s["bound"]["memory"]["s_weighted"] == pytest.approx(0.5 / 3)


def test_submissions_and_hardware_are_scored_separately():
    rows = [row("a1", t=1.0), row("a1", t=1.0, submission="other", native=False),
            row("a1", t=2.0, hardware="H100")]
    scores = {(s["submission"], s["hardware"]): s for s in score(frame(rows), FakeRelease({1: V1}))}
    assert set(scores) == {("s", "H200"), ("other", "H200"), ("s", "H100")}
    assert scores[("other", "H200")]["rates"]["native"]["unweighted"] == 0.0


def test_results_file_round_trip_appends_and_rejects_bad_rows(tmp_path):
    path = tmp_path / "r.parquet"
    write_results([row("a1", t=1.0)], path)
    write_results([row("a1", t=2.0, run=1)], path)
    table = read_results(path)
    assert table.num_rows == 2 and table.schema == RESULTS
    with pytest.raises(ValueError, match="stage"):
        results_table([{**row("a1"), "stage": "finished"}])
    with pytest.raises(ValueError, match="missing columns"):
        results_table([{"problem_id": "a1"}])


def test_t_roofline_comes_from_the_release_never_from_the_results():
    honest = [row("a1", t=2.0), row("a2", t=4.0), row("a3", t=1.0), row("g1", t=10.0)]
    forged = [{**r, "t_roofline_s": 1e9} for r in honest]  # would make every S_i 1.0 if trusted
    (s_honest,) = score(frame(honest), FakeRelease({1: V1}))
    (s_forged,) = score(frame(forged), FakeRelease({1: V1}))
    assert s_forged["S_agg"] == pytest.approx(s_honest["S_agg"]) == pytest.approx(0.6 * 0.5 + 0.4 * 0.1)
    (slower,) = score(frame(honest), FakeRelease({1: V1}, roofline={"g1": 5.0}))  # the release's gemm: 5 s
    assert slower["S_op"]["gemm"] == pytest.approx(0.5)


def test_nothing_timed_means_not_measured_not_zero():
    rows = [row(pid, t=None) for pid in PROBLEMS]  # a CPU run: compiled, correct, native, no timing
    (s,) = score(frame(rows), FakeRelease({1: V1}))
    assert s["performance_measured"] is False
    assert s["S_agg"] is None and s["S_problem_weighted"] is None
    assert set(s["S_agg_phase"].values()) == {None} and set(s["S_op"].values()) == {None}
    assert s["rates"]["native"]["unweighted"] == 1.0


def test_an_operator_without_a_file_scores_zero_even_when_nothing_was_timed():
    """Regression: a CPU run of a submission with no gemm file showed gemm's S_op as "not measured"; no problem of
    it compiled, so its S_i are 0 with or without timing."""
    from kernels_eval.leaderboard import leaderboard_lines
    from kernels_eval.score_display import operator_table

    rows = [row(pid, t=None) for pid in ("a1", "a2", "a3")]  # rms_norm passed, untimed; no row for gemm at all
    (s,) = score(frame(rows), FakeRelease({1: V1}))
    assert s["S_op"] == {"gemm": 0.0, "rms_norm": None} and s["S_agg"] is None
    assert s["operators"]["gemm"]["S_op"] == 0.0 and s["operators"]["gemm"]["evaluated"] == 0
    (line,) = [x for x in operator_table(s) if x.strip().startswith("gemm")]
    assert line.split()[2] == "0.0000"
    (gemm_row,) = [x for x in leaderboard_lines([{"rank": 1, "submission": "s", **s}]) if x.strip().startswith("gemm")]
    assert gemm_row.split()[-1] == "0.0000"


def test_unsandboxed_rows_are_counted():
    rows = [{**row("a1", t=1.0), "sandboxed": True}, row("a2", t=1.0), {**row("g1", t=1.0), "sandboxed": False}]
    (s,) = score(frame(rows), FakeRelease({1: V1}))
    assert s["unsandboxed_rows"] == 2
