"""Serving phases of unannotated steps from the kernels each step runs (ingest/step_kernels.yaml).

Without a step annotation or attention shapes, a step still says what it is by its kernels: a prefix-prefill
or batch-prefill attention kernel runs only when the step has prompt tokens, a paged-decode kernel only for
decode tokens, FlashAttention's split-KV combine only when every sequence has one query token. Steps are cut
per device after each sampling run (argmax / sampler kernels: the step's last work). A step without such
evidence stays `unknown`. Where the trace records launch grids, a kernel whose grid rows are the batch's
sequences counts them: a prefill kernel in a one-sequence step means no decode token beside the prompt."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from statistics import median

from catalogue.registry import operators_with

DEFAULT_PATH = Path(__file__).with_name("step_kernels.yaml")
SAMPLING = operators_with("sampling")  # the operators of a step's sampling rows
ATTENTION = operators_with("attention")  # the work models declare it (catalogue/operators/<op>/__init__.py TRAITS)
# Beside a prefill kernel, a decode kernel whose mean launch is under this share of its mean launch on the
# trace's decode-only steps ran idle (vLLM launches it every step): the step is prefill, else mixed.
IDLE_DECODE_SHARE = 0.25


@dataclass(frozen=True)
class StepKernels:
    """The kernel-name patterns of step_kernels.yaml."""

    prefill: re.Pattern
    decode: re.Pattern
    decode_pass: re.Pattern
    sequences: re.Pattern


@lru_cache(maxsize=4)
def load_step_kernels(path: str | None = None) -> StepKernels:
    """The patterns at `path` (default: the shipped step_kernels.yaml), validated."""
    import yaml

    where = Path(path) if path else DEFAULT_PATH
    doc = yaml.safe_load(where.read_text())
    if not isinstance(doc, dict) or set(doc) != {"prefill", "decode", "decode_pass", "sequences"}:
        raise ValueError(f"{where}: must map exactly prefill, decode, decode_pass and sequences to patterns")
    try:
        return StepKernels(**{k: re.compile(v) for k, v in doc.items()})
    except (TypeError, re.error) as exc:
        raise ValueError(f"{where}: a pattern is not a valid regex ({exc})") from None


def cut_steps(devices: list, ts: list[int], operators: list[str]) -> list[int]:
    """Each row's step: per device in time order, a new step begins after each run of sampling rows.
    Steps are numbered across devices (one device's steps never share a number with another's)."""
    order = sorted(range(len(ts)), key=lambda i: (devices[i] is None, devices[i] or 0, ts[i], i))
    step_of = [0] * len(ts)
    step, device, sampled = -1, object(), False
    for i in order:
        if devices[i] != device:
            step, device, sampled = step + 1, devices[i], False
        elif sampled and operators[i] not in SAMPLING:
            step += 1
            sampled = False
        sampled = sampled or operators[i] in SAMPLING
        step_of[i] = step
    return step_of


def step_phases(step_of: list[int], kernels: list[str], dur: list[int], operators: list[str],
                patterns: StepKernels | None = None, grid_x: list | None = None) -> dict[int, tuple[str, str]]:
    """The phase and rule each step's kernels decide, for the steps they decide; `grid_x` is each row's launch
    grid x (None where the trace gives no grid)."""
    patterns = patterns or load_step_kernels()
    seen = _evidence(step_of, kernels, dur, operators, patterns, grid_x)
    decode_only = [e["decode_ns"] / e["decode_n"] for e in seen.values() if e["decode_n"] and not e["prefill"]]
    reference = median(decode_only) if decode_only else None
    with_pass = any(e["pass"] for e in seen.values())
    out: dict[int, tuple[str, str]] = {}
    for s, e in seen.items():
        if e["prefill"] and e["sequences"] == {1}:
            out[s] = ("prefill", "kernels:prefill_one_sequence")  # the one sequence is the prompt
        elif e["prefill"] and e["decode_n"]:
            if reference is not None and e["decode_ns"] / e["decode_n"] < IDLE_DECODE_SHARE * reference:
                out[s] = ("prefill", "kernels:prefill_idle_decode")
            elif reference is not None:
                out[s] = ("mixed", "kernels:prefill_and_decode")
        elif e["prefill"]:
            out[s] = ("prefill", "kernels:prefill")
        elif e["decode_n"] or e["pass"]:
            out[s] = ("decode", "kernels:decode")
        elif with_pass and e["attention"]:
            # the trace's decode steps run their attention with a split-KV combine; this one without
            out[s] = ("prefill", "kernels:no_decode_pass")
    return out


def _says(patterns: StepKernels, name: str) -> tuple[bool, bool, bool, bool]:
    """What a kernel name says: (prefill, decode, decode pass, counts sequences)."""
    return (bool(patterns.prefill.search(name)), bool(patterns.decode.search(name)),
            bool(patterns.decode_pass.search(name)), bool(patterns.sequences.search(name)))


def _evidence(step_of: list[int], kernels: list[str], dur: list[int], operators: list[str], patterns: StepKernels,
              grid_x: list | None) -> dict[int, dict]:
    """Per step: whether a prefill kernel, a decode pass or attention ran, the decode kernels' ns and count, and
    the sequence counts the grids give (benchmarks/phase_steps.py: a few tenths of a second on 156k rows)."""
    seen: dict[int, dict] = {}
    said: dict[str, tuple] = {}  # kernel name -> what it says: names repeat
    for i, s in enumerate(step_of):
        e = seen.setdefault(s, {"prefill": False, "decode_ns": 0, "decode_n": 0, "pass": False, "attention": False,
                                "sequences": set()})
        name = kernels[i] or ""
        says = said.get(name)
        if says is None:
            says = said[name] = _says(patterns, name)
        if says[3] and grid_x is not None and grid_x[i] is not None:
            e["sequences"].add(grid_x[i])
        e["attention"] = e["attention"] or operators[i] in ATTENTION
        e["prefill"] = e["prefill"] or says[0]
        if says[1]:
            e["decode_ns"] += dur[i]
            e["decode_n"] += 1
        e["pass"] = e["pass"] or says[2]
    return seen
