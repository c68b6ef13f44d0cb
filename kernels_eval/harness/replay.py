"""The trusted replay: runs a recorded launch program with no candidate Python, and times it on a GPU.

A separate process (sandboxed like the worker, shown no candidate file and its own Triton cache), driven by the
parent with protocol.ReplayRequest messages. It rebuilds each recorded kernel from its validated source
(harness/kernel_source.py: Triton's interpreter on CPU, Triton's compiler on a GPU, never the candidate's cache),
draws inputs from the parent's seeds (fresh OS randomness the candidate never saw, except for a program that
depends on the data, which is replayed on the very inputs it was recorded on), restores the init-time state
from the snapshot taken after __init__, fills every buffer the program allocates with 0xFF (NaN in every float
dtype) before running, runs the steps, and exports the outputs for the parent to judge. `time_program` is the
performance stage's clock: CUPTI kernel records of calls issued back to back between the evaluator's markers,
L2 flushed and inputs rotated between calls; a call's time is the sum of its kernels' durations, so host launch
gaps are not counted. Usage (by the parent only): python -m kernels_eval.harness.replay CMD_FD RESULT_FD
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time

from kernels_eval.harness import channel
from kernels_eval.harness.kernel_source import KernelRefused, build, constant_value
from kernels_eval.harness.protocol import (Alloc, Copy, Fill, Launch, LaunchProgram, ProtocolError, Read,
                                           ReplayRequest, ReplayResult, TensorView, decode_program, decode_request,
                                           encode)
from kernels_eval.harness import spans
from kernels_eval.harness.compare import tensor_digest
from kernels_eval.harness.interpreter import patch_interpreter
from kernels_eval.harness.spans import SpanError
from kernels_eval.harness.timing import L2_FLUSH_BYTES, gpu_profiler, kineto_records
from kernels_eval.registry import load_reference

POISON_BYTE = 0xFF
BUILT_KEPT = 256  # sets of rebuilt kernels a replay process keeps (`built_kernels`)
_built: dict[str, dict] = {}


class ReplayRefused(ValueError):
    """A program the replay cannot run as recorded (a view outside its memory, a dtype it does not know)."""


def _dtype(torch, name: str):
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise ReplayRefused(f"unknown dtype {name!r}")
    return dtype


def materialize(view: TensorView, bases: dict, torch, device: str):
    """The tensor `view` names, over the storage in `bases` (role, ref) -> flat uint8 tensor; ReplayRefused when
    it would reach outside that storage."""
    dtype = _dtype(torch, view.dtype)
    if any(n == 0 for n in view.shape):
        return torch.empty(view.shape, dtype=dtype, device=device)
    key = ("buffer", view.ref) if view.role in ("output", "scratch") else (view.role, view.ref)
    base = bases.get(key)
    if base is None:
        raise ReplayRefused(f"a view names {view.role} {view.ref!r}, which the replay does not hold")
    item = dtype.itemsize
    if view.offset_bytes % item or any(s < 0 for s in view.strides):
        raise ReplayRefused(f"a view of {view.ref!r} is misaligned or has negative strides")
    extent = view.offset_bytes + (1 + sum((n - 1) * s for n, s in zip(view.shape, view.strides))) * item
    if extent > base.numel():
        raise ReplayRefused(f"a view of {view.ref!r} reaches byte {extent} of its {base.numel()}")
    return torch.empty(0, dtype=dtype, device=device).set_(base.untyped_storage(), view.offset_bytes // item,
                                                           view.shape, view.strides)


def input_bases(inputs: dict, torch) -> dict:
    """(role, name) -> flat bytes of each input's storage (the first name of a storage, as discovery names it)."""
    bases: dict = {}
    seen: set = set()
    for name, t in inputs.items():
        if isinstance(t, torch.Tensor) and t.numel():
            storage = t.untyped_storage()
            if storage.data_ptr() not in seen:
                seen.add(storage.data_ptr())
                bases[("input", name)] = torch.empty(0, dtype=torch.uint8, device=t.device).set_(
                    storage, 0, (storage.nbytes(),), (1,))
    return bases


def prepare(program: LaunchProgram, inputs: dict, state: dict, torch, device: str, clone_state: bool = True) -> dict:
    """The memory one run of `program` uses: the inputs' storages, the init-time state (fresh copies, unless
    `clone_state` is False: a timing shares it and checks it unchanged), and each allocated buffer filled with
    poison."""
    bases = input_bases(inputs, torch)
    bases.update({("state", name): t.clone() if clone_state else t for name, t in state.items()})
    for step in program.steps:
        if isinstance(step, Alloc):
            bases[("buffer", step.buffer)] = torch.full((step.nbytes,), POISON_BYTE, dtype=torch.uint8, device=device)
    return bases


