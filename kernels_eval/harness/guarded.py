"""The functions a candidate could replace in its own process to fake a comparison, a timing or an audit, held as
objects: each is (owner, attribute), the owner a module or class referenced in code, so a function that no longer
exists is an AttributeError where the list is built (tests/kernels_eval/test_guarded.py builds it), never a name
silently skipped. The worker takes the functions once before the candidate is imported and checks after every
call that each owner still holds the same object (worker.Worker._check_tamper). No verdict rests on this: it is
the early filter (docs/threat-model.md, "The trust boundary"); it runs in a worker only (imports torch, triton).
"""

from __future__ import annotations


def entries() -> list[tuple[str, object, str]]:
    """(label, owner, attribute) of every guarded function (the label names it in a tamper verdict)."""
    import _thread
    import threading
    import time

    import torch
    import torch.testing
    import torch.utils._python_dispatch as python_dispatch
    import triton.runtime.autotuner
    import triton.runtime.interpreter
    import triton.runtime.jit
    import triton.testing

    from kernels_eval.harness import channel, compare, markers, observe, profiler_guard, timing  # markers: triton

    out = [
        ("torch.allclose", torch, "allclose"), ("torch.isclose", torch, "isclose"), ("torch.equal", torch, "equal"),
        ("torch.testing.assert_close", torch.testing, "assert_close"), ("torch.Tensor.__eq__", torch.Tensor, "__eq__"),
        ("torch.Tensor.allclose", torch.Tensor, "allclose"), ("torch.Tensor.clone", torch.Tensor, "clone"),
        ("torch.Tensor.copy_", torch.Tensor, "copy_"), ("torch.save", torch, "save"),
        ("torch.cuda.synchronize", torch.cuda, "synchronize"), ("torch.cuda.Event.record", torch.cuda.Event, "record"),
        ("torch.cuda.Event.elapsed_time", torch.cuda.Event, "elapsed_time"),
        ("torch.cuda.Event.synchronize", torch.cuda.Event, "synchronize"),
        ("torch.cuda.Stream.synchronize", torch.cuda.Stream, "synchronize"),
        ("torch.cuda.current_stream", torch.cuda, "current_stream"),
        ("time.perf_counter", time, "perf_counter"), ("time.perf_counter_ns", time, "perf_counter_ns"),
        ("time.time", time, "time"), ("time.monotonic", time, "monotonic"),
        ("torch.profiler.profile.__enter__", torch.profiler.profile, "__enter__"),
        ("torch.profiler.profile.__exit__", torch.profiler.profile, "__exit__"),
        ("torch.profiler.profile.events", torch.profiler.profile, "events"),
        ("torch.profiler.profile.key_averages", torch.profiler.profile, "key_averages"),
        ("torch.utils._python_dispatch.TorchDispatchMode.__enter__", python_dispatch.TorchDispatchMode, "__enter__"),
        ("torch.utils._python_dispatch.TorchDispatchMode.__exit__", python_dispatch.TorchDispatchMode, "__exit__"),
        ("triton.runtime.jit.JITFunction.run", triton.runtime.jit.JITFunction, "run"),
        ("triton.runtime.interpreter.InterpretedFunction.run", triton.runtime.interpreter.InterpretedFunction, "run"),
        ("triton.runtime.autotuner.Autotuner.run", triton.runtime.autotuner.Autotuner, "run"),
        ("triton.testing.do_bench", triton.testing, "do_bench"),
        ("kernels_eval.harness.channel.send", channel, "send"),
        ("kernels_eval.harness.channel.export_tensor", channel, "export_tensor"),
        ("kernels_eval.harness.compare.tensor_digest", compare, "tensor_digest"),
        ("kernels_eval.harness.timing.time_calls", timing, "time_calls"),
        ("kernels_eval.harness.timing.kineto_records", timing, "kineto_records"),
        ("kernels_eval.harness.timing.gpu_profiler", timing, "gpu_profiler"),
        ("kernels_eval.harness.markers.Markers.start", markers.Markers, "start"),
        ("kernels_eval.harness.markers.Markers.end", markers.Markers, "end"),
        # the fallback audit (observe.py): the channel's writer, the observer's hooks, the thread starter
        ("kernels_eval.harness.observe.Channel.send", observe.Channel, "send"),
        ("kernels_eval.harness.observe.Channel.check", observe.Channel, "check"),
        ("kernels_eval.harness.observe._os_write", observe, "_os_write"),
        ("kernels_eval.harness.observe._os_fstat", observe, "_os_fstat"),
        ("kernels_eval.harness.observe._getframe", observe, "_getframe"),
        ("kernels_eval.harness.observe._setprofile", observe, "_setprofile"),
        ("kernels_eval.harness.observe.Observer._audit", observe.Observer, "_audit"),
        ("kernels_eval.harness.observe.Observer._profile", observe.Observer, "_profile"),
        ("kernels_eval.harness.observe.Observer._host_exit", observe.Observer, "_host_exit"),
        ("kernels_eval.harness.observe.Observer.mode_intact", observe.Observer, "mode_intact"),
        ("kernels_eval.harness.observe.Observer.begin", observe.Observer, "begin"),
        ("kernels_eval.harness.observe.Observer.end", observe.Observer, "end"),
        ("_thread.start_new_thread", _thread, "start_new_thread"),
        ("threading._start_new_thread", threading, "_start_new_thread"),
        ("torch._C._len_torch_dispatch_stack", torch._C, "_len_torch_dispatch_stack"),
        ("torch._C._get_dispatch_stack_at", torch._C, "_get_dispatch_stack_at"),
    ]
    # the profiler's entry points (replaced by the profiler guard's wrappers, harness/profiler_guard.py): the ones
    # this torch build has, in each module that holds them by name
    import importlib

    for holder in profiler_guard.HOLDERS:
        module = importlib.import_module(holder)
        out += [(f"{holder}.{name}", module, name) for name in profiler_guard.ENTRY_POINTS
                if name in profiler_guard._originals() and hasattr(module, name)]
    return out


def names() -> list[str]:
    """The labels of every guarded function."""
    return [label for label, _, _ in entries()]


def take() -> dict[str, object]:
    """label -> the function each owner holds now (AttributeError when one is gone)."""
    return {label: getattr(owner, attr) for label, owner, attr in entries()}


def replaced(before: dict[str, object]) -> list[str]:
    """Labels whose owner no longer holds the object `take()` returned."""
    now = {label: getattr(owner, attr, None) for label, owner, attr in entries()}
    return sorted(label for label, obj in before.items() if now.get(label) is not obj)
