"""One operator file's judge, in the parent: drives discovery (the sandboxed worker: compile, the judged calls
with their launch programs recorded, the init-time snapshot) and the trusted replay (harness/judge.py), and
builds each problem's Verdict: compile -> correctness -> adoption (the replay's) -> performance (the replay's
time). The worker's reply is hostile input: its outputs are judged here as data, its program only replayed."""

from __future__ import annotations

import json
import re
import secrets
import time
from pathlib import Path

from kernels_eval import registry
from kernels_eval.harness import adoption, channel, observe, safe_io
from kernels_eval.harness.compare import compare_outputs, named_outputs, unchanged_inputs
from kernels_eval.harness.config import EvalConfig
from kernels_eval.harness.autotune_judge import AutotuneSteps
from kernels_eval.harness.judge import Recorded, Replayer
from kernels_eval.harness.process import WorkerDied, WorkerProcess
from kernels_eval.harness.protocol import ProtocolError, WorkerReply, decode_reply
from kernels_eval.harness.verdict import Verdict
from kernels_eval.harness.worker_commands import Call, Command, Init, encode_command, name_of
from kernels_eval.harness import spans
from kernels_eval.harness.autotune_protocol import ProtocolError as AutotuneError, row_text
from kernels_eval.harness.channel import import_tensor
from kernels_eval.harness.limits import default_memory_bytes
from kernels_eval.harness.timing import L2_FLUSH_BYTES, gpu_profiler, kineto_records, quantiles, time_calls
from kernels_eval.harness.triton_cache import file_cache_dir

# Errors after which a CUDA context is unusable (CUDA's "sticky" errors, as torch and Triton word them): every
# later call in that worker fails at once, so the operator's next problem gets a fresh worker.
# A lane's worker that runs out of device memory had a lane's share of it: the problem is judged again alone
# (with the device's whole share) rather than failed for the other lanes' sake (seen on H200: an fp8 MoE problem of
# 3 GiB interface needed more than a sixth of the device).
OUT_OF_MEMORY = re.compile(r"OutOfMemoryError|CUDA out of memory", re.IGNORECASE)

CONTEXT_LOST = re.compile(r"illegal memory access|illegal instruction|misaligned address|unspecified launch "
                          r"failure|device-side assert|AcceleratorError|Triton Error \[CUDA\]", re.IGNORECASE)

# What a replayed call's time is (catalogue.vocabulary.TIMING_RULES): the union of its kernels' records (on the
# replay's one stream, the sum of their durations). A recorded program runs no host code, so an operator whose
# call reads a size back mid-call (moe_align_block_size) is timed without that round trip, on the inputs its
# program was recorded on (docs/reproducibility.md "Measurement rule").
TIMING_RULE = "device_busy"
TIMING_SETS = 8  # fresh input sets a replay's timing may rotate through (fewer where they exceed its memory cap)



