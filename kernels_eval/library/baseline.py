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

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from catalogue.registry import spec as operator_spec
from kernels_eval import registry
from kernels_eval.harness.compare import compare_outputs, named_outputs
from kernels_eval.harness.config import Problem
from kernels_eval.harness.release_view import read_release_view
from kernels_eval.harness.runner import _t_roofline, detect_hardware, new_run_id, release_identity, result_row
from kernels_eval.harness.timing import quantiles
from kernels_eval.harness.verdict import Verdict
from kernels_eval.library.paths import NO_LIBRARY, library_options
from kernels_eval.results_key import host_key, sign_row
from kernels_eval.results_schema import next_run
from kernels_eval.results_store import check_out, merge_rows

LIBRARY = "library"  # the submission name of baseline rows
NO_PATH = "none"  # `baseline` of a row whose operator has no library path
MARK = "LIBRARY_VERDICT "
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
        times, kernel_us = time_library(runs, budget_s=budget_s, max_calls=max_calls)
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
        except Exception as exc:  # noqa: BLE001 - recorded; a dead CUDA context ends the child, the parent says so
            verdict, path = Verdict(error=f"evaluator error: {type(exc).__name__}: {exc}"[:2000]), NO_PATH
        yield p, verdict, path


# ---- the parent: rows, signatures, the results file -------------------------------------------------------------

def baseline_row(base: dict, p: Problem, verdict: Verdict, path: str, t_roof: float | None, device: str) -> dict:
    """One results row of a baseline verdict (the evaluator's result_row, with `baseline` naming the path)."""
    row = result_row(base, p, verdict, base["file_sha256"], t_roof, device)
    row["baseline"] = path
    return row


def run_baseline(out: str | Path, release_path: str | Path, device: str, *, ops: list[str] | None = None,
                 problem_ids: list[str] | None = None, sets: int = 1, budget_s: float = 0.15, max_calls: int = 200,
                 isolate: bool | None = None, child_timeout_s: float = 300.0, progress=None) -> list[dict]:
    """The baseline rows of a release's problems (those of `ops` / `problem_ids` when given), signed with the host
    key and merged into results file `out` after each operator, as one sealed run of submission LIBRARY."""
    release = read_release_view(release_path)
    out = Path(out)
    check_out(out)
    key = host_key()
    hardware = detect_hardware(device, release.hardware_names)
    roof = release.roofline(hardware)
    chosen = [Problem(r) for r in sorted(release.problems, key=lambda r: (r["operator"], r["problem_id"]))
              if (ops is None or r["operator"] in ops) and (problem_ids is None or r["problem_id"] in problem_ids)]
    by_op: dict[str, list[Problem]] = {}
    for p in chosen:
        by_op.setdefault(p.operator, []).append(p)
    base = {"submission": LIBRARY, "release": release.name, "run_id": new_run_id(),
            "run": next_run(out, LIBRARY, hardware), "hardware": hardware, "device": device,
            "evaluated_at": datetime.now(timezone.utc).isoformat(timespec="seconds"), **release_identity(release),
            "sandboxed": False, "memory_accounting": None, "file_sha256": library_sha256(), "run_sealed": True}
    isolate = device == "cuda" if isolate is None else isolate
    rows: list[dict] = []
    for operator, problems in by_op.items():
        if isolate:
            found = _child_verdicts(operator, problems, release_path, device, sets, budget_s, max_calls,
                                    child_timeout_s)
        else:
            found = operator_verdicts(operator, problems, device, sets=sets, budget_s=budget_s, max_calls=max_calls)
        kept = []
        for p, verdict, path in found:
            row = sign_row(baseline_row(base, p, verdict, path, _t_roofline(roof, p, hardware), device), key)
            kept.append(row)
            if progress is not None:
                progress(row)
        merge_rows(kept, out, key=key)
        rows += kept
    return rows


def _child_verdicts(operator: str, problems: list[Problem], release_path, device: str, sets: int, budget_s: float,
                    max_calls: int, timeout_s: float):
    """The verdicts of one operator from a child process; a problem it never reported (it crashed or ran out of
    time) gets an evaluator-error verdict naming why."""
    cmd = [sys.executable, "-m", "kernels_eval.library.baseline", "--child", operator, "--release", str(release_path),
           "--device", device, "--sets", str(sets), "--budget-s", str(budget_s), "--max-calls", str(max_calls),
           "--problems", ",".join(p.problem_id for p in problems)]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
        stdout, tail = done.stdout, f"exit {done.returncode}: " + " | ".join(done.stderr.strip().splitlines()[-2:])
    except subprocess.TimeoutExpired as exc:
        stdout = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        tail = f"its child process ran past {timeout_s:.0f} s"
    got = {}
    for line in stdout.splitlines():
        if line.startswith(MARK):
            record = json.loads(line[len(MARK):])
            got[record["problem_id"]] = (Verdict(**record["verdict"]), record["path"])
    for p in problems:
        verdict, path = got.get(p.problem_id) or (Verdict(error=f"evaluator error, not judged: {tail}"[:2000]),
                                                  NO_PATH)
        yield p, verdict, path


def _child(args) -> int:
    wanted = set(args.problems.split(","))
    problems = [Problem(r) for r in read_release_view(args.release).problems if r["problem_id"] in wanted]
    for p, verdict, path in operator_verdicts(args.child, problems, args.device, sets=args.sets,
                                              budget_s=args.budget_s, max_calls=args.max_calls):
        print(MARK + json.dumps({"problem_id": p.problem_id, "verdict": verdict.as_dict(), "path": path}),
              flush=True)
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="one operator's library verdicts (the baseline's child process)")
    parser.add_argument("--child", required=True)
    parser.add_argument("--release", required=True)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--problems", required=True)
    parser.add_argument("--sets", type=int, default=1)
    parser.add_argument("--budget-s", type=float, default=0.15)
    parser.add_argument("--max-calls", type=int, default=200)
    return _child(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
