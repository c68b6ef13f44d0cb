"""`hotshape optimize`: the measure-revise loop. A proposer writes a candidate; the real evaluator judges it in
its sandbox on the operator's problems; the feedback goes back to the proposer. A candidate is accepted only
when every problem is correct and native and its weighted time beats the accepted file's. After K candidates
without improvement the proposer's context is restarted (optimization dropout): its iteration memory goes,
the accepted file and the audit trail stay.

This module needs only what the GPU machine has (torch, triton, numpy, pyarrow, pyyaml): no polars, DuckDB or
msgspec (records.py stands in for msgspec there)."""

from __future__ import annotations

import hashlib
import json
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from kernels_eval.agent import ncu
from kernels_eval.agent.audit import AuditTrail
from kernels_eval.agent.feedback import ProblemFeedback, evaluate_with_verdicts, problem_feedback, public_weights
from kernels_eval.agent.records import Struct, as_builtins
from kernels_eval.harness.release_view import read_release_view
from kernels_eval.harness.submission import jit_function_names

CPU_REASON = ("performance is not measured on CPU (Triton interpreter on smoke shapes): nothing can be "
              "accepted there; the loop ran and recorded every candidate")
DUPLICATE_TRIES = 20  # proposals of an already judged file asked again before the proposer counts as spent


class Candidate(Struct, kw_only=True):
    """One proposed file: its source, what changed, and the tokens it cost (LLM proposers)."""

    source: str
    note: str
    tokens_prompt: int | None = None
    tokens_completion: int | None = None
    tokens_total: int | None = None


@dataclass
class LoopState:
    """What a proposer may read: the operator, the accepted file and its feedback, and this context's
    iterations (candidate, feedback, accepted) since the last dropout."""

    operator: str
    accepted_source: str
    accepted_time_s: float | None
    accepted_feedback: list[ProblemFeedback]
    history: list[dict] = field(default_factory=list)  # {"candidate", "feedback", "accepted", "reason"}
    tried: set[str] = field(default_factory=set)  # sha256 of every file judged in this run


@dataclass
class Judgement:
    """The evaluator's verdicts on one file, folded for the loop."""

    rows: list[dict]
    feedback: list[ProblemFeedback]
    weighted_time_s: float | None
    s_op: float | None
    eval_s: float

    @property
    def all_good(self) -> bool:
        return bool(self.rows) and all(r["correct"] and r["native"] and r["stage"] == "done" for r in self.rows)


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def weighted_time(rows: list[dict], weights: dict[str, float]) -> float | None:
    """Σ w_i t_i / Σ w_i over the rows (the operator's problems), or None unless every problem was timed."""
    if not rows or any(r.get("t_measured_s") is None for r in rows):
        return None
    w = [weights.get(r["problem_id"], 0.0) or 0.0 for r in rows]
    if sum(w) <= 0:
        w = [1.0] * len(rows)
    return sum(wi * r["t_measured_s"] for wi, r in zip(w, rows)) / sum(w)


def s_op(rows: list[dict]) -> float | None:
    """Median over the problems of min(1, roofline fraction), 0 where not done (the scoring's S_op)."""
    if not rows or all(r.get("roofline_fraction") is None for r in rows):
        return None
    return statistics.median(min(1.0, r["roofline_fraction"] or 0.0) if r["stage"] == "done" and r["native"]
                             and r["correct"] else 0.0 for r in rows)


def judge(source: str, operator: str, release, config, weights: dict[str, float], scratch: Path,
          problems: list[str] | None = None) -> Judgement:
    """The evaluator's verdicts on `source` as the operator's file, in a fresh submission directory."""
    sub = Path(tempfile.mkdtemp(prefix="candidate-", dir=scratch))
    path = sub / f"{operator}.py"
    path.write_text(source)
    began = time.monotonic()
    rows, verdicts = evaluate_with_verdicts(sub, release, config, ops=[operator], problems=problems)
    took = time.monotonic() - began
    try:
        declared = jit_function_names(path)
    except SyntaxError:
        declared = []
    feedback = [problem_feedback(r, verdicts.get(r["problem_id"]), weight=weights.get(r["problem_id"]),
                                 declared=declared) for r in rows]
    return Judgement(rows=rows, feedback=feedback, weighted_time_s=weighted_time(rows, weights), s_op=s_op(rows),
                     eval_s=took)


