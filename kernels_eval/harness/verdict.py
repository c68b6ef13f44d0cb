"""The evaluator's verdict on one problem: a typed record from the judge to the results row, the progress
callbacks (`evaluate(progress=)`) and the agent's feedback. A plain dataclass with slots: the evaluator runs on
GPU machines with torch's own stack, and a misspelt field is an AttributeError, not a silent new key."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

from catalogue.vocabulary import STAGES


@dataclass(slots=True, kw_only=True)
class Verdict:
    stage: str = "compile"  # the last stage reached (catalogue.vocabulary.STAGES); "done" when it passed them all
    compiled: bool = False
    correct: bool = False
    native: bool = False
    native_fraction: float | None = None  # the submission's own kernels' share of the judged GPU time
    fallbacks: list[str] = field(default_factory=list)  # library, aten or Inductor kernels and host escapes seen
    error: str | None = None
    max_abs_err: float | None = None
    t_measured_s: float | None = None  # median time of the timed calls by the operator's rule (TIMING_RULES)
    t_p10_s: float | None = None
    t_p90_s: float | None = None
    n_timed: int | None = None
    t_reference_s: float | None = None  # the PyTorch reference, timed alike (EvalConfig.time_reference)
    t_event_s: float | None = None  # median CUDA-event time of the same timed calls
    timing_rule: str | None = None  # the rule t_measured_s was measured by (catalogue.vocabulary.TIMING_RULES)
    t_repeats_s: list[float] = field(default_factory=list)  # each full timing's median (eval --repeat N > 1)
    autotune_config: str | None = None  # the autotuning protocol's choice (autotune_protocol.row_text)
    sm_clock_mhz: int | None = None
    timed_samples: int | None = None  # outputs of timed calls judged
    samples_skipped: str | None = None
    kernel_us: dict[str, float] = field(default_factory=dict)  # GPU µs by kernel name over the timed window
    eval_s: float | None = None  # seconds the evaluator spent on the problem
    step_s: dict[str, float] = field(default_factory=dict)  # of which, by evaluator step (diagnostics)
    # a checked verdict whose performance stage is deferred to a lanes run's timing phase: its shape and the
    # checked calls' launches (never in a row or a progress record)
    pending: dict | None = None

    def __post_init__(self) -> None:
        _check_stage(self.stage)

    def update(self, **values: Any) -> Verdict:
        """Set several fields at once (an unknown name raises AttributeError); returns the verdict."""
        for name, value in values.items():
            setattr(self, name, value)
        return self

    def fail(self, stage: str, error: str) -> Verdict:
        """Stop at `stage` with `error`."""
        self.stage, self.error = _check_stage(stage), error
        return self

    def as_dict(self) -> dict:
        """The verdict as plain data (JSON-able), without the deferred timing's internals."""
        out = asdict(self)
        del out["pending"]
        return out


def _check_stage(stage: str) -> str:
    if stage not in STAGES:
        raise ValueError(f"verdict stage {stage!r} is not one of {', '.join(STAGES)}")
    return stage


FIELDS = frozenset(f.name for f in fields(Verdict))


def as_verdict(v: Verdict | dict) -> Verdict:
    """`v` as a Verdict: a mapping's keys must be Verdict fields (a judge that returns plain data, or a record
    read back from a progress file)."""
    if isinstance(v, Verdict):
        return v
    unknown = sorted(set(v) - FIELDS)
    if unknown:
        raise ValueError(f"not verdict fields: {', '.join(unknown)}")
    return Verdict(**v)
