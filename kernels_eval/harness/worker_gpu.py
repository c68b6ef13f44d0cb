"""The worker's GPU commands (in the candidate's process): a judged call under the profiler (`call_gpu`), the
worker's own timing loop (`time_command`, diagnostics: the replay times what is scored), and the caching
allocator's poisoning before every command's calls (`reserve_free`, `fill_free_blocks`). Nothing here decides a
verdict: the parent judges the outputs, the trusted replay (harness/replay.py) the time and native-ness.
"""

from __future__ import annotations

import os
import secrets
import time

from kernels_eval.harness import observe
from kernels_eval.harness.protocol import encode
from kernels_eval.harness.timing import L2_FLUSH_BYTES, gpu_profiler, kineto_records, time_calls
from kernels_eval.harness.worker_commands import Call, Time
from kernels_eval.harness.worker_support import as_named, pin


def call_gpu(worker, cmd: Call) -> dict:
    """`call` on a GPU. No dispatch mode (a candidate could tell a checked call from a timed one by it): the
    call runs under the profiler that timed calls run under, and its GPU records go to the parent, where the
    kernels' names decide adoption. Free cached blocks are filled with 0xFF bytes first (NaN in every
    float dtype), in place of poisoning fresh allocations, exactly as before timed calls."""
    torch = worker.torch
    began = time.perf_counter()
    worker.kept, worker.inputs = [], None
    worker.channel.sent = set()  # each call reports what it does (CPU calls reset it in Observer.begin)
    torch.cuda.ipc_collect()
    pin(cmd.pins)
    took = {}
    if cmd.tune:  # a shape's first judged call: its compiling and autotuning happen unrecorded first
        took["tune"] = worker._untimed_call(cmd.input_kwargs)
        began = time.perf_counter()
    inputs = worker._make_inputs(cmd.input_kwargs, cmd.seed)
    torch.cuda.synchronize()
    took["inputs"] = time.perf_counter() - began
    began = time.perf_counter()
    reserve_free(torch, 2 * tensor_bytes(inputs, torch))
    filled = fill_free_blocks(torch)
    threads_before = worker._threads_at_start()
    recorder = worker._recorder(cmd, inputs)
    worker.log.active = True
    try:
        with torch.no_grad(), gpu_profiler() as prof:
            if recorder is not None:  # the plumbing is read at the dispatcher (a mode for this call only)
                mode = worker.audit_class(observe.Channel(-1), poison=False)
                mode.recorder = recorder
                with mode:
                    out = worker._watched_model()(**inputs)
            else:
                out = worker._watched_model()(**inputs)
            torch.cuda.synchronize()
    finally:
        worker.log.active = False
    worker.inputs = inputs
    launches = worker.log.take()
    worker._check_tamper("the call")
    worker._threads_at_end(threads_before)
    outputs = as_named(out, worker.outputs, torch)
    records = kineto_records(prof)
    took["run"] = time.perf_counter() - began
    began = time.perf_counter()
    reply = {"ok": True, "launches": launches, "aten_ops": {}, "records": records, "filled_bytes": filled,
             **worker._export_call(outputs, inputs, int(cmd.digest_key))}
    if recorder is not None:
        reply["program"] = encode(recorder.finish(outputs))
    took["export"] = time.perf_counter() - began
    reply["took_s"] = took
    worker.kept = list(outputs.values())
    return reply


def time_command(worker, cmd: Time) -> dict:
    """Timed calls (timing.time_calls) over input sets drawn fresh for every call, under the profiler: the
    CUDA-event seconds of the reported run, the GPU records of the whole timing (the parent attributes them
    to calls between the markers: spans.attribute), the launches, and up to `samples` outputs of timed calls
    with the seed of the set each ran on. Which calls are kept is decided after each call returns, with
    fresh OS randomness (reservoir sampling: every marked call equally likely), so nothing the candidate can
    read beforehand predicts it; kept outputs are cloned after the call's end marker, outside its span."""
    torch = worker.torch
    from kernels_eval.harness import markers as marker_kernels  # triton's: a GPU call only

    worker.kept, worker.inputs = [], None
    worker.channel.sent = set()
    torch.cuda.ipc_collect()
    pin(cmd.pins)
    tune_s = worker._untimed_call(cmd.input_kwargs) if cmd.tune else 0.0
    setup0 = time.perf_counter()
    counter = [int(cmd.seed)]
    seeds: dict[int, int] = {}  # id(input set) -> its seed, for the sets alive in `sets`

    def draw() -> dict:
        counter[0] += 1
        inputs = worker._make_inputs(cmd.input_kwargs, counter[0])
        seeds[id(inputs)] = counter[0]
        return inputs

    sets = [draw()]
    set_bytes = tensor_bytes(sets[0], torch)
    n_sets = int(max(2, min(cmd.max_sets, cmd.rotation_bytes // max(set_bytes, 1))))
    sets += [draw() for _ in range(1, n_sets)]

    def fresh_sets():
        for inputs in sets:
            seeds.pop(id(inputs), None)
        sets.clear()  # free the old buffers before drawing new ones: big problems fit twice, not four times
        for _ in range(n_sets):
            sets.append(draw())
        return sets

    want, budget = max(0, int(cmd.samples)), int(cmd.sample_bytes)
    samples: list[dict] = []
    seen, skipped = [0], []

    def keep(inputs, out) -> None:
        outputs = as_named(out, worker.outputs, torch)
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
    worker.log.take()
    reserve_free(torch, 2 * set_bytes)
    filled = fill_free_blocks(torch)
    host0 = time.perf_counter()
    took = {"time_setup": host0 - setup0, "time_tune": tune_s}
    worker.log.active = True
    try:
        with torch.no_grad(), gpu_profiler() as prof:
            times = time_calls(worker._watched_model(), sets, refresh=fresh_sets, markers=markers, after_call=keep,
                               benchmarks=worker.benchmarks,
                               warmup=int(cmd.warmup), min_calls=int(cmd.min_calls),
                               max_calls=int(cmd.max_calls), budget_s=float(cmd.budget_s),
                               warmup_s=float(cmd.warmup_s))
    finally:
        worker.log.active = False
    host_s = time.perf_counter() - host0
    clock = sm_clock_mhz(torch)  # right after the timed calls, while the GPU still runs at their clock
    worker._check_tamper("timing")
    own = os.path.realpath(marker_kernels.FILE)
    launches = [x for x in worker.log.take() if x.get("file") != own]
    took["time_calls"] = time.perf_counter() - host0  # the profiler's stop included
    took["time_first_call"] = times.first_s  # of which the first call (a cold shape autotunes there)
    began = time.perf_counter()
    records = kineto_records(prof)
    took["time_records"] = time.perf_counter() - began
    began = time.perf_counter()
    exported = [{"seed": s["seed"], "call": s["call"],
                 "outputs": {k: worker._export(t, f"sample{j}_{k}") for k, t in s["outputs"].items()}}
                for j, s in enumerate(samples)]
    worker.kept = [t for s in samples for t in s["outputs"].values()]
    del sets[:], markers
    took["time_export"] = time.perf_counter() - began
    return {"ok": True, "times_s": list(times), "marked": times.marked, "benchmarked": times.benchmarked,
            "host_s": host_s, "sets": n_sets,
            "sm_clock_mhz": clock, "records": records, "launches": launches, "samples": exported,
            "samples_skipped": skipped[0] if skipped else None, "filled_bytes": filled, "took_s": took}


def sm_clock_mhz(torch) -> int | None:
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


def tensor_bytes(values: dict, torch) -> int:
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
