"""Every adversarial submission gets its expected verdict on CPU (Triton interpreter, smoke shapes), the honest
ones pass, and a candidate that kills or hangs its worker fails only its own problems."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("triton")

from kernels_eval.harness.runner import EvalConfig, evaluate  # noqa: E402
from tests.conftest import REPO, load_script  # noqa: E402

ADVERSARIAL = Path(__file__).resolve().parents[1] / "adversarial"
CASES = sorted(p.name for p in ADVERSARIAL.iterdir() if (p / "expected.json").is_file())
CPU_CASES = [c for c in CASES if "cpu" in json.loads((ADVERSARIAL / c / "expected.json").read_text())["devices"]]
CONFIG = dict(device="cpu", call_timeout_s=10.0)

error_expected = load_script(REPO / "benchmarks" / "eval_gpu.py").error_expected  # expected.json's reader


@pytest.fixture(scope="module")
def release(atrex_dir, tmp_path_factory):
    from kernels_eval.harness.release_view import read_release_view
    from release.atrex import import_atrex

    out = tmp_path_factory.mktemp("eval") / "release"
    import_atrex(atrex_dir, out)
    return read_release_view(out)


def _verdicts(rows):
    by_op = {}
    for r in rows:
        by_op.setdefault(r["operator"], r)
    return by_op


def test_every_exploit_has_a_readme_and_an_expected_verdict():
    assert len(CASES) >= 15 and "honest" in CASES
    for case in CASES:
        assert (ADVERSARIAL / case / "README.md").read_text().strip(), case
        assert list((ADVERSARIAL / case).glob("*.py")), case


@pytest.mark.parametrize("case", CPU_CASES)
def test_adversarial_verdict_on_cpu(case, release):
    expected = json.loads((ADVERSARIAL / case / "expected.json").read_text())
    ops = expected.get("operators") or [expected["operator"]]
    config = EvalConfig(**{**CONFIG, **expected.get("config", {})})
    rows = evaluate(ADVERSARIAL / case, release, config=config, ops=ops)
    n_problems = sum(p["operator"] in ops for p in release.problems)
    assert len(rows) == n_problems and {r["shape_kind"] for r in rows} == {"smoke"}
    for op, r in _verdicts(rows).items():
        got = {k: r[k] for k in expected["verdict"]}
        assert got == expected["verdict"], f"{case}/{op}: {r['error']}"
        assert error_expected(expected, "cpu") in (r["error"] or ""), r["error"]
        if "fallbacks_contain" in expected:
            assert any(expected["fallbacks_contain"] in f for f in r["fallbacks"]), r["fallbacks"]
        assert r["performance_measured"] is False and r["t_measured_s"] is None


def test_a_worker_that_exits_fails_its_operator_and_the_run_goes_on(release, tmp_path):
    sub = tmp_path / "mixed"
    sub.mkdir()
    shutil.copy(ADVERSARIAL / "exit_mid_call" / "rms_norm.py", sub / "rms_norm.py")
    shutil.copy(ADVERSARIAL / "honest" / "silu_and_mul.py", sub / "silu_and_mul.py")
    v = _verdicts(evaluate(sub, release, config=EvalConfig(**CONFIG), ops=["rms_norm", "silu_and_mul", "l2_norm"]))
    assert v["rms_norm"]["stage"] == "compile" and "exited with status 0" in v["rms_norm"]["error"]
    assert v["silu_and_mul"]["stage"] == "done" and v["silu_and_mul"]["native"]
    assert v["l2_norm"]["stage"] == "compile" and "no l2_norm.py" in v["l2_norm"]["error"]


def test_eval_and_score_commands(release, tmp_path):
    cli = ("import sys, argparse\nfrom kernels_eval import eval_commands\n"
           "p = argparse.ArgumentParser(); s = p.add_subparsers(dest='c', required=True)\n"
           "eval_commands.register(s); a = p.parse_args(sys.argv[1:]); sys.exit(a.func(a))\n")
    out = tmp_path / "results.parquet"
    first = next(r for r in release.problems if r["operator"] == "silu_and_mul")["problem_id"]
    run = subprocess.run([sys.executable, "-c", cli, "eval", str(ADVERSARIAL / "honest"), "--release",
                          str(release.path), "--device", "cpu", "--problems", first, "--out", str(out), "--json"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    doc = json.loads(run.stdout)
    (p,) = doc["problems"]
    assert set(p) == {"problem_id", "operator", "stage", "compiled", "correct", "native", "fallbacks", "error",
                      "t_measured_s", "roofline_fraction"}
    assert p["problem_id"] == first and p["stage"] == "done" and doc["summary"]["native_rate"] == 1.0
    run = subprocess.run([sys.executable, "-c", cli, "score", str(out), "--release", str(release.path), "--json"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    (s,) = json.loads(run.stdout)["scores"]
    # nothing is timed on CPU: S_agg is not measured (null), never 0
    assert s["evaluated"] == 1 and s["S_agg"] is None and s["performance_measured"] is False
    assert s["rates"]["native"]["unweighted"] == pytest.approx(1 / len(release.problems))
