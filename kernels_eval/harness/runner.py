"""Evaluate a submission against a release: per operator file, a worker process; per problem the stages
compile → correctness → adoption → performance, judged here, outside the candidate's process.

On `cpu` each operator is run on its registry smoke shapes through Triton's interpreter (once per operator;
the verdict stands for each of its problems) and performance is not measured. On `cuda` every problem runs
on its own shape.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import re
import secrets
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path

from kernels_eval import physics, registry
from kernels_eval.harness import adoption, channel, limits, observe, safe_io, sanitize
from kernels_eval.harness.compare import compare_outputs, named_outputs, unchanged_inputs
from kernels_eval.harness.autotune_protocol import DEFAULT_BUDGET, Budget
from kernels_eval.harness.judge import Recorded, Replayer
from kernels_eval.harness.process import WorkerDied, WorkerProcess
from kernels_eval.harness.release_view import ReleaseView, read_release_view
from kernels_eval.harness.submission import operator_files
from kernels_eval.harness.verdict import Verdict, as_verdict

log = logging.getLogger("hotshape.eval")  # phases and checked problems of a lanes run (the rows carry the rest)
# Errors after which a CUDA context is unusable (CUDA's "sticky" errors, as torch and Triton word them): every
# later call in that worker fails at once, so the operator's next problem gets a fresh worker.
# A lane's worker that runs out of device memory had a lane's share of it: the problem is judged again alone
# (with the device's whole share) rather than failed for the other lanes' sake (seen on H200: an fp8 MoE problem of
# 3 GiB interface needed more than a sixth of the device).
OUT_OF_MEMORY = re.compile(r"OutOfMemoryError|CUDA out of memory", re.IGNORECASE)
CONTEXT_LOST = re.compile(r"illegal memory access|illegal instruction|misaligned address|unspecified launch "
                          r"failure|device-side assert|AcceleratorError|Triton Error \[CUDA\]", re.IGNORECASE)


@dataclass
class EvalConfig:
    """Limits and counts of one evaluation run."""

    device: str = "cpu"
    sets: int = 3  # fresh random input sets per shape for correctness
    call_timeout_s: float = 120.0
    start_timeout_s: float = 300.0
    memory_gb: float | None = None  # host-memory limit of a worker and its children (None: half the machine)
    max_processes: int = 64  # processes a worker may have running, itself included
    sandbox: bool = True  # workers run in the bubblewrap sandbox (harness/sandbox.py)
    # a worker's memory limit is counted by a cgroup (memfd and shm included); False (eval --no-memory-cgroup): by a
    # cgroup where one can be made, else by the tree's RSS and held memfd/shm files (harness/limits.py)
    memory_cgroup: bool = True
    memory_accounting: str | None = None  # "cgroup" or "process", decided once per run by `evaluate`
    candidate_files: tuple[Path, ...] = ()  # the submission's files a sandbox shows (set by `evaluate`)
    triton_cache: Path | None = None  # root of the per-file compile caches (harness/triton_cache.py); None: cold
    markers_cache: Path | None = None  # the run's compiled markers, shown read-only to workers (markers.compile_into)
    # with a persistent cache, Triton keeps (and reuses) the file's autotuning there; False: reuses, keeps none
    keep_autotuning: bool = True
    gpu_memory_fraction: float = 0.45
    # the warm-up and repetition (ms) triton.testing.do_bench defaults to in a worker, so in Triton's autotuning
    # (harness/autotune_cache.py: shorter_benchmarks); None: Triton's own (25, 100)
    autotune_bench_ms: tuple[float, float] | None = (5.0, 20.0)
    # seconds of settling and of measuring per problem, each (timing.time_calls); the timing phase is serial on
    # the device, so this is most of a full evaluation's timing (0.3 s put ~0.6 s a problem into the timed calls)
    timing_budget_s: float = 0.15
    timing_max_calls: int = 200
    # outputs of timed calls kept (reservoir-sampled after each call, so unpredictable) and judged in the parent;
    # each costs an export, a reference call and a compare, serial on the device
    timed_samples: int = 2
    sample_gb: float = 1.0  # device memory the kept outputs may take; fewer are kept beyond it
    time_reference: bool = False  # also time the PyTorch reference (t_reference_s, speedup); scores use
    # the roofline, and timing the reference cost a full timing per problem
    # full timings per problem (`eval --repeat N`): t_repeats_s keeps each one's median, t_measured_s their median
    repeat: int = 1
    # "protocol": the evaluator's autotuning protocol chooses each autotuned kernel's configuration before timing
    # (harness/autotune_protocol.py, kept under autotune_store); "triton": Triton's own autotuner picks it
    autotune: str = "triton"
    autotune_store: Path | None = None  # None: autotune_protocol.default_root()
    autotune_budget: Budget = DEFAULT_BUDGET
    run: int = 0
    device_index: int | None = None  # the CUDA device of this worker and its references (`evaluate(devices=)`)
    hardware: str | None = None
    keep_logs: Path | None = None
    extra: dict = field(default_factory=dict)


class Problem:
    """One manifest row with decoded kwargs."""

    def __init__(self, row: dict) -> None:
        self.problem_id = row["problem_id"]
        self.operator = row["operator"]
        self.init_kwargs = json.loads(row["init_kwargs"])
        self.input_kwargs = json.loads(row["input_kwargs"])


def detect_hardware(device: str, known: list[str] = ()) -> str:
    """The hardware-table name of the local accelerator ('cpu' without one), the longest known name inside
    the device's name (H200 before H20)."""
    if device != "cuda":
        return "cpu"
    import torch

    names = list(known)
    try:
        from catalogue.hardware import load_hardware  # lazy: it needs pyyaml, which a GPU machine may lack

        names += list(load_hardware())
    except ImportError:  # no pyyaml: the release's roofline names are enough
        pass
    device_name = torch.cuda.get_device_name(0)
    matches = [key for key in names if key.lower() in device_name.lower()]
    return max(matches, key=len) if matches else device_name


