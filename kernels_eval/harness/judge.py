"""The parent's side of the trusted replay: which recorded program to replay on which inputs, the replay process's
handle, and the adoption (and, on a GPU, the time) judged from what it reproduces.

Native means the reference's output is reproduced by replaying the submission's own kernels alone (plus the
allowed tensor plumbing) on inputs its process never saw: the outputs the replay exports are compared here with
the reference computed here, on the same seeds. Programs come from discovery (hostile): they are decoded
strictly (protocol.decode_program) and only run by the replay, which runs no candidate Python.
"""

from __future__ import annotations

import secrets
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from kernels_eval.harness import channel
from kernels_eval.harness.compare import compare_outputs, unchanged_inputs
from kernels_eval.harness.process import WorkerDied, WorkerProcess
from kernels_eval.harness.protocol import (LaunchProgram, ProtocolError, ReplayRequest, decode_program,
                                           decode_result, encode)
from kernels_eval.harness.limits import default_memory_bytes

REPLAY_SETS = 2  # fresh input sets each shape's program is replayed on


@dataclass(slots=True)
class Recorded:
    """One discovery call's program (as the worker sent it) and the seed of the inputs it ran on."""

    program: object
    seed: int


@dataclass(slots=True)
class Outcome:
    """A replay's verdict on one shape: native (and why not), the largest error, the timed calls' seconds."""

    native: bool
    reason: str | None = None
    max_abs_err: float = 0.0
    times_s: list[float] | None = None
    timed_wrong: str | None = None  # the first wrong output of a timed call
    kernel_us: dict | None = None


def plan(recorded: list[Recorded], data_dependent_size: bool) -> tuple[list[tuple[LaunchProgram, list[int]]], str | None]:
    """(program, seeds to replay it on) pairs, or a reason the call is not replayable. The programs of the
    calls after the first (which compiles and autotunes) must be one program: it is then replayed on fresh
    seeds. Where the operator's output sizes depend on the data (its contract needs a host read), each program
    is replayed on the inputs it was recorded on, and only there; elsewhere a program that changed with the
    data is refused."""
    if not recorded:
        return [], "no call was recorded"
    try:
        programs = [(decode_program(r.program), r.seed) for r in recorded]
    except ProtocolError as exc:
        return [], f"the recorded launch program is malformed ({exc})"
    for program, _ in programs:
        if not program.launches():
            return [], "no @triton.jit kernel of the submission ran"
    for program, _ in programs:
        if program.refused:
            return [], "the call is not replayable from its kernels alone: " + "; ".join(program.refused[:3])
    steady = programs[1:] or programs
    if data_dependent_size:
        # two recordings can agree by chance (the same padded total on two input sets, seen on H200 for
        # moe_align_block_size's largest problem): such a program is only ever replayed on its own inputs
        return [(p, [seed]) for p, seed in steady], None
    same = all(encode(p) == encode(steady[0][0]) for p, _ in steady)
    if same:
        return [(steady[-1][0], [secrets.randbits(62) for _ in range(REPLAY_SETS)])], None  # fresh seeds
    if not data_dependent_size:
        return [], ("the launch program changed with the input data (grid or scalar arguments differ between "
                    "input sets), which this operator's contract does not need")
    return [(p, [seed]) for p, seed in steady], None


