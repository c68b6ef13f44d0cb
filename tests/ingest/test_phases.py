"""Phase detection: step annotations of vLLM / SGLang fixtures, then attention shapes, then graph heuristics."""

from __future__ import annotations

import gzip
import json

import polars as pl
import pytest

from ingest.classify import classify_events
from ingest.graphs import capture_traces_for, read_captures
from ingest.phases import parse_step
from ingest.pipeline import read_events

# The phase each fixture's step is, from its provenance (SOURCES.md): what ran, not what we parse.
STEPS = {
    "tracelens/inference/vllm_decode_full/graph_execution.json.gz": "decode",  # one FULL-graph decode step, bs 32
    "tracelens/inference/vllm_prefilldecode_piecewise/graph_execution.json.gz": "mixed",  # prefill+decode step
    "tracelens/inference/sglang_decode/sglang_Qwen3-8B_decode.json.gz": "decode",
    "tracelens/inference/sglang_prefilldecode/sglang_Qwen3-8B_prefilldecode.json.gz": "prefill",  # EXTEND step
    "tracelens/b200/eager_trace.json.gz": "prefill",  # one context request, no generation
}


def _step_annotations(path) -> list[str]:
    with gzip.open(path) as f:
        events = json.load(f)["traceEvents"]
    return [e["name"] for e in events if e.get("cat") == "user_annotation" and e["name"].startswith(("execute_", "step["))]


@pytest.mark.parametrize("rel", sorted(STEPS))
def test_fixture_step_annotations_parse_to_their_phase(public_traces, rel):
    names = _step_annotations(public_traces / rel)
    assert names, "fixture has a step annotation"
    for name in names:
        step = parse_step(name)
        assert step is not None and step.phase == STEPS[rel], name


def test_vllm_counts_read_from_the_annotation():
    # Strings as they appear in the piecewise and b200 fixtures.
    step = parse_step(
        "execute_8192_context_9(sq8155sk8430sqsq7475785sqsk7671310)_generation_37(sq37sk34489sqsq37sqsk34489)"
    )
    assert (step.phase, step.rule) == ("mixed", "annotation:vllm")
    assert (step.tokens, step.context_reqs, step.generation_reqs) == (8192, 9, 37)
    assert (step.context_q, step.context_kv, step.generation_q, step.generation_kv) == (8155, 8430, 37, 34489)
    assert step.context_q + step.generation_q == step.tokens
    upstream = parse_step("execute_context_1(888_788544)_generation_0(0)")
    assert (upstream.phase, upstream.context_reqs, upstream.context_q, upstream.generation_reqs) == ("prefill", 1, 888, 0)


def test_sglang_and_plain_ranges():
    extend = parse_step("step[EXTEND bs=15 toks=15360]")
    assert (extend.phase, extend.rule, extend.context_reqs, extend.tokens) == ("prefill", "annotation:sglang", 15, 15360)
    assert parse_step("step[DECODE bs=32]").generation_reqs == 32
    assert parse_step("step[MIXED bs=4]").phase == "mixed"
    assert parse_step("decode").phase == "decode" and parse_step("Prefill_step#3").phase == "prefill"
    # Op and kernel names that merely start with a phase word are not ranges.
    assert parse_step("decode_attention_fwd") is None and parse_step("context_attention_fwd") is None
    # Names from the fixtures that are not steps: profiler steps, capture windows, Inductor regions.
    for name in ("ProfilerStep#134", "capture_32_DECODE", "capture_8192_PIECEWISE", "nccl:_all_gather_base",
                 "## Call CompiledFxGraph fud64jsrxcxliekg7lptyw24yz5k3oa65b73wjfbhz6j2fg6ouu7 ##", "decoder_layer"):
        assert parse_step(name) is None, name


@pytest.mark.parametrize("rel", sorted(STEPS))
def test_every_annotated_row_takes_its_steps_phase(public_traces, rel):
    path = public_traces / rel
    out = classify_events(read_events(path), read_captures(capture_traces_for(path)))
    annotated = out.filter(pl.col("op_chain").list.eval(pl.element().str.contains(r"^(execute_|step\[)")).list.any())
    assert annotated.height > 0.9 * out.height
    assert set(annotated["phase"]) == {STEPS[rel]}
    assert set(annotated["phase_rule"]) <= {"annotation:vllm", "annotation:sglang"}


def test_shape_rule_without_annotation(public_traces):
    # A torch.compile forward with no serving annotation and one non-causal, cache-less SDPA call: nothing
    # shows autoregressive attention (it could be an encoder or a diffusion block), so no serving phase.
    out = classify_events(read_events(public_traces / "tracelens/torch_compile_triton/trace.json.gz"))
    attention = out.filter(pl.col("operator") == "attention_forward")
    assert attention.height == 1
    assert set(out["phase"]) == {"unknown"}


def _without_step_annotation(events: pl.DataFrame) -> pl.DataFrame:
    return events.with_columns(
        pl.col("op_chain").list.eval(pl.element().filter(~pl.element().str.starts_with("execute_"))),
        pl.lit(None, dtype=pl.String).alias("annotation"), pl.lit(None, dtype=pl.String).alias("op_chain_args"))


def test_decode_kernels_decide_a_step_when_the_step_annotation_is_missing(public_traces):
    # The FULL-graph decode step with its step annotation removed (a trace taken without it): vLLM's 3-D unified
    # attention and its segment reduction run only when every sequence has one query token, so the whole step,
    # its eager copies and sampling included, is decode, as the annotated trace says.
    events = read_events(public_traces / STEP_FULL)
    out = classify_events(_without_step_annotation(events))
    assert set(out["phase"]) == {"decode"} and set(out["phase_rule"]) == {"kernels:decode"}
    assert set(classify_events(events)["phase"]) == {"decode"}


def test_full_graph_heuristic_without_decode_kernels(public_traces):
    # The same step with its attention kernels renamed to one that says nothing about the phase: only the
    # FULL graph replaying attention says decode, and the eager rows outside it stay unknown.
    events = _without_step_annotation(read_events(public_traces / STEP_FULL)).with_columns(
        pl.col("kernel").str.replace(r"^(kernel_unified_attention_3d|reduce_segments)$", "kernel_unified_attention_2d"))
    out = classify_events(events)
    graph = out.filter(pl.col("graph_launch"))
    assert set(graph["phase"]) == {"decode"}
    assert set(graph["phase_rule"]) == {"graph:full_graph_decode"}
    assert set(out.filter(~pl.col("graph_launch"))["phase"]) == {"unknown"}


STEP_FULL = "tracelens/inference/vllm_decode_full/graph_execution.json.gz"


def test_training_trace_stays_unknown(public_traces):
    out = classify_events(read_events(public_traces / "hta/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz"))
    assert set(out["phase"]) == {"unknown"} and set(out["phase_rule"]) == {"none"}
