"""`hotshape eval --lanes`: several operators checked at once on one device, then the checked problems timed one
at a time; problems too large to share a lane checked in a large lane beside the lanes, those that ran out of
memory judged again alone. The plan with judges that record when and where they ran; a lanes run on CPU with
real interpreter workers."""

from __future__ import annotations

import shutil
import threading
import time
from pathlib import Path

import pytest

from kernels_eval.harness import operator_judge, runner, schedule
from kernels_eval.harness.release_view import ReleaseView
from kernels_eval.harness.verdict import Verdict
from kernels_eval.harness.worker_commands import Init

HONEST = Path(__file__).resolve().parents[1] / "adversarial" / "honest"


def _view(problems: dict[str, int]) -> ReleaseView:
    rows = [{"problem_id": f"{op}-{i}", "operator": op, "init_kwargs": "{}", "input_kwargs": "{}"}
            for op, n in problems.items() for i in range(n)]
    return ReleaseView(path=Path("/nonexistent"), name="tiny", problems=rows, roofline_rows=[])


def _overlaps(a: tuple[float, float], b: tuple[float, float]) -> bool:
    return a[0] < b[1] and b[0] < a[1]


def _phase(workdir) -> str:
    """The phase directory ("lanes", "alone") a judge's scratch directory lies in (lanes/lane-k[/op#j])."""
    return next((d.name for d in (Path(workdir), *Path(workdir).parents) if d.name in ("lanes", "alone")),
                Path(workdir).name)


def _recording_judge(seen: dict, order: list):
    def judge(op, file, plist, config, workdir, progress, worker=None, defer_timing=False):
        for p in plist:
            seen[p.problem_id] = (config.gpu_memory_fraction, threading.current_thread().name, config.device_index,
                                  _phase(workdir), config.keep_autotuning)
            order.append(p.problem_id)
        time.sleep(0.01)
        return {p.problem_id: {"stage": "done", "compiled": True, "correct": True, "native": True} for p in plist}
    return judge


def _recorded_gpu_run(monkeypatch, tmp_path, ops) -> tuple[dict, list, Path]:
    """(seen, order, submission dir) for a run on a pretend GPU whose judges record where they ran."""
    seen, order = {}, []
    monkeypatch.setattr(schedule, "_judge_operator", _recording_judge(seen, order))
    monkeypatch.setattr(operator_judge, "start_worker", lambda *a, **k: (_ for _ in ()).throw(OSError("no spawn")))
    import torch

    monkeypatch.setattr(torch.cuda, "set_device", lambda index: None)
    sub = tmp_path / "sub"
    sub.mkdir()
    for op in ops:
        (sub / f"{op}.py").write_text("class Model: pass\n")
    return seen, order, sub


def test_lanes_split_the_devices_memory_between_their_workers(monkeypatch, tmp_path):
    ops = ("rms_norm", "silu_and_mul", "layer_norm", "l2_norm", "gemm", "embedding")
    seen, order, sub = _recorded_gpu_run(monkeypatch, tmp_path, ops)
    view = _view({op: 2 for op in ops})
    config = runner.EvalConfig(device="cuda", hardware="cpu", sandbox=False, gpu_memory_fraction=0.45)
    rows = runner.evaluate(sub, view, config=config, lanes=4)
    assert len(rows) == 12 and all(r["stage"] == "done" for r in rows)
    assert [v[0] for v in seen.values()] == [pytest.approx(0.2)] * 12  # four workers share 80% of the device
    assert len({v[1] for v in seen.values()}) == 4  # four lane threads
    seen.clear()
    runner.evaluate(sub, view, config=config, lanes=2, devices=[0, 1])  # two devices, two lanes each
    assert len({v[1] for v in seen.values()}) == 4 and {v[0] for v in seen.values()} == {0.4}
    by_device: dict[int, set] = {}
    for v in seen.values():
        by_device.setdefault(v[2], set()).add(v[1])
    assert {d: len(t) for d, t in by_device.items()} == {0: 2, 1: 2}  # two lanes on each device
    with pytest.raises(ValueError, match="lanes"):
        runner.evaluate(sub, view, config=config, lanes=0)


