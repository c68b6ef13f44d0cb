"""The library line (docs/library-baseline.md): every operator has a library path or a stated reason; each path is
real torch library calls judged against the reference (a wrong one is refused); `hotshape baseline` on CPU writes
signed baseline rows that `score` shows beside a submission and `leaderboard` keeps off the ranking; the library
S_op, S_agg and the fraction toward the roofline from timed rows, by their definitions."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from catalogue.registry import spec
from catalogue.operators import OPERATORS
from kernels_eval.library import paths
from kernels_eval.library.baseline import NO_PATH, judge
from kernels_eval.library.line import library_scores, split_baseline, toward_roofline, versus_library
from kernels_eval.library.option import Option
from kernels_eval.library.record import LIBRARY
from kernels_eval.results_schema import read_results
from tests.conftest import REPO

HOTSHAPE = str(Path(sys.executable).with_name("hotshape"))
HONEST = REPO / "tests" / "adversarial" / "honest"
OPS = "rms_norm,silu_and_mul,unified_attention,gated_delta_rule_update"


def hotshape(*args, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([HOTSHAPE, *map(str, args)], capture_output=True, text=True, timeout=600, env=env)


def test_every_operator_has_a_library_path_or_a_reason():
    assert set(paths.PATHS) | set(paths.NO_LIBRARY) == set(OPERATORS)
    assert not set(paths.PATHS) & set(paths.NO_LIBRARY)
    assert all(len(reason) > 20 for reason in paths.NO_LIBRARY.values())
    # the catalogue's heaviest operators go through a library kernel, not the reference's own ops
    for op in ("unified_attention", "attention_forward", "fused_moe", "rms_norm", "paged_attention_decode"):
        assert paths.PATHS[op] is not paths.reference_ops


LIBRARY_OPS = sorted(op for op in OPERATORS if op in paths.PATHS)


@pytest.mark.parametrize("operator", LIBRARY_OPS)
def test_library_path_matches_the_reference_on_cpu(operator):
    shapes = [s for s in spec(operator).smoke
              if not (operator == "block_scaled_mm" and (s.init.get("group_n"), s.init.get("group_k")) != (128, 128))]
    if not shapes:  # torch's block-scaled GEMM takes 128x128 blocks only: the smoke shape's 32x32 is refused by name
        verdict, path = judge(operator, spec(operator).smoke[0].init, spec(operator).smoke[0].inputs, "cpu")
        assert (verdict.stage, path) == ("compile", NO_PATH) and "128x128" in verdict.error
        return
    for smoke in shapes:
        verdict, path = judge(operator, smoke.init, smoke.inputs, "cpu", sets=2)
        assert verdict.stage == "done" and verdict.correct and not verdict.native, verdict.error
        assert path != NO_PATH and verdict.t_measured_s is None  # nothing is timed on a CPU


def test_operator_without_a_library_path_says_why():
    smoke = spec("gated_delta_rule_update").smoke[0]
    verdict, path = judge("gated_delta_rule_update", smoke.init, smoke.inputs, "cpu")
    assert path == NO_PATH and not verdict.compiled and verdict.error.startswith("no library path: ")


def test_a_wrong_library_path_is_refused_and_the_next_option_runs(monkeypatch):
    """An option that skips rms_norm's weight fails the reference check; the judge moves on to a right one."""
    import torch.nn.functional as F

    def builder(model, inputs, device):
        x, w = inputs["x"], inputs["weight"]
        yield Option("rms_norm without its weight", lambda: F.rms_norm(x, (x.shape[-1],), None, model.eps), lambda o: o)
        yield Option("rms_norm", lambda: F.rms_norm(x, (x.shape[-1],), w, model.eps), lambda o: o)

    monkeypatch.setitem(paths.PATHS, "rms_norm", builder)
    smoke = spec("rms_norm").smoke[0]
    verdict, path = judge("rms_norm", smoke.init, smoke.inputs, "cpu")
    assert (verdict.stage, path) == ("done", "rms_norm")

    def wrong_only(model, inputs, device):
        yield from list(builder(model, inputs, device))[:1]
    monkeypatch.setitem(paths.PATHS, "rms_norm", wrong_only)
    verdict, path = judge("rms_norm", smoke.init, smoke.inputs, "cpu")
    assert verdict.stage == "correctness" and not verdict.correct and path == NO_PATH
    assert "rms_norm without its weight" in verdict.error and "beyond atol" in verdict.error


