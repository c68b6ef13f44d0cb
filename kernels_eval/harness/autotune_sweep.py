"""The GPU half of the evaluator's autotuning protocol (autotune_protocol.py), in the parent: which (kernel, key)
a problem's call tunes (the worker's `sweep` command), each configuration's launch program recorded by a worker
call with it pinned, and each program timed by the trusted replay (harness/judge.py, harness/replay.py
`time_program`: CUPTI kernel durations in a process that runs no candidate Python), the choice made here.

A configuration's figure in a round is the replay's µs per call of the autotuned kernel itself (its records, by
name), else the median replayed call: a cheap kernel beside an expensive one is compared on its own time, not
within the noise of the whole call. A configuration whose call fails, whose outputs are wrong or whose program
the replay does not reproduce is not eligible. Kernels are decided in the order the call first reached them, each
with the earlier ones pinned at their choice.

Everything the worker sends (kernel names, keys, configuration texts, indices) is bounded and sanitised here
before it reaches a record or a row; the choice rests only on the replay's times.
"""

from __future__ import annotations

import statistics
import time

from kernels_eval.harness.autotune_protocol import Budget, KernelChoice, ProtocolError, Record, decide

MAX_KERNELS = 32  # autotuned (kernel, key) pairs one call may tune
MAX_CONFIGS = 512  # configurations one kernel may offer at a key
MAX_TEXT = 400  # characters of a kernel name, key or configuration text kept


def clean(value, what: str) -> str:
    """Text from the worker, printable ASCII only and at most MAX_TEXT characters; a ProtocolError otherwise."""
    if not isinstance(value, str) or not value or len(value) > MAX_TEXT or not value.isprintable() \
            or not value.isascii():
        raise ProtocolError(f"the worker's {what} is not printable text of at most {MAX_TEXT} characters")
    return value


def tuned_kernels(reply: dict) -> list[KernelChoice]:
    """The (kernel, key) pairs a discovery call reached with more than one configuration to consider, as
    undecided KernelChoices in first-use order; a ProtocolError for a malformed reply."""
    tuned = reply.get("tuned")
    if not isinstance(tuned, list) or len(tuned) > MAX_KERNELS:
        raise ProtocolError(f"the worker's tuned list is missing or longer than {MAX_KERNELS}")
    out, seen = [], set()
    for t in tuned:
        if not isinstance(t, dict):
            raise ProtocolError("the worker's tuned list holds a non-record")
        kernel, key = clean(t.get("kernel"), "kernel name"), clean(t.get("key"), "tuning key")
        indices, configs = t.get("indices"), t.get("configs")
        if (not isinstance(indices, list) or not isinstance(configs, list) or len(indices) != len(configs)
                or not 0 < len(indices) <= MAX_CONFIGS
                or not all(type(i) is int and 0 <= i < 1 << 16 for i in indices) or len(set(indices)) != len(indices)):
            raise ProtocolError(f"kernel {kernel}: the worker's configuration indices are malformed")
        if (kernel, key) in seen or len(indices) < 2:
            continue
        seen.add((kernel, key))
        out.append(KernelChoice(kernel=kernel, key=key, indices=list(indices),
                                configs=[clean(c, "configuration text") for c in configs]))
    return out


def sweep(discover, record, replay, budget: Budget, *, file_sha256: str, problem_id: str, hardware: str,
          triton: str) -> Record:
    """The protocol's Record for one problem. `discover()` is the worker's discovery reply; `record(pins)` records
    the call's program with those configurations pinned (None when the call fails or its outputs are wrong);
    `replay(program)` times it in the trusted replay: (seconds per timed call, µs per call by kernel name), or
    None when the replay does not reproduce the reference. Each tuned kernel's configurations are timed in
    `budget.rounds` interleaved rounds and decided by the rule (autotune_protocol.choose). A ProtocolError when
    the worker's replies cannot be judged or no configuration of a kernel could be timed."""
    began = time.monotonic()
    reply = discover()
    if not reply.get("ok"):
        raise ProtocolError(f"the discovery call failed: {reply.get('error')}")
    kernels = tuned_kernels(reply)
    pins: dict[str, dict[str, int]] = {}
    for k in kernels:
        programs = {}
        for index in k.indices:
            program = record({**pins, k.kernel: {**pins.get(k.kernel, {}), k.key: index}})
            if program is not None:
                programs[index] = program
        measures = set()
        for _ in range(budget.rounds):
            for index, program in programs.items():
                timed = replay(program)
                if timed is None:
                    continue
                times_s, kernel_us = timed
                own = (kernel_us or {}).get(k.kernel)
                if own is not None and own > 0:
                    k.rounds_s.setdefault(index, []).append(own / 1e6)
                    measures.add("kernel")
                elif times_s:
                    k.rounds_s.setdefault(index, []).append(statistics.median(times_s))
                    measures.add("span")
        k.measure = "kernel" if measures == {"kernel"} else "span"
        if measures == {"kernel", "span"}:  # compare like with like: every configuration by its whole call
            raise ProtocolError(f"kernel {k.kernel}: the replay named it in some configurations' records only")
        decide(k, budget.noise_band)
        pins.setdefault(k.kernel, {})[k.key] = k.chosen
    return Record(file_sha256=file_sha256, problem_id=problem_id, hardware=hardware, triton=triton, kernels=kernels,
                  budget=budget, sweep_s=time.monotonic() - began)