class OperatorJudge:
    """Runs one operator file's problems, respawning the worker whenever a candidate kills it."""

    def __init__(self, operator: str, file: Path, config: EvalConfig, workdir: Path,
                 worker: WorkerProcess | None = None, replayer: Replayer | None = None) -> None:
        self.operator, self.file, self.config, self.workdir = operator, file, config, workdir
        self.spec = registry.spec(operator)
        self.reference = registry.load_reference(operator)
        self.worker: WorkerProcess | None = worker  # a pre-started one (see `start_worker`), or spawned on need
        # held open from here on: the parent reads and removes tensor files only through this fd (safe_io)
        self.exchange = safe_io.ExchangeDir.create(workdir, f"x-{operator}-")
        self.staging = channel.Staging()  # pinned host buffer of CUDA tensors read from the exchange
        self.log = workdir / f"{operator}.log"
        self.initialized_with = None
        self.spent: dict[str, float] = {}  # seconds per evaluator step, for the run log (see `_clock`)
        self.observed = observe.Observed()  # host escapes / threads the worker's channel recorded (`_observe`)
        self.observed_ops: dict[str, int] = {}
        self.tamper: str | None = None
        # the trusted replay (harness/judge.py): the operator's own, or one shared by a device's timing phase
        self.owns_replayer = replayer is None
        self.replayer = replayer or Replayer(operator, config)
        self.state: dict = {}  # the init-time snapshot of the current Model (name -> its storage's bytes)
        self.last_seed: int | None = None

    def _clock(self, step: str, began: float) -> None:
        self.spent[step] = self.spent.get(step, 0.0) + time.monotonic() - began

    # ---- worker plumbing --------------------------------------------------------------------------------

    def _request(self, message: dict, timeout_s: float | None = None) -> dict:
        warming = getattr(self.worker, "warming", None)
        if warming is not None:  # a prestarted worker's "warm" command (`_warm_ahead`) is answered first
            began = time.monotonic()
            warming.join()
            self.worker.warming = None
            self._clock("warm_wait", began)
        if self.worker is None or not self.worker.ready:
            began = time.monotonic()
            try:
                if self.worker is None:
                    self.worker = start_worker(self.config, self.log, wait=True, file=self.file)
                else:
                    self.worker.wait_ready()
            except WorkerDied:
                self.worker = None
                raise
            finally:
                self._clock("spawn", began)
        began = time.monotonic()
        try:
            reply = self.worker.request(message, timeout_s or self.config.call_timeout_s)
        except WorkerDied:
            self.worker = None
            raise
        finally:
            self._clock(f"worker_{message['cmd']}", began)
        took = reply.get("took_s")  # the worker's own split of a call (diagnostics only; never judged)
        for step, seconds in (took.items() if isinstance(took, dict) else ()):
            if isinstance(seconds, (int, float)):
                self.spent[f"in_worker_{step}"] = self.spent.get(f"in_worker_{step}", 0.0) + float(seconds)
        return reply

    def close(self) -> None:
        if self.worker is not None:
            self.worker.close()
            self.worker = None
        if self.owns_replayer:
            self.replayer.close()
        self.exchange.remove()

    def _import(self, descs: dict) -> dict:
        from kernels_eval.harness.channel import import_tensor

        if not isinstance(descs, dict):
            raise ValueError("worker reply lacks a tensor table")
        return {str(k): import_tensor(v, self.exchange, self.staging) for k, v in descs.items()}

    def _reference_inputs(self, input_kwargs: dict, seed: int) -> dict:
        import torch

        g = torch.Generator(device=self.config.device)
        g.manual_seed(seed)
        return self.reference.make_inputs(**input_kwargs, device=self.config.device, generator=g)

    # ---- one shape --------------------------------------------------------------------------------------

    def _init(self, init_kwargs: dict) -> dict:
        self.initialized_with = None
        reply = self._request({"cmd": "init", "operator": self.operator, "file": str(self.file),
                              "device": self.config.device, "init_kwargs": init_kwargs,
                              "outputs": list(self.spec.outputs), "exchange": str(self.exchange),
                              "gpu_memory_fraction": self.config.gpu_memory_fraction,
                              "autotune_bench_ms": self.config.autotune_bench_ms,
                              "markers_cache": str(self.config.markers_cache) if self.config.markers_cache else None,
                              # a worker shown one GPU numbers it 0: an IPC handle would name the wrong device
                              "cuda_ipc": not self.config.sandbox and self.config.device_index is None},
                              max(self.config.call_timeout_s, self.config.start_timeout_s))
        if reply.get("ok"):
            self.initialized_with = (id(self.worker), _shape_text(init_kwargs))
            try:
                self.state = self._import(reply.get("state") or {})
            except ValueError as exc:
                return {"ok": False, "error": f"the init-time state snapshot is unreadable: {exc}"}
        return reply

    def _ensure_init(self, init_kwargs: dict) -> None:
        """Re-import and rebuild Model in a respawned worker (or for other init kwargs)."""
        if self.worker is None or self.initialized_with != (id(self.worker), _shape_text(init_kwargs)):
            reply = self._init(init_kwargs)
            if not reply.get("ok"):
                raise WorkerDied(f"re-initialising the worker failed: {reply.get('error')}")

    def _expected(self, model, input_kwargs: dict, seed: int) -> tuple[dict, dict, dict | None]:
        """(pristine inputs, the reference's outputs, its tie scores) on the inputs drawn from `seed`; references
        never write their inputs (operators/README.md), so the inputs stay pristine."""
        import torch

        before = self._reference_inputs(input_kwargs, seed)
        with torch.no_grad():
            expected = named_outputs(model(**before), self.spec.outputs)
            tie_scores = getattr(self.reference, "tie_scores", None)
            ties = tie_scores(model, before) if tie_scores is not None else None
        return before, expected, ties

    def _judged_call(self, model, init_kwargs: dict, input_kwargs: dict, **flags) -> tuple[dict, list[str], float]:
        """(reply, failures, max error) of one worker call judged against the reference on the same seed."""
        import torch

        seed, key = secrets.randbits(62), secrets.randbits(62)
        self.last_seed = seed
        reply = self._request({"cmd": "call", "input_kwargs": input_kwargs, "seed": seed, "digest_key": key, **flags})
        tamper = self._observe(reply)
        if tamper:
            reply = {"ok": False, "tamper": True, "error": f"TamperError: {tamper}"}
        if not reply.get("ok"):
            return reply, [reply.get("error", "call failed")], 0.0
        began = time.monotonic()
        try:
            got = self._import(reply.get("outputs"))
        except safe_io.RefusedFile as exc:  # the worker's own doing (a swapped exchange directory, a FIFO): its fail
            reply = {"ok": False, "error": f"output refused: {exc}"}
            return reply, [reply["error"]], 0.0
        after = reply.get("inputs")
        if not isinstance(after, dict) or not all(isinstance(d, str) for d in after.values()):
            raise ValueError("worker reply lacks its inputs' digests")
        self._clock("import", began)
        began = time.monotonic()
        before, expected, ties = self._expected(model, input_kwargs, seed)
        self._clock("reference", began)
        began = time.monotonic()
        failures, err = compare_outputs(got, expected, self.spec.tolerance, self.spec.order_free_outputs, ties)
        failures += unchanged_inputs(after, before, set(self.spec.inplace.values()), key)
        del got, after, before, expected, ties
        if self.config.device == "cuda":
            torch.cuda.empty_cache()
        self._clock("compare", began)
        return reply, failures, err

    def _observe(self, reply: dict) -> str | None:
        """Fold one call's channel records (set by the parent's end of the pipe) into this verdict's
        observations; the tamper they show, or None."""
        seen = reply.get("observed") or {}
        records = observe.parse_records(list(seen.get("lines") or []))
        for op, n in records["op"].items():
            self.observed_ops[op] = self.observed_ops.get(op, 0) + n
        self.observed.extend_unique(records["host"] + records["thread"])  # capped, found with a set
        tampers = records["tamper"] + (["the observation channel was closed"] if seen.get("closed") else [])
        if tampers and self.tamper is None:
            self.tamper = "; ".join(tampers)
        return self.tamper if tampers else None

    def evaluate_shapes(self, shapes: list[tuple[dict, dict]], defer_timing: bool = False) -> Verdict:
        """The verdict over one or more (init_kwargs, input_kwargs) shapes of this operator. With `defer_timing` a
        verdict that has passed every check up to performance is returned with its `pending` entry (the shape
        and the checked calls' launches): `time_checked` finishes it later, in another worker."""
        v = Verdict()
        checked_us: dict[str, float] = {}  # GPU: kernel time by name over the checked calls after each shape's first
        launches, aten_ops, errors, max_err = [], {}, [], 0.0
        replay_reason: str | None = None  # why the replay did not reproduce the output (None: it did)
        gpu = self.config.device == "cuda"
        self.spent = {}
        # what the worker's observation channel recorded over this verdict's calls
        self.observed, self.observed_ops, self.tamper = observe.Observed(), {}, None
        v.step_s = self.spent
        try:
            for index, (init_kwargs, input_kwargs) in enumerate(shapes):
                began = time.monotonic()
                model = self.reference.Model(**init_kwargs)
                if gpu:
                    model = model.to("cuda")
                self._clock("reference_model", began)
                reply = self._init(init_kwargs)
                if not reply.get("ok"):
                    return self._fail(v, "compile", f"import/constructor failed: {reply.get('error')}")
                recorded: list[Recorded] = []
                for k in range(self.config.sets):
                    # a shape's first call compiles and autotunes: the worker makes one untimed call before it,
                    # with no profiler (Worker._untimed_call)
                    reply, failures, err = self._judged_call(model, init_kwargs, input_kwargs, poison=True, record=True,
                                                             **({"tune": True} if gpu and k == 0 else {}))
                    if reply.get("ok"):
                        recorded.append(Recorded(reply.get("program"), self.last_seed))
                    if not reply.get("ok"):
                        stage = "compile" if index == 0 and k == 0 else "correctness"
                        return self._fail(v, stage, f"call failed: {reply.get('error')}")
                    v.compiled = True
                    launches += reply.get("launches", [])
                    if gpu and k:  # a shape's first call compiles and autotunes (its benchmark flushes are aten)
                        for name, us in _kernel_us(reply.get("records")).items():
                            checked_us[name] = checked_us.get(name, 0.0) + us
                    for op, n in reply.get("aten_ops", {}).items():
                        aten_ops[op] = aten_ops.get(op, 0) + int(n)
                    max_err = max(max_err, err)
                    if failures and not errors:
                        errors = [f"input set {k + 1}, {_shape_text(input_kwargs)}: " + "; ".join(failures[:3])]
                if not errors and not gpu:  # the trusted replay of this shape's program decides adoption (judge.py)
                    began = time.monotonic()
                    outcome = self.replayer.reproduce(
                        self.operator, self.spec, lambda seed, m=model, kw=input_kwargs: self._expected(m, kw, seed),
                        input_kwargs, recorded, self.state)
                    self._clock("replay", began)
                    if not outcome.native and replay_reason is None:
                        replay_reason = f"{_shape_text(input_kwargs)}: {outcome.reason}"
        except WorkerDied as exc:
            return self._fail(v, "correctness" if v.compiled else "compile", str(exc))
        if self.tamper:  # seen outside a judged call's reply (a judged call's tamper already failed above)
            return self._fail(v, "correctness", f"call failed: TamperError: {self.tamper}")
        for op, n in self.observed_ops.items():  # the channel's count stands where the reply's was taken back
            aten_ops[op] = max(aten_ops.get(op, 0), n)
        v.max_abs_err = max_err
        v.correct = not errors
        if gpu and not any(x.get("owned") for x in launches):
            verdict = adoption.gpu_adoption({}, launches, aten_ops)  # nothing of the submission ran
        elif gpu and checked_us:
            verdict = adoption.gpu_adoption(checked_us, launches, aten_ops,
                                            host_reads_exempt=self.spec.data_dependent_size)
        elif gpu:  # one call per shape: the timed calls' records alone decide
            verdict = {"native": True, "native_fraction": None, "fallbacks": [], "reason": None}
        else:
            verdict = adoption.cpu_adoption(launches, aten_ops, self.observed)
        if gpu and self.observed:
            verdict.update(native=False, fallbacks=verdict["fallbacks"] + self.observed,
                           reason=verdict["reason"] or "host-side compute or threads beside the submission's kernels")
        # the early filter above (dispatch audit, host-escape watch) feeds `fallbacks` and the reason's detail;
        # native is the replay's alone
        seen = f" (the early filter saw: {'; '.join(verdict['fallbacks'][:3])})" if not verdict["native"] else ""
        verdict.update(native=replay_reason is None and not errors,
                       reason=f"not reproduced by the submission's kernels alone: {replay_reason}{seen}"
                       if replay_reason else None)
        v.update(native=verdict["native"], native_fraction=verdict["native_fraction"], fallbacks=verdict["fallbacks"])
        if errors:
            return self._fail(v, "correctness", errors[0])
        if not verdict["native"]:
            return self._fail(v, "adoption", verdict["reason"])
        if not gpu:
            v.stage = "done"
            return v
        # on a GPU the replay decides adoption and time together (`_performance`), on the last shape's programs
        pending = {"shape": shapes[-1], "recorded": recorded, "state": self.state}
        if defer_timing:
            v.stage, v.pending = "performance", pending
            return v
        return self._performance(v, model, pending)

    def time_checked(self, v: Verdict) -> Verdict:
        """The performance stage of a verdict `evaluate_shapes(defer_timing=True)` left for it (in place)."""
        pending, v.pending = v.pending, None
        init_kwargs, _ = pending["shape"]
        self.spent = v.step_s
        began = time.monotonic()
        model = self.reference.Model(**init_kwargs).to("cuda")
        self._clock("reference_model", began)
        return self._performance(v, model, pending)

    def _performance(self, v: Verdict, model, pending: dict) -> Verdict:
        """The performance stage: with `config.autotune` "protocol", the configuration the autotuning protocol
        chose (`_autotune`) is pinned and the call's program recorded again with it; then `config.repeat` full
        timings by the trusted replay (`_replayed`); t_measured_s is the median of their medians, each kept in
        t_repeats_s when there are several."""
        import statistics

        from kernels_eval.harness.autotune_protocol import ProtocolError, row_text

        if self.config.autotune == "protocol":
            try:
                record = self._autotune(model, pending)
                pins = record.pins()
                if pins:
                    program = self._record_program(model, pending["shape"], pins)
                    if program is None:
                        raise ProtocolError("the call with the chosen configurations failed or was wrong")
                    # the program refers to the init-time state of the worker that recorded it
                    pending = {**pending, "recorded": [program], "state": self.state}
            except (ProtocolError, WorkerDied) as exc:
                return self._fail(v, "performance", f"autotuning protocol failed: {exc}")
            v.autotune_config = row_text(record)
        medians, n_timed = [], 0
        for _ in range(max(1, int(self.config.repeat))):
            v = self._replayed(v, model, pending)
            if v.stage != "done":
                return v
            medians.append(v.t_measured_s)
            n_timed += v.n_timed or 0
        if len(medians) > 1:
            v.update(t_repeats_s=medians, t_measured_s=statistics.median(medians), n_timed=n_timed)
        v.timing_rule = TIMING_RULE
        if self.config.time_reference:
            v.t_reference_s = self._reference_time(model, pending["shape"][1])
        return v

    def _record_program(self, model, shape: tuple[dict, dict], pins: dict) -> Recorded | None:
        """The call's launch program recorded by one judged worker call with `pins` (kernel -> key -> config
        index) pinned; None when the call fails or its outputs are wrong."""
        init_kwargs, input_kwargs = shape
        self._ensure_init(init_kwargs)
        reply, failures, _ = self._judged_call(model, init_kwargs, input_kwargs, poison=True, record=True, pins=pins)
        if not reply.get("ok") or failures or self.tamper:
            return None
        return Recorded(reply.get("program"), self.last_seed)

    def _autotune(self, model, pending: dict):
        """The autotuning protocol's record for this file on the pending shape: the kept one, else decided now
        (harness/autotune_sweep.py: discovery in this judge's worker, each configuration recorded there and timed
        by the trusted replay with the protocol's budget) and kept."""
        from dataclasses import replace as with_values

        from kernels_eval.harness import autotune_protocol as protocol
        from kernels_eval.harness.autotune_sweep import sweep
        from kernels_eval.harness.triton_cache import triton_version

        init_kwargs, input_kwargs = shape = pending["shape"]
        store = protocol.ChoiceStore(self.config.autotune_store or protocol.default_root())
        problem = "s" + hashlib.sha256((_shape_text(init_kwargs) + _shape_text(input_kwargs)).encode()).hexdigest()[:16]
        keys = {"triton": triton_version(), "file_sha256": file_sha256(self.file),
                "hardware": re.sub(r"[^A-Za-z0-9._-]", "_", self.config.hardware or "unknown"), "problem_id": problem}
        record = store.load(**keys)
        if record is not None:
            return record
        budget = self.config.autotune_budget
        if b"autotune" not in Path(self.file).read_bytes():
            # nothing in the file can reach Triton's autotuner by name: no sweep, and no worker started for one in a
            # timing phase that otherwise runs no candidate process (14 of the Triton reference's 31 files)
            return protocol.Record(kernels=[], budget=budget, **keys)
        self._ensure_init(init_kwargs)

        def replay(program: Recorded):
            outcome = self.replayer.reproduce(self.operator, self.spec,
                                              lambda seed: self._expected(model, input_kwargs, seed), input_kwargs,
                                              [program], self.state, time_seeds=2)  # the recording worker's
            if not outcome.native or outcome.timed_wrong or not outcome.times_s:
                return None
            return outcome.times_s, outcome.kernel_us

        began = time.monotonic()
        kept, self.replayer.config = self.replayer.config, with_values(
            self.replayer.config, timing_budget_s=budget.budget_s, timing_max_calls=budget.max_calls)
        try:
            record = sweep(lambda: self._request({"cmd": "sweep", "input_kwargs": input_kwargs, "pins": {}}),
                           lambda pins: self._record_program(model, shape, pins), replay, budget, **keys)
        finally:
            self.replayer.config = kept
        store.save(record)
        self._clock("autotune", began)
        return record

    def _replayed(self, v: Verdict, model, pending: dict) -> Verdict:
        """Adoption and time from the trusted replay (harness/judge.py, harness/replay.py): the recorded program
        must reproduce the reference on fresh inputs, and its time is the median over the replayed timed calls
        of the sum of each call's kernel durations (CUPTI, in the replay's own process). The outputs of each
        rotated input set's last timed call are judged too."""
        from kernels_eval.harness.timing import quantiles

        _, input_kwargs = pending["shape"]
        began = time.monotonic()
        outcome = self.replayer.reproduce(self.operator, self.spec, lambda seed: self._expected(model, input_kwargs, seed),
                                          input_kwargs, pending["recorded"], pending["state"], time_seeds=TIMING_SETS)
        self._clock("replay", began)
        if not outcome.native:
            v.native = False
            return self._fail(v, "adoption", f"not reproduced by the submission's kernels alone: {outcome.reason}")
        v.native = True
        if outcome.timed_wrong:
            v.correct = False
            return self._fail(v, "performance", f"a timed call's output was wrong: {outcome.timed_wrong}")
        if not outcome.times_s:
            return self._fail(v, "performance", "the replay timed no call")
        q = quantiles(outcome.times_s)
        v.update(t_measured_s=q["median"], t_p10_s=q["p10"], t_p90_s=q["p90"], n_timed=len(outcome.times_s),
                 kernel_us=outcome.kernel_us or {}, max_abs_err=max(v.max_abs_err or 0.0, outcome.max_abs_err))
        v.stage = "done"
        return v

    def _reference_time(self, model, input_kwargs: dict) -> float | None:
        """Median kernel span of the PyTorch reference, timed as the candidate is (EvalConfig.time_reference)."""
        import torch

        from kernels_eval.harness import spans
        from kernels_eval.harness.markers import Markers
        from kernels_eval.harness.timing import L2_FLUSH_BYTES, gpu_profiler, kineto_records, quantiles, time_calls

        began = time.monotonic()
        sets = [self._reference_inputs(input_kwargs, secrets.randbits(62)) for _ in range(2)]
        markers = Markers(L2_FLUSH_BYTES)
        markers.start()
        markers.end()
        torch.cuda.synchronize()
        with torch.no_grad(), gpu_profiler() as prof:
            times = time_calls(model, sets, budget_s=self.config.timing_budget_s, markers=markers,
                               max_calls=self.config.timing_max_calls, min_calls=3)  # a slow one: 3 calls
        del sets, markers
        torch.cuda.empty_cache()
        try:
            windows, _, pairs = spans.attribute(kineto_records(prof), times.marked)
            measured = spans.call_spans(windows, pairs)[times.marked - len(times):]
            t = quantiles([ns / 1e9 for ns in measured])["median"]
        except spans.SpanError:
            t = quantiles(list(times))["median"]  # a reference that syncs mid-call: its events' figure
        self._clock("reference_timing", began)
        return t

    @staticmethod
    def _fail(v: Verdict, stage: str, error: str, errors: list[str] | None = None) -> Verdict:
        """Stop at `stage` with `error`; a correctness failure already found takes precedence."""
        if errors:
            stage, error = "correctness", errors[0]
        return v.fail(stage, error)


