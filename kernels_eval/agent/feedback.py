"""`hotshape feedback`: per problem, a structured record for a revising agent — verdict and stage, the first
correctness mismatch, adoption, per-kernel GPU time, and (with Nsight Compute) each kernel's bound. Roofline
figures come from the release's sealed part, so they appear only for a maintainer."""

from __future__ import annotations

import json
import re
from pathlib import Path

from kernels_eval.agent import ncu as ncu_mod
from kernels_eval.agent.ncu import KernelProfile
from kernels_eval.agent.records import Struct, as_builtins, field
from kernels_eval.harness.release_view import read_release_view
from kernels_eval.harness.runner import evaluate
from kernels_eval.harness.submission import jit_function_names, operator_files
from kernels_eval.harness.verdict import Verdict

MISMATCH = re.compile(r"^(?P<where>input set \d+, \{.*?\}): (?P<detail>.*)$", re.DOTALL)
OUTPUT = re.compile(r"output '(?P<name>[^']+)'")


class Mismatch(Struct, kw_only=True):
    """The first failing comparison: where (input set, shape, output) and by how much."""

    where: str
    output: str | None
    detail: str
    max_abs_err: float | None


class Adoption(Struct, kw_only=True):
    """Whose kernels did the work: the file's own @triton.jit functions, and what ran instead of them."""

    native: bool
    native_fraction: float | None
    declared_kernels: list[str] = field(default_factory=list)
    fallbacks: list[str] = field(default_factory=list)


class KernelTime(Struct, kw_only=True):
    """GPU time of one kernel over the evaluator's judged calls (GPU only)."""

    name: str
    time_us: float


class ProblemFeedback(Struct, kw_only=True):
    """What a revising agent learns about its file on one problem."""

    problem_id: str
    operator: str
    weight: float | None
    stage: str
    compiled: bool
    correct: bool
    native: bool
    error: str | None
    mismatch: Mismatch | None
    adoption: Adoption
    t_measured_s: float | None
    t_event_s: float | None
    kernels: list[KernelTime] = field(default_factory=list)
    profile: list[KernelProfile] = field(default_factory=list)
    note: str | None = None
    t_roofline_s: float | None = None  # maintainer only
    roofline_fraction: float | None = None  # maintainer only
    init_kwargs: dict | None = None  # the problem's shape: what its opaque id stands for (public manifest data)
    input_kwargs: dict | None = None


def first_mismatch(stage: str, error: str | None, max_abs_err: float | None) -> Mismatch | None:
    """The first correctness failure of a verdict, split into where it happened and what differed."""
    if stage not in ("correctness", "performance") or not error:
        return None
    m = MISMATCH.match(error)
    where, detail = (m["where"], m["detail"]) if m else ("", error)
    out = OUTPUT.search(detail)
    return Mismatch(where=where, output=out["name"] if out else None, detail=detail, max_abs_err=max_abs_err)


def kernel_times(verdict: Verdict | None) -> list[KernelTime]:
    """GPU µs per timed call by kernel name over the verdict's timed window (`Verdict.kernel_us`), longest
    first; none where nothing was timed (on CPU, or a problem that stopped before performance)."""
    us = verdict.kernel_us if verdict is not None else {}
    return sorted((KernelTime(name=name, time_us=float(t)) for name, t in us.items()), key=lambda k: -k.time_us)


