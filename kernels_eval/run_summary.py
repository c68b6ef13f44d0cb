"""What a run's rows say per operator: problems done, failed by stage, and the first failure's reason."""

from __future__ import annotations

from dataclasses import dataclass, field

from catalogue.vocabulary import DONE, STAGES
from kernels_eval.harness.sanitize import terminal


@dataclass
class OperatorSummary:
    """One operator's problems in a run: how many, how many done, failures per stage, the first failure."""

    operator: str
    problems: int = 0
    done: int = 0
    failed: dict[str, int] = field(default_factory=dict)  # stage -> problems that stopped there
    first_failure: dict | None = None  # problem_id, stage, error of the first failed problem (by id)

    @property
    def failed_total(self) -> int:
        return sum(self.failed.values())

    def as_dict(self) -> dict:
        """The summary as JSON-ready values."""
        return {"operator": self.operator, "problems": self.problems, "done": self.done,
                "failed": self.failed_total, "failed_by_stage": dict(self.failed), "first_failure": self.first_failure}


def operator_summaries(rows: list[dict]) -> list[OperatorSummary]:
    """One summary per operator of `rows` (results rows of one run), in operator order."""
    by_op: dict[str, OperatorSummary] = {}
    for r in sorted(rows, key=lambda r: (r["operator"], r["problem_id"])):
        s = by_op.setdefault(r["operator"], OperatorSummary(r["operator"]))
        s.problems += 1
        if r["stage"] == DONE:
            s.done += 1
            continue
        s.failed[r["stage"]] = s.failed.get(r["stage"], 0) + 1
        if s.first_failure is None:
            s.first_failure = {"problem_id": r["problem_id"], "stage": r["stage"], "error": r.get("error")}
    for s in by_op.values():  # stages in pipeline order, so the counts read left to right
        s.failed = {st: s.failed[st] for st in STAGES if st in s.failed}
    return [by_op[op] for op in sorted(by_op)]


def summary_lines(summaries: list[OperatorSummary], reason_chars: int = 160) -> list[str]:
    """One line per operator: done/N, failures by stage, the first failure's problem and reason."""
    name = max([len(s.operator) for s in summaries] + [8])
    lines = []
    for s in summaries:
        fails = ", ".join(f"{n} at {st}" for st, n in s.failed.items())
        line = f"{terminal(s.operator, 80):<{name}}  {s.done:>4}/{s.problems:<4} done"
        if fails:
            f = s.first_failure
            reason = terminal(f["error"] or "no reason recorded", reason_chars)  # candidate text, made inert
            line += f"  failed: {fails}; first {terminal(f['problem_id'], 80)} ({f['stage']}): {reason}"
        lines.append(line)
    return lines


def passed(rows: list[dict]) -> int:
    """How many rows went through every stage."""
    return sum(r["stage"] == DONE for r in rows)
