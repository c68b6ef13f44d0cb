"""The GPU timing loop (kernels_eval.harness.timing.time_calls) against a simulated GPU: CUDA events, the spin
and the flush advance a simulated device clock, a call adds its kernel time to it, so what the loop measures,
how many calls it makes and which protocol it follows can be checked without a GPU."""

from __future__ import annotations

import time

import pytest

torch = pytest.importorskip("torch")

from kernels_eval.harness import timing  # noqa: E402


class SimulatedGPU:
    """A device clock in seconds. Work is queued in order, so an event records the clock after all work before
    it; `cycles_per_s` converts the spin's cycles."""

    cycles_per_s = 2e9

    def __init__(self, monkeypatch):
        self.clock = 0.0
        self.calls = 0
        gpu = self

        class Event:
            def __init__(self, enable_timing=False):
                self.t = None

            def record(self):
                self.t = gpu.clock

            def elapsed_time(self, other):  # milliseconds, as torch.cuda.Event gives
                return (other.t - self.t) * 1e3

        monkeypatch.setattr(torch.cuda, "Event", Event)
        monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
        monkeypatch.setattr(torch.cuda, "_sleep", lambda cycles: self.advance(cycles / self.cycles_per_s))

    def advance(self, seconds: float) -> None:
        self.clock += seconds

    def flush(self):
        gpu = self

        class Flush:
            def zero_(self):
                gpu.advance(20e-6)

        return Flush()

    def kernel(self, seconds: float, host_s: float = 0.0):
        def call(**_):
            self.calls += 1
            if host_s:
                time.sleep(host_s)
            self.advance(seconds)

        return call


def test_a_short_call_is_timed_by_its_kernel_time_after_settling(monkeypatch):
    gpu = SimulatedGPU(monkeypatch)
    times = timing.time_calls(gpu.kernel(10e-6), [{}, {}], flush=gpu.flush(), budget_s=0.05, warmup_s=0.0)
    assert all(t == pytest.approx(10e-6) for t in times)
    assert 10 <= len(times) <= 200
    # warm-up, shield calibration, at least two settle blocks of 10 and the 5-call estimate came first
    assert gpu.calls >= len(times) + 3 + 2 + 20 + 5
    assert times.marked >= len(times) + 5  # the estimate's calls are bracketed by markers too


def test_a_call_slower_than_the_threshold_skips_calibration_and_settling(monkeypatch):
    gpu = SimulatedGPU(monkeypatch)
    sets_seen = []

    def call(**inputs):
        sets_seen.append(inputs["i"])
        gpu.kernel(0.030, host_s=0.025)()

    times = timing.time_calls(call, [{"i": 0}, {"i": 1}], flush=gpu.flush(), budget_s=0.05, min_calls=3)
    assert times == pytest.approx([0.030] * 3)
    assert gpu.calls == 5  # two untimed calls (the first may compile), then min_calls timed calls: nothing else
    assert sets_seen == [0, 1, 0, 1, 0]  # the timed calls go on rotating through the input sets


def test_a_slow_call_still_fills_the_budget_up_to_max_calls(monkeypatch):
    gpu = SimulatedGPU(monkeypatch)
    times = timing.time_calls(gpu.kernel(0.030, host_s=0.021), [{}], flush=gpu.flush(), budget_s=0.2,
                              min_calls=3, max_calls=5)
    assert len(times) == 5  # 0.2 s / ~0.021 s would be 9 calls: capped at max_calls
    assert gpu.calls == 7


def test_a_first_call_that_compiles_does_not_make_a_short_call_slow(monkeypatch):
    """A fresh worker's first call compiles or autotunes (tens of ms to seconds); the call itself takes 10 µs of
    kernel time and must get the whole protocol: warm-up, shield, settling, a budget's worth of calls."""
    gpu = SimulatedGPU(monkeypatch)
    kernel = gpu.kernel(10e-6)
    first = [True]

    def call(**inputs):
        if first[0]:
            first[0] = False
            time.sleep(0.05)  # compiling and autotuning, on the host
        kernel()

    times = timing.time_calls(call, [{}, {}], flush=gpu.flush(), budget_s=0.05, warmup_s=0.0)
    assert times.first_s >= 0.05
    assert all(t == pytest.approx(10e-6) for t in times) and len(times) > 10
    assert gpu.calls >= len(times) + 3 + 2 + 20 + 5


class CountingMarkers:
    def __init__(self, gpu, log):
        self.gpu, self.log = gpu, log

    def start(self):
        self.log.append("start")
        self.gpu.advance(20e-6)

    def end(self):
        self.log.append("end")

    def warm(self):
        self.gpu.advance(20e-6)


def test_every_marked_call_runs_on_a_set_no_earlier_call_touched_and_is_seen_after_its_end_marker(monkeypatch):
    gpu = SimulatedGPU(monkeypatch)
    drawn = [0]

    def fresh():
        drawn[0] += 1
        return [{"set": (drawn[0], j)} for j in range(2)]

    used, log = [], []

    def call(**inputs):
        used.append(inputs["set"])
        log.append("call")
        gpu.advance(10e-6)
        return inputs["set"]

    def after(inputs, out):
        assert out == inputs["set"] and log[-2:] == ["call", "end"]
        log.append("after")

    times = timing.time_calls(call, fresh(), refresh=fresh, budget_s=0.01, warmup_s=0.0,
                              markers=CountingMarkers(gpu, log), after_call=after)
    assert len(used) == len(set(used))  # warm-up, calibration and timed calls: never the same set twice
    assert log.count("start") == log.count("end") == log.count("after") == times.marked


def test_sets_that_cost_more_to_draw_than_a_slow_call_are_timed_over_min_calls_after_the_warm_up(monkeypatch):
    gpu = SimulatedGPU(monkeypatch)
    drawn, used = [0], []

    def fresh(draw_s: float):
        def draw():
            drawn[0] += 1
            time.sleep(draw_s)  # host time to make a set (a MoE problem's weights: ~0.7 s on H200)
            return [{"set": (drawn[0], j)} for j in range(2)]
        return draw

    def call(**inputs):
        used.append(inputs["set"])
        gpu.advance(50e-6)

    costly = fresh(0.06)
    times = timing.time_calls(call, costly(), refresh=costly, min_calls=6, slow_call_s=0.02, warmup_s=0.0,
                              flush=gpu.flush())
    assert len(times) == 6 and times.marked == 6  # no settle blocks, no calibration: the timed run alone
    assert len(used) == 3 + 6 and len(used) == len(set(used))  # warm-up and timed calls, each on a fresh set
    assert all(t == pytest.approx(50e-6) for t in times)
    # the same call whose sets are cheap to draw goes through settling and the estimate as before
    used.clear()
    cheap = fresh(0.0)
    times = timing.time_calls(call, cheap(), refresh=cheap, min_calls=6, budget_s=0.01, slow_call_s=0.02,
                              warmup_s=0.0, flush=gpu.flush())
    assert times.marked > len(times) >= 6 and len(used) == len(set(used))