def _argument(arg, bases: dict, torch, device: str):
    if arg.tensor is not None:
        return materialize(arg.tensor, bases, torch, device)
    if arg.constexpr and isinstance(arg.value, str) and arg.value.startswith("tl."):
        return constant_value(arg.value)
    return arg.value


def run_steps(program: LaunchProgram, kernels: dict, bases: dict, torch, device: str) -> dict:
    """Run the program's steps over `bases` (from `prepare`); its outputs, name -> tensor."""
    for step in program.steps:
        if isinstance(step, Fill):
            materialize(step.target, bases, torch, device).fill_(step.value)
        elif isinstance(step, Copy):
            materialize(step.dst, bases, torch, device).copy_(materialize(step.src, bases, torch, device))
        elif isinstance(step, Read):
            materialize(step.src, bases, torch, device).reshape(-1)[:1].item()
        elif isinstance(step, Launch):
            if 0 in step.grid:
                continue
            args = {a.name: _argument(a, bases, torch, device) for a in step.args}
            kernels[step.kernel][step.grid](**args, **step.options)
    return {name: materialize(view, bases, torch, device) for name, view in program.outputs.items()}


def run_program(program: LaunchProgram, kernels: dict, inputs: dict, state: dict, torch, device: str) -> dict:
    """One replayed call of `program` on `inputs`: outputs, name -> tensor."""
    return run_steps(program, kernels, prepare(program, inputs, state, torch, device), torch, device)


def make_inputs(reference, input_kwargs: dict, seed: int, torch, device: str) -> dict:
    """The reference's inputs drawn from `seed` (the parent draws the same to compute the expected outputs)."""
    g = torch.Generator(device=device)
    g.manual_seed(int(seed))
    return reference.make_inputs(**input_kwargs, device=device, generator=g)


ROTATION_BYTES = 2 << 30  # input sets a timing rotates through take at most this much (at least two sets)


def buffers_of(bases: dict) -> list:
    """The memory a program allocates in one prepared run (what is poisoned again before each timed call)."""
    return [t for (role, _), t in bases.items() if role == "buffer"]


def time_program(program: LaunchProgram, kernels: dict, input_sets: list[dict], state: dict, *,
                 budget_s: float = 0.15, min_calls: int = 10, max_calls: int = 200, warmup: int = 3):
    """(seconds of each timed call, each input set's outputs after its last timed call, µs per call by kernel
    name) of `program` on a GPU.

    A call's time is the sum of the durations of the GPU work it ran (CUPTI records between the evaluator's
    markers; the start marker flushes L2), so host launch gaps are not counted. The calls are issued back to
    back, each on the next of `input_sets` (rotated); before each, the memory the program allocates is poisoned
    again (outside the markers), so no call can reuse an earlier call's work, and the init-time state is
    checked unchanged afterwards (a kernel that caches results in it is refused). The entry point an autotuning
    protocol times each configuration's program with."""
    import torch

    from kernels_eval.harness.markers import Markers  # triton's: timed replays only

    markers = Markers(L2_FLUSH_BYTES)
    state_before = {name: t.clone() for name, t in state.items()}
    memory = [prepare(program, inputs, state, torch, "cuda", clone_state=False) for inputs in input_sets]
    for k in range(warmup):
        run_steps(program, kernels, memory[k % len(memory)], torch, "cuda")
    markers.start()
    markers.end()
    torch.cuda.synchronize()
    began = time.perf_counter()
    run_steps(program, kernels, memory[0], torch, "cuda")
    torch.cuda.synchronize()
    per_call = max(time.perf_counter() - began, 1e-6)
    calls = int(min(max_calls, max(min_calls, budget_s / per_call)))
    last: list = [None] * len(memory)
    with torch.no_grad(), gpu_profiler() as prof:
        for k in range(calls):
            bases = memory[k % len(memory)]
            for buf in buffers_of(bases):
                buf.fill_(POISON_BYTE)
            markers.start()
            last[k % len(memory)] = run_steps(program, kernels, bases, torch, "cuda")
            markers.end()
        torch.cuda.synchronize()
    changed = [name for name, t in state.items() if not torch.equal(t, state_before[name])]
    if changed:
        raise ReplayRefused(f"the kernels wrote to init-time state ({', '.join(changed[:3])}) during timed calls")
    windows, _, _ = spans.attribute(kineto_records(prof), calls)
    for k, window in enumerate(windows):
        if not window:
            raise spans.SpanError(f"replayed call {k} ran no GPU work")
    times = [ns / 1e9 for ns in spans.call_busy(windows)]  # on the one stream: the sum of the durations
    kernel_us = {name: us / len(windows) for name, us in spans.time_by_name(windows).items()}
    return times, last, kernel_us


