"""The sandboxed worker: one process per submission operator file, driven by the parent over two pipes.

It imports torch, triton and numpy (and the torch-free registry plus the operator's reference module for
`make_inputs`), never polars/duckdb/dagster. It runs the candidate, records which @triton.jit functions ran
and which aten ops were dispatched, poisons fresh allocations, and ships outputs and post-call inputs back;
the parent judges them. Usage (by the parent only): python -m kernels_eval.harness.worker CMD_FD RESULT_FD
"""

from __future__ import annotations

import importlib.util
import os
import sys
import threading
import time
import traceback

from kernels_eval.harness import channel

# Functions a candidate could patch to fake a comparison, a timing or an audit. Their identities are
# snapshot before the candidate is imported and re-checked after every call.
GUARDED = (
    "torch.allclose", "torch.isclose", "torch.equal", "torch.testing.assert_close", "torch.Tensor.__eq__",
    "torch.Tensor.allclose", "torch.Tensor.clone", "torch.Tensor.copy_", "torch.save", "torch.cuda.synchronize",
    "torch.cuda.Event.record", "torch.cuda.Event.elapsed_time", "torch.cuda.Event.synchronize",
    "torch.cuda.Stream.synchronize", "torch.cuda.current_stream", "time.perf_counter", "time.perf_counter_ns",
    "time.time", "time.monotonic", "torch.profiler.profile.__enter__", "torch.profiler.profile.__exit__",
    "torch.profiler.profile.events", "torch.profiler.profile.key_averages",
    "torch.utils._python_dispatch.TorchDispatchMode.__enter__",
    "torch.utils._python_dispatch.TorchDispatchMode.__exit__", "triton.runtime.jit.JITFunction.run",
    "triton.runtime.interpreter.InterpretedFunction.run",
    "triton.runtime.autotuner.Autotuner.run", "triton.testing.do_bench",
    "kernels_eval.harness.channel.send", "kernels_eval.harness.channel.export_tensor",
    "kernels_eval.harness.timing.time_calls",
)
POISON_OPS = frozenset({"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "empty_permuted"})


def _resolve(path: str):
    parts = path.split(".")
    for i in range(len(parts), 0, -1):
        obj = sys.modules.get(".".join(parts[:i]))
        if obj is None:
            continue
        for attr in parts[i:]:
            obj = getattr(obj, attr, None)
        return obj
    return None


def snapshot() -> dict:
    """Identity of every guarded function that is importable here."""
    return {name: id(obj) for name in GUARDED if (obj := _resolve(name)) is not None}


def tampered(before: dict) -> list[str]:
    """Guarded functions replaced since `before`."""
    now = snapshot()
    return sorted(name for name, ident in before.items() if now.get(name) != ident)


class LaunchLog:
    """Records every @triton.jit launch (function name, defining file, owned by the submission or not);
    in ghost mode the submission's own launches are skipped, to test that they do the work."""

    def __init__(self, owned_file: str) -> None:
        self.owned_file = os.path.realpath(owned_file)
        self.events: list[dict] = []
        self.active = False
        self.ghost = False

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

    def _wrap(self, original):
        log = self

        def run(fn_self, *args, **kwargs):
            fn = getattr(fn_self, "fn", None)
            code = getattr(fn, "__code__", None)
            file = os.path.realpath(code.co_filename) if code is not None else "?"
            owned = file == log.owned_file
            if log.active and not kwargs.get("warmup"):
                log.events.append({"name": getattr(fn, "__name__", "?"), "file": file, "owned": owned})
            if log.ghost and owned and not kwargs.get("warmup"):
                return None
            return original(fn_self, *args, **kwargs)

        return run

    def take(self) -> list[dict]:
        """The distinct launches since the last take, with counts."""
        counts: dict[tuple, int] = {}
        for e in self.events:
            key = (e["name"], e["file"], e["owned"])
            counts[key] = counts.get(key, 0) + 1
        self.events = []
        return [{"name": n, "file": f, "owned": o, "count": c} for (n, f, o), c in sorted(counts.items())]


def _audit_mode(poison: bool):
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    class Audit(TorchDispatchMode):
        """Counts dispatched ops and fills fresh allocations with NaN / a sentinel so unwritten output fails."""

        def __init__(self) -> None:
            super().__init__()
            self.ops: dict[str, int] = {}

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = func.overloadpacket.__name__
            if func.namespace != "aten":
                name = f"{func.namespace}::{name}"
            self.ops[name] = self.ops.get(name, 0) + 1
            out = func(*args, **(kwargs or {}))
            if poison and name in POISON_OPS and isinstance(out, torch.Tensor) and out.numel():
                if out.is_floating_point():
                    out.fill_(float("nan"))
                elif out.dtype != torch.bool and not out.is_complex():
                    out.fill_(torch.iinfo(out.dtype).min + 3 if out.dtype != torch.uint8 else 0xA5)
            return out

    return Audit()


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

    # ---- commands --------------------------------------------------------------------------------------

    def init(self, msg: dict) -> dict:
        """Import the candidate file (once) and build Model(**init_kwargs)."""
        torch = self.torch
        self.device = msg["device"]
        self.exchange = msg["exchange"]
        self.outputs = tuple(msg["outputs"])
        if self.module is None:
            from kernels_eval.registry import load_reference

            self.reference = load_reference(msg["operator"])
            import triton  # noqa: F401  (decorators read TRITON_INTERPRET at import of the candidate)
            import kernels_eval.harness.timing  # noqa: F401  (guarded)

            if os.environ.get("TRITON_INTERPRET") == "1":
                from kernels_eval.harness.interpreter import patch_interpreter

                patch_interpreter()
            if self.device == "cuda" and msg.get("gpu_memory_fraction"):
                torch.cuda.set_per_process_memory_fraction(float(msg["gpu_memory_fraction"]))
            self.log = LaunchLog(msg["file"])
            self.log.install()
            self.guard = snapshot()
            spec = importlib.util.spec_from_file_location(f"hotshape_candidate_{msg['operator']}", msg["file"])
            module = importlib.util.module_from_spec(spec)
            sys.modules[spec.name] = module
            spec.loader.exec_module(module)
            self.module = module
            self._check_tamper("importing the submission")
        self.model = self.module.Model(**msg["init_kwargs"])
        if isinstance(self.model, torch.nn.Module):
            self.model = self.model.to(self.device)
        self._check_tamper("building Model")
        return {"ok": True, "jit_functions": sorted(_jit_functions(self.module))}

    def call(self, msg: dict) -> dict:
        """One call on inputs drawn with the parent's seed; outputs and the inputs as they are afterwards."""
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
        audit = _audit_mode(poison=msg.get("poison", True))
        threads_before = set(threading.enumerate())
        self.log.active, self.log.ghost = True, bool(msg.get("ghost"))
        try:
            with torch.no_grad(), audit:
                out = self.model(**inputs)
            self._sync()
        finally:
            self.log.active, self.log.ghost = False, False
        self.inputs = inputs
        launches = self.log.take()
        self._check_tamper("the call")
        started = [t for t in set(threading.enumerate()) - threads_before if self._owned_thread(t)]
        if started:
            raise RuntimeError(f"the call left {len(started)} thread(s) of the submission running (work after return)")
        outputs = _as_named(out, self.outputs, torch)
        took["run"] = time.perf_counter() - began
        began = time.perf_counter()
        reply = {"ok": True, "launches": launches, "aten_ops": audit.ops,
                 "outputs": {k: self._export(v, f"out_{k}") for k, v in outputs.items()},
                 "inputs": {k: self._export(v, f"in_{k}") for k, v in inputs.items()
                            if isinstance(v, torch.Tensor)}}
        took["export"] = time.perf_counter() - began
        reply["took_s"] = took
        self.kept = list(outputs.values())
        return reply

    def profile(self, msg: dict) -> dict:
        """GPU kernel time per name over a few profiled calls (all streams), and the CUDA-event time of each."""
        torch = self.torch
        from torch.autograd import DeviceType
        from torch.profiler import ProfilerActivity, profile

        inputs = self._make_inputs(msg["input_kwargs"], msg["seed"])
        calls = int(msg.get("calls", 3))
        with torch.no_grad():
            self.model(**inputs)
        torch.cuda.synchronize()
        event_s = []
        self.log.active = True
        with torch.no_grad(), profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(calls):
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                self.model(**inputs)
                end.record()
                torch.cuda.synchronize()
                event_s.append(start.elapsed_time(end) / 1e3)
        self.log.active = False
        kernel_us: dict[str, float] = {}
        for evt in prof.events():
            if evt.device_type == DeviceType.CUDA and not getattr(evt, "is_user_annotation", False):
                kernel_us[evt.name] = kernel_us.get(evt.name, 0.0) + float(evt.time_range.elapsed_us())
        self._check_tamper("profiling")
        return {"ok": True, "kernel_us": {k: v / calls for k, v in kernel_us.items()},
                "event_s": event_s, "launches": self.log.take()}

    def time(self, msg: dict) -> dict:
        """Seconds per call over rotating fresh input sets (see timing.time_calls)."""
        torch = self.torch
        from kernels_eval.harness.timing import time_calls

        seed = int(msg["seed"])
        self.kept, self.inputs = [], None
        first = self._make_inputs(msg["input_kwargs"], seed)
        set_bytes = sum(t.numel() * t.element_size() for t in first.values() if isinstance(t, torch.Tensor))
        n_sets = int(max(2, min(msg.get("max_sets", 8), msg.get("rotation_bytes", 2 << 30) // max(set_bytes, 1))))
        sets = [first] + [self._make_inputs(msg["input_kwargs"], seed + j) for j in range(1, n_sets)]
        del first
        counter = [seed + n_sets]

        def fresh_sets():
            sets.clear()  # free the old buffers before drawing new ones: big problems fit twice, not four times
            for _ in range(n_sets):
                counter[0] += 1
                sets.append(self._make_inputs(msg["input_kwargs"], counter[0]))
            return sets

        host0 = time.perf_counter()
        with torch.no_grad():
            times = time_calls(self.model, sets, refresh=fresh_sets, warmup=int(msg.get("warmup", 3)),
                               min_calls=int(msg.get("min_calls", 10)), max_calls=int(msg.get("max_calls", 200)),
                               budget_s=float(msg.get("budget_s", 0.5)))
        host_s = time.perf_counter() - host0
        clock = _sm_clock_mhz(torch)  # right after the timed calls, while the GPU still runs at their clock
        self._check_tamper("timing")
        self.log.take()
        self.inputs = sets[-1]
        return {"ok": True, "times_s": times, "host_s": host_s, "sets": n_sets, "sm_clock_mhz": clock}

    # ---- helpers ---------------------------------------------------------------------------------------

    def _make_inputs(self, input_kwargs: dict, seed: int) -> dict:
        torch = self.torch
        g = torch.Generator(device=self.device)
        g.manual_seed(int(seed))
        return self.reference.make_inputs(**input_kwargs, device=self.device, generator=g)

    def _owned_thread(self, t) -> bool:
        target = getattr(t, "_target", None) or getattr(type(t), "run", None)
        code = getattr(target, "__code__", None)
        return code is not None and os.path.realpath(code.co_filename) == self.log.owned_file

    def _sync(self) -> None:
        if self.device == "cuda":
            self.torch.cuda.synchronize()

    def _export(self, t, name: str) -> dict:
        return channel.export_tensor(t, self.exchange, name)

    def _check_tamper(self, when: str) -> None:
        changed = tampered(self.guard)
        if changed:
            raise TamperError(f"the submission replaced {', '.join(changed)} during {when}")


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
    channel.send(res_fd, {"ok": True, "ready": True, "pid": os.getpid()})
    while True:
        try:
            msg = channel.recv(cmd_fd)
        except EOFError:
            return 0
        try:
            handler = {"init": worker.init, "call": worker.call, "profile": worker.profile,
                       "time": worker.time}[msg["cmd"]]
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


if __name__ == "__main__":
    sys.exit(main())

