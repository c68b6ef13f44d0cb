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

import os
import sys
import time

from kernels_eval.harness import channel
from kernels_eval.harness.kernel_source import KernelRefused, build, constant_value
from kernels_eval.harness.protocol import (Alloc, Copy, Fill, Launch, LaunchProgram, ProtocolError, ReplayRequest,
                                           ReplayResult, TensorView, decode_program, decode_request, encode)

POISON_BYTE = 0xFF


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


def prepare(program: LaunchProgram, inputs: dict, state: dict, torch, device: str) -> dict:
    """The memory one run of `program` uses: the inputs' storages, fresh copies of the init-time state, and each
    allocated buffer filled with poison."""
    bases = input_bases(inputs, torch)
    bases.update({("state", name): t.clone() for name, t in state.items()})
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


def time_program(program: LaunchProgram, kernels: dict, input_sets: list[dict], state: dict, *,
                 budget_s: float = 0.15, min_calls: int = 10, max_calls: int = 200, warmup: int = 3) -> list[float]:
    """Seconds of each timed call of `program` on a GPU: the sum of the durations of the GPU work each call ran
    (CUPTI records between the evaluator's markers; the start marker flushes L2), the calls issued back to
    back, each on the next of `input_sets` (rotated) with its own freshly poisoned buffers and state. The entry
    point an autotuning protocol times each configuration's program with."""
    import torch

    from kernels_eval.harness import spans
    from kernels_eval.harness.markers import Markers
    from kernels_eval.harness.timing import L2_FLUSH_BYTES, gpu_profiler, kineto_records

    markers = Markers(L2_FLUSH_BYTES)
    for k in range(warmup):
        run_program(program, kernels, input_sets[k % len(input_sets)], state, torch, "cuda")
    torch.cuda.synchronize()
    began = time.perf_counter()
    run_program(program, kernels, input_sets[0], state, torch, "cuda")
    torch.cuda.synchronize()
    per_call = max(time.perf_counter() - began, 1e-6)
    calls = int(min(max_calls, max(min_calls, budget_s / per_call)))
    # each call's memory is made before the profiled calls, so its poison fills are outside every window
    memory = [prepare(program, input_sets[k % len(input_sets)], state, torch, "cuda") for k in range(min(calls, 4))]
    torch.cuda.synchronize()
    with torch.no_grad(), gpu_profiler() as prof:
        for k in range(calls):
            markers.start()
            run_steps(program, kernels, memory[k % len(memory)], torch, "cuda")
            markers.end()
        torch.cuda.synchronize()
    windows, _, _ = spans.attribute(kineto_records(prof), calls)
    times = []
    for k, window in enumerate(windows):
        if not window:
            raise spans.SpanError(f"replayed call {k} ran no GPU work")
        times.append(sum(r.end_ns - r.start_ns for r in window) / 1e9)
    return times


def serve(request: ReplayRequest) -> ReplayResult:
    """The replay of one request: outputs (exported into the request's exchange directory) and input digests of
    each seed, and the timed calls' seconds where asked."""
    import torch

    from kernels_eval.harness.compare import tensor_digest
    from kernels_eval.registry import load_reference

    try:
        program = decode_program(request.program)
        kernels = build(program.kernels)
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
        times = None
        if request.time_calls and device == "cuda":
            sets = [make_inputs(reference, request.input_kwargs, seed, torch, device) for seed in request.time_seeds]
            times = time_program(program, kernels, sets, state, budget_s=request.budget_s,
                                 max_calls=request.max_calls)
    except ReplayRefused as exc:
        return ReplayResult(ok=False, refused=str(exc)[:2000])
    return ReplayResult(ok=True, outputs=outputs, digests=digests, times_s=times)


def main() -> int:
    cmd_fd, res_fd = int(sys.argv[1]), int(sys.argv[2])
    if os.environ.get("TRITON_INTERPRET") == "1":
        from kernels_eval.harness.interpreter import patch_interpreter

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