def timing_sets(reference, input_kwargs: dict, seeds: list[int], torch) -> tuple[list[dict], list[int]]:
    """Input sets for a timing (at least two, at most ROTATION_BYTES of them) and their seeds."""
    sets, used = [], []
    for seed in seeds:
        inputs = make_inputs(reference, input_kwargs, seed, torch, "cuda")
        sets.append(inputs)
        used.append(seed)
        size = sum(t.numel() * t.element_size() for t in inputs.values() if isinstance(t, torch.Tensor))
        if len(sets) >= 2 and size * (len(sets) + 1) > ROTATION_BYTES:
            break
    return sets, used


def built_kernels(kernels) -> dict:
    """`build(kernels)`, kept for the process by the kernels' exact definitions (source, aliases, constants,
    callees): the configurations of an autotuned kernel, its protocol rounds and the later problems timing the same
    sources reuse the same `triton.jit` functions, and so the specializations they compiled, rather than loading
    each from the compile cache again per request. A refused kernel is refused each time."""
    key = json.dumps([dataclasses.asdict(k) for k in kernels], sort_keys=True)
    kept = _built.get(key)
    if kept is None:
        if len(_built) >= BUILT_KEPT:
            _built.clear()
        kept = _built[key] = build(kernels)
    return kept


def serve(request: ReplayRequest) -> ReplayResult:
    """The replay of one request: outputs (exported into the request's exchange directory) and input digests of
    each seed, and the timed calls' seconds where asked."""
    import torch

    try:
        program = decode_program(request.program)
        kernels = built_kernels(program.kernels)
    except (ProtocolError, KernelRefused) as exc:
        return ReplayResult(ok=False, refused=str(exc)[:2000])
    device = request.device
    reference = load_reference(request.operator)
    state = {name: channel.import_tensor(desc, request.exchange) for name, desc in request.state.items()}
    outputs, digests = [], []
    try:
        for k, seed in enumerate(request.seeds):
            inputs = make_inputs(reference, request.input_kwargs, seed, torch, device)
            with torch.no_grad():
                got = run_program(program, kernels, inputs, state, torch, device)
            if device == "cuda":
                torch.cuda.synchronize()
            outputs.append({name: channel.export_tensor(t, request.exchange, f"replay{k}_{name}", cuda_ipc=False)
                            for name, t in got.items()})
            digests.append({name: tensor_digest(t, request.digest_key) for name, t in inputs.items()
                            if isinstance(t, torch.Tensor)})
            del got, inputs
        times, timed_outputs, timed_seeds, timed_digests, kernel_us = None, [], [], [], {}
        if request.time_calls and device == "cuda":
            sets, timed_seeds = timing_sets(reference, request.input_kwargs, request.time_seeds, torch)
            with torch.no_grad():
                times, last, kernel_us = time_program(program, kernels, sets, state, budget_s=request.budget_s,
                                           max_calls=request.max_calls)
            for k, got in enumerate(last):
                timed_outputs.append({name: channel.export_tensor(t, request.exchange, f"timed{k}_{name}",
                                                                  cuda_ipc=False) for name, t in got.items()})
                timed_digests.append({name: tensor_digest(t, request.digest_key) for name, t in sets[k].items()
                                      if isinstance(t, torch.Tensor)})
    except (ReplayRefused, spans_error()) as exc:
        return ReplayResult(ok=False, refused=str(exc)[:2000])
    return ReplayResult(ok=True, outputs=outputs, digests=digests, times_s=times, timed_outputs=timed_outputs,
                        timed_seeds=timed_seeds, timed_digests=timed_digests, kernel_us=kernel_us)


def spans_error():
    return SpanError


def main() -> int:
    cmd_fd, res_fd = int(sys.argv[1]), int(sys.argv[2])
    if os.environ.get("TRITON_INTERPRET") == "1":
        patch_interpreter()
    channel.send(res_fd, {"ok": True, "ready": True, "pid": os.getpid()})
    while True:
        try:
            message = channel.recv(cmd_fd)
        except EOFError:
            return 0
        try:
            result = serve(decode_request(message))
        except Exception as exc:  # noqa: BLE001 - a kernel that fails to build or run is reported, not raised
            result = ReplayResult(ok=False, error=f"{type(exc).__name__}: {exc}"[:2000])
        channel.send(res_fd, encode(result))


if __name__ == "__main__":
    sys.exit(main())
