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
Imports torch when a guard is installed or a pause made: in a worker only."""

from __future__ import annotations

import contextlib
import sys

# the C entry points of torch._C._autograd that start, stop, step or pause the profiler's collection
ENTRY_POINTS = ("_toggle_collection_dynamic", "_disable_profiler", "_enable_profiler", "_prepare_profiler",
                "_disable_profiler_legacy", "_enable_profiler_legacy", "_kineto_step")
# the torch modules that hold them by name (checked by identity: harness/guarded.py)
HOLDERS = ("torch._C._autograd", "torch.autograd", "torch.autograd.profiler")
_ORIGINAL: dict = {}  # name -> torch's own function, taken before any wrapper replaces it


def _originals() -> dict:
    """torch's own entry points (taken once, before `Guard.install` replaces them)."""
    import torch._C._autograd as autograd

    for name in ENTRY_POINTS:
        if name not in _ORIGINAL and hasattr(autograd, name):
            _ORIGINAL[name] = getattr(autograd, name)
    return _ORIGINAL


class Guard:
    """Reports (`report(detail)`) any call of the profiler's entry points made during a watched call."""

    def __init__(self, report) -> None:
        self.report = report
        self.during = False  # a candidate's call runs (`watched`)
        self.wrappers: dict[str, object] = {}

    def install(self) -> None:
        """Replace each entry point in every loaded torch module that holds it (they are imported by name into
        torch.autograd and torch.autograd.profiler, among others)."""
        wrapper_of = {}
        for name, original in _originals().items():
            self.wrappers[name] = wrapper_of[id(original)] = self._wrap(name, original)
        for module_name, module in list(sys.modules.items()):
            if module_name.split(".", 1)[0] != "torch" or not isinstance(getattr(module, "__dict__", None), dict):
                continue
            for attr, value in list(vars(module).items()):
                wrapper = wrapper_of.get(id(value))
                if wrapper is not None and value is _ORIGINAL[wrapper.__name__]:
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

    def watched(self, call):
        """`call` with the guard watching it: profiler calls inside it are reported."""
        guard = self

        def watched_call(*args, **kwargs):
            guard.during = True
            try:
                return call(*args, **kwargs)
            finally:
                guard.during = False

        return watched_call


@contextlib.contextmanager
def records_paused():
    """The profiler's CUDA collection paused while it runs (when a profiler collects), through torch's own
    entry points; yields whether it paused."""
    import torch

    toggle = _originals().get("_toggle_collection_dynamic")
    if toggle is None or not torch.autograd._profiler_enabled():
        yield False
        return
    cuda = {torch.profiler.ProfilerActivity.CUDA}
    toggle(False, cuda)
    try:
        yield True
    finally:
        toggle(True, cuda)