def test_problems_too_large_to_share_a_lane_are_checked_in_a_large_lane_beside_the_lanes(monkeypatch, tmp_path):
    seen, spans = {}, {}

    def judge(op, file, plist, config, workdir, progress, worker=None, defer_timing=False):
        began = time.monotonic()
        time.sleep(0.15)
        for p in plist:
            seen[p.problem_id] = (config.gpu_memory_fraction, threading.current_thread().name, Path(workdir).name,
                                  config.keep_autotuning, defer_timing)
            spans[p.problem_id] = (began, time.monotonic())
        return {p.problem_id: {"stage": "done", "compiled": True, "correct": True, "native": True} for p in plist}

    monkeypatch.setattr(schedule, "_judge_operator", judge)
    monkeypatch.setattr(operator_judge, "start_worker", lambda *a, **k: (_ for _ in ()).throw(OSError("no spawn")))
    sub = tmp_path / "sub"
    sub.mkdir()
    for op in ("rms_norm", "gemm", "silu_and_mul"):
        (sub / f"{op}.py").write_text("class Model: pass\n")
    view = _view({"rms_norm": 2, "gemm": 3, "silu_and_mul": 2})
    gib = 1 << 30
    view.roofline_rows = [  # interface bytes of some problems (the rest: sized by the work model, or unknown)
        {"problem_id": "gemm-0", "hardware": "H200", "t_roofline_s": 1e-3, "bytes_read": 5 * gib, "bytes_written": 0},
        {"problem_id": "gemm-1", "hardware": "H200", "t_roofline_s": 1e-3, "bytes_read": 2 * gib,
         "bytes_written": 2 * gib},
        {"problem_id": "rms_norm-1", "hardware": "B200", "t_roofline_s": 1e-3, "bytes_read": 2 * gib,
         "bytes_written": 3 * gib}]
    config = runner.EvalConfig(device="cuda", hardware="cpu", sandbox=False, gpu_memory_fraction=0.45)
    rows = runner.evaluate(sub, view, config=config, lanes=3)
    assert len(rows) == 7 and all(r["stage"] == "done" for r in rows)
    large = {"gemm-0", "rms_norm-1"}  # over 4 GiB; gemm-1 is exactly 4 GiB
    rest = set(seen) - large
    # one large lane, each problem in a worker (a scratch directory) of its own, with 40% of the device
    assert {seen[pid][1] for pid in large} == {"eval-large"} and seen["gemm-0"][2] != seen["rms_norm-1"][2]
    assert [seen[pid][0] for pid in sorted(large)] == [pytest.approx(0.4)] * 2
    # the other two lanes share 45%; every check leaves its timing for later and keeps no autotuning
    assert [seen[pid][0] for pid in sorted(rest)] == [pytest.approx(0.45 / 2)] * 5
    assert len({seen[pid][1] for pid in rest}) == 2 and not {seen[pid][1] for pid in rest} & {"eval-large"}
    assert all(v[4] and not v[3] for v in seen.values())
    # checked at the same time as the lanes' problems, not after them
    assert any(_overlaps(spans[a], spans[b]) for a in large for b in rest)
    assert not _overlaps(spans["gemm-0"], spans["rms_norm-1"])  # one after another
    seen.clear()
    runner.evaluate(sub, view, config=config)  # one lane: nothing is set apart
    assert all(v[0] == 0.45 and v[1] != "eval-large" and not v[4] for v in seen.values()) and len(seen) == 7