def _kernel_us(records: dict | None) -> dict[str, float]:
    """Microseconds per GPU record name in a worker's records table (timing.kineto_records)."""
    from kernels_eval.harness import spans

    if not records:
        return {}
    return spans.time_by_name([spans.records_from_rows(records)])


def _shape_text(kwargs: dict) -> str:
    return json.dumps(kwargs, sort_keys=True, separators=(",", ":"))


def file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def new_run_id() -> str:
    """A fresh run id: UTC time and 6 random hex digits."""
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ") + "-" + secrets.token_hex(3)


def release_identity(release: ReleaseView) -> dict:
    """release_digest (of the release.json the view was read from) and manifest_sha256 (its problems)."""
    try:
        info = json.loads((Path(release.path) / "release.json").read_bytes())
    except (OSError, ValueError):
        info = {}
    return {"release_digest": getattr(release, "digest", None) or info.get("digest"),
            "manifest_sha256": (info.get("files") or {}).get("public/manifest.parquet")}


def evaluate(submission: str | Path, release: ReleaseView | str | Path, *, config: EvalConfig,
             ops: list[str] | None = None, problems: list[str] | None = None, progress=None, sink=None,
             skip=(), run_id: str | None = None, devices: list[int] | None = None, lanes: int = 1) -> list[dict]:
    """Result rows (results_schema.RESULTS columns) of a submission on a release's problems. Each row goes to
    `sink(row)` (which returns the row as stored) as soon as its problem is judged, so a cut run keeps it;
    problems in `skip` (judged before, in the run being resumed) are not run. With `devices` (CUDA indices)
    the operators are sharded over them longest-first (harness/shard.py): one thread per device judges its
    operators there, one worker at a time shown only that device; rows reach `sink` one at a time. With
    `lanes` > 1 each device checks that many operators at once, one worker each (compiling, autotuning and the
    correctness and adoption calls overlap), then times the checked problems one at a time, so no timed window
    ever shares the device with another lane's work."""
    if lanes < 1:
        raise ValueError(f"lanes must be at least 1, not {lanes}")
    if not isinstance(release, ReleaseView):
        release = read_release_view(release)
    submission = Path(submission)
    files = operator_files(submission)
    config = replace(config, candidate_files=tuple(f for f in files.values() if f is not None))
    manifest = sorted(release.problems, key=lambda r: (r["operator"], r["problem_id"]))
    chosen = [Problem(r) for r in manifest
              if (ops is None or r["operator"] in ops) and (problems is None or r["problem_id"] in problems)
              and r["problem_id"] not in skip]
    hardware = config.hardware or detect_hardware(config.device, release.hardware_names)
    roof = release.roofline(hardware)
    config = replace(config, memory_accounting=limits.memory_accounting(require_cgroup=config.memory_cgroup))
    base = {"submission": submission.name, "release": release.name, "run_id": run_id or new_run_id(),
            "run": config.run, "hardware": hardware, "device": config.device,
            "evaluated_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            **release_identity(release), "sandboxed": bool(getattr(config, "sandbox", False)),
            "memory_accounting": config.memory_accounting}
    rows = []
    emitted: set[str] = set()
    one_writer = threading.Lock()  # device threads hand rows to the sink (the journal) one at a time
    # hashed before any candidate runs: the row names the file that was judged, not what it became
    shas = {op: file_sha256(f) for op, f in files.items() if f is not None}

    def emit(p: Problem, verdict: Verdict | dict, device_index: int | None, announce: bool = False) -> None:
        verdict = as_verdict(verdict)
        with one_writer:
            if p.problem_id in emitted:
                return
            sha = shas.get(p.operator)
            row = result_row(base, p, verdict, sha, _t_roofline(roof, p, hardware), config.device)
            row["device_index"] = device_index
            rows.append(sink(row) if sink is not None else row)
            emitted.add(p.problem_id)
            if announce and progress:
                progress(p, verdict)

    by_op: dict[str, list[Problem]] = {}
    for p in chosen:
        by_op.setdefault(p.operator, []).append(p)
    workdir = Path(tempfile.mkdtemp(prefix="hotshape-eval-", dir=_scratch_dir()))
    config = replace(config, markers_cache=_compile_markers(workdir / "markers") if config.device == "cuda" else None)
    targets = [replace(config, device_index=d) for d in devices] if devices else [config]
    # Lanes on a GPU: every problem is checked first, several operators at once (compiling and autotuning
    # overlap), then the checked problems are timed one at a time per device: a timed window shares the device
    # with nothing (measured on H200 with a readers-writer gate around timed calls instead: each timing waited
    # for the other lanes' in-flight compiles, 3x slower per problem than one lane). Problems too large to share
    # a lane's memory are checked in a large lane of their own beside the lanes (`_run_lanes`); a problem whose
    # worker ran out of memory there is judged again after them, alone, and timed with its checks.
    two_phase = lanes > 1 and config.device == "cuda"
    if two_phase and config.triton_cache is None:  # the timing phase's workers load what the checks compiled
        targets = [replace(t, triton_cache=workdir / "triton") for t in targets]
    pending: list | None = [] if two_phase else None
    try:
        if two_phase:
            retry: list[Problem] = []
            _run_lanes(by_op, _too_large_for_lanes(release, chosen), targets, lanes, files, workdir / "lanes", emit,
                       pending, retry)
            again: dict[str, list[Problem]] = {}
            for p in retry:
                again.setdefault(p.operator, []).append(p)
            if again:
                _run_phase(again, targets, 1, files, workdir / "alone", emit)
        else:
            _run_phase(by_op, targets, lanes, files, workdir / "lanes", emit)
        if pending:
            log.info("timing %d checked problems", len(pending))
            by_device: dict[int | None, list] = {}
            for p, verdict, cfg in pending:
                by_device.setdefault(cfg.device_index, []).append((p, verdict))
            timers = [threading.Thread(target=_time_checked, args=(items, files, target, workdir / f"timing-{k}", emit),
                                       name=f"eval-device-{target.device_index}-timing", daemon=True)
                      for k, target in enumerate(targets) if (items := by_device.get(target.device_index))]
            for thread in timers:
                thread.start()
            for thread in timers:
                thread.join()
            for p, _, cfg in pending:  # a timing thread that died outright: its problems still get their row
                emit(p, Verdict(stage="performance", compiled=True, correct=True, native=True,
                             error="evaluator error, problem not timed: its device's timing stopped"), _row_device(cfg))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return rows


