"""Where and in what order operators are judged: devices (`evaluate(devices=)`), lanes (several operators checked
at once per device, then the checked problems timed one at a time), large problems in a lane of their own, and
units of an operator split over lanes (harness/shard.py balances them); workers started ahead of their turn."""

from __future__ import annotations

import logging
import math
import threading
import time
from dataclasses import replace
from pathlib import Path

from kernels_eval import registry
from kernels_eval.harness import operator_judge, safe_io
from kernels_eval.harness.autotune_judge import sweeps
from kernels_eval.harness.config import EvalConfig, Problem
from kernels_eval.harness.judge import Replayer
from kernels_eval.harness.operator_judge import CONTEXT_LOST, OUT_OF_MEMORY, OperatorJudge
from kernels_eval.harness.process import WorkerProcess
from kernels_eval.harness.verdict import Verdict, as_verdict
from kernels_eval.harness.worker_commands import Warm, encode_command
from kernels_eval.harness.shard import lpt_plan, operator_costs, recorded_seconds
from kernels_eval.harness.triton_cache import file_cache_dir, prune

log = logging.getLogger("hotshape.eval")  # phases and checked problems of a lanes run (the rows carry the rest)



# Of the device's memory, the lanes' workers together may hold this share (the parent's references need the rest).
LANES_MEMORY_SHARE = 0.8

# With a large lane: its worker's share, and the other lanes' together (the parent keeps 15%). Seen on H200 with
# the large problems judged alone after the lanes instead: 13 problems of 11-38 s each, one after another, with
# every lane idle (a third of the catalogue: 178 s of its ~410).
LARGE_LANE_SHARE = 0.4

LANES_BESIDE_LARGE_SHARE = 0.45



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
    # the autotuning protocol's sweeps run in the operator's worker: those of the next TIMING_AHEAD operators that
    # will sweep are started (and warmed) while one is timed; a run that finds every choice kept starts none
    ops = sorted(by_op)
    sweeping = [op for op in ops if sweeps(config, files[op], [v.pending["shape"] for _, v in by_op[op]])]
    spares: dict[str, WorkerProcess] = {}
    try:
        for op in ops:
            for ahead in [s for s in sweeping if s >= op][:1 + TIMING_AHEAD]:  # no-op for those started already
                _prestart(spares, config, workdir, ahead, files[ahead])
            judge = OperatorJudge(op, files[op], config, workdir, worker=spares.pop(op, None), replayer=replayer)
            try:
                # in a fixed order, whatever order the lanes checked them in: the autotuning protocol's choice for a
                # tuning key is made on the first problem that reaches it (docs/reproducibility.md)
                for p, verdict in sorted(by_op[op], key=lambda item: item[0].problem_id):
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
        for spare in spares.values():
            spare.close()



def _row_device(config: EvalConfig) -> int | None:
    """The device index a row records: the shard's, else CUDA device 0 (a worker's default), none on cpu."""
    if config.device_index is not None:
        return config.device_index
    return 0 if config.device == "cuda" else None



# Units whose workers a lane starts (and warms) ahead of the one it judges. Seen on H200 with one ahead: judges
# waited 90 s in all (`warm_wait`, over a third of the catalogue's 103 problems) for workers whose start, CUDA
# context and first profiler start take ~12 s, longer than a small operator's checks.
LANE_AHEAD = 2



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
            spares[key] = _warm_ahead(operator_judge.start_worker(config, workdir / f"{op}.log", wait=False, file=file),
                                      config)
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
            worker.request(encode_command(Warm(device=config.device, markers_cache=str(config.markers_cache)
                                               if config.markers_cache else None)), config.start_timeout_s)
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



def _free_device_memory(device: str) -> None:
    if device == "cuda":
        import gc

        import torch

        gc.collect()
        torch.cuda.empty_cache()