def test_two_lanes_of_real_interpreter_workers_judge_as_one_does(monkeypatch, tmp_path):
    sub = tmp_path / "sub"
    sub.mkdir()
    for op in ("rms_norm", "silu_and_mul"):
        shutil.copy(HONEST / f"{op}.py", sub / f"{op}.py")
    view = _view({"rms_norm": 2, "silu_and_mul": 2})
    config = runner.EvalConfig(device="cpu", hardware="cpu", sandbox=False, sets=1)
    one = runner.evaluate(sub, view, config=config)
    spans: dict[str, tuple[float, float]] = {}
    real = schedule._judge_operator

    def timed_judge(op, *args, **kwargs):
        t0 = time.monotonic()
        try:
            return real(op, *args, **kwargs)
        finally:
            spans[op] = (t0, time.monotonic())

    monkeypatch.setattr(schedule, "_judge_operator", timed_judge)
    two = runner.evaluate(sub, view, config=config, lanes=2)
    verdict = lambda rows: {r["problem_id"]: (r["stage"], r["correct"], r["native"]) for r in rows}  # noqa: E731
    assert verdict(two) == verdict(one) == {pid: ("done", True, True) for pid in verdict(one)}
    assert _overlaps(spans["rms_norm"], spans["silu_and_mul"])  # judged at the same time


def test_lanes_check_everything_first_then_time_one_problem_at_a_time(monkeypatch, tmp_path):
    """On a GPU, lanes defer the performance stage: every problem's checks end before the first timing starts,
    the timings run one at a time in one thread, and each row carries its check's and its timing's seconds."""
    events, lock = [], threading.Lock()

    def judge(op, file, plist, config, workdir, progress, worker=None, defer_timing=False):
        out = {}
        for p in plist:
            t0 = time.monotonic()
            time.sleep(0.02)
            v = Verdict(stage="performance", compiled=True, correct=True, native=True, eval_s=0.5,
                        pending={"shape": ({}, {}), "recorded": [], "state": {}})
            if p.problem_id == "gemm-1":  # failed its checks: never timed
                v = Verdict(stage="correctness", compiled=True, correct=False, error="wrong")
            assert defer_timing
            with lock:
                events.append(("check", p.problem_id, t0, time.monotonic(), threading.current_thread().name))
            progress(p, v)
            out[p.problem_id] = v
        return out

    def time_checked(self, v):
        assert self.config.keep_autotuning and self.config.gpu_memory_fraction == 0.45  # alone on the device
        t0 = time.monotonic()
        time.sleep(0.01)
        assert v.pending is not None
        v.pending = None
        with lock:
            events.append(("time", self.operator, t0, time.monotonic(), threading.current_thread().name))
        return v.update(stage="done", t_measured_s=1e-5)

    monkeypatch.setattr(schedule, "_judge_operator", judge)
    monkeypatch.setattr(runner.OperatorJudge, "time_checked", time_checked)
    monkeypatch.setattr(operator_judge, "start_worker", lambda *a, **k: (_ for _ in ()).throw(OSError("no spawn")))
    sub = tmp_path / "sub"
    sub.mkdir()
    for op in ("rms_norm", "gemm", "silu_and_mul"):
        (sub / f"{op}.py").write_text("class Model: pass\n")
    view = _view({"rms_norm": 3, "gemm": 2, "silu_and_mul": 2})
    announced = []
    rows = runner.evaluate(sub, view, config=runner.EvalConfig(device="cuda", hardware="cpu", sandbox=False),
                           lanes=3, progress=lambda p, v: announced.append(p.problem_id))
    by_id = {r["problem_id"]: r for r in rows}
    assert len(rows) == 7 and by_id["gemm-1"]["stage"] == "correctness"
    assert all(r["stage"] == "done" and r["eval_s"] >= 0.5 for pid, r in by_id.items() if pid != "gemm-1")
    checks = [e for e in events if e[0] == "check"]
    timings = [e for e in events if e[0] == "time"]
    assert len(checks) == 7 and len(timings) == 6 and len({e[4] for e in checks}) == 3
    assert max(e[3] for e in checks) <= min(e[2] for e in timings)  # every check before the first timing
    assert len({e[4] for e in timings}) == 1  # one timing thread for the one device
    ordered = sorted(timings, key=lambda e: e[2])
    assert all(a[3] <= b[2] for a, b in zip(ordered, ordered[1:]))  # never two at once
    assert sorted(announced) == sorted(by_id)  # each problem announced once, when its row is final