def decide(j: Judgement, best_time_s: float | None, device: str, min_gain: float,
           best_s_op: float | None = None) -> tuple[bool, str]:
    """(accepted, reason) for a judged candidate against the accepted file: its weighted time (what the fleet
    pays) or its S_op (the median problem's roofline fraction, what the score counts) better by more than
    `min_gain`, the other no worse by more than `min_gain`. Either alone can mislead: a step that speeds up
    the few problems holding the weight leaves the median where it was, and one that speeds up the median
    problem may slow the weighted ones."""
    if not j.rows:
        return False, "no problems were judged"
    bad = [r for r in j.rows if not (r["correct"] and r["native"] and r["stage"] == "done")]
    if bad:
        r = bad[0]
        return False, (f"{len(bad)}/{len(j.rows)} problems not done, correct and native; first: {r['stage']}: "
                       f"{(r['error'] or '')[:200]}")
    if device != "cuda":
        return False, CPU_REASON
    if j.weighted_time_s is None:
        return False, "not every problem was timed"
    if best_time_s is None:
        return True, "the first timed, correct and native file"
    gain = 1.0 - j.weighted_time_s / best_time_s
    s_gain = (j.s_op / best_s_op - 1.0) if (j.s_op is not None and best_s_op) else None
    said = (f"weighted time {j.weighted_time_s * 1e6:.2f} us against the accepted {best_time_s * 1e6:.2f} us "
            f"({gain:+.1%})" + ("" if s_gain is None else f", S_op {j.s_op:.4f} against {best_s_op:.4f} "
                                                           f"({s_gain:+.1%})"))
    if s_gain is None:
        if gain > min_gain:
            return True, f"{said}: faster by more than {min_gain:.1%}"
        return False, f"{said}: needs more than {min_gain:.1%}"
    if (gain > min_gain and s_gain >= -min_gain) or (s_gain > min_gain and gain >= -min_gain):
        return True, f"{said}: one better by more than {min_gain:.1%}, the other no worse than -{min_gain:.1%}"
    return False, f"{said}: needs one better by more than {min_gain:.1%} and the other no worse than -{min_gain:.1%}"


def _iteration_row(i: int, context: int, proposer: str, cand: Candidate, j: Judgement | None, accepted: bool,
                   reason: str, best: float | None) -> dict:
    rows = j.rows if j else []
    return {"iteration": i, "context": context, "proposer": proposer, "note": cand.note,
            "file_sha256": sha256_text(cand.source), "source": cand.source, "evaluated": j is not None,
            "accepted": accepted, "reason": reason, "problems": len(rows),
            "correct": sum(bool(r["correct"]) for r in rows), "native": sum(bool(r["native"]) for r in rows),
            "timed": sum(r.get("t_measured_s") is not None for r in rows),
            "weighted_time_s": j.weighted_time_s if j else None, "best_weighted_time_s": best,
            "s_op": j.s_op if j else None, "tokens_prompt": cand.tokens_prompt,
            "tokens_completion": cand.tokens_completion, "tokens_total": cand.tokens_total,
            "eval_s": j.eval_s if j else None, "dropout": False,
            "feedback_json": json.dumps([as_builtins(f) for f in j.feedback], default=str) if j else None}


def _problem_rows(i: int, j: Judgement, weights: dict[str, float]) -> list[dict]:
    return [{"iteration": i, "problem_id": r["problem_id"], "weight": weights.get(r["problem_id"]),
             "stage": r["stage"], "compiled": r["compiled"], "correct": r["correct"], "native": r["native"],
             "fallbacks": list(r.get("fallbacks") or []), "error": r.get("error"), "max_abs_err": r.get("max_abs_err"),
             "t_measured_s": r.get("t_measured_s"), "t_event_s": r.get("t_event_s"),
             "roofline_fraction": r.get("roofline_fraction")} for r in j.rows]


def _profile(j: Judgement, operator: str, file: Path, release, say) -> None:
    """Attach Nsight Compute's per-kernel profile of `file` on the heaviest problem to that problem's feedback."""
    heaviest = max(j.feedback, key=lambda f: f.weight or 0.0, default=None)
    if heaviest is None:
        return
    p = next(p for p in release.problems if p["problem_id"] == heaviest.problem_id)
    try:
        heaviest.profile = ncu.profile_problem(file, operator, json.loads(p["init_kwargs"]),
                                               json.loads(p["input_kwargs"]))
    except ncu.NcuUnavailable as exc:
        heaviest.note = f"--ncu: {exc}"
        say(f"ncu: {exc}")


