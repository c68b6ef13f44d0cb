"""The GPU half of the evaluator's autotuning protocol (autotune_protocol.py), in the parent: which (kernel, key)
a problem's call tunes (the worker's `sweep` command), each configuration's launch program recorded by a worker
call with it pinned, and each program timed by the trusted replay (harness/judge.py, harness/replay.py
`time_program`: CUPTI kernel durations in a process that runs no candidate Python), the choice made here.

A configuration's figure in a round is the replay's µs per call of the autotuned kernel itself (its records, by
name), else the median replayed call: a cheap kernel beside an expensive one is compared on its own time, not
within the noise of the whole call. A configuration whose call fails, whose outputs are wrong or whose program
the replay does not reproduce is not eligible. Kernels are decided in the order the call first reached them, each
with the earlier ones pinned at their choice and the later ones at their kept choice or first kept configuration;
a (kernel, key) an earlier problem decided is not swept again (its choice is kept per key).

Everything the worker sends (kernel names, keys, configuration texts, indices) is bounded and sanitised here
before it reaches a record or a row; the choice rests only on the replay's times.
"""

from __future__ import annotations

import statistics
import time

from kernels_eval.harness.autotune_protocol import (Budget, ChoiceStore, KernelChoice, ProtocolError, Record,
                                                      decide, survivors)

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
          triton: str, choices: ChoiceStore | None = None) -> Record:
    """The protocol's Record for one problem. `discover()` is the worker's discovery reply; `record(pins)` records
    the call's program with those configurations pinned (None when the call fails or its outputs are wrong);
    `replay(program)` times it in the trusted replay, on fresh inputs whose timed calls' outputs are judged:
    (seconds per timed call, µs per call by kernel name), or None when the replay does not reproduce the
    reference. A (kernel, key) whose choice `choices`
    keeps (decided by an earlier problem that reached the same key, as Triton's own autotuner shares one
    decision per key) is pinned at it without a sweep, when this problem's pruning keeps that configuration;
    each other tuned kernel's configurations are timed in interleaved rounds (`_rounds`), decided by the rule
    (autotune_protocol.choose) and kept in `choices` for the problems after. A ProtocolError when the worker's
    replies cannot be judged or no configuration of a kernel could be timed."""
    began = time.monotonic()
    reply = discover()
    if not reply.get("ok"):
        raise ProtocolError(f"the discovery call failed: {reply.get('error')}")
    keys = {"triton": triton, "file_sha256": file_sha256, "hardware": hardware}
    tuned = tuned_kernels(reply)
    kept = [choices.load_choice(**keys, kernel=k.kernel, key=k.key) if choices is not None else None for k in tuned]
    # every tuned kernel pinned throughout, so that no recording call runs Triton's own benchmarks: at its kept
    # choice, else at the first configuration its pruning keeps until it is decided
    pins: dict[str, dict[str, int]] = {}
    for k, choice in zip(tuned, kept):
        usable = choice is not None and choice.chosen in k.indices
        pins.setdefault(k.kernel, {})[k.key] = choice.chosen if usable else k.indices[0]
    kernels, final = [], None
    for k, choice in zip(tuned, kept):
        if choice is not None and choice.chosen in k.indices:
            k = choice
        else:
            programs = {}
            decide(k, budget.noise_band, _rounds(k, pins, record, replay, budget, programs))
            if choices is not None and choice is None:
                choices.save_choice(Record(problem_id=problem_id, kernels=[], budget=budget, **keys), k)
            final = programs[k.chosen]  # recorded with every kernel before at its choice, every one after kept
        kernels.append(k)
        pins[k.kernel][k.key] = k.chosen
    # the last swept kernel's chosen program is the call with every choice pinned: the timing needs no other
    return Record(problem_id=problem_id, kernels=kernels, budget=budget, sweep_s=time.monotonic() - began,
                  program=final, **keys)


def _rounds(k: KernelChoice, pins: dict, record, replay, budget: Budget, programs: dict) -> list[int]:
    """The configurations eligible for the choice, after timing each configuration of `k` (the kernels before it
    pinned at `pins`) into `k.rounds_s`: the first round over every configuration whose call records, the later
    rounds over the survivors of the first (autotune_protocol.survivors; the others go to `k.dropped`),
    interleaved; with one survivor, no more rounds. `programs` gets each configuration's recorded program."""
    for index in k.indices:
        pinned = {name: dict(keys) for name, keys in pins.items()}  # a copy: `pins` changes as kernels are decided
        pinned.setdefault(k.kernel, {})[k.key] = index
        program = record(pinned)
        if program is not None:
            programs[index] = program
    measures = set()
    timing = list(programs)
    for round_ in range(budget.rounds):
        for index in timing:
            timed = replay(programs[index])
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
        if round_ == 0:
            timing = survivors(timing, {i: t[0] for i, t in k.rounds_s.items()}, budget.drop_above)
            k.dropped = [i for i in programs if i not in timing]
            if len(timing) < 2:
                break
    if measures == {"kernel", "span"}:  # compare like with like: every configuration by its whole call
        raise ProtocolError(f"kernel {k.kernel}: the replay named it in some configurations' records only")
    k.measure = "kernel" if measures == {"kernel"} else "span"
    # eligible: the survivors measured in every round they were timed in (a round lost to a failed replay
    # disqualifies)
    full = budget.rounds if len(timing) > 1 else 1
    return [i for i in timing if len(k.rounds_s.get(i, ())) == full]
