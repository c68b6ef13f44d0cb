"""`hotshape eval --devices`: the LPT plan, the one-GPU sandbox view, device_index in results, and sharded runs
on CPU (interpreter workers standing in for GPUs: `evaluate(devices=...)` takes any device list)."""

from __future__ import annotations

import json
import shutil
import threading
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from kernels_eval.harness import operator_judge, runner, sandbox, schedule
from kernels_eval.harness.release_view import ReleaseView
from kernels_eval.harness.shard import lpt_plan, makespan, operator_costs, parse_devices, recorded_seconds

HONEST = Path(__file__).resolve().parents[1] / "adversarial" / "honest"


def _graham_bound(costs: dict[str, float], n: int) -> float:
    return sum(costs.values()) / n + (1 - 1 / n) * max(costs.values())


def test_lpt_plan_is_deterministic_longest_first_and_within_the_list_bound():
    costs = {"a": 7.0, "b": 7.0, "c": 6.0, "d": 5.0, "e": 4.0, "f": 2.0, "g": 2.0, "h": 1.0}
    plan = lpt_plan(costs, 3)
    assert plan == lpt_plan(dict(reversed(list(costs.items()))), 3)  # input order does not matter
    assert plan == [["a", "e", "h"], ["b", "f", "g"], ["c", "d"]]  # ties: by name, then the lower device
    for shard in plan:
        assert [costs[op] for op in shard] == sorted((costs[op] for op in shard), reverse=True)
    assert sorted(op for shard in plan for op in shard) == sorted(costs)
    for n in (1, 2, 3, 5, 8, 12):
        assert makespan(lpt_plan(costs, n), costs) <= _graham_bound(costs, n) + 1e-9
    assert lpt_plan(costs, 12)[8:] == [[], [], [], []]
    with pytest.raises(ValueError):
        lpt_plan(costs, 0)


def test_the_recorded_table_splits_the_full_run_evenly_over_two_gpus():
    recorded = recorded_seconds()
    assert len(recorded) == 30 and sum(n for _, n in recorded.values()) == 440
    costs = operator_costs({op: n for op, (_, n) in recorded.items()}, recorded)
    total = sum(costs.values())
    assert abs(total - sum(s for s, _ in recorded.values())) < 1e-6
    two = lpt_plan(costs, 2)
    assert makespan(two, costs) <= 0.51 * total
    assert "unified_attention" in two[0] and two[0][0] == "unified_attention"  # the longest goes first
    for n in (2, 4, 8):
        assert makespan(lpt_plan(costs, n), costs) <= _graham_bound(costs, n) + 1e-9


def test_costs_scale_with_the_problems_run_and_fall_back_to_counts():
    recorded = {"slow": (100.0, 10), "fast": (10.0, 10)}
    costs = operator_costs({"slow": 2, "fast": 10, "new": 4}, recorded)
    assert costs == {"slow": 20.0, "fast": 10.0, "new": pytest.approx(4 * 110 / 20)}
    assert operator_costs({"x": 3, "y": 5}, {}) == {"x": 3.0, "y": 5.0}  # no table: problem counts alone


def test_parse_devices():
    assert parse_devices("all", 4) == [0, 1, 2, 3]
    assert parse_devices("0, 2", 4) == [0, 2]
    for bad in ("0,0", "4", "a", "", "-1"):
        with pytest.raises(ValueError):
            parse_devices(bad, 4)
    with pytest.raises(ValueError, match="no CUDA device"):
        parse_devices("all", 0)


def test_a_worker_is_shown_only_its_gpu():
    nodes = ["/dev/nvidia0", "/dev/nvidia1", "/dev/nvidia10", "/dev/nvidia2", "/dev/nvidia-caps", "/dev/nvidia-uvm",
             "/dev/nvidiactl"]
    one = sandbox.gpu_nodes(2, {}, nodes)
    assert one == ["/dev/nvidia-caps", "/dev/nvidia-uvm", "/dev/nvidia2", "/dev/nvidiactl"]
    assert "/dev/nvidia10" in sandbox.gpu_nodes(3, {}, nodes)  # by minor number, not by name order
    container = ["/dev/nvidia4", "/dev/nvidia6", "/dev/nvidiactl"]  # a container shown two GPUs: CUDA's 0 and 1
    assert sandbox.gpu_nodes(1, {}, container) == ["/dev/nvidia6", "/dev/nvidiactl"]
    assert sandbox.gpu_nodes(None, {}, nodes) == sorted(nodes)
    assert sandbox.gpu_nodes(0, {"CUDA_VISIBLE_DEVICES": "3,5"}, nodes) == sorted(nodes)  # mapping unknown: all
    assert sandbox.visible_devices(1, {}) == "1"
    assert sandbox.visible_devices(1, {"CUDA_VISIBLE_DEVICES": "3,5"}) == "5"
    with pytest.raises(ValueError):
        sandbox.visible_devices(2, {"CUDA_VISIBLE_DEVICES": "3,5"})


