"""The worker's GPU commands (Worker.time, Worker.call_gpu) on a simulated GPU: CUDA events, the spin, the markers
and the candidate's kernels advance one device clock and append profiler records, so the records the worker ships
go through the parent's attribution (spans.attribute) and kept outputs are judged on their seeds, without a GPU."""

from __future__ import annotations

import sys
import types

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from kernels_eval.harness import markers, spans, timing, worker, worker_gpu  # noqa: E402
from kernels_eval.harness.channel import import_tensor  # noqa: E402
from kernels_eval.harness.compare import compare_outputs, named_outputs  # noqa: E402
from kernels_eval.harness.worker_commands import Call, Time  # noqa: E402
from kernels_eval.registry import load_reference, spec  # noqa: E402

SHAPE = {"token_count": 4, "hidden_size": 64}


class Device:
    """A device clock (ns) and the profiler records of what ran on it."""

    def __init__(self, monkeypatch) -> None:
        from torch.autograd import DeviceType

        self.clock, self.corr, self.events = 0, 0, []
        device = self

        class Record:
            def __init__(self, name, dur):
                device.corr += 1
                self.c, self.s, self.n = device.corr, device.clock, name
                device.clock += dur
                self.e = device.clock

            correlation_id = lambda self: self.c  # noqa: E731
            linked_correlation_id = lambda self: 0  # noqa: E731
            start_ns = lambda self: self.s  # noqa: E731
            end_ns = lambda self: self.e  # noqa: E731
            device_type = lambda self: DeviceType.CUDA  # noqa: E731
            device_resource_id = lambda self: 7  # noqa: E731
            name = lambda self: self.n  # noqa: E731
            activity_type = lambda self: "kernel"  # noqa: E731
            is_user_annotation = lambda self: False  # noqa: E731

        class Event:
            def __init__(self, enable_timing=False):
                self.t = None

            def record(self):
                self.t = device.clock

            def elapsed_time(self, other):
                return (other.t - self.t) / 1e6

        class Markers:
            def __init__(self, flush_bytes):
                pass

            def start(self):
                device.run(spans.START_MARKER, 60_000)

            def end(self):
                device.run(spans.END_MARKER, 1_000)

            def warm(self):
                device.run("fill", 60_000)

        self.profiling = False

        class Profiler:
            def __enter__(self):
                device.events, device.profiling = [], True
                return self

            def __exit__(self, *exc):
                device.profiling = False
                self.profiler = types.SimpleNamespace(kineto_results=types.SimpleNamespace(events=lambda: device.events))

        self.Record = Record
        for name, value in {"Event": Event, "synchronize": lambda *a: None, "ipc_collect": lambda: None,
                            "_sleep": lambda cycles: self.run("spin", cycles // 2), "clock_rate": lambda: 1980}.items():
            monkeypatch.setattr(torch.cuda, name, value, raising=False)
        monkeypatch.setattr(markers, "Markers", Markers)
        monkeypatch.setattr(timing, "gpu_profiler", Profiler)
        monkeypatch.setattr(worker, "gpu_profiler", Profiler)  # the worker's own name for it
        monkeypatch.setattr(worker_gpu, "gpu_profiler", Profiler)  # and its GPU commands'
        monkeypatch.setattr(worker_gpu, "fill_free_blocks", lambda torch: 0)

    def run(self, name: str, dur_ns: int) -> None:
        self.events.append(self.Record(name, dur_ns))


class Candidate(torch.nn.Module):
    """rms_norm computed by the reference, its 'kernel' a 4 µs record; with skip, every call but one in eight
    returns the previous output after a 0.1 µs one-element kernel."""

    def __init__(self, device: Device, skip: bool) -> None:
        super().__init__()
        self.device, self.skip, self.ref, self.last, self.n = device, skip, load_reference("rms_norm").Model(), None, 0

    def forward(self, x, weight):
        self.n += 1
        if self.skip and self.last is not None and self.n % 8:
            self.device.run("touch_kernel", 100)
            return self.last
        self.device.run("rms_norm_kernel", 4_000)
        self.last = self.ref(x, weight)
        return self.last


def make_worker(device: Device, tmp_path, skip: bool = False) -> worker.Worker:
    w = worker.Worker()
    w.device, w.outputs, w.exchange = "cuda", ("out",), str(tmp_path)
    w.reference = load_reference("rms_norm")
    w.model = Candidate(device, skip)
    w.log, w.guard = worker.LaunchLog(__file__), {}
    w.baseline_threads = set(sys._current_frames())  # as init records them, before the candidate's
    w._make_inputs = lambda input_kwargs, seed: inputs(seed)
    return w


def inputs(seed: int) -> dict:
    g = torch.Generator()
    g.manual_seed(int(seed))
    return load_reference("rms_norm").make_inputs(**SHAPE, generator=g)


def judged(w: worker.Worker, reply: dict) -> list[list[str]]:
    """compare_outputs' failures of each kept sample against the reference on its seed."""
    tol = spec("rms_norm").tolerance
    out = []
    for s in reply["samples"]:
        got = {k: import_tensor(v, w.exchange) for k, v in s["outputs"].items()}
        expected = named_outputs(w.reference.Model()(**inputs(s["seed"])), ("out",))
        out.append(compare_outputs(got, expected, tol)[0])
    return out


def test_time_ships_records_that_attribute_to_every_marked_call_and_samples_judged_right(monkeypatch, tmp_path):
    device = Device(monkeypatch)
    w = make_worker(device, tmp_path)
    reply = w.time(Time(input_kwargs=SHAPE, seed=5, budget_s=0.01, samples=4))
    windows, outside, pairs = spans.attribute(reply["records"], reply["marked"])
    assert set(spans.call_spans(windows, pairs)) == {4_000} and len(reply["times_s"]) <= reply["marked"]
    assert {r.name for r in outside} == {"spin"}  # warm-up ran before the first marker: not listed
    assert len(reply["samples"]) == 4 and len({s["call"] for s in reply["samples"]}) == 4
    assert judged(w, reply) == [[]] * 4


def test_time_keeps_outputs_that_betray_a_submission_skipping_back_to_back_calls(monkeypatch, tmp_path):
    device = Device(monkeypatch)
    w = make_worker(device, tmp_path, skip=True)
    reply = w.time(Time(input_kwargs=SHAPE, seed=5, budget_s=0.01, samples=4))
    windows, _, pairs = spans.attribute(reply["records"], reply["marked"])
    assert 100 in spans.call_spans(windows, pairs)
    assert any(failures for failures in judged(w, reply))


def test_call_gpu_runs_without_a_dispatch_mode_and_ships_its_kernel_records(monkeypatch, tmp_path):
    device = Device(monkeypatch)
    w = make_worker(device, tmp_path)
    seen = []
    w.model.register_forward_pre_hook(
        lambda *a: seen.append(torch.utils._python_dispatch._get_current_dispatch_mode()))
    reply = w.call_gpu(Call(input_kwargs=SHAPE, seed=3, digest_key=7))
    assert seen == [None] and reply["aten_ops"] == {}
    assert spans.time_by_name([spans.records_from_rows(reply["records"])]) == {"rms_norm_kernel": 4.0}


def test_a_profiler_call_is_reported_in_every_call_and_timing_that_makes_it(monkeypatch, tmp_path,
                                                                          restore_entry_points):
    from kernels_eval.harness import profiler_guard

    device = Device(monkeypatch)
    w = make_worker(device, tmp_path)
    w.profiler_guard = profiler_guard.Guard(lambda detail: w.channel.send("tamper", detail))
    w.profiler_guard.install()
    cpu = {torch.profiler.ProfilerActivity.CPU}
    w.model.register_forward_pre_hook(lambda *a: torch.autograd.profiler._toggle_collection_dynamic(True, cpu))
    for seed in (3, 4):  # the same record in a second call of the same worker is reported again
        before = len(w.channel.records)
        w.call_gpu(Call(input_kwargs=SHAPE, seed=seed, digest_key=7))
        assert [r for r in w.channel.records[before:] if r.startswith("tamper\t")], seed
    before = len(w.channel.records)
    w.time(Time(input_kwargs=SHAPE, seed=5, budget_s=0.01, samples=1))
    assert any("torch's profiler" in r for r in w.channel.records[before:])


def test_time_makes_one_untimed_call_without_the_profiler_before_drawing_the_timed_sets(monkeypatch, tmp_path):
    device = Device(monkeypatch)
    w = make_worker(device, tmp_path)
    drawn, calls = [], []
    w._make_inputs = lambda input_kwargs, seed: drawn.append(seed) or inputs(seed)
    w.model.register_forward_pre_hook(lambda *a: calls.append((device.profiling, len(drawn))))
    reply = w.time(Time(input_kwargs=SHAPE, seed=5, budget_s=0.01, samples=1))
    assert calls[0] == (False, 1) and all(profiled for profiled, _ in calls[1:])  # tuned first, unrecorded
    assert 5 + 1 in drawn[1:] and drawn[0] not in drawn[1:]  # its inputs are its own; the sets come after
    assert reply["took_s"]["time_tune"] > 0 and len(calls) > 2
    windows, _, pairs = spans.attribute(reply["records"], reply["marked"])
    assert set(spans.call_spans(windows, pairs)) == {4_000}


def test_a_thread_left_by_the_untimed_call_fails_the_timing(monkeypatch, tmp_path):
    import threading

    device = Device(monkeypatch)
    w = make_worker(device, tmp_path)
    stop = threading.Event()
    w.model.register_forward_pre_hook(lambda *a: threading.Thread(target=stop.wait, daemon=True).start())
    try:
        with pytest.raises(RuntimeError, match="thread"):
            w.time(Time(input_kwargs=SHAPE, seed=5, budget_s=0.01, samples=1))
    finally:
        stop.set()


def test_a_shapes_first_judged_call_is_preceded_by_an_untimed_one_without_the_profiler(monkeypatch, tmp_path):
    device = Device(monkeypatch)
    w = make_worker(device, tmp_path)
    calls = []
    w.model.register_forward_pre_hook(lambda *a: calls.append(device.profiling))
    reply = w.call_gpu(Call(input_kwargs=SHAPE, seed=3, digest_key=7, tune=True))
    assert calls == [False, True] and reply["took_s"]["tune"] > 0
    assert spans.time_by_name([spans.records_from_rows(reply["records"])]) == {"rms_norm_kernel": 4.0}
    w.call_gpu(Call(input_kwargs=SHAPE, seed=4, digest_key=7))
    assert calls == [False, True, True]  # later calls: the judged one alone
