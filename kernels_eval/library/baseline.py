"""The library baseline of a release: each problem through its operator's library path (kernels_eval/library/paths.py),
judged against the reference on fresh inputs and timed by the trusted replay's rule (kernels_eval/library/timing.py),
stored as signed, sealed results rows of submission LIBRARY with `baseline` naming the path that ran.

A baseline row is never native (no candidate kernel ran) and `score`/`leaderboard` keep it off the ranking
(kernels_eval/library/line.py). On a GPU each operator runs in a child process of its own (an illegal address kills
the CUDA context; only that operator is lost) and its rows are written as soon as it finishes; on a CPU the library
runs each operator's smoke shapes once and the verdict stands for each of its problems, untimed, as `eval` does.
torch, pyarrow and the standard library only (the GPU machine has no polars).
Usage of the child (by the parent only): python -m kernels_eval.library.baseline --child OP --release R ...
"""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

from catalogue.registry import spec as operator_spec
from kernels_eval import registry
from kernels_eval.harness.compare import compare_outputs, named_outputs
from kernels_eval.harness.config import Problem
from kernels_eval.harness.timing import quantiles
from kernels_eval.harness.verdict import Verdict
from kernels_eval.library.paths import NO_LIBRARY, library_options

NO_PATH = "none"  # `baseline` of a row whose operator has no library path
ROTATION_BYTES = 2 << 30  # as the replay: input sets a timing rotates through take at most this much


def library_sha256() -> str:
    """sha256 over the library path modules (what file_sha256 holds for a baseline row)."""
    h = hashlib.sha256()
    here = Path(__file__).resolve().parent
    for name in ("option.py", "attention.py", "paths.py"):
        h.update((here / name).read_bytes())
    return h.hexdigest()


def _seed() -> int:
    return int.from_bytes(os.urandom(7), "little")


def _inputs(reference, input_kwargs: dict, seed: int, device: str) -> dict:
    import torch

    g = torch.Generator(device=device)
    g.manual_seed(seed)
    return reference.make_inputs(**input_kwargs, device=device, generator=g)


def _sync(device: str) -> None:
    if device == "cuda":
        import torch

        torch.cuda.synchronize()


def _check(spec, reference, model, option, inputs: dict, device: str) -> tuple[list[str], float]:
    """(failures, max abs err) of one library option against the reference on `inputs`."""
    import torch

    with torch.no_grad():
        expected = named_outputs(model(**inputs), spec.outputs)
        got = named_outputs(option.outputs(option.run()), spec.outputs)
    _sync(device)
    tie_scores = getattr(reference, "tie_scores", None)
    ties = tie_scores(model, inputs) if tie_scores is not None else None
    return compare_outputs(got, expected, spec.tolerance, spec.order_free_outputs, ties)


def _option(operator: str, model, inputs: dict, device: str, path: str):
    for option in library_options(operator, model, inputs, device):
        if option.path == path:
            return option
    raise RuntimeError(f"the library path {path!r} is not offered for another input set")


