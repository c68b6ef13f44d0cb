"""Evaluate a submission against a release: per operator file, a worker process; per problem the stages
compile → correctness → adoption → performance, judged here, outside the candidate's process.

On `cpu` each operator is run on its registry smoke shapes through Triton's interpreter (once per operator;
the verdict stands for each of its problems) and performance is not measured. On `cuda` every problem runs
on its own shape.
"""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
import threading
import secrets
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

from kernels_eval import physics
from kernels_eval.harness import limits, sanitize
from kernels_eval.harness.config import EvalConfig, Problem
from kernels_eval.harness.operator_judge import CONTEXT_LOST, OperatorJudge  # noqa: F401 - the runner's names
from kernels_eval.harness.release_view import ReleaseView, read_release_view
from kernels_eval.harness.schedule import _row_device, _run_lanes, _run_phase, _time_checked
from kernels_eval.harness.shard import _too_large_for_lanes
from kernels_eval.harness.submission import file_sha256, operator_files
from kernels_eval.harness.verdict import Verdict, as_verdict

__all__ = ["CONTEXT_LOST", "EvalConfig", "OperatorJudge", "Problem", "detect_hardware", "evaluate", "file_sha256",
           "new_run_id", "release_identity", "result_row"]
log = logging.getLogger("hotshape.eval")



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
    # the detected hardware names the run's autotuning choices too (autotune_protocol.ChoiceStore)
    config = replace(config, hardware=hardware,
                     memory_accounting=limits.memory_accounting(require_cgroup=config.memory_cgroup))
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



def _compile_markers(path: Path) -> Path | None:
    """The evaluator's markers compiled into `path` (the seed each worker copies before its candidate is
    imported), or None where that fails (each worker then compiles them itself)."""
    try:
        from kernels_eval.harness.markers import compile_into  # triton's: the parent imports triton only here

        compile_into(path)
        return path
    except Exception:  # noqa: BLE001 - a slower start, nothing else
        return None



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



def result_row(base: dict, p: Problem, v: Verdict | dict, sha: str | None, t_roof: float | None,
               device: str) -> dict:
    """One results row (results_schema.RESULTS) of a problem's verdict (the scoreboard rebuilds rows of a run
    cut short from its streamed verdicts with it: `v` may be a verdict's plain data)."""
    v = as_verdict(v)
    refused = physics.refusal(v.t_measured_s, t_roof)
    if refused:  # never a time under the roofline in a row: the numbers go into the refusal's text
        v = replace(v, stage="performance", error=refused, t_measured_s=None, t_p10_s=None, t_p90_s=None,
                    t_repeats_s=[],
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



def _scratch_dir() -> str | None:
    shm = Path("/dev/shm")
    return str(shm) if shm.is_dir() and shutil.disk_usage(shm).free > (1 << 30) else None