def optimize(operator: str, release, start: str | Path, proposer, config, out: str | Path, *, budget: int,
             dropout_after: int = 3, min_gain: float = 0.01, problems: list[str] | None = None,
             log=None, stop_at: float | None = None, stop_margin_evals: float = 1.0, ncu: bool = False) -> dict:
    """Run the loop for `budget` candidates after the starting file; the accepted file is written to
    out/<operator>.py, the audit trail to out/*.parquet, and a summary (returned) to out/summary.json.
    `stop_at` (time.monotonic()) ends the loop early when another `stop_margin_evals` evaluations of the last
    one's length would pass it. `ncu` profiles each accepted file on its heaviest problem (GPU) so that its
    feedback carries each kernel's bound."""
    if not hasattr(release, "problems"):
        release = read_release_view(release)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    trail = AuditTrail(out)
    weights = public_weights(release.path)
    say = log or (lambda text: None)
    scratch = Path(tempfile.mkdtemp(prefix="hotshape-optimize-"))
    source = Path(start).read_text()
    base = Candidate(source=source, note=f"the starting file {Path(start).name}")
    j = judge(source, operator, release, config, weights, scratch, problems)
    ok, reason = decide(j, None, config.device, min_gain)
    if ok and ncu:
        _profile(j, operator, start, release, say)
    if not j.all_good:
        reason = f"the starting file itself fails: {reason}"
    best_time = j.weighted_time_s if ok else None
    best_s_op = j.s_op if ok else None
    state = LoopState(operator=operator, accepted_source=source, accepted_time_s=best_time,
                      accepted_feedback=j.feedback, tried={sha256_text(source)})
    trail.add(_iteration_row(0, 0, "start", base, j, ok, reason, best_time), _problem_rows(0, j, weights))
    say(f"iteration 0 (start): {reason}")
    context, stale, accepted_steps, dropouts = 0, 0, [], 0
    for i in range(1, budget + 1):
        if stop_at is not None and time.monotonic() + stop_margin_evals * j.eval_s > stop_at:
            say(f"iteration {i}: out of time (the last evaluation took {j.eval_s:.0f} s); stopping")
            break
        cand = None
        for _ in range(DUPLICATE_TRIES):
            cand = proposer.propose(state)
            if cand is None or sha256_text(cand.source) not in state.tried:
                break
            cand = None
        if cand is None:
            say(f"iteration {i}: the proposer has nothing new to try; stopping")
            break
        state.tried.add(sha256_text(cand.source))
        j = judge(cand.source, operator, release, config, weights, scratch, problems)
        ok, reason = decide(j, best_time, config.device, min_gain, best_s_op)
        if ok:
            best_time, best_s_op, stale = j.weighted_time_s, j.s_op, 0
            state.accepted_source, state.accepted_time_s, state.accepted_feedback = cand.source, best_time, j.feedback
            accepted_steps.append(i)
            if ncu:
                path = scratch / f"accepted-{i}.py"
                path.write_text(cand.source)
                _profile(j, operator, path, release, say)
        else:
            stale += 1
        state.history.append({"candidate": cand, "feedback": j.feedback, "accepted": ok, "reason": reason})
        row = _iteration_row(i, context, proposer.name, cand, j, ok, reason, best_time)
        if stale >= dropout_after:
            row["dropout"] = True
            proposer.restart()
            state.history = []
            context, stale, dropouts = context + 1, 0, dropouts + 1
        trail.add(row, _problem_rows(i, j, weights))
        say(f"iteration {i} ({cand.note}): {'ACCEPTED ' if ok else ''}{reason}"
            + (" — dropout: proposer context restarted" if row["dropout"] else ""))
    (out / f"{operator}.py").write_text(state.accepted_source)
    first = trail.iterations[0]
    summary = {"operator": operator, "device": config.device, "proposer": proposer.name,
               "iterations": len(trail.iterations) - 1, "accepted": accepted_steps, "dropouts": dropouts,
               "start_weighted_time_s": first["weighted_time_s"], "best_weighted_time_s": best_time,
               "start_s_op": first["s_op"],
               "best_s_op": next((r["s_op"] for r in reversed(trail.iterations) if r["accepted"]), first["s_op"]),
               "tokens_total": sum(r["tokens_total"] or 0 for r in trail.iterations),
               "accepted_file": str(out / f"{operator}.py"),
               "note": CPU_REASON if config.device != "cuda" else None}
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    import shutil

    shutil.rmtree(scratch, ignore_errors=True)
    return summary
