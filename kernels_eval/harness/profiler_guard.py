"""The profiler's records belong to the evaluator: the kernel span of a timed call and the ownership of its GPU
time are read from the CUPTI records of torch's profiler (harness/timing.py), so a candidate that pauses the
collection, or stops and restarts the profiler, around work of its own hides that work from both. Its entry
points in torch (the C functions behind `torch.profiler.profile.toggle_collection_dynamic`, `stop`, `start`
and `step`, wherever torch's modules hold them) are replaced in the worker by wrappers that report every call
made while a candidate's call runs (`Guard.during`); the report is a tamper record, which fails the problem
(tests/adversarial/profiler_pause: F.rms_norm run with the collection paused, then a one-element kernel of
its own).

The evaluator pauses the collection itself in one place, with the original entry points: around Triton's
autotuning benchmark (`records_paused`, harness/autotune_cache.py), whose launches are not the call's result.
A timed call that benchmarks is refused (timing.time_calls counts them), so no timed work runs unrecorded.
(Seen on H200: pausing did not shorten a cold shape's first call under the profiler, 12.0-12.6 s against
11.1-11.4 s before for two 9- and 15-configuration problems whose kernels were all compiled and cached.)
Imports torch: loaded in a worker only."""

from __future__ import annotations

import contextlib
import sys

import torch
import torch._C._autograd as _autograd

# the C entry points that start, stop, step or pause the profiler's collection
ENTRY_POINTS = ("_toggle_collection_dynamic", "_disable_profiler", "_enable_profiler", "_prepare_profiler",
                "_disable_profiler_legacy", "_enable_profiler_legacy", "_kineto_step")
_ORIGINAL = {name: getattr(_autograd, name) for name in ENTRY_POINTS if hasattr(_autograd, name)}
_CUDA = {torch.profiler.ProfilerActivity.CUDA}


class Guard:
    """Reports (`report(detail)`) any call of the profiler's entry points made while `during` is set."""

    def __init__(self, report) -> None:
        self.report = report
        self.during = False  # a candidate's call runs (set by the worker around each call)
        self.wrappers: dict[str, object] = {}

    def install(self) -> None:
        """Replace each entry point in every loaded torch module that holds it (they are imported by name into
        torch.autograd and torch.autograd.profiler, among others)."""
        for name, original in _ORIGINAL.items():
            wrapper = self._wrap(name, original)
            self.wrappers[name] = wrapper
            for module_name, module in list(sys.modules.items()):
                if module_name.split(".", 1)[0] != "torch" or not isinstance(getattr(module, "__dict__", None), dict):
                    continue
                for attr, value in list(vars(module).items()):
                    if value is original:
                        setattr(module, attr, wrapper)

    def _wrap(self, name: str, original):
        guard = self

        def entry_point(*args, **kwargs):
            if guard.during:  # the evaluator starts and stops its profiler outside the candidate's calls
                guard.report(f"the submission called torch's profiler ({name}): the records that time and judge "
                             "its calls are the evaluator's")
            return original(*args, **kwargs)

        entry_point.__name__ = entry_point.__qualname__ = name
        return entry_point

    @contextlib.contextmanager
    def candidate_call(self):
        """Mark a candidate's call: profiler calls inside it are reported."""
        self.during = True
        try:
            yield
        finally:
            self.during = False


@contextlib.contextmanager
def records_paused():
    """The profiler's CUDA collection paused while it runs (when a profiler collects), through the original
    entry points; yields whether it paused."""
    if not torch.autograd._profiler_enabled() or "_toggle_collection_dynamic" not in _ORIGINAL:
        yield False
        return
    toggle = _ORIGINAL["_toggle_collection_dynamic"]
    toggle(False, _CUDA)
    try:
        yield True
    finally:
        toggle(True, _CUDA)
