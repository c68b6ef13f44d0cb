"""The profiler guard (harness/profiler_guard.py): the profiler's entry points in torch's modules are replaced by
wrappers that report a call made during a candidate's call, and pass every call through."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from kernels_eval.harness import guarded, profiler_guard, worker  # noqa: E402


def test_every_module_holding_an_entry_point_gets_the_wrapper_and_calls_during_a_call_are_reported(
        restore_entry_points):
    reports = []
    guard = profiler_guard.Guard(reports.append)
    guard.install()
    toggle = profiler_guard._ORIGINAL["_toggle_collection_dynamic"]
    for module in (torch._C._autograd, torch.autograd, torch.autograd.profiler):
        assert module._toggle_collection_dynamic is guard.wrappers["_toggle_collection_dynamic"] is not toggle
    cpu = {torch.profiler.ProfilerActivity.CPU}
    torch.autograd.profiler._toggle_collection_dynamic(True, cpu)  # outside a call: the evaluator's own
    assert reports == []
    guard.watched(lambda: torch._C._autograd._toggle_collection_dynamic(True, cpu))()
    assert len(reports) == 1 and "_toggle_collection_dynamic" in reports[0] and "profiler" in reports[0]
    assert not guard.during


def test_a_real_profiler_still_starts_and_stops_through_the_wrappers(restore_entry_points):
    reports = []
    guard = profiler_guard.Guard(reports.append)
    guard.install()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        torch.ones(8).sum()
    assert any(e.name == "aten::sum" for e in prof.events()) and reports == []


def test_the_entry_points_are_guarded_by_identity_and_installed_before_the_snapshot():
    import inspect

    for name in ("torch._C._autograd._toggle_collection_dynamic", "torch.autograd.profiler._disable_profiler",
                 "torch.autograd.profiler._enable_profiler", "torch.autograd._toggle_collection_dynamic"):
        assert name in guarded.names()
    source = inspect.getsource(worker.Worker.init)
    assert source.index("self.profiler_guard.install()") < source.index("self.guard = snapshot()")
