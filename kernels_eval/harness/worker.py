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

from kernels_eval.harness import channel, discovery, guarded, observe, profiler_guard, worker_gpu
from kernels_eval.harness.launch_log import LaunchLog
from kernels_eval.harness.protocol import encode
from kernels_eval.harness.worker_commands import Call, Init, Sweep, Time, Warm, decode_command
from kernels_eval.harness.worker_support import TamperError, as_named, pin
from kernels_eval.harness.adoption import ALLOWED_ATEN_OPS
from kernels_eval.harness import autotune_pins
from kernels_eval.harness.compare import tensor_digest
from kernels_eval.harness.interpreter import patch_interpreter
from kernels_eval.harness.timing import gpu_profiler
from kernels_eval.registry import load_reference

TRITON_BENCH_MS = (25.0, 100.0)  # triton.testing.do_bench's own warm-up and repetitions, where none are given
POISON_OPS = frozenset({"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "empty_permuted"})


def snapshot() -> dict:
    """The guarded functions (harness/guarded.py) as each owner holds them now."""
    return guarded.take()


def tampered(before: dict) -> list[str]:
    """Guarded functions replaced since `before`."""
    return guarded.replaced(before)


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

    def warm(self, cmd: Warm) -> dict:
        """Make the CUDA context and the profiler's first start ahead, before any candidate is imported: a
        process's first CUDA-activity profile takes ~6 s on H200 (CUPTI's start; later ones ~1 ms), which a
        prestarted worker pays while the previous operator is judged rather than inside its first command."""
        torch = self.torch
        began = time.perf_counter()
        if cmd.device == "cuda" and torch.cuda.is_available():
            torch.cuda.init()
            with gpu_profiler():
                torch.cuda.synchronize()
            if cmd.markers_cache:  # ~0.8 s of loading the evaluator's markers, off the first command too
                import kernels_eval.harness.markers  # triton's: loaded ahead only when asked

                try:
                    kernels_eval.harness.markers.compile_privately(cmd.markers_cache)
                    self.markers_loaded = True
                except Exception:  # noqa: BLE001 - then init loads them, as without warming
                    pass
        return {"ok": True, "took_s": {"warm": time.perf_counter() - began}}

    def init(self, cmd: Init) -> dict:
        """Import the candidate file (once) and build Model(**init_kwargs)."""
        torch = self.torch
        self.device = cmd.device
        self.file = cmd.file
        self.exchange = cmd.exchange
        # CUDA IPC handles cannot be opened across the sandbox's pid/ipc namespaces (seen on H200: "mapping of
        # buffer object failed" in the parent): a sandboxed worker hands CUDA tensors over as host copies
        self.cuda_ipc = bool(cmd.cuda_ipc)
        self.outputs = tuple(cmd.outputs)
        took: dict[str, float] = {}
        began = time.perf_counter()
        if self.module is None:
            self.reference = load_reference(cmd.operator)
            import triton  # noqa: F401  (decorators read TRITON_INTERPRET at import of the candidate)
            import kernels_eval.harness.timing  # noqa: F401  (guarded)
            import kernels_eval.harness.markers  # noqa: F401  (guarded)

            if os.environ.get("TRITON_INTERPRET") == "1":
                patch_interpreter()
            if self.device == "cuda" and cmd.gpu_memory_fraction:
                torch.cuda.set_per_process_memory_fraction(float(cmd.gpu_memory_fraction))
            if self.device == "cuda":  # before the snapshot below: do_bench is guarded
                from kernels_eval.harness.autotune_cache import shorter_benchmarks  # triton's: a GPU only

                self.benchmarks = shorter_benchmarks(*(float(x) for x in cmd.autotune_bench_ms or
                                                       TRITON_BENCH_MS))
            from kernels_eval.harness import autotune_pins  # before the snapshot too: Autotuner.run is GUARDED

            autotune_pins.install()
            took["init_setup"] = time.perf_counter() - began
            began = time.perf_counter()
            if self.device == "cuda" and not self.markers_loaded:
                try:  # not from the cache the candidate can write; a failure here leaves them to the first timing
                    kernels_eval.harness.markers.compile_privately(cmd.markers_cache)
                except Exception:  # noqa: BLE001 - the markers then compile at their first launch, as before
                    pass
            took["init_markers"] = time.perf_counter() - began
            began = time.perf_counter()
            self.observer = observe.Observer(cmd.file, self.channel)
            self.observer.install()
            self.audit_class = observe.audit_mode_class(POISON_OPS, ALLOWED_ATEN_OPS)
            if self.device != "cuda":  # the mode checks CPU calls only (call_gpu runs under the profiler alone)
                # the first dispatch under a Python mode imports much of torch lazily (seconds): not in a call
                with torch.no_grad(), self.audit_class(observe.Channel(-1), poison=True):
                    torch.empty_like(torch.zeros(4)).copy_(torch.ones(4))
            self.log = LaunchLog(cmd.file, self.observer)
            self.log.install()
            if self.device == "cuda":
                self.profiler_guard = profiler_guard.Guard(lambda detail: self.observer.channel.send("tamper", detail))
                self.profiler_guard.install()
            self.observer.boundary = {w.__code__ for w in self.log.wrappers} | {Worker.call.__code__}
            self.baseline_threads = set(sys._current_frames())  # the worker's own threads, before the candidate's
            self.guard = snapshot()
            self.guard.update(self._audit_identity())
            spec = importlib.util.spec_from_file_location(f"hotshape_candidate_{cmd.operator}", cmd.file)
            module = importlib.util.module_from_spec(spec)
            sys.modules[spec.name] = module
            spec.loader.exec_module(module)
            self.module = module
            self._check_tamper("importing the submission")
            took["init_import"] = time.perf_counter() - began
            began = time.perf_counter()
        self.model = self.module.Model(**cmd.init_kwargs)
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

    def call(self, cmd: Call) -> dict:
        """One call on inputs drawn with the parent's seed; outputs and the inputs as they are afterwards."""
        pin(cmd.pins)  # the autotuning protocol's configurations, where the parent names them
        if self.device == "cuda":
            return self.call_gpu(cmd)
        torch = self.torch
        began = time.perf_counter()
        self.kept = []
        if self.device == "cuda":
            torch.cuda.ipc_collect()
        if cmd.reuse_buffers and self.inputs is not None:
            fresh = self._make_inputs(cmd.input_kwargs, cmd.seed)
            for name, t in self.inputs.items():
                if isinstance(t, torch.Tensor):
                    t.copy_(fresh[name])
                else:
                    self.inputs[name] = fresh[name]
            inputs = self.inputs
        else:
            inputs = self._make_inputs(cmd.input_kwargs, cmd.seed)
        self._sync()
        took = {"inputs": time.perf_counter() - began}
        began = time.perf_counter()
        audit = self.audit_class(self.channel, poison=cmd.poison)
        recorder = self._recorder(cmd, inputs)
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
        outputs = as_named(out, self.outputs, torch)
        took["run"] = time.perf_counter() - began
        began = time.perf_counter()
        reply = {"ok": True, "launches": launches, "aten_ops": audit.ops,
                 **self._export_call(outputs, inputs, int(cmd.digest_key))}
        if recorder is not None:
            reply["program"] = encode(recorder.finish(outputs))
        took["export"] = time.perf_counter() - began
        reply["took_s"] = took
        self.kept = list(outputs.values())
        return reply

    def call_gpu(self, cmd: Call) -> dict:
        """`call` on a GPU (harness/worker_gpu.py)."""
        return worker_gpu.call_gpu(self, cmd)

    def time(self, cmd: Time) -> dict:
        """The worker's own timing loop (harness/worker_gpu.py; diagnostics, no verdict reads it)."""
        return worker_gpu.time_command(self, cmd)

    def sweep(self, cmd: Sweep) -> dict:
        """The worker's half of the evaluator's autotuning protocol (harness/autotune_sweep.py): one untimed call
        that reports which (kernel, key) it tuned, the configurations the autotuner's own pruning keeps for it
        and the one that ran. Each configuration is then recorded by a `call` with it pinned (`pins`) and timed
        by the trusted replay, never here."""
        self.kept, self.inputs = [], None
        pin(cmd.pins)
        autotune_pins.Watch.start()
        try:
            tune_s = self._untimed_call(cmd.input_kwargs)
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

    def _recorder(self, cmd: Call, inputs: dict) -> discovery.Recorder | None:
        """The recorder of this call's launch program where the parent asked for one."""
        self.log.recorder = None
        if not cmd.record:
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


def _jit_functions(module) -> list[str]:
    from triton.runtime.jit import KernelInterface

    return [name for name, obj in vars(module).items() if isinstance(obj, KernelInterface)]


def main() -> int:
    cmd_fd, res_fd = int(sys.argv[1]), int(sys.argv[2])
    worker = Worker()
    if len(sys.argv) > 3:  # the observation channel (observe.py), read by the parent only
        worker.channel = observe.Channel(int(sys.argv[3]))
    channel.send(res_fd, {"ok": True, "ready": True, "pid": os.getpid()})
    while True:
        try:
            message = channel.recv(cmd_fd)
        except EOFError:
            return 0
        try:
            command = decode_command(message)  # an unknown command or field: a failed reply naming it
            handler = {Warm: worker.warm, Init: worker.init, Call: worker.call, Time: worker.time,
                       Sweep: worker.sweep}[type(command)]
            reply = handler(command)
        except BaseException as exc:  # noqa: BLE001 - a candidate's failure of any kind is reported, not raised
            if isinstance(exc, KeyboardInterrupt):
                raise
            reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:2000],
                     "tamper": isinstance(exc, TamperError), "traceback": traceback.format_exc()[-4000:]}
        channel.send(res_fd, reply)


if __name__ == "__main__":
    sys.exit(main())
