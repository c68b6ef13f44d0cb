"""Which of a release's problems `--ops/--problems` select (eval, feedback, workspace, export-flashinfer, optimize)
and which operator `check --op` names; a name that is not there is an error with the nearest names there are
(the one did-you-mean of every command that takes operator names)."""

from __future__ import annotations

import difflib


class SelectionError(ValueError):
    """An --ops or --problems value the release does not have; the message says which and suggests names."""


def did_you_mean(name: str, known) -> str:
    """' (did you mean X, Y?)' with the known names closest to `name`, or '' when none is close."""
    close = difflib.get_close_matches(name, sorted(set(known)), n=3, cutoff=0.6)
    return f" (did you mean {', '.join(close)}?)" if close else ""


def unknown_names(asked: list[str] | None, known, what: str, where: str) -> list[str]:
    """One message per name of `asked` that is not in `known`."""
    known = set(known)
    return [f"{where} has no {what} {name!r}{did_you_mean(name, known)}" for name in asked or () if name not in known]


def known_operator(name: str, known, where: str) -> str:
    """`name` when `known` has it, else a SelectionError naming it and the nearest known names."""
    errors = unknown_names([name], known, "operator", where)
    if errors:
        raise SelectionError(errors[0])
    return name


def select_problems(problems: list[dict], release_name: str, ops: list[str] | None = None,
                    problem_ids: list[str] | None = None) -> list[dict]:
    """The manifest rows of `problems` that --ops and --problems select; a SelectionError for a name the release
    does not have, or a combination that selects nothing."""
    errors = (unknown_names(ops, (r["operator"] for r in problems), "operator", f"release {release_name}")
              + unknown_names(problem_ids, (r["problem_id"] for r in problems), "problem", f"release {release_name}"))
    if errors:
        raise SelectionError("; ".join(errors))
    chosen = [r for r in problems if (ops is None or r["operator"] in ops)
              and (problem_ids is None or r["problem_id"] in problem_ids)]
    if not chosen:
        raise SelectionError(f"release {release_name}: no problem of operators {','.join(ops or [])} has the ids "
                             f"{','.join(problem_ids or [])}" if ops and problem_ids
                             else f"release {release_name} has no problems")
    return chosen