def test_the_sandbox_sets_the_workers_cuda_visible_devices(tmp_path):
    argv, env = sandbox.bwrap_command("/usr/bin/bwrap", ["true"], device="cuda", scratch=tmp_path,
                                      environ={"PATH": "/usr/bin"}, visible_device=1)
    assert env["CUDA_VISIBLE_DEVICES"] == "1"
    at = argv.index("CUDA_VISIBLE_DEVICES")
    assert argv[at - 1] == "--setenv" and argv[at + 1] == "1"
    _, env = sandbox.bwrap_command("/usr/bin/bwrap", ["true"], device="cuda", scratch=tmp_path,
                                   environ={"PATH": "/usr/bin"})
    assert "CUDA_VISIBLE_DEVICES" not in env


def _row(**extra) -> dict:
    row = {"submission": "s", "release": "r", "run_id": "x", "run": 0, "problem_id": "p0", "operator": "rms_norm",
           "hardware": "H200", "device": "cuda", "file_sha256": "0" * 64, "shape_kind": "problem", "stage": "done",
           "compiled": True, "correct": True, "native": True, "native_fraction": 1.0, "fallbacks": [],
           "error": None, "max_abs_err": 0.0, "performance_measured": True, "t_measured_s": 1e-5, "t_p10_s": 1e-5,
           "t_p90_s": 1e-5, "n_timed": 10, "t_roofline_s": 1e-5, "roofline_fraction": 1.0, "t_reference_s": None,
           "speedup": None, "eval_s": 1.0, "evaluated_at": "2026-12-01T00:00:00+00:00", "t_event_s": 1e-5,
           "sandboxed": True, "release_digest": "d", "manifest_sha256": "m"}
    return {**row, **extra}


def test_device_index_is_signed_where_set_and_older_rows_still_verify(tmp_path):
    from kernels_eval.results_key import host_key, row_verifies, sign_row
    from kernels_eval.results_schema import read_results, results_table

    key = host_key()
    old = sign_row(_row(), key)  # a row as signed before the column existed
    assert row_verifies({**old, "device_index": None}, key)
    new = sign_row(_row(device_index=1), key)
    assert row_verifies(new, key) and not row_verifies({**new, "device_index": 0}, key)
    # a file written before the column: read with nulls there, its rows verify
    table = results_table([old])
    path = tmp_path / "old.parquet"
    pq.write_table(table.drop_columns(["device_index"]), path)
    back = read_results(path).to_pylist()
    assert back[0]["device_index"] is None and row_verifies(back[0], key)
    assert read_results(path).schema.field("device_index").type == pa.int32()


def _view(problems: dict[str, int]) -> ReleaseView:
    rows = [{"problem_id": f"{op}-{i}", "operator": op, "init_kwargs": "{}", "input_kwargs": "{}"}
            for op, n in problems.items() for i in range(n)]
    return ReleaseView(path=Path("/nonexistent"), name="tiny", problems=rows, roofline_rows=[])


class OneWriter:
    """A sink that fails the test when two device threads reach it at once."""

    def __init__(self) -> None:
        self.lock, self.rows = threading.Lock(), []

    def __call__(self, row: dict) -> dict:
        assert self.lock.acquire(blocking=False), "two rows reached the sink at once"
        try:
            self.rows.append(row)
            return row
        finally:
            self.lock.release()