def test_toward_roofline_by_its_definition():
    assert toward_roofline(0.5, 0.5) == 0.0
    assert toward_roofline(1.0, 0.5) == 1.0
    assert toward_roofline(0.25, 0.5) == pytest.approx(-0.5)  # slower than the library: negative
    assert toward_roofline(0.9, 1.0) is None and toward_roofline(None, 0.5) is None


@pytest.fixture(scope="module")
def release(atrex_dir, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("release") / "atrex"
    done = hotshape("import-atrex", atrex_dir, "--out", out)
    assert done.returncode == 0, done.stderr
    return out


@pytest.fixture(scope="module")
def results(release, tmp_path_factory) -> dict[str, Path]:
    """A CPU library baseline of four operators and the honest submission's CPU run, in two results files."""
    tmp = tmp_path_factory.mktemp("results")
    lib, sub = tmp / "library.parquet", tmp / "honest.parquet"
    # the session's results key (tests/conftest.py sets it per test; a module fixture runs before that)
    env = {**os.environ, "HOTSHAPE_KEY_DIR": str(tmp_path_factory.getbasetemp() / "results-key")}
    done = hotshape("baseline", "--release", release, "--device", "cpu", "--ops", OPS, "--out", lib, "--json",
                    env=env)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["no_library_path"] == ["gated_delta_rule_update"] and summary["timed"] == 0
    done = hotshape("eval", HONEST, "--release", release, "--device", "cpu", "--ops", "rms_norm",
                    "--out", sub, env=env)
    assert done.returncode == 0, done.stderr
    return {"library": lib, "honest": sub}


def test_baseline_rows_are_marked_and_never_native(results):
    rows = read_results(results["library"]).to_pylist()
    assert {r["submission"] for r in rows} == {LIBRARY} and all(r["baseline"] for r in rows)
    assert not any(r["native"] for r in rows) and all(r["run_sealed"] and r["signature"] for r in rows)
    by_op = {}
    for r in rows:
        by_op.setdefault(r["operator"], set()).add((r["stage"], r["correct"], r["baseline"]))
    assert by_op["rms_norm"] == {("done", True, "torch.nn.functional.rms_norm")}
    assert by_op["gated_delta_rule_update"] == {("compile", False, NO_PATH)}
    assert all("scaled_dot_product_attention" in b for _, _, b in by_op["unified_attention"])
    assert all(r["baseline"] is None for r in read_results(results["honest"]).to_pylist())


def test_score_shows_the_library_beside_the_submission(results, release, tmp_path):
    report = tmp_path / "report.html"
    done = hotshape("score", results["honest"], "--library", results["library"], "--release", release,
                    "--report", report, "--per-problem")
    assert done.returncode == 0, done.stderr
    assert "vs library: S_agg over the operators with a library path" in done.stdout
    assert "S_op lib" in done.stdout and "toward roofline" in done.stdout
    assert "library on cpu: S_agg not measured" in done.stdout
    lines = [ln for ln in done.stdout.splitlines() if ln.strip().startswith("rms_norm ")]
    assert len(lines) == 2 and lines[1].rstrip().endswith("torch.nn.functional.rms_norm")  # score table, then vs library
    assert any(ln.strip().startswith(pid[:18]) for ln in done.stdout.splitlines()
               for pid in read_results(results["library"]).column("problem_id").to_pylist()[:1])  # --per-problem
    assert "ran unsandboxed" not in done.stdout  # the baseline runs no candidate: no sandbox to count
    page = report.read_text()
    assert "Against the library" in page and "torch.nn.functional.rms_norm" in page
    done = hotshape("score", results["honest"], "--library", results["library"], "--release", release, "--json")
    data = json.loads(done.stdout)
    assert [s["submission"] for s in data["scores"]] == ["honest"] and len(data["library"]) == 1
    vs = data["scores"][0]["vs_library"]
    assert vs["operators"]["gated_delta_rule_update"]["path"] is None
    assert vs["operators"]["rms_norm"]["path"] == "torch.nn.functional.rms_norm"


def test_leaderboard_keeps_the_library_off_the_ranking(results, release):
    done = hotshape("leaderboard", results["honest"], results["library"], "--release", release, "--json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert [e["submission"] for e in data["leaderboard"]] == ["honest"]
    assert [lib["hardware"] for lib in data["library"]] == ["cpu"]
    done = hotshape("leaderboard", results["honest"], results["library"], "--release", release)
    ranked = [ln for ln in done.stdout.splitlines() if ln.strip()[:2] in ("1 ", "2 ")]
    assert len(ranked) == 1 and "honest@cpu" in ranked[0]
    assert any(ln.strip().startswith("-  library on cpu") for ln in done.stdout.splitlines())


def test_library_line_from_timed_rows(release):
    """Timed rows of two rms_norm problems (above their roofline, as physics requires): S_lib, S_op, the library's
    S_agg and the fraction toward the roofline, each by its definition."""
    from release.bundle import read_release

    rel = read_release(release)
    roof = rel.sealed("roofline").filter(pl.col("hardware") == "H200")
    pids = rel.manifest.filter(pl.col("operator") == "rms_norm")["problem_id"].sort().to_list()[:2]
    t_roof = {r["problem_id"]: r["t_roofline_s"] for r in roof.to_dicts() if r["problem_id"] in pids}
    base = {"hardware": "H200", "operator": "rms_norm", "compiled": True, "correct": True, "run": 0,
            "performance_measured": True, "t_roofline_s": None}
    lib_t = {pids[0]: 2 * t_roof[pids[0]], pids[1]: 4 * t_roof[pids[1]]}   # S_lib 0.5, 0.25
    sub_t = {pids[0]: 1.25 * t_roof[pids[0]], pids[1]: 8 * t_roof[pids[1]]}  # S_sub 0.8, 0.125
    rows = pl.DataFrame([{**base, "submission": LIBRARY, "problem_id": p, "native": False, "t_measured_s": t,
                          "baseline": "torch.nn.functional.rms_norm", "error": None} for p, t in lib_t.items()]
                        + [{**base, "submission": "sub", "problem_id": p, "native": True, "t_measured_s": t,
                            "baseline": None, "error": None} for p, t in sub_t.items()])
    subs, lib_rows = split_baseline(rows)
    assert subs["submission"].unique().to_list() == ["sub"] and lib_rows.height == 2
    line = library_scores(lib_rows, rel)["H200"]
    assert line["S_op"]["rms_norm"] == pytest.approx(statistics.median([0.5, 0.25]))
    assert line["S_agg"] == pytest.approx(0.375)  # the only operator covered: S_agg is its S_op
    assert line["coverage_weight"] == pytest.approx(rel.weights().join(
        rel.manifest.filter(pl.col("operator") == "rms_norm").select("problem_id"), on="problem_id")["weight"].sum())
    from kernels_eval.scoring import score

    s = score(subs, rel, intervals=False)[0]
    vs = versus_library(s, subs, rel, line)
    assert s["S_op"]["rms_norm"] == pytest.approx(statistics.median([0.8, 0.125, *([0.0] * 54)]))
    r = vs["operators"]["rms_norm"]
    assert r["toward_roofline"] == pytest.approx((r["S_op_submission"] - 0.375) / (1 - 0.375))
    by_pid = {p["problem_id"]: p for p in vs["problems"]}
    assert by_pid[pids[0]]["S_library"] == pytest.approx(0.5) and by_pid[pids[0]]["S_submission"] == pytest.approx(0.8)
    assert by_pid[pids[0]]["toward_roofline"] == pytest.approx((0.8 - 0.5) / 0.5)
    assert by_pid[pids[1]]["toward_roofline"] == pytest.approx((0.125 - 0.25) / 0.75)  # slower than the library
    assert by_pid[pids[1]]["t_library_s"] == pytest.approx(lib_t[pids[1]])


def test_child_processes_judge_alike_and_a_stalled_child_costs_one_problem_each(release, tmp_path):
    """The GPU's isolation, run on CPU: verdicts from a child equal the in-process ones; a child that reports
    nothing in time is stopped, its problem recorded as an evaluator error, and a new child takes the rest."""
    from kernels_eval.library.record import run_baseline

    pids = sorted(r["problem_id"] for r in read_results_release(release) if r["operator"] == "silu_and_mul")[:2]
    here = run_baseline(tmp_path / "a.parquet", release, "cpu", problem_ids=pids, isolate=False)
    child = run_baseline(tmp_path / "b.parquet", release, "cpu", problem_ids=pids, isolate=True)
    assert [(r["problem_id"], r["stage"], r["baseline"]) for r in here] == \
           [(r["problem_id"], r["stage"], r["baseline"]) for r in child]
    assert {r["stage"] for r in child} == {"done"}
    stalled = run_baseline(tmp_path / "c.parquet", release, "cpu", problem_ids=pids, isolate=True,
                           problem_timeout_s=0.01)
    assert [r["problem_id"] for r in stalled] == pids
    assert all(not r["compiled"] and "no verdict within" in r["error"] for r in stalled)
    assert read_results(tmp_path / "c.parquet").num_rows == 2


def read_results_release(release: Path) -> list[dict]:
    import pyarrow.parquet as pq

    return pq.read_table(release / "public" / "manifest.parquet").to_pylist()
