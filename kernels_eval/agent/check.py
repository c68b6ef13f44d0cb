"""`hotshape check`: one file through the real evaluator on its operator's smoke shapes, no release needed —
the self-check a workspace's README points to."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

from catalogue import registry
from kernels_eval.harness.release_view import ReleaseView
from kernels_eval.harness.runner import EvalConfig, evaluate


def smoke_release(operator: str, device: str, where: Path):
    """A release view whose problems are the operator's registry smoke shapes (on CPU one problem stands for
    them all, as the evaluator runs every smoke shape for it; on GPU one problem per shape)."""
    smoke = registry.spec(operator).smoke
    shapes = smoke[:1] if device == "cpu" else smoke
    problems = [{"problem_id": f"smoke-{i}", "operator": operator,
                 "init_kwargs": json.dumps(dict(s.init), sort_keys=True),
                 "input_kwargs": json.dumps(dict(s.inputs), sort_keys=True), "dtypes": "{}"}
                for i, s in enumerate(shapes)]
    return ReleaseView(path=where, name=f"smoke-{operator}", problems=problems, roofline_rows=[])


def check_file(file: str | Path, operator: str, device: str = "cpu", sandbox: bool = True,
               call_timeout_s: float = 120.0) -> list[dict]:
    """The evaluator's verdict on each smoke problem of `operator` for candidate `file` (a verdict dict with
    the problem id added), evaluated as `hotshape eval` would: in a sandboxed worker, fresh inputs per set."""
    if not registry.is_benchmarkable(operator):
        raise KeyError(f"unknown operator {operator!r}")
    file = Path(file)
    if not file.is_file():
        raise FileNotFoundError(f"{file}: no such file")
    scratch = Path(tempfile.mkdtemp(prefix="hotshape-check-"))
    try:
        sub = scratch / "submission"
        sub.mkdir()
        shutil.copy(file, sub / f"{operator}.py")
        verdicts: list[dict] = []
        config = EvalConfig(device=device, sandbox=sandbox, call_timeout_s=call_timeout_s,
                            hardware=None if device == "cuda" else "cpu")
        evaluate(sub, smoke_release(operator, device, scratch), config=config,
                 progress=lambda p, v: verdicts.append({"problem_id": p.problem_id, **v.as_dict()}))
        return verdicts
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def passed(verdicts: list[dict]) -> bool:
    """True when every smoke problem compiled, was correct and native, through the last stage."""
    return bool(verdicts) and all(v.get("stage") == "done" and v.get("correct") and v.get("native")
                                  for v in verdicts)