def test_a_problem_out_of_a_lanes_memory_is_judged_again_alone(monkeypatch, tmp_path):
    calls: list[tuple[str, float, str]] = []

    def judge(op, file, plist, config, workdir, progress, worker=None, defer_timing=False):
        out = {}
        for p in plist:
            phase = _phase(workdir)
            calls.append((p.problem_id, config.gpu_memory_fraction, phase))
            if p.problem_id == "gemm-1" and phase == "lanes":
                v = {"stage": "compile", "compiled": False, "error": "call failed: OutOfMemoryError: CUDA out of "
                                                                     "memory. Tried to allocate 3.50 GiB."}
            elif p.problem_id == "rms_norm-0":  # the candidate's own failure: kept as it is
                v = {"stage": "correctness", "compiled": True, "correct": False, "error": "wrong"}
            else:
                v = {"stage": "done", "compiled": True, "correct": True, "native": True}
            progress(p, v)
            out[p.problem_id] = v
        return out

    monkeypatch.setattr(schedule, "_judge_operator", judge)
    monkeypatch.setattr(operator_judge, "start_worker", lambda *a, **k: (_ for _ in ()).throw(OSError("no spawn")))
    sub = tmp_path / "sub"
    sub.mkdir()
    for op in ("rms_norm", "gemm"):
        (sub / f"{op}.py").write_text("class Model: pass\n")
    view = _view({"rms_norm": 2, "gemm": 2})
    config = runner.EvalConfig(device="cuda", hardware="cpu", sandbox=False, gpu_memory_fraction=0.45)
    rows = {r["problem_id"]: r for r in runner.evaluate(sub, view, config=config, lanes=4)}
    assert len(rows) == 4 and rows["gemm-1"]["stage"] == "done" and rows["rms_norm-0"]["stage"] == "correctness"
    assert [c for c in calls if c[0] == "gemm-1"] == [("gemm-1", pytest.approx(0.2), "lanes"),
                                                       ("gemm-1", 0.45, "alone")]
    assert sum(c[0] == "rms_norm-0" for c in calls) == 1
    calls.clear()
    one = {r["problem_id"]: r for r in runner.evaluate(sub, view, config=config)}  # one lane: no second try
    assert one["gemm-1"]["stage"] == "compile" and "OutOfMemoryError" in one["gemm-1"]["error"]
    assert len(calls) == 4


def test_lanes_below_one_is_refused_before_anything_is_read(tmp_path):
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "pipelines.cli", "eval", str(HONEST), "--release",
                           str(tmp_path / "none"), "--lanes", "0", "--out", str(tmp_path / "r.parquet")],
                          capture_output=True, text=True, timeout=300, cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 2 and done.stderr.strip() == "hotshape eval: --lanes 0: at least 1"
    assert not (tmp_path / "r.parquet").exists()


def test_an_operator_longer_than_half_a_lanes_share_is_split_over_lanes(monkeypatch, tmp_path):
    """Seen on H200: one operator's 25 problems kept one lane busy for 400 s while the others were done
    after 90. Its problems are dealt over parts judged in other lanes, each problem judged once."""
    seen, order, sub = _recorded_gpu_run(monkeypatch, tmp_path, ("unified_attention", "rms_norm", "mrope"))
    view = _view({"unified_attention": 25, "rms_norm": 4, "mrope": 2})
    config = runner.EvalConfig(device="cuda", hardware="cpu", sandbox=False)
    rows = runner.evaluate(sub, view, config=config, lanes=6)
    assert len(rows) == 31 and len(order) == len(set(order)) == 31 and all(r["stage"] == "done" for r in rows)
    heavy = {v[1] for pid, v in seen.items() if pid.startswith("unified_attention")}
    assert len(heavy) >= 4  # judged in four lanes or more at once
    assert len({v[1] for pid, v in seen.items() if pid.startswith("mrope")}) == 1  # a short one stays whole
    seen.clear()
    runner.evaluate(sub, view, config=config)  # one lane: one worker judges the operator's problems in order
    assert len({v[1] for v in seen.values()}) == 1


