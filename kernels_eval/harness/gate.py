"""The GPU gate of concurrent evaluation lanes on one device (`eval --lanes`): every lane's GPU work (worker
calls, which compile and autotune; the parent's references and comparisons) holds it shared, and the timed
calls hold it alone, so no other lane's kernel runs on the device while a candidate is timed. Compiling is host
work of minutes on a cold cache; with several lanes it overlaps while the timed windows stay exclusive.

A waiting timer goes first: once a lane asks for the gate alone, new shared holders wait until its timing is
over (else a steady stream of checks could hold it off for ever). Shared holds are re-entrant per thread."""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager


class GpuGate:
    """A readers-writer lock with writer preference; `exclusive_s` and `waited_s` add up what timing held and
    how long timers waited for it (the run log's breakdown)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._shared = 0  # threads holding it shared
        self._exclusive = False
        self._waiting = 0  # timers waiting for it alone
        self._depth = threading.local()
        self.exclusive_s = 0.0
        self.waited_s = 0.0

    @contextmanager
    def shared(self):
        depth = getattr(self._depth, "n", 0)
        if depth:  # nested in this thread's own shared hold
            self._depth.n = depth + 1
            try:
                yield
            finally:
                self._depth.n -= 1
            return
        with self._cond:
            while self._exclusive or self._waiting:
                self._cond.wait()
            self._shared += 1
        self._depth.n = 1
        try:
            yield
        finally:
            self._depth.n = 0
            with self._cond:
                self._shared -= 1
                if not self._shared:
                    self._cond.notify_all()

    @contextmanager
    def exclusive(self):
        if getattr(self._depth, "n", 0):
            raise RuntimeError("the GPU gate is held shared by this thread: timing cannot take it alone")
        asked = time.monotonic()
        with self._cond:
            self._waiting += 1
            try:
                while self._exclusive or self._shared:
                    self._cond.wait()
            finally:
                self._waiting -= 1
            self._exclusive = True
        began = time.monotonic()
        self.waited_s += began - asked
        try:
            yield
        finally:
            with self._cond:
                self._exclusive = False
                self.exclusive_s += time.monotonic() - began
                self._cond.notify_all()
