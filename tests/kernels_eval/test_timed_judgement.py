"""The parent's judgement of a GPU timing (OperatorJudge._performance) on worker replies built here: spans from the
records, the timed window's ownership, kept outputs judged on their seeds, device-busy time for data-dependent
sizes. The worker's side needs a GPU (benchmarks/eval_gpu_selftest.py runs it); this is the rest of the path."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from kernels_eval.harness import runner  # noqa: E402
from kernels_eval.harness.spans import END_MARKER, START_MARKER  # noqa: E402
from kernels_eval.harness.verdict import Verdict  # noqa: E402

OWN = [{"name": "rms_norm_kernel", "file": "/sub/rms_norm.py", "owned": True, "count": 3}]


def records(calls: list[list[tuple[str, int]]], between: list[tuple[str, int]] = ()) -> dict:
    """A records table (timing.kineto_records' form) of timed calls back to back on one stream."""
    names: list[str] = []
    rows, t, corr = [], 0, 0

    def add(name, dur):
        nonlocal t, corr
        if name is None:  # the device idle (waiting for the host's next launch)
            t += dur
            return
        corr += 1
        if name not in names:
            names.append(name)
        rows.append([corr, 0, t, t + dur, 7, names.index(name), 0])
        t += dur

    for kernels in calls:
        add(START_MARKER, 60_000)
        for name, dur in kernels:
            add(name, dur)
        add(END_MARKER, 1_000)
        for name, dur in between:
            add(name, dur)
    return {"names": names, "kinds": ["kernel"], "rows": rows}


class Judge(runner.OperatorJudge):
    """An rms_norm judge whose worker is a canned `time` reply and whose imports are plain tensors."""

    def __init__(self, reply: dict, tmp_path) -> None:
        super().__init__("rms_norm", tmp_path / "rms_norm.py", runner.EvalConfig(device="cpu"), tmp_path)
        self.reply = reply

    def _ensure_init(self, init_kwargs):
        pass

    def _request(self, message, timeout_s=None):
        assert message["cmd"] == "time" and message["samples"] == self.config.timed_samples
        return self.reply

    def _import(self, descs):
        return descs


SHAPE = ({"eps": 1e-6}, {"token_count": 4, "hidden_size": 64})


def verdict():
    return Verdict(stage="adoption", compiled=True, correct=True, native=True)


def run(tmp_path, reply, data_dependent=False):
    judge = Judge({"ok": True, "host_s": 1.0, "sm_clock_mhz": 1980, "launches": [], **reply}, tmp_path)
    if data_dependent:
        judge.spec = type(judge.spec)(**{**judge.spec.__dict__, "data_dependent_size": True,
                                         "timing_rule": "device_busy"})
    model = judge.reference.Model(**SHAPE[0])
    try:
        return judge._performance(verdict(), model, SHAPE, OWN)
    finally:
        judge.close()


def reference_output(seed: int):
    """The reference's output on the input set drawn with `seed` (as the parent draws it)."""
    from kernels_eval.registry import load_reference

    ref = load_reference("rms_norm")
    g = torch.Generator(device="cpu")
    g.manual_seed(seed)
    inputs = ref.make_inputs(**SHAPE[1], device="cpu", generator=g)
    return ref.Model(**SHAPE[0])(**inputs)


def test_the_kernel_span_is_t_measured_and_the_events_are_kept_beside(tmp_path):
    reply = {"times_s": [9e-6] * 4, "marked": 6, "records": records([[("rms_norm_kernel", 4_000)]] * 6,
                                                                    between=[("aten_normal", 3_000)]),
             "samples": [{"seed": 11, "call": 2, "outputs": {"out": reference_output(11)}}]}
    v = run(tmp_path, reply)
    assert v.stage == "done", v.error
    assert v.t_measured_s == pytest.approx(4e-6) and v.t_event_s == pytest.approx(9e-6)
    assert v.n_timed == 4 and v.native_fraction == 1.0 and v.timed_samples == 1
    # the feedback's per-kernel figure: µs per timed call by name, the evaluator's markers and what ran between
    # the calls left out
    assert v.kernel_us == {"rms_norm_kernel": pytest.approx(4.0)}


def test_a_kept_output_that_is_not_its_sets_result_fails_at_performance(tmp_path):
    stale = reference_output(10)  # the previous call's output, returned again
    reply = {"times_s": [9e-6] * 2, "marked": 2, "records": records([[("one_element", 1_000)]] * 2),
             "samples": [{"seed": 11, "call": 1, "outputs": {"out": stale}}]}
    own = [{"name": "one_element", "file": "/sub/rms_norm.py", "owned": True, "count": 2}]
    judge = Judge({"ok": True, "host_s": 1.0, "launches": [], **reply}, tmp_path)
    v = judge._performance(verdict(), judge.reference.Model(**SHAPE[0]), SHAPE, own)
    judge.close()
    assert v.stage == "performance" and not v.correct
    assert "a timed call's output was wrong" in v.error and "timed call 1" in v.error


def test_library_kernels_in_the_timed_window_make_it_not_native_by_name(tmp_path):
    calls = [[("rms_norm_kernel", 500), ("void at::native::vectorized_rms_norm_kernel<float>", 9_500)]] * 3
    v = run(tmp_path, {"times_s": [1e-5] * 3, "marked": 3, "records": records(calls), "samples": []})
    assert v.stage == "adoption" and not v.native
    assert v.error.startswith("timed calls: only 5.0%")
    assert any("vectorized_rms_norm_kernel" in f for f in v.fallbacks)


def test_the_submission_s_kernels_between_timed_calls_are_refused(tmp_path):
    calls = [[("one_element", 1_000)]] * 2
    own = OWN + [{"name": "one_element", "file": "/sub/rms_norm.py", "owned": True, "count": 2}]
    judge = Judge({"ok": True, "host_s": 1.0, "launches": [], "times_s": [1e-5] * 2, "marked": 2, "samples": [],
                   "records": records(calls, between=[("rms_norm_kernel", 8_000)])}, tmp_path)
    v = judge._performance(verdict(), judge.reference.Model(**SHAPE[0]), SHAPE, own)
    judge.close()
    assert v.stage == "adoption" and "between timed calls" in v.error and "rms_norm_kernel" in v.error


def test_unattributable_records_refuse_the_timing(tmp_path):
    v = run(tmp_path, {"times_s": [1e-5] * 3, "marked": 4, "records": records([[("rms_norm_kernel", 1)]] * 3),
                       "samples": []})
    assert v.stage == "performance" and "could not be attributed to calls" in v.error


def test_a_data_dependent_size_is_timed_by_its_kernels_busy_time_not_the_hosts_round_trip(tmp_path):
    # each call: a counting kernel, 40 µs of the device idle while the host reads the size back, a scatter kernel
    calls = [[("rms_norm_kernel", 3_000), (None, 40_000), ("rms_norm_kernel", 2_000)]] * 3
    reply = {"times_s": [6e-5] * 3, "marked": 3, "records": records(calls), "samples": []}
    v = run(tmp_path, reply, data_dependent=True)
    assert v.stage == "done" and v.t_measured_s == pytest.approx(5e-6) and v.t_event_s == pytest.approx(6e-5)
    v = run(tmp_path, reply)  # the same records under the kernel-span rule: the wait counts
    assert v.stage == "done" and v.t_measured_s == pytest.approx(45e-6)


def test_only_the_data_dependent_operator_is_timed_by_busy_time():
    from catalogue.registry import operator_names, spec

    rules = {op: spec(op).timing_rule for op in operator_names()}
    assert {op for op, rule in rules.items() if rule == "device_busy"} == {
        op for op in rules if spec(op).data_dependent_size} == {"moe_align_block_size"}
