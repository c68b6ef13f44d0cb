"""The evaluator's verdict as a typed record (kernels_eval/harness/verdict.py): what it refuses, and the plain
data it gives the rows, progress files and the agent's feedback."""

from __future__ import annotations

import json

import pytest

from kernels_eval.harness.runner import Problem, result_row
from kernels_eval.harness.verdict import FIELDS, Verdict, as_verdict


def test_a_verdict_refuses_unknown_fields_and_stages():
    v = Verdict()
    with pytest.raises(AttributeError):
        v.t_measured = 1e-6  # a misspelt field is an error, not a new key
    with pytest.raises(AttributeError):
        v.update(stage="done", natve=True)
    with pytest.raises(ValueError, match="stage 'timing'"):
        Verdict(stage="timing")
    with pytest.raises(ValueError, match="stage 'finished'"):
        v.fail("finished", "x")
    with pytest.raises(ValueError, match="not verdict fields: problem_id"):
        as_verdict({"stage": "done", "problem_id": "p1"})


def test_plain_data_round_trips_and_never_carries_the_deferred_timing():
    v = Verdict(stage="performance", compiled=True, correct=True, native=True,
                pending={"shape": ({}, {}), "launches": [{"kernel": "k"}]})
    v.update(stage="done", t_measured_s=4e-6, kernel_us={"k": 4.0}, step_s={"worker_time": 0.5})
    data = v.as_dict()
    assert "pending" not in data and set(data) == FIELDS - {"pending"}
    assert as_verdict(json.loads(json.dumps(data))) == Verdict(**{**data})  # a progress record reads back
    assert as_verdict(v) is v


def test_a_row_is_made_from_a_verdict_or_its_plain_data_alike():
    p = Problem({"problem_id": "p1", "operator": "rms_norm", "init_kwargs": "{}", "input_kwargs": "{}"})
    v = Verdict(stage="done", compiled=True, correct=True, native=True, native_fraction=1.0,
                t_measured_s=4e-6, t_event_s=9e-6, n_timed=200)
    base = {"submission": "s", "release": "r", "run_id": "x", "run": 0, "hardware": "H200", "device": "cuda",
            "evaluated_at": None}
    row = result_row(base, p, v, None, 2e-6, "cuda")
    assert row == result_row(base, p, v.as_dict(), None, 2e-6, "cuda")
    assert row["roofline_fraction"] == pytest.approx(0.5) and row["t_event_s"] == 9e-6 and row["stage"] == "done"
    failed = result_row(base, p, Verdict(error="the submission has no rms_norm.py"), None, None, "cuda")
    assert failed["stage"] == "compile" and not failed["compiled"] and failed["fallbacks"] == []
