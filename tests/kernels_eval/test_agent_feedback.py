"""Feedback records on CPU: a failing adversarial submission gives its first mismatch (where, by how much) and a
fallback one its named fallbacks; no GPU figures on CPU and no roofline without --maintainer. The Nsight Compute
classification follows its rule."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernels_eval.agent import ncu
from kernels_eval.agent.feedback import first_mismatch, kernel_times, submission_feedback
from kernels_eval.harness.verdict import Verdict

ADVERSARIAL = Path(__file__).resolve().parents[1] / "adversarial"


@pytest.fixture(scope="module")
def release(atrex_dir, tmp_path_factory):
    from kernels_eval.harness.release_view import read_release_view
    from release.atrex import import_atrex

    out = tmp_path_factory.mktemp("feedback") / "release"
    import_atrex(atrex_dir, out)
    return read_release_view(out)


def _config():
    from kernels_eval.harness.runner import EvalConfig

    return EvalConfig(device="cpu", call_timeout_s=30.0)


def test_a_systematic_error_gives_where_and_by_how_much(release):
    records = submission_feedback(ADVERSARIAL / "loose_tolerance", release, _config(), ops=["rms_norm"], ncu=True)
    assert len(records) == 56 and {r.operator for r in records} == {"rms_norm"}
    r = records[0]
    assert r.stage == "correctness" and r.compiled and not r.correct
    assert r.mismatch.where.startswith("input set 1, {") and r.mismatch.output == "out"
    assert "systematic" in r.mismatch.detail and r.mismatch.max_abs_err > 0
    assert r.weight and r.adoption.declared_kernels == ["rms_norm_kernel"]
    assert r.kernels == [] and r.profile == [] and r.t_measured_s is None  # CPU: no GPU figures
    assert r.t_roofline_s is None and r.roofline_fraction is None
    assert "performance not measured" in r.note and "--ncu: no GPU here" in r.note


def test_a_partial_fallback_names_its_fallbacks(release):
    from kernels_eval.agent.feedback import feedback_json

    r = submission_feedback(ADVERSARIAL / "partial_fallback", release, _config(), ops=["rms_norm"])[0]
    assert r.stage == "adoption" and r.correct and not r.native and r.mismatch is None
    assert any(f.startswith("aten::rsqrt") for f in r.adoption.fallbacks), r.adoption.fallbacks
    assert r.adoption.declared_kernels == ["scale_kernel"]
    assert '"fallbacks": ["aten::' in feedback_json([r])


def test_mismatch_and_kernel_records_parse_the_evaluator_s_words():
    err = "input set 2, {\"shape\":[5,96]}: output 'out': 226/240 elements beyond atol=0.02 rtol=0.02 (max abs err 3.41)"
    m = first_mismatch("correctness", err, 3.41)
    assert m.where == "input set 2, {\"shape\":[5,96]}" and m.output == "out" and m.detail.startswith("output 'out'")
    assert first_mismatch("adoption", "PyTorch/library compute ran", None) is None
    times = kernel_times(Verdict(stage="done", kernel_us={"a": 2.0, "b": 5.0}))
    assert [(k.name, k.time_us) for k in times] == [("b", 5.0), ("a", 2.0)]
    assert kernel_times(Verdict()) == [] and kernel_times(None) == []


def test_ncu_bound_rule_and_csv_table():
    assert ncu.classify(30.0, 35.0) == "latency"
    assert ncu.classify(85.0, 40.0) == "memory" and ncu.classify(40.0, 40.0) == "memory"
    assert ncu.classify(20.0, 70.0) == "compute"
    # `ncu --csv` prints the program's own lines, then one row per (launch, metric) with these columns
    head = '"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size",' \
           '"Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"'
    metric_rows = [("0", "k1", ncu.METRICS[0], "%", "80.5"), ("0", "k1", ncu.METRICS[1], "%", "30.1"),
                   ("0", "k1", ncu.METRICS[2], "%", "61.0"), ("0", "k1", ncu.METRICS[3], "usecond", "4.50"),
                   ("1", "k2", ncu.METRICS[0], "%", "5.0"), ("1", "k2", ncu.METRICS[1], "%", "9.0"),
                   ("1", "k2", ncu.METRICS[2], "%", "12.0"), ("1", "k2", ncu.METRICS[3], "nsecond", "1,200")]
    lines = ["==PROF== Connected to process 1", head] + [
        f'"{i}","1","python","h","{k}","1","7","(128, 1, 1)","(64, 1, 1)","0","9.0","Command line profiler metrics",'
        f'"{m}","{u}","{v}"' for i, k, m, u, v in metric_rows]
    table = ncu.parse_csv("\n".join(lines))
    assert [(k["name"], k["bound"], round(k["time_us"], 2)) for k in table] == [("k1", "memory", 4.5),
                                                                                ("k2", "latency", 1.2)]
    assert table[0]["occupancy_pct"] == pytest.approx(61.0)
    cmd = ncu.ncu_command("ncu", Path("d.py"), {})
    assert cmd[:3] == ["ncu", "--clock-control", "none"] and ",".join(ncu.METRICS) in cmd and "--csv" in cmd