def test_split_units_deal_problems_round_robin_and_keep_costs():
    problems = [runner.Problem({"problem_id": f"a-{i}", "operator": "a", "init_kwargs": "{}",
                                "input_kwargs": "{}"}) for i in range(7)]
    small = [runner.Problem({"problem_id": "b-0", "operator": "b", "init_kwargs": "{}", "input_kwargs": "{}"})]
    # two lanes: half a lane's share is 72 / 2 / 2 = 18 s, so "a" (70 s) becomes four parts and "b" stays whole
    units, costs = schedule._split_units({"a": problems, "b": small}, {"a": 70.0, "b": 2.0}, bins=2)
    assert {u: [p.problem_id for p in ps] for u, ps in units.items()} == {
        "a#0": ["a-0", "a-4"], "a#1": ["a-1", "a-5"], "a#2": ["a-2", "a-6"], "a#3": ["a-3"], "b": ["b-0"]}
    assert costs == {"a#0": 20.0, "a#1": 20.0, "a#2": 20.0, "a#3": 10.0, "b": 2.0}
    assert {schedule._unit_op(u) for u in units} == {"a", "b"}
    # no more parts than problems
    units, _ = schedule._split_units({"a": problems[:2]}, {"a": 70.0}, bins=8)
    assert set(units) == {"a#0", "a#1"}


def test_a_prestarted_gpu_worker_is_warmed_ahead_and_its_judge_waits_for_that(monkeypatch, tmp_path):
    """`_warm_ahead` sends a prestarted worker its "warm" command from a thread; the judge that takes the
    worker waits for that reply before its own first command, so the two never interleave on one pipe."""
    sent, lock = [], threading.Lock()

    class Worker:
        ready, warming = True, None

        def request(self, message, timeout_s):
            with lock:
                sent.append(("start", message["cmd"]))
            time.sleep(0.2 if message["cmd"] == "warm" else 0.0)
            with lock:
                sent.append(("end", message["cmd"]))
            return {"ok": True}

    gpu = runner.EvalConfig(device="cuda", hardware="cpu", sandbox=False)
    worker = Worker()
    judge = runner.OperatorJudge("rms_norm", HONEST / "rms_norm.py", gpu, tmp_path, worker)
    assert schedule._warm_ahead(worker, gpu) is worker  # warmed from here on, the judge built first (that takes time)
    assert worker.warming is not None and worker.warming.is_alive()
    assert judge._request(Init(operator="rms_norm", file=str(HONEST / "rms_norm.py"), device="cuda", init_kwargs={},
                               outputs=["out"], exchange=str(tmp_path)))["ok"]
    assert sent == [("start", "warm"), ("end", "warm"), ("start", "init"), ("end", "init")]
    assert worker.warming is None and judge.spent["warm_wait"] > 0.05
    cpu = runner.EvalConfig(device="cpu", hardware="cpu", sandbox=False)
    assert schedule._warm_ahead(Worker(), cpu).warming is None  # nothing to make ahead on cpu


def test_a_real_worker_answers_warm_before_its_init(tmp_path):
    from kernels_eval.harness.process import WorkerProcess

    worker = WorkerProcess(device="cpu", log_path=tmp_path / "w.log", memory_bytes=4 << 30, start_timeout_s=120,
                           sandboxed=False, scratch=tmp_path, use_cgroup=False)
    try:
        reply = worker.request({"cmd": "warm", "device": "cpu"}, 120)
        assert reply["ok"] and reply["took_s"]["warm"] >= 0
        assert not worker.request({"cmd": "nonsense"}, 120)["ok"]  # the command table is what answered
    finally:
        worker.close()