# A problem whose inputs and outputs exceed this is checked in the large lane, beside the lanes: its worker may
# need several times the interface bytes, and the parent holds its references beside it (the catalogue's largest
# on H200: 18 GB of interface, 13 problems over 4 GiB).
LANE_MAX_BYTES = 4 << 30
# Of the device's memory, the lanes' workers together may hold this share (the parent's references need the rest).
LANES_MEMORY_SHARE = 0.8
# With a large lane: its worker's share, and the other lanes' together (the parent keeps 15%). Seen on H200 with
# the large problems judged alone after the lanes instead: 13 problems of 11-38 s each, one after another, with
# every lane idle (a third of the catalogue: 178 s of its ~410).
LARGE_LANE_SHARE = 0.4
LANES_BESIDE_LARGE_SHARE = 0.45


def _too_large_for_lanes(release: ReleaseView, chosen: list[Problem]) -> set[str]:
    """Problem ids whose interface bytes (the release's roofline rows, else the catalogue's work model) exceed
    LANE_MAX_BYTES; a problem whose size is unknown stays in the lanes."""
    sizes: dict[str, int] = {}
    for r in release.roofline_rows:
        sizes[r["problem_id"]] = max(sizes.get(r["problem_id"], 0), int(r["bytes_read"]) + int(r["bytes_written"]))
    alone = set()
    for p in chosen:
        size = sizes.get(p.problem_id)
        if size is None:
            try:
                w = registry.work(p.operator, p.init_kwargs, p.input_kwargs)
                size = int(w["bytes_read"]) + int(w["bytes_written"])
            except Exception:  # noqa: BLE001 - a shape the work model cannot size: judged in a lane
                continue
        if size > LANE_MAX_BYTES:
            alone.add(p.problem_id)
    return alone


