"""The sandboxed worker: one process per submission operator file, driven by the parent over two pipes.

It imports torch, triton and numpy (and the torch-free registry plus the operator's reference module for
`make_inputs`), never polars/duckdb/dagster. It runs the candidate, records which @triton.jit functions ran
and which aten ops were dispatched, poisons fresh allocations, and ships outputs and post-call inputs back;
the parent judges them. Usage (by the parent only): python -m kernels_eval.harness.worker CMD_FD RESULT_FD
"""

from __future__ import annotations

import importlib.util
import os
import secrets
import sys
import threading
import time
import traceback

from kernels_eval.harness import channel, discovery, guarded, observe, profiler_guard
from kernels_eval.harness.protocol import encode
from kernels_eval.harness.adoption import ALLOWED_ATEN_OPS
from kernels_eval.harness import autotune_pins
from kernels_eval.harness.compare import tensor_digest
from kernels_eval.harness.interpreter import patch_interpreter
from kernels_eval.harness.timing import L2_FLUSH_BYTES, gpu_profiler, kineto_records, time_calls
from kernels_eval.registry import load_reference

TRITON_BENCH_MS = (25.0, 100.0)  # triton.testing.do_bench's own warm-up and repetitions, where none are given
POISON_OPS = frozenset({"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "empty_permuted"})


def snapshot() -> dict:
    """The guarded functions (harness/guarded.py) as each owner holds them now."""
    return guarded.take()


def tampered(before: dict) -> list[str]:
    """Guarded functions replaced since `before`."""
    return guarded.replaced(before)


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


class Worker:
    """State of one worker: the candidate module, the current Model, the reference's make_inputs."""

    def __init__(self) -> None:
        import torch

        self.torch = torch
        self.module = None
        self.model = None
        self.kept: list = []
        self.inputs = None
        self.guard: dict = {}
        self.log: LaunchLog | None = None
        self.exchange = ""
        self.cuda_ipc = True
        self.staging = channel.Staging()
        self.channel = observe.Channel(-1)
        self.observer: observe.Observer | None = None
        self.audit_class = None
        self.baseline_threads: set = set()
        self.markers_loaded = False  # by "warm", before any candidate was imported
        self.benchmarks = None  # GPU: the count of autotuning benchmarks run (harness/autotune_cache.py)
        self.profiler_guard = None  # GPU: reports the candidate's calls of the profiler (harness/profiler_guard.py)

    # ---- commands --------------------------------------------------------------------------------------

    def warm(self, msg: dict) -> dict:
        """Make the CUDA context and the profiler's first start ahead, before any candidate is imported: a
        process's first CUDA-activity profile takes ~6 s on H200 (CUPTI's start; later ones ~1 ms), which a
        prestarted worker pays while the previous operator is judged rather than inside its first command."""
        torch = self.torch
        began = time.perf_counter()
        if msg.get("device") == "cuda" and torch.cuda.is_available():
            torch.cuda.init()
            with gpu_profiler():
                torch.cuda.synchronize()
            if msg.get("markers_cache"):  # ~0.8 s of loading the evaluator's markers, off the first command too
                import kernels_eval.harness.markers  # triton's: loaded ahead only when asked

                try:
                    kernels_eval.harness.markers.compile_privately(msg["markers_cache"])
                    self.markers_loaded = True
                except Exception:  # noqa: BLE001 - then init loads them, as without warming
                    pass
        return {"ok": True, "took_s": {"warm": time.perf_counter() - began}}

    def init(self, msg: dict) -> dict:
        """Import the candidate file (once) and build Model(**init_kwargs)."""
        torch = self.torch
        self.device = msg["device"]
        self.file = msg["file"]
        self.exchange = msg["exchange"]
        # CUDA IPC handles cannot be opened across the sandbox's pid/ipc namespaces (seen on H200: "mapping of
        # buffer object failed" in the parent): a sandboxed worker hands CUDA tensors over as host copies
        self.cuda_ipc = bool(msg.get("cuda_ipc", True))
        self.outputs = tuple(msg["outputs"])
        took: dict[str, float] = {}
        began = time.perf_counter()
        if self.module is None:
            self.reference = load_reference(msg["operator"])
            import triton  # noqa: F401  (decorators read TRITON_INTERPRET at import of the candidate)
            import kernels_eval.harness.timing  # noqa: F401  (guarded)
            import kernels_eval.harness.markers  # noqa: F401  (guarded)

            if os.environ.get("TRITON_INTERPRET") == "1":
                patch_interpreter()
            if self.device == "cuda" and msg.get("gpu_memory_fraction"):
                torch.cuda.set_per_process_memory_fraction(float(msg["gpu_memory_fraction"]))
            if self.device == "cuda":  # before the snapshot below: do_bench is guarded
                from kernels_eval.harness.autotune_cache import shorter_benchmarks  # triton's: a GPU only

                self.benchmarks = shorter_benchmarks(*(float(x) for x in msg.get("autotune_bench_ms") or
                                                       TRITON_BENCH_MS))
            from kernels_eval.harness import autotune_pins  # before the snapshot too: Autotuner.run is GUARDED

            autotune_pins.install()
            took["init_setup"] = time.perf_counter() - began
            began = time.perf_counter()
            if self.device == "cuda" and not self.markers_loaded:
                try:  # not from the cache the candidate can write; a failure here leaves them to the first timing
                    kernels_eval.harness.markers.compile_privately(msg.get("markers_cache"))
                except Exception:  # noqa: BLE001 - the markers then compile at their first launch, as before
                    pass
            took["init_markers"] = time.perf_counter() - began
            began = time.perf_counter()
            self.observer = observe.Observer(msg["file"], self.channel)
            self.observer.install()
            self.audit_class = observe.audit_mode_class(POISON_OPS, ALLOWED_ATEN_OPS)
            if self.device != "cuda":  # the mode checks CPU calls only (call_gpu runs under the profiler alone)
                # the first dispatch under a Python mode imports much of torch lazily (seconds): not in a call
                with torch.no_grad(), self.audit_class(observe.Channel(-1), poison=True):
                    torch.empty_like(torch.zeros(4)).copy_(torch.ones(4))
            self.log = LaunchLog(msg["file"], self.observer)
            self.log.install()
            if self.device == "cuda":
                self.profiler_guard = profiler_guard.Guard(lambda detail: self.observer.channel.send("tamper", detail))
                self.profiler_guard.install()
            self.observer.boundary = {w.__code__ for w in self.log.wrappers} | {Worker.call.__code__}
            self.baseline_threads = set(sys._current_frames())  # the worker's own threads, before the candidate's
            self.guard = snapshot()
            self.guard.update(self._audit_identity())
            spec = importlib.util.spec_from_file_location(f"hotshape_candidate_{msg['operator']}", msg["file"])
            module = importlib.util.module_from_spec(spec)
            sys.modules[spec.name] = module
            spec.loader.exec_module(module)
            self.module = module
            self._check_tamper("importing the submission")
            took["init_import"] = time.perf_counter() - began
            began = time.perf_counter()
        self.model = self.module.Model(**msg["init_kwargs"])
        if isinstance(self.model, torch.nn.Module):
            self.model = self.model.to(self.device)
        self._check_tamper("building Model")
        took["init_model"] = time.perf_counter() - began
        began = time.perf_counter()
        # the init-time state, before any input exists: the replay restores it from here, never from later
        state = discovery.state_tensors(self.model, torch)
        state_files = {name: self._export(discovery.storage_bytes(t, torch), f"state{i}")
                    for i, (name, t) in enumerate(state.items())}
        self.state = state
        took["init_snapshot"] = time.perf_counter() - began
        return {"ok": True, "jit_functions": sorted(_jit_functions(self.module)), "took_s": took, "state": state_files}

    def call(self, msg: dict) -> dict:
        """One call on inputs drawn with the parent's seed; outputs and the inputs as they are afterwards."""
        _pin(msg)  # the autotuning protocol's configurations, where the parent names them
        if self.device == "cuda":
            return self.call_gpu(msg)
        torch = self.torch
        began = time.perf_counter()
        self.kept = []
        if self.device == "cuda":
            torch.cuda.ipc_collect()
        if msg.get("reuse_buffers") and self.inputs is not None:
            fresh = self._make_inputs(msg["input_kwargs"], msg["seed"])
            for name, t in self.inputs.items():
                if isinstance(t, torch.Tensor):
                    t.copy_(fresh[name])
                else:
                    self.inputs[name] = fresh[name]
            inputs = self.inputs
        else:
            inputs = self._make_inputs(msg["input_kwargs"], msg["seed"])
        self._sync()
        took = {"inputs": time.perf_counter() - began}
        began = time.perf_counter()
        audit = self.audit_class(self.channel, poison=msg.get("poison", True))
        recorder = self._recorder(msg, inputs)
        audit.recorder = recorder
        threads_before = self._threads_at_start()
        depth = torch._C._len_torch_dispatch_stack()
        self.log.active = True
        self.observer.begin(profile=self.device == "cpu")
        changed = None
        try:
            with torch.no_grad():
                audit.__enter__()
                try:
                    out = self.model(**inputs)
                finally:
                    self.observer.end()
                    changed = self.observer.mode_intact(audit, self.audit_class, depth)
                    if changed is None:  # a stack the candidate rearranged is left as it is: the verdict is tamper
                        audit.__exit__(None, None, None)
            self._sync()
        finally:
            self.observer.end()
            self.log.active = False
            if changed:
                raise TamperError(f"{changed} during the call")
        self.inputs = inputs
        launches = self.log.take()
        self._check_tamper("the call")
        self._threads_at_end(threads_before)
        outputs = _as_named(out, self.outputs, torch)
        took["run"] = time.perf_counter() - began
        began = time.perf_counter()
        reply = {"ok": True, "launches": launches, "aten_ops": audit.ops,
                 **self._export_call(outputs, inputs, int(msg["digest_key"]))}
        if recorder is not None:
            reply["program"] = encode(recorder.finish(outputs))
        took["export"] = time.perf_counter() - began
        reply["took_s"] = took
        self.kept = list(outputs.values())
        return reply

    def call_gpu(self, msg: dict) -> dict:
        """`call` on a GPU. No dispatch mode (a candidate could tell a checked call from a timed one by it): the
        call runs under the profiler that timed calls run under, and its GPU records go to the parent, where the
        kernels' names decide adoption. Free cached blocks are filled with 0xFF bytes first (NaN in every
        float dtype), in place of poisoning fresh allocations, exactly as before timed calls."""
        torch = self.torch

        began = time.perf_counter()
        self.kept, self.inputs = [], None
        self.channel.sent = set()  # each call reports what it does (CPU calls reset it in Observer.begin)
        torch.cuda.ipc_collect()
        _pin(msg)
        took = {}
        if msg.get("tune"):  # a shape's first judged call: its compiling and autotuning happen unrecorded first
            took["tune"] = self._untimed_call(msg["input_kwargs"])
            began = time.perf_counter()
        inputs = self._make_inputs(msg["input_kwargs"], msg["seed"])
        torch.cuda.synchronize()
        took["inputs"] = time.perf_counter() - began
        began = time.perf_counter()
        reserve_free(torch, 2 * _tensor_bytes(inputs, torch))
        filled = fill_free_blocks(torch)
        threads_before = self._threads_at_start()
        recorder = self._recorder(msg, inputs)
        self.log.active = True
        try:
            with torch.no_grad(), gpu_profiler() as prof:
                if recorder is not None:  # the plumbing is read at the dispatcher (a mode for this call only)
                    mode = self.audit_class(observe.Channel(-1), poison=False)
                    mode.recorder = recorder
                    with mode:
                        out = self._watched_model()(**inputs)
                else:
                    out = self._watched_model()(**inputs)
                torch.cuda.synchronize()
        finally:
            self.log.active = False
        self.inputs = inputs
        launches = self.log.take()
        self._check_tamper("the call")
        self._threads_at_end(threads_before)
        outputs = _as_named(out, self.outputs, torch)
        records = kineto_records(prof)
        took["run"] = time.perf_counter() - began
        began = time.perf_counter()
        reply = {"ok": True, "launches": launches, "aten_ops": {}, "records": records, "filled_bytes": filled,
                 **self._export_call(outputs, inputs, int(msg["digest_key"]))}
        if recorder is not None:
            reply["program"] = encode(recorder.finish(outputs))
        took["export"] = time.perf_counter() - began
        reply["took_s"] = took
        self.kept = list(outputs.values())
        return reply

    def time(self, msg: dict) -> dict:
        """Timed calls (timing.time_calls) over input sets drawn fresh for every call, under the profiler: the
        CUDA-event seconds of the reported run, the GPU records of the whole timing (the parent attributes them
        to calls between the markers: spans.attribute), the launches, and up to `samples` outputs of timed calls
        with the seed of the set each ran on. Which calls are kept is decided after each call returns, with
        fresh OS randomness (reservoir sampling: every marked call equally likely), so nothing the candidate can
        read beforehand predicts it; kept outputs are cloned after the call's end marker, outside its span."""
        torch = self.torch
        from kernels_eval.harness import markers as marker_kernels  # triton's: a GPU call only

        self.kept, self.inputs = [], None
        self.channel.sent = set()
        torch.cuda.ipc_collect()
        _pin(msg)
        tune_s = self._untimed_call(msg["input_kwargs"]) if msg.get("tune", True) else 0.0
        setup0 = time.perf_counter()
        counter = [int(msg["seed"])]
        seeds: dict[int, int] = {}  # id(input set) -> its seed, for the sets alive in `sets`

        def draw() -> dict:
            counter[0] += 1
            inputs = self._make_inputs(msg["input_kwargs"], counter[0])
            seeds[id(inputs)] = counter[0]
            return inputs

        sets = [draw()]
        set_bytes = _tensor_bytes(sets[0], torch)
        n_sets = int(max(2, min(msg.get("max_sets", 8), msg.get("rotation_bytes", 2 << 30) // max(set_bytes, 1))))
        sets += [draw() for _ in range(1, n_sets)]

        def fresh_sets():
            for inputs in sets:
                seeds.pop(id(inputs), None)
            sets.clear()  # free the old buffers before drawing new ones: big problems fit twice, not four times
            for _ in range(n_sets):
                sets.append(draw())
            return sets

        want, budget = max(0, int(msg.get("samples", 4))), int(msg.get("sample_bytes", 1 << 30))
        samples: list[dict] = []
        seen, skipped = [0], []

        def keep(inputs, out) -> None:
            outputs = _as_named(out, self.outputs, torch)
            seen[0] += 1
            size = sum(t.numel() * t.element_size() for t in outputs.values())
            room = min(want, budget // max(size, 1))
            if room == 0:
                skipped[:] = [f"outputs of {size} bytes exceed the sample budget of {budget} bytes"]
                return
            slot = len(samples) if len(samples) < room else secrets.randbelow(seen[0])
            if slot < room:
                entry = {"seed": seeds[id(inputs)], "call": seen[0] - 1,
                         "outputs": {k: t.clone() for k, t in outputs.items()}}
                samples[slot:slot + 1] = [entry]

        markers = marker_kernels.Markers(L2_FLUSH_BYTES)
        markers.start()
        markers.end()  # compiled (or loaded from Triton's cache) before anything is timed
        torch.cuda.synchronize()
        self.log.take()
        reserve_free(torch, 2 * set_bytes)
        filled = fill_free_blocks(torch)
        host0 = time.perf_counter()
        took = {"time_setup": host0 - setup0, "time_tune": tune_s}
        self.log.active = True
        try:
            with torch.no_grad(), gpu_profiler() as prof:
                times = time_calls(self._watched_model(), sets, refresh=fresh_sets, markers=markers, after_call=keep,
                                   benchmarks=self.benchmarks,
                                   warmup=int(msg.get("warmup", 3)), min_calls=int(msg.get("min_calls", 10)),
                                   max_calls=int(msg.get("max_calls", 200)), budget_s=float(msg.get("budget_s", 0.5)),
                                   warmup_s=float(msg.get("warmup_s", 0.05)))
        finally:
            self.log.active = False
        host_s = time.perf_counter() - host0
        clock = _sm_clock_mhz(torch)  # right after the timed calls, while the GPU still runs at their clock
        self._check_tamper("timing")
        own = os.path.realpath(marker_kernels.FILE)
        launches = [x for x in self.log.take() if x.get("file") != own]
        took["time_calls"] = time.perf_counter() - host0  # the profiler's stop included
        took["time_first_call"] = times.first_s  # of which the first call (a cold shape autotunes there)
        began = time.perf_counter()
        records = kineto_records(prof)
        took["time_records"] = time.perf_counter() - began
        began = time.perf_counter()
        exported = [{"seed": s["seed"], "call": s["call"],
                     "outputs": {k: self._export(t, f"sample{j}_{k}") for k, t in s["outputs"].items()}}
                    for j, s in enumerate(samples)]
        self.kept = [t for s in samples for t in s["outputs"].values()]
        del sets[:], markers
        took["time_export"] = time.perf_counter() - began
        return {"ok": True, "times_s": list(times), "marked": times.marked, "benchmarked": times.benchmarked,
                "host_s": host_s, "sets": n_sets,
                "sm_clock_mhz": clock, "records": records, "launches": launches, "samples": exported,
                "samples_skipped": skipped[0] if skipped else None, "filled_bytes": filled, "took_s": took}

    def sweep(self, msg: dict) -> dict:
        """The worker's half of the evaluator's autotuning protocol (harness/autotune_sweep.py): one untimed call
        that reports which (kernel, key) it tuned, the configurations the autotuner's own pruning keeps for it
        and the one that ran. Each configuration is then recorded by a `call` with it pinned (`pins`) and timed
        by the trusted replay, never here."""
        self.kept, self.inputs = [], None
        _pin(msg)
        autotune_pins.Watch.start()
        try:
            tune_s = self._untimed_call(msg["input_kwargs"])
        finally:
            tuned = autotune_pins.Watch.stop()
        return {"ok": True, "tuned": tuned, "took_s": {"sweep_discover": tune_s}}

    # ---- helpers ---------------------------------------------------------------------------------------

    def _untimed_call(self, input_kwargs: dict) -> float:
        """One call before a timing (and before a shape's first judged call), with no profiler, on inputs of a
        fresh seed of its own (drawn and freed before the judged or timed inputs exist), its output dropped; its
        seconds. A cold shape compiles, loads and autotunes its kernels here: seen on H200, tuning a compiled
        shape took a plain process 1.6 s with no profiler against 7.2 s under one. Nothing it could learn helps
        a later call: the judged and timed inputs are drawn afterwards on the parent's seeds, threads are
        checked around it as around a judged call, and the profiler guard watches it."""
        torch = self.torch
        began = time.perf_counter()
        inputs = self._make_inputs(input_kwargs, secrets.randbits(62))
        threads_before = self._threads_at_start()
        with torch.no_grad():
            out = self._watched_model()(**inputs)
        torch.cuda.synchronize()
        self._check_tamper("the untimed call that tunes the shape")
        self._threads_at_end(threads_before)
        del out, inputs
        return time.perf_counter() - began

    def _recorder(self, msg: dict, inputs: dict) -> discovery.Recorder | None:
        """The recorder of this call's launch program where the parent asked for one."""
        self.log.recorder = None
        if not msg.get("record"):
            return None
        recorder = discovery.Recorder(self.file, self.state)
        recorder.begin(inputs, self.torch)
        self.log.recorder = recorder
        return recorder

    def _watched_model(self):
        """The model's call, watched by the profiler guard where one is installed (GPU workers)."""
        return self.profiler_guard.watched(self.model) if self.profiler_guard else self.model

    def _make_inputs(self, input_kwargs: dict, seed: int) -> dict:
        torch = self.torch
        g = torch.Generator(device=self.device)
        g.manual_seed(int(seed))
        return self.reference.make_inputs(**input_kwargs, device=self.device, generator=g)

    def _threads_at_start(self) -> set:
        """The threads alive as a call starts; RuntimeError when one of the submission's is running (a pool made
        in __init__ would do work outside the judged call)."""
        running = self._candidate_threads()
        if running:
            raise RuntimeError(f"{len(running)} thread(s) of the submission are running as the call starts (a "
                               f"thread pool or background thread: work outside the audited call)")
        return set(threading.enumerate())

    def _threads_at_end(self, before: set) -> None:
        """RuntimeError when the call left a thread of the submission running (work after return)."""
        started = [t for t in set(threading.enumerate()) - before if self._owned_thread(t)]
        left = self._candidate_threads()
        if started or left:
            raise RuntimeError(f"the call left {max(len(started), len(left))} thread(s) of the submission running "
                               f"(work after return)")

    def _candidate_threads(self) -> set:
        """Python threads alive now that the worker did not start (any target: pool workers too)."""
        return set(sys._current_frames()) - self.baseline_threads

    def _audit_identity(self) -> dict:
        """The audit's own class's methods and the launch wrappers, checked like the guarded functions."""
        cls = self.audit_class
        named = {"Audit.__torch_dispatch__": cls.__dict__["__torch_dispatch__"], "Audit.__init__": cls.__dict__["__init__"],
                 "Audit.__enter__": cls.__enter__, "Audit.__exit__": cls.__exit__}
        named.update({f"LaunchLog wrapper {i}": w for i, w in enumerate(self.log.wrappers)})
        return named

    def _owned_thread(self, t) -> bool:
        target = getattr(t, "_target", None) or getattr(type(t), "run", None)
        code = getattr(target, "__code__", None)
        return code is not None and os.path.realpath(code.co_filename) == self.log.owned_file

    def _sync(self) -> None:
        if self.device == "cuda":
            self.torch.cuda.synchronize()

    def _export_call(self, outputs: dict, inputs: dict, key: int) -> dict:
        """A call's outputs, exported for the parent to judge, and the digest under `key` of each of its tensor
        inputs as they are afterwards (in-place outputs are outputs; the parent digests its pristine inputs)."""
        return {"outputs": {k: self._export(v, f"out_{k}") for k, v in outputs.items()},
                "inputs": {k: tensor_digest(v, key) for k, v in inputs.items() if isinstance(v, self.torch.Tensor)}}

    def _export(self, t, name: str) -> dict:
        return channel.export_tensor(t, self.exchange, name, cuda_ipc=self.cuda_ipc, staging=self.staging)

    def _check_tamper(self, when: str) -> None:
        own = self._audit_identity() if self.audit_class is not None else {}
        changed = tampered({k: v for k, v in self.guard.items() if k not in own})
        changed += sorted(k for k, v in self.guard.items() if k in own and own[k] is not v)
        if changed:
            raise TamperError(f"the submission replaced {', '.join(changed)} during {when}")


def _pin(msg: dict) -> None:
    """Pin the configurations a command names (kernel -> key -> index: autotune_pins.PINS), none when it names none."""
    autotune_pins.PINS.clear()
    for kernel, keys in (msg.get("pins") or {}).items():
        autotune_pins.PINS[str(kernel)] = {str(k): int(i) for k, i in keys.items()}


class TamperError(RuntimeError):
    """The candidate patched a function the evaluation relies on."""


def _jit_functions(module) -> list[str]:
    from triton.runtime.jit import KernelInterface

    return [name for name, obj in vars(module).items() if isinstance(obj, KernelInterface)]


def _as_named(out, names: tuple[str, ...], torch) -> dict:
    """The candidate's return value as {output name: plain torch.Tensor}, or a TypeError saying what is wrong."""
    if isinstance(out, dict):
        missing = [n for n in names if n not in out]
        if missing:
            raise TypeError(f"returned dict lacks outputs {missing}")
        named = {n: out[n] for n in names}
    elif isinstance(out, (tuple, list)):
        if len(out) != len(names):
            raise TypeError(f"returned {len(out)} values; the operator has outputs {list(names)}")
        named = dict(zip(names, out))
    else:
        if len(names) != 1:
            raise TypeError(f"returned one value; the operator has outputs {list(names)}")
        named = {names[0]: out}
    for n, t in named.items():
        if type(t) is not torch.Tensor:
            raise TypeError(f"output {n!r} is a {type(t).__module__}.{type(t).__name__}, not a plain torch.Tensor")
    return named


def main() -> int:
    cmd_fd, res_fd = int(sys.argv[1]), int(sys.argv[2])
    worker = Worker()
    if len(sys.argv) > 3:  # the observation channel (observe.py), read by the parent only
        worker.channel = observe.Channel(int(sys.argv[3]))
    channel.send(res_fd, {"ok": True, "ready": True, "pid": os.getpid()})
    while True:
        try:
            msg = channel.recv(cmd_fd)
        except EOFError:
            return 0
        try:
            handler = {"warm": worker.warm, "init": worker.init, "call": worker.call, "time": worker.time,
                       "sweep": worker.sweep}[msg["cmd"]]
            reply = handler(msg)
        except BaseException as exc:  # noqa: BLE001 - a candidate's failure of any kind is reported, not raised
            if isinstance(exc, KeyboardInterrupt):
                raise
            reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:2000],
                     "tamper": isinstance(exc, TamperError), "traceback": traceback.format_exc()[-4000:]}
        channel.send(res_fd, reply)


def _sm_clock_mhz(torch) -> int | None:
    """The GPU's current SM clock (MHz, through NVML), or None where NVML is missing: a latency-bound kernel's
    time scales with it, so a timing is reported with the clock it ran at."""
    try:
        return int(torch.cuda.clock_rate())
    except Exception:  # noqa: BLE001 - no pynvml, no NVML driver, or a device NVML cannot see
        return None


class _DeviceBytes:
    """A bare view of `size` bytes of device memory at `address` (the CUDA array interface), for torch.as_tensor."""

    def __init__(self, address: int, size: int) -> None:
        self.__cuda_array_interface__ = {"shape": (size,), "typestr": "|u1", "data": (address, False),
                                         "version": 3, "strides": None}


def _tensor_bytes(values: dict, torch) -> int:
    return sum(t.numel() * t.element_size() for t in values.values() if isinstance(t, torch.Tensor))


RESERVE_MIN_BYTES = 64 << 20


def reserve_free(torch, nbytes: int) -> int:
    """Leave at least `nbytes` of free memory in the caching allocator (one block, allocated and released; halved
    until it fits under the memory cap, none below RESERVE_MIN_BYTES), so the outputs and temporaries of the next
    call are cut from memory `fill_free_blocks` poisons rather than from memory mapped anew (seen on H200: a
    270 MB output with one element left unwritten read a stale value, not NaN). The bytes reserved."""
    nbytes = int(nbytes)
    while nbytes >= RESERVE_MIN_BYTES:
        try:
            block = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
        except torch.cuda.OutOfMemoryError:
            nbytes //= 2
            continue
        del block
        return nbytes
    return 0


def fill_free_blocks(torch) -> int:
    """Bytes of the caching allocator's free cached blocks (on the current device) filled with 0xFF: NaN in every
    float dtype and -1 in signed integers, so an output the candidate leaves unwritten reads as poison wherever
    the allocator hands it memory from its cache (memory it must map anew is not filled: fresh inputs per call
    keep old results out of it). Run before every command's candidate calls, checked or timed alike."""
    device = torch.cuda.current_device()
    filled = 0
    for segment in torch.cuda.memory_snapshot():
        if segment.get("device", device) != device or segment.get("is_expandable"):
            continue  # an expandable segment's free tail may be unmapped: writing it would fault
        address = int(segment["address"])
        for block in segment.get("blocks", []):
            size = int(block["size"])
            start = int(block.get("address", address))
            if block.get("state") == "inactive" and size > 0:
                torch.as_tensor(_DeviceBytes(start, size), device="cuda").fill_(0xFF)
                filled += size
            address = start + size
    torch.cuda.synchronize()
    return filled


if __name__ == "__main__":
    sys.exit(main())