def test_the_timing_phase_runs_no_candidate_process_and_shares_one_replay(monkeypatch, tmp_path):
    """The timing phase times every checked problem in one trusted replay process per device (harness/judge.py):
    no worker is started there, each operator's judge gets that replay, and a problem whose error says the CUDA
    context was lost gets the next problems a fresh replay."""
    events: list[tuple[str, str]] = []

    class FakeReplayer:
        made = 0

        def __init__(self, name, config):
            FakeReplayer.made += 1
            self.number = FakeReplayer.made

        def close(self):
            events.append(("replay closed", str(self.number)))

    class Judge:
        def __init__(self, op, file, config, workdir, worker=None, replayer=None):
            assert worker is None and replayer is not None
            self.op, self.replayer = op, replayer

        def time_checked(self, verdict):
            events.append(("timed", f"{self.op}@{self.replayer.number}"))
            if self.op == "op2":
                return verdict.update(stage="performance", pending=None, error="an illegal memory access was encountered")
            return verdict.update(stage="done", pending=None)

        def close(self):
            pass

    def no_worker(*args, **kwargs):
        raise AssertionError("the timing phase started a worker")

    monkeypatch.setattr(schedule, "_prestart", no_worker)
    monkeypatch.setattr(operator_judge, "start_worker", no_worker)
    monkeypatch.setattr(schedule, "Replayer", FakeReplayer)
    monkeypatch.setattr(schedule, "OperatorJudge", Judge)
    ops = [f"op{k}" for k in range(4)]
    items = [(runner.Problem({"problem_id": f"{op}-{j}", "operator": op, "init_kwargs": "{}", "input_kwargs": "{}"}),
              Verdict(stage="performance", pending={"shape": ({}, {}), "recorded": [], "state": {}}))
             for op in ops for j in (1, 0)]  # as the lanes left them: not in problem order
    rows = []
    config = runner.EvalConfig(device="cpu", hardware="cpu", sandbox=False)
    schedule._time_checked(items, {op: tmp_path / f"{op}.py" for op in ops}, config, tmp_path,
                         lambda p, v, index, announce=False: rows.append((p.problem_id, v.stage)))
    # in problem-id order within each operator, whatever order the lanes checked them in (the autotuning
    # protocol decides a tuning key on the first problem that reaches it)
    assert [pid for pid, _ in rows] == [f"{op}-{j}" for op in ops for j in range(2)]
    timed = [who for kind, who in events if kind == "timed"]
    assert timed[:4] == ["op0@1", "op0@1", "op1@1", "op1@1"]  # one replay for the operators before the fault
    assert timed[4:] == ["op2@1", "op2@2", "op3@3", "op3@3"]  # each lost context: a fresh replay
    assert [who for kind, who in events if kind == "replay closed"] == ["1", "2", "3"]


def test_the_timing_phase_starts_the_workers_of_the_operators_the_autotuning_protocol_sweeps_ahead(monkeypatch,
                                                                                                   tmp_path):
    """With the autotuning protocol, an operator whose choices are not all kept sweeps in its worker: that worker is
    started TIMING_AHEAD operators ahead and handed to the operator's judge; the others get none."""
    events: list[tuple[str, str]] = []

    class FakeReplayer:
        def __init__(self, name, config):
            pass

        def close(self):
            pass

    class Judge:
        def __init__(self, op, file, config, workdir, worker=None, replayer=None):
            events.append(("judge", f"{op}:{worker}"))

        def time_checked(self, verdict):
            return verdict.update(stage="done", pending=None)

        def close(self):
            pass

    def prestart(spares, config, workdir, op, file, key=None):
        if op not in spares:
            spares[op] = f"worker-{op}"
            events.append(("started", op))

    ops = [f"op{k}" for k in range(7)]
    swept = {"op1", "op2", "op3", "op4", "op6"}
    monkeypatch.setattr(schedule, "_prestart", prestart)
    monkeypatch.setattr(schedule, "Replayer", FakeReplayer)
    monkeypatch.setattr(schedule, "OperatorJudge", Judge)
    monkeypatch.setattr(schedule, "sweeps", lambda config, file, shapes: file.stem in swept and shapes == [({}, {})])
    items = [(runner.Problem({"problem_id": f"{op}-0", "operator": op, "init_kwargs": "{}", "input_kwargs": "{}"}),
              Verdict(stage="performance", pending={"shape": ({}, {}), "recorded": [], "state": {}})) for op in ops]
    config = runner.EvalConfig(device="cuda", hardware="H200", sandbox=False, autotune="protocol")
    schedule._time_checked(items, {op: tmp_path / f"{op}.py" for op in ops}, config, tmp_path,
                           lambda p, v, index, announce=False: None)
    assert schedule.TIMING_AHEAD == 3
    # while op0 (nothing to sweep) is timed, the next four that sweep start; op6 once op2 is reached
    assert events == [("started", "op1"), ("started", "op2"), ("started", "op3"), ("started", "op4"),
                      ("judge", "op0:None"), ("judge", "op1:worker-op1"), ("started", "op6"),
                      ("judge", "op2:worker-op2"), ("judge", "op3:worker-op3"), ("judge", "op4:worker-op4"),
                      ("judge", "op5:None"), ("judge", "op6:worker-op6")]


