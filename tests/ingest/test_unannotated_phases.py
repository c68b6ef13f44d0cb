"""Phases without annotations (issue 19 item 5): each example trace that has both phases, its
step annotations renamed `execute_model` (what HF-style generation traces carry), numbered
`ProfilerStep#N` (torch.profiler's schedule) or removed
(tests/fixtures/strip_annotations.py), splits its GPU time into prefill/decode within 3 points of
what the annotated trace says."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from ingest.pipeline import ingest_trace
from tests.fixtures.cut_trace import load, save
from tests.fixtures.strip_annotations import strip_annotations

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "traces"
ANNOTATED = sorted(p.relative_to(EXAMPLES).as_posix() for p in EXAMPLES.glob("*/eager.json.gz"))


def _split(events: pl.DataFrame) -> dict[str, float]:
    total = events["dur_ns"].sum()
    by = dict(events.group_by("phase").agg(pl.col("dur_ns").sum()).rows())
    return {p: 100 * by.get(p, 0) / total for p in ("prefill", "decode", "mixed", "unknown")}


@pytest.mark.parametrize("rel", ANNOTATED)
@pytest.mark.parametrize("name", ["execute_model", "ProfilerStep#{n}", None], ids=["execute_model", "profiler_step", "no_range"])
def test_unannotated_split_within_3_points(rel, name, tmp_path):
    truth = ingest_trace(EXAMPLES / rel).events
    assert set(truth["phase"]) >= {"prefill", "decode"}, rel
    doc, changed = strip_annotations(load(EXAMPLES / rel), name)
    assert changed
    events = ingest_trace(save(doc, tmp_path / "stripped.json.gz")).events
    assert not events["phase_rule"].str.starts_with("annotation:").any()
    want, got = _split(truth), _split(events)
    for phase in ("prefill", "decode"):
        assert abs(got[phase] - want[phase]) <= 3.0, (rel, phase, want, got)


UNANNOTATED = Path(__file__).resolve().parents[1] / "fixtures" / "unannotated"


@pytest.mark.parametrize("model", ["llama3-8b", "deepseek-v2-lite"])
def test_a_generation_loop_captured_without_annotations_splits_as_its_annotated_run(model):
    """The same generation loop captured twice on an H200 (tests/fixtures/SOURCES.md), once with a phase
    annotation per forward and once with none at all: no rule reads a phase word in the second, and its split
    is within 3 points of the first's."""
    truth = ingest_trace(UNANNOTATED / f"{model}_annotated.json.gz").events
    events = ingest_trace(UNANNOTATED / f"{model}_plain.json.gz").events
    assert truth["phase_rule"].str.starts_with("annotation:").all()
    assert not events["phase_rule"].str.starts_with("annotation:").any()
    want, got = _split(truth), _split(events)
    assert want["prefill"] > 20 and want["decode"] > 20
    for phase in ("prefill", "decode"):
        assert abs(got[phase] - want[phase]) <= 3.0, (model, phase, want, got)