def problem_feedback(row: dict, verdict: Verdict | None, *, weight: float | None = None, declared: list[str] = (),
                     maintainer: bool = False, profile: list[KernelProfile] = ()) -> ProblemFeedback:
    """The record of one problem from the evaluator's results row and verdict."""
    stage = row.get("stage") or (verdict.stage if verdict is not None else "compile")
    max_err = verdict.max_abs_err if verdict is not None else row.get("max_abs_err")
    note = None
    if row.get("device") == "cpu":
        note = "CPU run: smoke shapes through the Triton interpreter; performance not measured"
    return ProblemFeedback(
        problem_id=row["problem_id"], operator=row["operator"], weight=weight, stage=stage,
        compiled=bool(row.get("compiled")), correct=bool(row.get("correct")), native=bool(row.get("native")),
        error=row.get("error"), mismatch=first_mismatch(stage, row.get("error"), max_err),
        adoption=Adoption(native=bool(row.get("native")), native_fraction=row.get("native_fraction"),
                          declared_kernels=list(declared), fallbacks=list(row.get("fallbacks") or [])),
        t_measured_s=row.get("t_measured_s"), t_event_s=row.get("t_event_s") or (verdict.t_event_s if verdict is not None else None),
        kernels=kernel_times(verdict), profile=list(profile), note=note,
        t_roofline_s=row.get("t_roofline_s") if maintainer else None,
        roofline_fraction=row.get("roofline_fraction") if maintainer else None)


def public_weights(release_path: str | Path, version: int | None = None) -> dict[str, float]:
    """problem_id → weight from the release's public weights file (latest version by default); pyarrow only."""
    import pyarrow.parquet as pq

    root = Path(release_path)
    info = json.loads((root / "release.json").read_text())
    versions = sorted(int(v["version"]) for v in info.get("weights", []))
    if not versions:
        return {}
    v = versions[-1] if version is None else int(str(version).lstrip("v"))
    table = pq.read_table(root / f"public/weights/v{v}.parquet", columns=["problem_id", "weight"])
    return dict(zip(table.column("problem_id").to_pylist(), table.column("weight").to_pylist()))


def evaluate_with_verdicts(submission: str | Path, release, config, ops=None, problems=None):
    """(rows, {problem_id: verdict}) of one evaluation of the submission (not recorded in any results file)."""
    verdicts: dict[str, Verdict] = {}
    rows = evaluate(submission, release, config=config, ops=ops, problems=problems,
                    progress=lambda p, v: verdicts.__setitem__(p.problem_id, v))
    return rows, verdicts


def submission_feedback(submission: str | Path, release, config, *, ops=None, problems=None, ncu: bool = False,
                        maintainer: bool = False) -> list[ProblemFeedback]:
    """Feedback records of a submission on a release's problems (one evaluation; `ncu` adds one profiled
    run per problem where Nsight Compute is installed and the device is a GPU)."""
    if not hasattr(release, "problems"):
        release = read_release_view(release)
    files = operator_files(submission)
    weights = public_weights(release.path)
    rows, verdicts = evaluate_with_verdicts(submission, release, config, ops=ops, problems=problems)
    declared = {op: jit_function_names(f) for op, f in files.items()}
    by_id = {p["problem_id"]: p for p in release.problems}
    out = []
    for row in rows:
        profile, note = [], None
        if ncu and config.device != "cuda":
            note = "--ncu: no GPU here, nothing profiled"
        elif ncu and row["compiled"] and files.get(row["operator"]):
            p = by_id[row["problem_id"]]
            try:
                profile = ncu_mod.profile_problem(files[row["operator"]], row["operator"],
                                                  json.loads(p["init_kwargs"]), json.loads(p["input_kwargs"]))
            except ncu_mod.NcuUnavailable as exc:
                note = f"--ncu: {exc}"
        record = problem_feedback(row, verdicts.get(row["problem_id"]), weight=weights.get(row["problem_id"]),
                                  declared=declared.get(row["operator"], []), maintainer=maintainer,
                                  profile=profile)
        if note:
            record.note = f"{record.note}; {note}" if record.note else note
        problem = by_id.get(row["problem_id"]) or {}
        record.init_kwargs = json.loads(problem.get("init_kwargs") or "{}")
        record.input_kwargs = json.loads(problem.get("input_kwargs") or "{}")
        out.append(record)
    return out


def feedback_json(records: list[ProblemFeedback]) -> str:
    """The records as one JSON document (a list), for an agent to read."""
    return json.dumps([as_builtins(r) for r in records], default=str)