def test_a_lane_starts_workers_a_few_units_ahead(monkeypatch, tmp_path):
    """While a lane judges one unit, the workers of its next LANE_AHEAD units are starting (each start took
    ~12 s on H200, longer than checking a small operator)."""
    events: list[tuple[str, str]] = []

    def prestart(spares, config, workdir, op, file, key=None):
        if (key or op) not in spares:
            spares[key or op] = object()
            events.append(("started", key or op))

    def judge(op, file, plist, config, workdir, progress, worker=None, defer_timing=False):
        assert worker is not None  # each unit's judge takes the worker started for it
        events.append(("judged", op))
        return {p.problem_id: Verdict(stage="done") for p in plist}

    monkeypatch.setattr(schedule, "_prestart", prestart)
    monkeypatch.setattr(schedule, "_judge_operator", judge)
    monkeypatch.setattr(schedule.registry, "is_benchmarkable", lambda op: True)
    ops = ["rms_norm", "layer_norm", "silu_and_mul", "l2_norm", "gated_rms_norm"]
    by_op = {op: [runner.Problem({"problem_id": f"{op}-0", "operator": op, "init_kwargs": "{}",
                                  "input_kwargs": "{}"})] for op in ops}
    rows = []
    config = runner.EvalConfig(device="cpu", hardware="cpu", sandbox=False)
    schedule._run_shard(ops, by_op, {op: tmp_path / f"{op}.py" for op in ops}, config, tmp_path,
                      lambda p, v, index, announce=False: rows.append(p.problem_id))
    assert len(rows) == len(ops)
    first = events.index(("judged", ops[0]))
    assert [op for _, op in events[:first]] == ops[:1 + schedule.LANE_AHEAD]
    for k, op in enumerate(ops):  # by a unit's judging, the next LANE_AHEAD units' workers are starting
        started = [o for kind, o in events[:events.index(("judged", op))] if kind == "started"]
        assert started == ops[:min(len(ops), k + 1 + schedule.LANE_AHEAD)]


def test_a_run_without_a_stated_hardware_judges_with_the_detected_one(monkeypatch, tmp_path):
    """The detected hardware is in every judge's config, not only in the rows: the autotuning protocol keeps its
    choices per hardware (a config left at None filed them all under one name)."""
    seen = []

    def judge(op, file, plist, config, workdir, progress, worker=None, defer_timing=False):
        seen.append(config.hardware)
        return {p.problem_id: Verdict(stage="done") for p in plist}

    monkeypatch.setattr(schedule, "_judge_operator", judge)
    monkeypatch.setattr(runner, "detect_hardware", lambda device, known=(): "H200")
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "rms_norm.py").write_text("class Model: pass\n")
    rows = runner.evaluate(sub, _view({"rms_norm": 2}), config=runner.EvalConfig(device="cpu", sandbox=False))
    assert seen == ["H200"] and {r["hardware"] for r in rows} == {"H200"}