def test_sharded_run_fails_only_the_problems_of_the_operator_that_raised(monkeypatch, tmp_path):
    """The merge without workers: a fake judge per operator; one raises midway, one device cannot start."""
    judged_on: dict[str, str] = {}

    def judge(op, file, plist, config, workdir, progress, worker=None, defer_timing=False):
        judged_on[op] = threading.current_thread().name
        if op == "silu_and_mul":
            progress(plist[0], {"stage": "done", "compiled": True, "correct": True, "native": True})
            raise RuntimeError("lost the device")
        return {p.problem_id: {"stage": "done", "compiled": True, "correct": True, "native": True} for p in plist}

    monkeypatch.setattr(schedule, "_judge_operator", judge)
    monkeypatch.setattr(operator_judge, "start_worker", lambda *a, **k: (_ for _ in ()).throw(OSError("no spawn")))
    sub = tmp_path / "sub"
    sub.mkdir()
    for op in ("rms_norm", "silu_and_mul", "layer_norm", "l2_norm"):
        (sub / f"{op}.py").write_text("class Model: pass\n")
    view = _view({"rms_norm": 3, "silu_and_mul": 3, "layer_norm": 2, "l2_norm": 2})
    sink = OneWriter()
    config = runner.EvalConfig(device="cpu", hardware="cpu", sandbox=False)
    rows = runner.evaluate(sub, view, config=config, sink=sink, devices=[3, 5])
    assert sorted(r["problem_id"] for r in rows) == sorted(p["problem_id"] for p in view.problems)
    assert rows == sink.rows
    by_id = {r["problem_id"]: r for r in rows}
    assert by_id["silu_and_mul-0"]["stage"] == "done"  # judged before the error: kept
    for pid in ("silu_and_mul-1", "silu_and_mul-2"):
        assert by_id[pid]["stage"] == "compile" and "lost the device" in by_id[pid]["error"]
    assert all(r["stage"] == "done" for r in rows if r["operator"] != "silu_and_mul")
    assert {r["device_index"] for r in rows} == {3, 5}
    for op in ("rms_norm", "silu_and_mul", "layer_norm", "l2_norm"):  # an operator stays on one device
        assert len({r["device_index"] for r in rows if r["operator"] == op}) == 1
    assert len(set(judged_on.values())) == 2  # two device threads
    single = runner.evaluate(sub, view, config=config)  # without devices: one thread, no index on cpu
    assert {r["device_index"] for r in single} == {None}


def test_a_device_that_cannot_be_selected_fails_only_its_shard(monkeypatch, tmp_path):
    import torch

    def set_device(index):
        if index == 1:
            raise RuntimeError("CUDA error: no device 1")

    monkeypatch.setattr(torch.cuda, "set_device", set_device)
    monkeypatch.setattr(schedule, "_judge_operator", lambda op, file, plist, *a, **k: {
        p.problem_id: {"stage": "done", "compiled": True, "correct": True, "native": True} for p in plist})
    monkeypatch.setattr(operator_judge, "start_worker", lambda *a, **k: (_ for _ in ()).throw(OSError("no spawn")))
    sub = tmp_path / "sub"
    sub.mkdir()
    for op in ("rms_norm", "silu_and_mul"):
        (sub / f"{op}.py").write_text("class Model: pass\n")
    view = _view({"rms_norm": 2, "silu_and_mul": 1})
    config = runner.EvalConfig(device="cuda", hardware="cpu", sandbox=False)
    rows = runner.evaluate(sub, view, config=config, devices=[0, 1])
    assert len(rows) == 3
    on = {r["device_index"] for r in rows if r["stage"] == "done"}
    failed = [r for r in rows if r["stage"] != "done"]
    assert on == {0} and failed and all(r["device_index"] == 1 and "device 1 unusable" in r["error"]
                                        for r in failed)


@pytest.mark.parametrize("sandboxed", [False, True])
def test_interpreter_workers_in_parallel_one_dies(tmp_path, sandboxed):
    """Two CPU 'devices' judging at once with real interpreter workers: the worker of silu_and_mul exits on import
    and fails its problem only; every problem is in the merged rows once, with its device."""
    if sandboxed and sandbox.check_bwrap() is not None:
        pytest.skip(sandbox.check_bwrap())
    sub = tmp_path / "sub"
    sub.mkdir()
    shutil.copy(HONEST / "rms_norm.py", sub / "rms_norm.py")
    (sub / "silu_and_mul.py").write_text("import os\nos._exit(3)\n")
    view = _view({"rms_norm": 2, "silu_and_mul": 1})
    sink = OneWriter()
    config = runner.EvalConfig(device="cpu", hardware="cpu", sandbox=sandboxed, sets=1)
    rows = runner.evaluate(sub, view, config=config, sink=sink, devices=[0, 1])
    assert sorted(r["problem_id"] for r in rows) == ["rms_norm-0", "rms_norm-1", "silu_and_mul-0"]
    by_op = {}
    for r in rows:
        by_op.setdefault(r["operator"], []).append(r)
    assert all(r["stage"] == "done" for r in by_op["rms_norm"]), json.dumps(by_op["rms_norm"], default=str)[:800]
    dead = by_op["silu_and_mul"][0]
    assert dead["stage"] == "compile" and "exited" in dead["error"]
    # the recorded table has rms_norm longer than silu_and_mul for these counts: device 0 gets it
    assert {r["device_index"] for r in by_op["rms_norm"]} == {0} and dead["device_index"] == 1


