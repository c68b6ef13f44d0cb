"""A worker's autotuning benchmarks: triton.testing.do_bench's defaults shortened (harness/autotune_cache.py),
what Triton's autotuner resolves at each tuning; explicit arguments pass through; a worker's init applies the
run's setting before its guarded functions are taken."""

from __future__ import annotations

import inspect

import pytest

triton = pytest.importorskip("triton")

from kernels_eval.harness import autotune_cache, guarded, runner, worker  # noqa: E402


def test_do_bench_defaults_are_shortened_and_explicit_arguments_kept(monkeypatch):
    import triton.testing

    seen = []

    def plain(fn, warmup=25, rep=100, grad_to_none=None, quantiles=None, return_mode="mean"):
        seen.append((warmup, rep, quantiles, return_mode))
        return 1.0

    monkeypatch.setattr(triton.testing, "do_bench", plain)
    autotune_cache.shorter_benchmarks(5, 20)
    autotune_cache.shorter_benchmarks(5, 20)  # applied again: still one wrapper around Triton's own
    from triton.testing import do_bench  # how Triton's driver hands the autotuner its benchmarker

    assert do_bench is not plain and do_bench.__wrapped__ is plain
    do_bench(lambda: None, quantiles=(0.5, 0.2, 0.8))  # as Autotuner._bench calls it
    do_bench(lambda: None, 1, 2, return_mode="median")
    assert seen == [(5, 20, (0.5, 0.2, 0.8), "mean"), (1, 2, None, "median")]
    assert inspect.signature(do_bench, follow_wrapped=False).parameters["warmup"].default == 5


def test_the_run_setting_reaches_the_worker_before_its_guard_is_snapshot(monkeypatch, tmp_path):
    sent = []

    class Worker:
        ready, warming = True, None

        def request(self, message, timeout_s):
            sent.append(message)
            return {"ok": True}

    config = runner.EvalConfig(device="cpu", hardware="cpu", sandbox=False)
    judge = runner.OperatorJudge("rms_norm", tmp_path / "rms_norm.py", config, tmp_path, Worker())
    judge._init({})
    assert sent[-1]["autotune_bench_ms"] == [5.0, 20.0] == list(config.autotune_bench_ms)  # a JSON list on the pipe
    source = inspect.getsource(worker.Worker.init)
    assert "triton.testing.do_bench" in guarded.names()
    assert source.index("shorter_benchmarks(") < source.index("self.guard = snapshot()")


def test_benchmarks_are_counted_and_run_with_the_profilers_collection_paused(monkeypatch):
    import torch
    import triton.testing

    from kernels_eval.harness import profiler_guard

    toggles = []
    monkeypatch.setitem(profiler_guard._ORIGINAL, "_toggle_collection_dynamic",
                        lambda enable, activities: toggles.append((enable, sorted(map(str, activities)))))
    monkeypatch.setattr(triton.testing, "do_bench", lambda fn, warmup=25, rep=100, **kw: fn() or 1.0)
    count = autotune_cache.shorter_benchmarks(5, 20)
    assert count() == 0
    triton.testing.do_bench(lambda: None)  # no profiler collects: nothing to pause
    assert count() == 1 and toggles == []
    monkeypatch.setattr(torch.autograd, "_profiler_enabled", lambda: True)
    inside = []
    triton.testing.do_bench(lambda: inside.append(list(toggles)))
    cuda = [str(torch.profiler.ProfilerActivity.CUDA)]
    assert inside == [[(False, cuda)]]  # the benchmark ran while the collection was paused
    assert toggles == [(False, cuda), (True, cuda)] and count() == 2


def test_on_a_gpu_only_each_shapes_first_judged_call_asks_for_the_untimed_call_before_it(tmp_path):
    sent = []

    class Worker:
        ready, warming = True, None

        def request(self, message, timeout_s):
            sent.append(message)
            return {"ok": False, "error": "stop here"} if message["cmd"] == "call" and len(sent) > 4 else \
                {"ok": True, "jit_functions": []} if message["cmd"] == "init" else {"ok": False, "error": "stop"}

    for device, expected in (("cuda", True), ("cpu", False)):  # every Call carries tune
        sent.clear()
        config = runner.EvalConfig(device=device, hardware="cpu", sandbox=False)
        judge = runner.OperatorJudge("rms_norm", tmp_path / "rms_norm.py", config, tmp_path, Worker())
        judge.reference = type("Ref", (), {"Model": lambda **kw: type("M", (), {"to": lambda self, d: self})()})
        judge.evaluate_shapes([({}, {"token_count": 4, "hidden_size": 64})])
        calls = [m for m in sent if m["cmd"] == "call"]
        assert calls and calls[0].get("tune") is expected, device
