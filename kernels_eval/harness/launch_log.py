"""The worker's record of @triton.jit launches (in the candidate's process): which kernels ran, from which file,
owned by the submission or not, each seen before it runs by the launch-program recorder of a recorded call
(harness/discovery.py) and bracketed for the observer (harness/observe.py). An early filter and the feedback's
source: no verdict rests on it (docs/threat-model.md)."""

from __future__ import annotations

import os
import threading

from kernels_eval.harness import discovery, observe


class LaunchLog:
    """Records every @triton.jit launch (function name, defining file, owned by the submission or not);
    the recorder of a recorded call sees each launch before it runs."""

    def __init__(self, owned_file: str, observer: observe.Observer | None = None) -> None:
        self.owned_file = os.path.realpath(owned_file)
        self.events: list[dict] = []
        self.active = False
        self.observer = observer
        self.wrappers: list = []
        self.recorder: discovery.Recorder | None = None  # records the launch program of a recorded call

    def install(self) -> None:
        from triton.runtime.jit import JITFunction

        classes = [JITFunction]
        try:
            from triton.runtime.interpreter import InterpretedFunction
            classes.append(InterpretedFunction)
        except ImportError:
            pass
        for cls in classes:
            cls.run = self._wrap(cls.run)
            self.wrappers.append(cls.run)

    def _wrap(self, original):
        log = self

        def run(fn_self, *args, **kwargs):
            fn = getattr(fn_self, "fn", None)
            code = getattr(fn, "__code__", None)
            file = os.path.realpath(code.co_filename) if code is not None else "?"
            owned = file == log.owned_file
            if log.active and not kwargs.get("warmup"):
                log.events.append({"name": getattr(fn, "__name__", "?"), "file": file, "owned": owned})
            recorder = log.recorder if log.active and not kwargs.get("warmup") else None
            if recorder is not None and recorder.active:
                recorder.launch(fn_self, args, kwargs)
                recorder.in_launch += 1  # the interpreter's own copies of the arguments are not the program's
            observer = log.observer
            try:
                if observer is None:
                    return original(fn_self, *args, **kwargs)
                if log.active and threading.get_ident() != threading.main_thread().ident:
                    observer.channel.send("thread", "a kernel was launched from another thread")
                previous = observer.launching()
                try:
                    return original(fn_self, *args, **kwargs)
                finally:
                    observer.launched(previous)
            finally:
                if recorder is not None and recorder.in_launch:
                    recorder.in_launch -= 1

        return run

    def take(self) -> list[dict]:
        """The distinct launches since the last take, with counts."""
        counts: dict[tuple, int] = {}
        for e in self.events:
            key = (e["name"], e["file"], e["owned"])
            counts[key] = counts.get(key, 0) + 1
        self.events = []
        return [{"name": n, "file": f, "owned": o, "count": c} for (n, f, o), c in sorted(counts.items())]
