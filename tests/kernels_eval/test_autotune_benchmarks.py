"""A worker's autotuning benchmarks: triton.testing.do_bench's defaults shortened (harness/autotune_cache.py),
what Triton's autotuner resolves at each tuning; explicit arguments pass through; a worker's init applies the
run's setting before its GUARDED functions are snapshot."""

from __future__ import annotations

import inspect

import pytest

triton = pytest.importorskip("triton")

from kernels_eval.harness import autotune_cache, runner, worker  # noqa: E402


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
    assert sent[-1]["autotune_bench_ms"] == (5.0, 20.0) == config.autotune_bench_ms
    source = inspect.getsource(worker.Worker.init)
    assert "triton.testing.do_bench" in worker.GUARDED
    assert source.index("shorter_benchmarks(") < source.index("self.guard = snapshot()")