def _run_lanes(by_op: dict[str, list[Problem]], large: set[str], targets: list[EvalConfig], lanes: int,
               files: dict, workdir: Path, emit, pending: list, retry: list) -> None:
    """The checks of a lanes run: `lanes` lanes per device share LANES_MEMORY_SHARE of its memory; with problems
    in `large` (ids), one of the lanes is a large lane that checks them one after another with LARGE_LANE_SHARE,
    each in a worker of its own, while the others share LANES_BESIDE_LARGE_SHARE. Checked problems go to
    `pending`, those whose worker (or reference) ran out of memory to `retry`."""
    big = {op: [p for p in plist if p.problem_id in large] for op, plist in by_op.items()}
    big = {op: plist for op, plist in big.items() if plist}
    if not big or lanes < 2:
        _run_phase(by_op, targets, lanes, files, workdir, emit, pending, retry, LANES_MEMORY_SHARE)
        return
    rest = {op: [p for p in plist if p.problem_id not in large] for op, plist in by_op.items()}
    rest = {op: plist for op, plist in rest.items() if plist}
    # each large problem is a unit of its own ("op#Lk"): its worker's memory is given back before the next one's
    units = {f"{op}{UNIT_SEP}L{k}": [p] for op, plist in big.items() for k, p in enumerate(plist)}
    jobs = [(units, 1, workdir / "large", LARGE_LANE_SHARE)]
    if rest:
        jobs.append((rest, lanes - 1, workdir, LANES_BESIDE_LARGE_SHARE))
    threads = [threading.Thread(target=_run_phase, args=(plan, targets, n, files, where, emit, pending, retry, share),
                                name=f"eval-{'large' if plan is units else 'lanes'}", daemon=True)
               for plan, n, where, share in jobs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def _run_phase(by_op: dict[str, list[Problem]], targets: list[EvalConfig], lanes: int, files: dict, workdir: Path,
               emit, pending: list | None = None, retry: list | None = None, share: float | None = None) -> None:
    """Judge `by_op` (operators, or units of them: `_split_units`) on `targets` (one config per device) with
    `lanes` units at once per device: units sharded longest-first over devices x lanes (harness/shard.py), one
    thread per lane. With `pending` (the checks of a lanes run), checked problems are left there as (problem,
    verdict, config) for `_time_checked`, and the lanes' workers share `share` of each device's memory; with
    `retry`, problems whose worker ran out of device memory are left there (to be judged alone) instead of
    failed."""
    if pending is not None:  # the device's memory is split between its lanes' workers
        # Autotuning beside other lanes' kernels picks other configurations (seen on H200: small autotuned
        # layer_norm problems 20-25% slower or faster than a one-lane run's picks): the lanes' picks serve their
        # checks only; the timing phase, alone on the device, autotunes again and keeps what it picked, which
        # a later run's lanes reuse (harness/autotune_cache.py).
        targets = [replace(t, gpu_memory_fraction=min(t.gpu_memory_fraction, share / lanes),
                           keep_autotuning=False) for t in targets]
    if len(targets) * lanes > 1:
        from kernels_eval.harness.shard import lpt_plan, operator_costs, recorded_seconds

        costs = operator_costs({op: len(plist) for op, plist in by_op.items()}, recorded_seconds())
        if lanes > 1 and targets[0].device == "cuda":  # on cpu one verdict over smoke shapes stands for all
            by_op, costs = _split_units(by_op, costs, len(targets) * lanes)
        plan = lpt_plan(costs, len(targets) * lanes)  # bin i runs on target i % len(targets)
        shards = [(targets[i % len(targets)], shard) for i, shard in enumerate(plan) if shard]
    else:
        shards = [(targets[0], list(by_op))]
    workdir.mkdir(parents=True, exist_ok=True)
    lane_pending = [[] if pending is not None else None for _ in shards]
    lane_retry = [[] if retry is not None else None for _ in shards]
    if len(shards) == 1:
        _run_shard(shards[0][1], by_op, files, shards[0][0], workdir, emit, None, lane_pending[0], lane_retry[0])
    else:
        threads = [threading.Thread(target=_run_shard, args=(shard, by_op, files, cfg, workdir, emit, lane,
                                                             lane_pending[lane], lane_retry[lane]),
                                    name=f"eval-device-{cfg.device_index}-lane-{lane}", daemon=True)
                   for lane, (cfg, shard) in enumerate(shards)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    if pending is not None:
        for (cfg, _), checked in zip(shards, lane_pending):
            pending.extend((p, verdict, cfg) for p, verdict in checked)
    if retry is not None:
        retry.extend(p for again in lane_retry for p in again)
    # a lane thread that died outright left problems unjudged: each still gets its one row
    left = {p.problem_id for p, _, _ in pending} if pending is not None else set()
    left |= {p.problem_id for p in retry} if retry is not None else set()
    for cfg, shard in shards:
        for op in shard:
            for p in by_op[op]:
                if p.problem_id not in left:
                    emit(p, Verdict(error="evaluator error, problem not judged: its device's evaluation stopped"),
                         _row_device(cfg))


UNIT_SEP = "#"  # "op#2": the third part of an operator split over lanes


def _unit_op(unit: str) -> str:
    return unit.split(UNIT_SEP, 1)[0]


def _split_units(by_op: dict[str, list[Problem]], costs: dict[str, float],
                 bins: int) -> tuple[dict[str, list[Problem]], dict[str, float]]:
    """Lanes' units of work: an operator whose cost exceeds half a lane's fair share is split into parts (its
    problems dealt round-robin, so each part has large and small ones), each judged in a worker of its own,
    possibly in another lane. Seen on H200 before: unified_attention's 25 problems took ~16 s each to check
    (compiling and autotuning per shape), one lane busy for 400 s while the five others were done after 90."""
    share = sum(costs.values()) / bins / 2
    units: dict[str, list[Problem]] = {}
    unit_costs: dict[str, float] = {}
    for op, plist in by_op.items():
        parts = max(1, min(len(plist), math.ceil(costs[op] / share))) if share > 0 else 1
        for j in range(parts):
            unit = op if parts == 1 else f"{op}{UNIT_SEP}{j}"
            units[unit] = plist[j::parts]
            unit_costs[unit] = costs[op] * len(units[unit]) / len(plist)
    return units, unit_costs


# Operators whose timing workers are started (and warmed) ahead of the one being timed. Seen on H200 with one
# ahead: a worker's start, CUDA context and first profiler start take ~12 s, longer than timing an operator of
# a few problems, and the timing phase waited for them (warm_wait).
TIMING_AHEAD = 3


def _time_checked(items: list[tuple[Problem, Verdict]], files: dict, config: EvalConfig, workdir: Path, emit) -> None:
    """The timing phase of a lanes run on one device: the performance stage of each checked problem, one at a
    time, in one trusted replay process for the device (a fresh one after a kernel broke its CUDA context); no
    candidate process runs here. Each row goes to `emit` as it is timed."""
    index = _row_device(config)
    if config.device_index is not None:
        import torch

        torch.cuda.set_device(config.device_index)
    workdir.mkdir(parents=True, exist_ok=True)
    by_op: dict[str, list[tuple[Problem, dict]]] = {}
    for p, verdict in items:
        by_op.setdefault(p.operator, []).append((p, verdict))
    replayer = Replayer("timing", config)
    try:
        for op in sorted(by_op):
            judge = OperatorJudge(op, files[op], config, workdir, replayer=replayer)
            try:
                for p, verdict in by_op[op]:
                    t0 = time.monotonic()
                    try:
                        verdict = judge.time_checked(verdict)
                        fresh = bool(CONTEXT_LOST.search(verdict.error or ""))
                    except Exception as exc:  # noqa: BLE001 - reported in the row; the timing goes on
                        verdict.pending = None
                        verdict = OperatorJudge._fail(verdict, "performance", "evaluator error, problem not timed: "
                                                      f"{type(exc).__name__}: {exc}"[:2000])
                        fresh = True
                        _free_device_memory(config.device)
                    verdict.eval_s = (verdict.eval_s or 0.0) + time.monotonic() - t0
                    emit(p, verdict, index, announce=True)
                    if fresh:
                        replayer.close()
                        replayer = Replayer("timing", config)
                        judge.replayer = replayer
            finally:
                judge.close()
    finally:
        replayer.close()


def _compile_markers(path: Path) -> Path | None:
    """The evaluator's markers compiled into `path` (the seed each worker copies before its candidate is
    imported), or None where that fails (each worker then compiles them itself)."""
    try:
        from kernels_eval.harness.markers import compile_into

        compile_into(path)
        return path
    except Exception:  # noqa: BLE001 - a slower start, nothing else
        return None


def _row_device(config: EvalConfig) -> int | None:
    """The device index a row records: the shard's, else CUDA device 0 (a worker's default), none on cpu."""
    if config.device_index is not None:
        return config.device_index
    return 0 if config.device == "cuda" else None


# Units whose workers a lane starts (and warms) ahead of the one it judges. Seen on H200 with one ahead: judges
# waited 90 s in all (`warm_wait`, over a third of the catalogue's 103 problems) for workers whose start, CUDA
# context and first profiler start take ~12 s, longer than a small operator's checks.
LANE_AHEAD = 2
# What a replayed call's time is (catalogue.vocabulary.TIMING_RULES): the union of its kernels' records (on the
# replay's one stream, the sum of their durations). A recorded program runs no host code, so an operator whose
# call reads a size back mid-call (moe_align_block_size) is timed without that round trip, on the inputs its
# program was recorded on (docs/reproducibility.md "Measurement rule").
TIMING_RULE = "device_busy"
TIMING_SETS = 8  # fresh input sets a replay's timing may rotate through (fewer where they exceed its memory cap)


def _run_shard(shard: list[str], by_op: dict[str, list[Problem]], files: dict, config: EvalConfig, workdir: Path,
               emit, lane: int | None = None, pending: list | None = None, retry: list | None = None) -> None:
    """Judge the operators of one lane of a device in order, each problem's row to `emit` as it is judged; with
    `pending` (a list) a verdict left for the timing phase goes there as (problem, verdict) instead, and with
    `retry` a problem whose worker ran out of device memory goes there (OUT_OF_MEMORY). An error of
    the device (it cannot be selected, an operator's judging raises) fails only the problems it left
    unjudged."""
    index = _row_device(config)
    try:
        if config.device == "cuda" and config.device_index is not None:
            import torch

            torch.cuda.set_device(config.device_index)  # this thread's references run on the worker's GPU
    except Exception as exc:  # noqa: BLE001 - every problem of the shard fails with the reason
        failed = Verdict(error=f"device {config.device_index} unusable: {type(exc).__name__}: {exc}")
        for op in shard:
            for p in by_op[op]:
                emit(p, failed, index)
        return
    sub = workdir / f"lane-{lane}" if lane is not None else workdir
    sub.mkdir(parents=True, exist_ok=True)
    spares: dict[str, WorkerProcess] = {}  # unit -> its worker, started ahead
    # Each unit's worker is started while one of the LANE_AHEAD units before it is judged (`_prestart`). A unit is
    # an operator, or one part of an operator split over lanes (`_split_units`), with a scratch directory of its own.
    judged = [u for u in shard if files.get(_unit_op(u)) is not None and registry.is_benchmarkable(_unit_op(u))]

    def scratch(unit: str) -> Path:
        return sub if unit == _unit_op(unit) else sub / unit

    def prestart(unit: str | None) -> None:
        if unit is not None:
            scratch(unit).mkdir(parents=True, exist_ok=True)
            _prestart(spares, config, scratch(unit), _unit_op(unit), files[_unit_op(unit)], key=unit)

    def on_verdict(p: Problem, verdict: dict) -> None:
        verdict = as_verdict(verdict)
        if retry is not None and OUT_OF_MEMORY.search(verdict.error or ""):
            retry.append(p)
            log.info("out of a lane's memory: %s %s is judged again alone", p.problem_id, p.operator)
        elif verdict.pending is not None:
            pending.append((p, verdict))  # list.append: one at a time across lane threads
            log.info("checked %s %s in %.1f s", p.problem_id, p.operator, verdict.eval_s or 0.0)
        else:
            emit(p, verdict, index, announce=True)

    try:
        for ahead in judged[:LANE_AHEAD]:
            prestart(ahead)
        for unit in shard:
            op = _unit_op(unit)
            plist, file = by_op[unit], files.get(op)
            if unit in judged:
                following = judged.index(unit) + 1
                for ahead in judged[following:following + LANE_AHEAD]:  # no-op for those started already
                    prestart(ahead)
            if file is None:
                miss = Verdict(error=f"the submission has no {op}.py")
                verdicts = {p.problem_id: miss for p in plist}
            elif not registry.is_benchmarkable(op):
                verdicts = {p.problem_id: Verdict(error=f"operator {op} has no reference") for p in plist}
            else:
                try:
                    scratch(unit).mkdir(parents=True, exist_ok=True)
                    verdicts = _judge_operator(op, file, plist, config, scratch(unit), on_verdict,
                                               spares.pop(unit, None), defer_timing=pending is not None)
                except Exception as exc:  # noqa: BLE001 - this operator's unjudged problems fail; the shard goes on
                    error = f"evaluator error, problem not judged: {type(exc).__name__}: {exc}"[:2000]
                    verdicts = {p.problem_id: Verdict(error=error) for p in plist}
            deferred = {q.problem_id for q, _ in pending} if pending is not None else set()
            deferred |= {q.problem_id for q in retry} if retry is not None else set()
            for p in plist:
                if as_verdict(verdicts[p.problem_id]).pending is None and p.problem_id not in deferred:
                    emit(p, verdicts[p.problem_id], index)
    finally:
        for spare in spares.values():
            spare.close()


def _t_roofline(roof: dict[str, float], p: Problem, hardware: str) -> float | None:
    """The problem's roofline time on `hardware`: the release's, else the model's (none on cpu)."""
    t_roof = roof.get(p.problem_id)
    if t_roof is None and hardware != "cpu":
        try:
            from catalogue.roofline import problem_roofline  # lazy: it needs pyyaml (see detect_hardware)

            t_roof = problem_roofline(p.operator, p.init_kwargs, p.input_kwargs, hardware)["t_roofline_s"]
        except (KeyError, ValueError, ImportError):
            t_roof = None
    return t_roof


def start_worker(config: EvalConfig, log_path: Path, wait: bool, file: Path | None = None) -> WorkerProcess:
    """A worker process for operator file `file`; wait=False returns while it is still importing torch. It
    sees that file's own Triton cache, known before it starts (a prestarted worker's is bound already)."""
    from kernels_eval.harness.limits import default_memory_bytes
    from kernels_eval.harness.triton_cache import file_cache_dir

    memory = int(config.memory_gb * 2**30) if config.memory_gb else default_memory_bytes()
    # `evaluate` decided it for the run; a bare config (a benchmark's judge) takes a cgroup where one can be made
    cgroup = config.memory_accounting != "process"
    # the run's scratch directory (exchange directories, Triton cache) is the sandbox's one writable place
    return WorkerProcess(device=config.device, log_path=log_path, memory_bytes=memory,
                         start_timeout_s=config.start_timeout_s, wait=wait, sandboxed=config.sandbox,
                         max_processes=config.max_processes, scratch=log_path.parent,
                         files=config.candidate_files + ((config.markers_cache,) if config.markers_cache else ()),
                         visible_device=config.device_index if config.device == "cuda" else None,
                         triton_cache=file_cache_dir(config.triton_cache, file)
                         if config.triton_cache is not None and file is not None else None,
                         keep_autotuning=config.keep_autotuning, use_cgroup=cgroup,
                         require_cgroup=config.memory_accounting == "cgroup")


def _judge_operator(op: str, file: Path, plist: list[Problem], config: EvalConfig, workdir: Path,
                    progress, worker: WorkerProcess | None = None, defer_timing: bool = False) -> dict[str, Verdict]:
    """problem_id → verdict for one operator file. On CPU one verdict over the smoke shapes stands for every
    problem; on GPU each problem runs on its shape. An error of the evaluator itself (say, the reference
    running out of memory) fails only that problem, with the error named; so does a candidate error that kills
    the worker's CUDA context (an illegal address, say): the next problem starts a fresh worker (seen on H200:
    one faulting problem failed the operator's 20 others in under a millisecond each)."""
    judge = OperatorJudge(op, file, config, workdir, worker)
    if config.device == "cpu":
        groups = [(plist, [(dict(s.init), dict(s.inputs)) for s in judge.spec.smoke])]
    else:
        groups = [([p], [(p.init_kwargs, p.input_kwargs)]) for p in plist]
    verdicts = {}
    try:
        for problems, shapes in groups:
            t0 = time.monotonic()
            try:
                verdict = judge.evaluate_shapes(shapes, defer_timing=defer_timing)
                # a dead CUDA context in the worker fails every later call: the next problem gets a fresh one
                fresh = config.device == "cuda" and bool(CONTEXT_LOST.search(verdict.error or ""))
            except Exception as exc:  # noqa: BLE001 - reported in the row; the run goes on
                verdict = Verdict(error=f"evaluator error, problem not judged: {type(exc).__name__}: {exc}"[:2000])
                fresh = True
                _free_device_memory(config.device)
            if fresh:
                judge.close()
                judge = OperatorJudge(op, file, config, workdir)
            verdict.eval_s = time.monotonic() - t0
            for p in problems:
                verdicts[p.problem_id] = verdict
                if progress:
                    progress(p, verdict)
    finally:
        judge.close()
        if config.triton_cache is not None:
            from kernels_eval.harness.triton_cache import file_cache_dir, prune

            prune(file_cache_dir(config.triton_cache, file))
        _keep_log(config, judge.log, judge.log.name)
    return verdicts


def _prestart(spares: dict[str, WorkerProcess], config: EvalConfig, workdir: Path, op: str, file: Path,
              key: str | None = None) -> None:
    """Start operator `op`'s worker ahead into `spares[key or op]` (importing torch takes seconds of host time)
    and, on a GPU, have it make its CUDA context and its profiler's first start meanwhile (`_warm_ahead`); one
    that cannot start is started on demand."""
    key = key or op
    if key not in spares:
        try:
            spares[key] = _warm_ahead(start_worker(config, workdir / f"{op}.log", wait=False, file=file), config)
        except (OSError, RuntimeError):  # a sandbox or cgroup refused: started on demand, the reason in its row
            pass


def _warm_ahead(worker: WorkerProcess, config: EvalConfig) -> WorkerProcess:
    """`worker`, sent its "warm" command from a thread of its own (joined by the judge that takes the worker,
    `OperatorJudge._request`): seen on H200, each timing-phase worker's first command spent 4.5 s starting,
    2.3 s initialising and 5.8 s in its first profiler start, one operator after another. Making a context and
    starting CUPTI run no kernel; the timed worker beside it shares the device with no other work."""
    if config.device != "cuda":
        return worker

    def warm() -> None:
        try:
            worker.request({"cmd": "warm", "device": config.device,
                            "markers_cache": str(config.markers_cache) if config.markers_cache else None},
                           config.start_timeout_s)
        except Exception:  # noqa: BLE001 - the judge that takes it finds it dead (or closed) and starts another
            pass

    worker.warming = threading.Thread(target=warm, name="eval-warm-worker", daemon=True)
    worker.warming.start()
    return worker


def _keep_log(config: EvalConfig, log: Path, name: str) -> None:
    """A worker's log copied into EvalConfig.keep_logs as `name`, never through a link the candidate may have
    put there (process.read_log)."""
    if config.keep_logs is not None and log.exists():
        config.keep_logs.mkdir(parents=True, exist_ok=True)
        try:
            safe_io.copy_tail(log, config.keep_logs / name)  # its last KEPT_LOG_BYTES, never through a link
        except OSError:
            pass


def result_row(base: dict, p: Problem, v: Verdict | dict, sha: str | None, t_roof: float | None,
               device: str) -> dict:
    """One results row (results_schema.RESULTS) of a problem's verdict (the scoreboard rebuilds rows of a run
    cut short from its streamed verdicts with it: `v` may be a verdict's plain data)."""
    v = as_verdict(v)
    refused = physics.refusal(v.t_measured_s, t_roof)
    if refused:  # never a time under the roofline in a row: the numbers go into the refusal's text
        v = replace(v, stage="performance", error=refused, t_measured_s=None, t_p10_s=None, t_p90_s=None, t_repeats_s=[],
                    t_event_s=v.t_event_s if not physics.below_roofline(v.t_event_s, t_roof) else None)
    t, ref = v.t_measured_s, v.t_reference_s
    return sanitize.row({**base, "problem_id": p.problem_id, "operator": p.operator, "file_sha256": sha,
            "shape_kind": "smoke" if device == "cpu" else "problem", "stage": v.stage,
            "compiled": v.compiled, "correct": v.correct, "native": v.native,
            "native_fraction": v.native_fraction, "fallbacks": list(v.fallbacks),
            "error": v.error, "max_abs_err": v.max_abs_err, "performance_measured": t is not None or bool(refused),
            "t_measured_s": t, "t_p10_s": v.t_p10_s, "t_p90_s": v.t_p90_s, "n_timed": v.n_timed,
            "t_roofline_s": t_roof, "roofline_fraction": (t_roof / t) if (t and t_roof) else None,
            "t_reference_s": ref, "speedup": (ref / t) if (t and ref) else None, "eval_s": v.eval_s,
            "t_event_s": v.t_event_s, "timing_rule": v.timing_rule, "t_repeats_s": list(v.t_repeats_s) or None,
            "autotune_config": v.autotune_config, "key_id": None, "signature": None})


def _free_device_memory(device: str) -> None:
    if device == "cuda":
        import gc

        import torch

        gc.collect()
        torch.cuda.empty_cache()


def _scratch_dir() -> str | None:
    shm = Path("/dev/shm")
    return str(shm) if shm.is_dir() and shutil.disk_usage(shm).free > (1 << 30) else None