def test_sharded_rows_are_merged_into_one_signed_results_file(monkeypatch, tmp_path):
    from kernels_eval.eval_commands import evaluate_to
    from kernels_eval.results_key import host_key, row_verifies
    from kernels_eval.results_schema import read_results

    monkeypatch.setattr(schedule, "_judge_operator", lambda op, file, plist, *a, **k: {
        p.problem_id: {"stage": "done", "compiled": True, "correct": True, "native": True} for p in plist})
    monkeypatch.setattr(operator_judge, "start_worker", lambda *a, **k: (_ for _ in ()).throw(OSError("no spawn")))
    sub = tmp_path / "sub"
    sub.mkdir()
    for op in ("rms_norm", "silu_and_mul", "layer_norm"):
        (sub / f"{op}.py").write_text("class Model: pass\n")
    view = _view({"rms_norm": 4, "silu_and_mul": 3, "layer_norm": 2})
    out = tmp_path / "results.parquet"
    config = runner.EvalConfig(device="cpu", hardware="cpu", sandbox=False)
    recorded = evaluate_to(out, sub, view, config, devices=[0, 1, 2])
    stored = read_results(out).to_pylist()
    assert len(stored) == len(recorded.rows) == 9
    assert sorted(r["problem_id"] for r in stored) == sorted(p["problem_id"] for p in view.problems)
    assert {r["device_index"] for r in stored} == {0, 1, 2}
    key = host_key()
    assert all(row_verifies(r, key) for r in stored)
    assert not recorded.journal.exists()  # merged, then the journal removed


def test_host_gpus_counts_without_torch():
    from kernels_eval.harness.shard import host_gpus

    assert host_gpus({}, ["/dev/nvidia0", "/dev/nvidia1", "/dev/nvidiactl", "/dev/nvidia-uvm"]) == 2
    assert host_gpus({"CUDA_VISIBLE_DEVICES": "2,3,5"}, []) == 3
    assert host_gpus({"CUDA_VISIBLE_DEVICES": ""}, ["/dev/nvidia0"]) == 0
    assert host_gpus({"CUDA_VISIBLE_DEVICES": "-1"}, ["/dev/nvidia0"]) == 0
    assert host_gpus({}, []) == 0


def _bench():
    import importlib.util

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "eval_multi_gpu.py"
    spec = importlib.util.spec_from_file_location("eval_multi_gpu", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_multi_gpu_comparison_checks_verdicts_timings_and_wall(tmp_path):
    import argparse

    from kernels_eval.results_schema import results_table

    bench = _bench()
    out = tmp_path / "multi_gpu"
    out.mkdir()
    single = [_row(problem_id=f"p{i}", t_measured_s=1e-4 * (i + 1), eval_s=2.0) for i in range(6)]
    multi = [{**r, "t_measured_s": r["t_measured_s"] * 1.01, "device_index": i % 2} for i, r in enumerate(single)]
    pq.write_table(results_table(single), out / "single.parquet")
    pq.write_table(results_table(multi), out / "multi.parquet")
    walls = [{"mode": "single", "pid": 1, "rows": 6, "wall_s": 50.0}, {"mode": "single", "pid": 2, "rows": 1,
             "wall_s": 50.0}, {"mode": "multi", "pid": 3, "rows": 6, "wall_s": 52.0}]
    (out / "walls.jsonl").write_text("".join(json.dumps(w) + "\n" for w in walls))
    args = argparse.Namespace(out=str(tmp_path))
    assert bench.compare(args) == 0  # 52 / 100 <= 0.55, timings +1%
    report = json.loads((out / "compare.json").read_text())
    assert report["devices_used"] == 2 and report["rows_per_device"] == {"0": 3, "1": 3}  # JSON keys
    multi[2] = {**multi[2], "stage": "correctness", "correct": False}
    pq.write_table(results_table(multi), out / "multi.parquet")
    assert bench.compare(args) == 1
    assert json.loads((out / "compare.json").read_text())["verdicts_differ"] == ["p2"]


def test_devices_on_cpu_is_refused_before_anything_is_read(tmp_path):
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "pipelines.cli", "eval", str(HONEST), "--release",
                           str(tmp_path / "none"), "--device", "cpu", "--devices", "0,1", "--out",
                           str(tmp_path / "r.parquet")], capture_output=True, text=True, timeout=300,
                          cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 2 and "--devices needs --device cuda" in done.stderr
    assert not (tmp_path / "r.parquet").exists()