def judge(operator: str, init_kwargs: dict, input_kwargs: dict, device: str, *, sets: int = 1,
          time_it: bool = False, budget_s: float = 0.15, max_calls: int = 200) -> tuple[Verdict, str]:
    """(verdict, library path that ran) of one problem: the first library option that runs and matches the
    reference on a fresh input set, checked on `sets` sets in all, then timed when `time_it`."""
    import torch

    began = time.perf_counter()
    v = Verdict()
    if operator in NO_LIBRARY:
        return v.fail("compile", f"no library path: {NO_LIBRARY[operator]}"), NO_PATH
    spec, reference = registry.spec(operator), registry.load_reference(operator)
    model = reference.Model(**init_kwargs).to(device).eval()
    inputs = _inputs(reference, input_kwargs, _seed(), device)
    chosen, first_failure, mismatched = None, None, False
    try:
        options = library_options(operator, model, inputs, device)
        for option in options:
            try:
                failures, err = _check(spec, reference, model, option, inputs, device)
            except Exception as exc:  # noqa: BLE001 - a backend that refuses the shape: the next option
                first_failure = first_failure or f"{option.path}: {type(exc).__name__}: {exc}"
                _recover(device)
                continue
            if not failures:
                chosen, v.max_abs_err = option, err
                break
            if not mismatched:
                first_failure, mismatched = f"{option.path}: {failures[0]}", True
    except Exception as exc:  # noqa: BLE001 - preparing the library's layout failed
        first_failure = first_failure or f"{type(exc).__name__}: {exc}"
    if chosen is None:
        v.update(eval_s=time.perf_counter() - began)
        return v.fail("correctness" if mismatched else "compile",
                      f"no library option ran and matched the reference: {first_failure}"), NO_PATH
    v.compiled = True
    path = chosen.path
    del inputs, options
    for _ in range(sets - 1):
        more = _inputs(reference, input_kwargs, _seed(), device)
        failures, err = _check(spec, reference, model, _option(operator, model, more, device, path), more, device)
        v.max_abs_err = max(v.max_abs_err or 0.0, err)
        if failures:
            v.update(eval_s=time.perf_counter() - began)
            return v.fail("correctness", f"{path}: {failures[0]}"), path
    v.correct = True
    if time_it and device == "cuda":
        from kernels_eval.library.timing import TIMING_RULE, time_library  # its markers load triton: GPU only

        runs = []
        size = 0
        while len(runs) < 2 or (len(runs) < 8 and size * (len(runs) + 1) <= ROTATION_BYTES):
            more = _inputs(reference, input_kwargs, _seed(), device)
            size = sum(t.numel() * t.element_size() for t in more.values() if isinstance(t, torch.Tensor))
            runs.append(_option(operator, model, more, device, path).run)
        try:
            times, kernel_us = time_library(runs, budget_s=budget_s, max_calls=max_calls)
        except Exception as exc:  # noqa: BLE001 - correct but untimed (a refused span, say): the row says why
            v.update(eval_s=time.perf_counter() - began)
            return v.fail("performance", f"{path}: timing failed: {type(exc).__name__}: {exc}"[:2000]), path
        q = quantiles(times)
        v.update(t_measured_s=q["median"], t_p10_s=q["p10"], t_p90_s=q["p90"], n_timed=len(times),
                 timing_rule=TIMING_RULE, kernel_us=kernel_us)
    v.stage = "done"
    v.eval_s = time.perf_counter() - began
    return v, path


def _recover(device: str) -> None:
    """Memory a refused option held given back (a sticky CUDA error raises here: the child dies, the parent says
    so in the operator's rows)."""
    if device == "cuda":
        import torch

        torch.cuda.synchronize()
        torch.cuda.empty_cache()


def operator_verdicts(operator: str, problems: list[Problem], device: str, *, sets: int, budget_s: float,
                      max_calls: int):
    """(problem, verdict, path) of each problem of one operator: on cuda each problem on its own shape, timed; on
    cpu the operator's smoke shapes once (the verdict of the first that fails, else the last), for every problem."""
    if device != "cuda":
        verdict, path = Verdict(stage="done", compiled=True, correct=True), NO_PATH
        for smoke in operator_spec(operator).smoke:
            verdict, path = judge(operator, smoke.init, smoke.inputs, device, sets=sets)
            if verdict.stage != "done":
                break
        for p in problems:
            yield p, verdict, path
        return
    for p in problems:
        try:
            verdict, path = judge(operator, p.init_kwargs, p.input_kwargs, device, sets=sets, time_it=True,
                                  budget_s=budget_s, max_calls=max_calls)
        except Exception as exc:  # noqa: BLE001 - recorded; a dead CUDA context ends the process after this row
            verdict, path = Verdict(error=f"evaluator error: {type(exc).__name__}: {exc}"[:2000]), NO_PATH
            yield p, verdict, path
            if not _context_alive():
                raise ContextLost(f"the CUDA context died on {p.problem_id}") from exc
            continue
        yield p, verdict, path
        import torch

        torch.cuda.empty_cache()  # the next problem's inputs need not share memory with this one's


class ContextLost(RuntimeError):
    """The CUDA context is unusable (an illegal address, say): nothing more can run in this process."""


def _context_alive() -> bool:
    import torch

    try:
        torch.cuda.synchronize()
        torch.empty(1, device="cuda").add_(1)
        torch.cuda.synchronize()
        return True
    except Exception:  # noqa: BLE001 - any failure here means the context is gone
        return False