class Replayer:
    """One operator's trusted replay process (started on first use) in a private directory the workers never
    see (its exchange files and its own Triton cache)."""

    def __init__(self, name: str, config) -> None:
        self.config = config
        self.dir = Path(tempfile.mkdtemp(prefix=f"hotshape-replay-{name}-"))
        self.process: WorkerProcess | None = None

    def _start(self) -> WorkerProcess:
        config = self.config
        memory = int(config.memory_gb * 2**30) if config.memory_gb else default_memory_bytes()
        # the replay's compile cache: the run's persistent root's own directory, which no worker is shown
        # (each worker sees only its file's directory under that root), else a private one in self.dir
        cache = Path(config.triton_cache) / ".replay" if config.triton_cache is not None else None
        if cache is not None:
            cache.mkdir(parents=True, exist_ok=True)
        return WorkerProcess(triton_cache=cache, device=config.device, log_path=self.dir / "replay.log", memory_bytes=memory,
                             start_timeout_s=config.start_timeout_s, sandboxed=config.sandbox, scratch=self.dir,
                             max_processes=config.max_processes, files=(),
                             visible_device=config.device_index if config.device == "cuda" else None,
                             module="kernels_eval.harness.replay",
                             use_cgroup=config.memory_accounting != "process",
                             require_cgroup=config.memory_accounting == "cgroup")

    def close(self) -> None:
        if self.process is not None:
            self.process.close()
            self.process = None
        shutil.rmtree(self.dir, ignore_errors=True)

    def reproduce(self, operator: str, spec, expected, input_kwargs: dict, recorded: list[Recorded], state: dict,
                  time_seeds: int = 0, timing_seeds: list[int] | None = None, check: bool = True) -> Outcome:
        """The replay's verdict on one shape of `operator` (its registry spec): `expected(seed)` gives (pristine inputs, reference outputs, tie
        scores) as the judge draws them; `state` the init-time snapshot (name -> flat bytes tensor). `timing_seeds`
        (fresh ones the caller drew) replace the `time_seeds` drawn here, so that an autotuning sweep times every
        configuration on the same inputs and computes their reference once; with `check` False the program is
        only timed (its timed calls' outputs still judged), not first run and judged on fresh inputs."""
        pairs, reason = plan(recorded, spec.data_dependent_size)
        if reason:
            return Outcome(native=False, reason=reason)
        outcome = Outcome(native=True)
        fresh = len(pairs) == 1 and len(pairs[0][1]) == REPLAY_SETS and pairs[0][1][0] not in {r.seed for r in recorded}
        for index, (program, seeds) in enumerate(pairs):
            key = secrets.randbits(62)
            timed = time_seeds > 0 and index == len(pairs) - 1
            # a program that depends on the data is timed on the inputs it was recorded on
            timing = (list(timing_seeds) if timing_seeds else [secrets.randbits(62) for _ in range(time_seeds)]) \
                if fresh else list(seeds)
            seeds = seeds if check else []
            exchange = str(self.dir)
            request = ReplayRequest(operator=operator, device=self.config.device, program=encode(program),
                                    input_kwargs=input_kwargs, seeds=seeds, exchange=exchange, digest_key=key,
                                    state={name: channel.export_tensor(t, exchange, f"state{i}", cuda_ipc=False)
                                           for i, (name, t) in enumerate(state.items())},
                                    time_calls=timed, time_seeds=timing if timed else [],
                                    budget_s=getattr(self.config, "timing_budget_s", 0.15),
                                    max_calls=getattr(self.config, "timing_max_calls", 200))
            try:
                if self.process is None:
                    self.process = self._start()
                reply = self.process.request(encode(request), self.config.call_timeout_s * 4)
                reply.pop("observed", None)  # the process handle's own field (the replay has no observer)
                result = decode_result(reply)
            except (WorkerDied, ProtocolError) as exc:
                self.process = None
                return Outcome(native=False, reason=f"the replay of the recorded program failed: {exc}"[:2000])
            if not result.ok:
                why = result.refused or result.error or "no reason given"
                return Outcome(native=False, reason=f"the recorded program cannot be replayed: {why}"[:2000])
            for seed, outs, digests in zip(seeds, result.outputs, result.digests):
                failures, err = self._judge(spec, expected, seed, outs, digests, key)
                outcome.max_abs_err = max(outcome.max_abs_err, err)
                if failures:
                    return Outcome(native=False, reason="the submission's kernels alone do not reproduce the "
                                                        "reference's output on inputs its process never saw: "
                                                        + "; ".join(failures[:3]))
            for k, (seed, outs, digests) in enumerate(zip(result.timed_seeds, result.timed_outputs,
                                                          result.timed_digests)):
                failures, _ = self._judge(spec, expected, seed, outs, digests, key)
                if failures and outcome.timed_wrong is None:
                    outcome.timed_wrong = f"input set {k} of the timed calls: " + "; ".join(failures[:3])
            if result.times_s is not None:
                outcome.times_s, outcome.kernel_us = list(result.times_s), dict(result.kernel_us)
        return outcome

    def _judge(self, spec, expected, seed: int, outs: dict, digests: dict, key: int) -> tuple[list[str], float]:
        """(failures, max error) of replayed outputs against the reference on `seed`'s inputs."""
        if not isinstance(outs, dict) or not isinstance(digests, dict):
            return ["the replay returned no outputs"], 0.0
        got = {name: channel.import_tensor(desc, str(self.dir)) for name, desc in outs.items()}
        before, want, ties = expected(seed)
        failures, err = compare_outputs(got, want, spec.tolerance, spec.order_free_outputs, ties)
        failures += unchanged_inputs(digests, before, set(spec.inplace.values()), key)
        del got, before, want, ties
        return failures, err