class OperatorJudge(AutotuneSteps):
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

    def _request(self, command: Command, timeout_s: float | None = None) -> dict:
        """The worker's reply (plain data; `_decoded` types it) to `command` (harness/worker_commands.py)."""
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
            reply = self.worker.request(encode_command(command), timeout_s or self.config.call_timeout_s)
        except WorkerDied:
            self.worker = None
            raise
        finally:
            self._clock(f"worker_{name_of(command)}", began)
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
        if not isinstance(descs, dict):
            raise ValueError("worker reply lacks a tensor table")
        return {str(k): import_tensor(v, self.exchange, self.staging) for k, v in descs.items()}

    def _reference_inputs(self, input_kwargs: dict, seed: int) -> dict:
        import torch

        g = torch.Generator(device=self.config.device)
        g.manual_seed(seed)
        return self.reference.make_inputs(**input_kwargs, device=self.config.device, generator=g)

    # ---- one shape --------------------------------------------------------------------------------------

    def _init(self, init_kwargs: dict) -> WorkerReply:
        self.initialized_with = None
        config = self.config
        bench_ms = list(config.autotune_bench_ms) if config.autotune_bench_ms else None
        reply = self._decoded(self._request(Init(
            operator=self.operator, file=str(self.file), device=config.device, init_kwargs=init_kwargs,
            outputs=list(self.spec.outputs), exchange=str(self.exchange),
            gpu_memory_fraction=config.gpu_memory_fraction, autotune_bench_ms=bench_ms,
            markers_cache=str(config.markers_cache) if config.markers_cache else None,
            # a worker shown one GPU numbers it 0: an IPC handle would name the wrong device
            cuda_ipc=not config.sandbox and config.device_index is None),
            max(config.call_timeout_s, config.start_timeout_s)))
        if reply.ok:
            self.initialized_with = (id(self.worker), _shape_text(init_kwargs))
            try:
                self.state = self._import(reply.state)
            except ValueError as exc:
                return WorkerReply(ok=False, error=f"the init-time state snapshot is unreadable: {exc}")
        return reply

    @staticmethod
    def _decoded(data: dict) -> WorkerReply:
        """The worker's reply as a WorkerReply; a malformed one is a failed reply naming its fault."""
        try:
            return decode_reply(data)
        except ProtocolError as exc:
            return WorkerReply(ok=False, error=f"malformed worker reply ({exc})")

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

    def _judged_call(self, model, init_kwargs: dict, input_kwargs: dict,
                     **flags) -> tuple[WorkerReply, list[str], float]:
        """(reply, failures, max error) of one worker call judged against the reference on the same seed."""
        import torch

        seed, key = secrets.randbits(62), secrets.randbits(62)
        self.last_seed = seed
        reply = self._decoded(self._request(Call(input_kwargs=input_kwargs, seed=seed, digest_key=key, **flags)))
        tamper = self._observe(reply)
        if tamper:
            reply = WorkerReply(ok=False, tamper=True, error=f"TamperError: {tamper}")
        if not reply.ok:
            return reply, [reply.error or "call failed"], 0.0
        began = time.monotonic()
        try:
            got = self._import(reply.outputs)
        except safe_io.RefusedFile as exc:  # the worker's own doing (a swapped exchange directory, a FIFO): its fail
            reply = WorkerReply(ok=False, error=f"output refused: {exc}")
            return reply, [reply.error], 0.0
        after = reply.inputs
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

    def _observe(self, reply: WorkerReply) -> str | None:
        """Fold one call's channel records (set by the parent's end of the pipe) into this verdict's
        observations; the tamper they show, or None."""
        seen = reply.observed
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
                if not reply.ok:
                    return self._fail(v, "compile", f"import/constructor failed: {reply.error}")
                recorded: list[Recorded] = []
                for k in range(self.config.sets):
                    # a shape's first call compiles and autotunes: the worker makes one untimed call before it,
                    # with no profiler (Worker._untimed_call)
                    reply, failures, err = self._judged_call(model, init_kwargs, input_kwargs, poison=True, record=True,
                                                             **({"tune": True} if gpu and k == 0 else {}))
                    if reply.ok:
                        recorded.append(Recorded(reply.program, self.last_seed))
                    if not reply.ok:
                        stage = "compile" if index == 0 and k == 0 else "correctness"
                        return self._fail(v, stage, f"call failed: {reply.error}")
                    v.compiled = True
                    launches += reply.launches
                    if gpu and k:  # a shape's first call compiles and autotunes (its benchmark flushes are aten)
                        for name, us in _kernel_us(reply.records).items():
                            checked_us[name] = checked_us.get(name, 0.0) + us
                    for op, n in reply.aten_ops.items():
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

        if self.config.autotune == "protocol":
            try:
                record = self._autotune(model, pending)
                pins = record.pins()
                if pins:  # the sweep's own recording of the chosen call, else one recorded now
                    program = record.program or self._record_program(model, pending["shape"], pins)
                    if program is None:
                        raise AutotuneError("the call with the chosen configurations failed or was wrong")
                    # the program refers to the init-time state of the worker that recorded it
                    pending = {**pending, "recorded": [program], "state": self.state}
            except (AutotuneError, WorkerDied) as exc:
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

    def _ensure_init(self, init_kwargs: dict) -> None:
        """Re-import and rebuild Model in a respawned worker (or for other init kwargs)."""
        if self.worker is None or self.initialized_with != (id(self.worker), _shape_text(init_kwargs)):
            reply = self._init(init_kwargs)
            if not reply.ok:
                raise WorkerDied(f"re-initialising the worker failed: {reply.error}")

    def _replayed(self, v: Verdict, model, pending: dict) -> Verdict:
        """Adoption and time from the trusted replay (harness/judge.py, harness/replay.py): the recorded program
        must reproduce the reference on fresh inputs, and its time is the median over the replayed timed calls
        of the sum of each call's kernel durations (CUPTI, in the replay's own process). The outputs of each
        rotated input set's last timed call are judged too."""
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

        from kernels_eval.harness.markers import Markers  # triton's: the parent loads it only to time a reference

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
    if not records:
        return {}
    return spans.time_by_name([spans.records_from_rows(records)])



def _shape_text(kwargs: dict) -> str:
    return json.dumps(kwargs, sort_keys=True, separators=(",", ":"))



def start_worker(config: EvalConfig, log_path: Path, wait: bool, file: Path | None = None) -> WorkerProcess:
    """A worker process for operator file `file`; wait=False returns while it is still importing torch. It
    sees that file's own Triton cache, known before it starts (a prestarted worker's is bound already)."""
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
