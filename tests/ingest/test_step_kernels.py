"""Phases of unannotated serving steps from the kernels each step runs (ingest/step_kernels.py)."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from ingest.classify import classify_events
from ingest.pipeline import ingest_trace, read_events
from ingest.step_kernels import cut_steps, step_phases

INFERENCE = "tracelens/inference"
UNANNOTATED = Path(__file__).resolve().parents[1] / "fixtures" / "unannotated"


def _strip_steps(events: pl.DataFrame) -> pl.DataFrame:
    """The trace as a server without step annotations records it: vLLM's execute_* and SGLang's step[...] gone."""
    return events.with_columns(
        pl.col("op_chain").list.eval(pl.element().filter(~pl.element().str.contains(r"^(execute_|step\[)"))),
        pl.lit(None, dtype=pl.String).alias("annotation"))


def _split(out: pl.DataFrame) -> dict[str, float]:
    total = out["dur_ns"].sum()
    return {p: ns / total for p, ns in out.group_by("phase").agg(pl.col("dur_ns").sum()).rows()}


@pytest.mark.parametrize("rel,phase", [
    # SGLang + AITER on MI300X: an EXTEND step runs CK's batch-prefill attention (FmhaBatchPrefill...) ...
    (f"{INFERENCE}/sglang_prefilldecode/sglang_Qwen3-8B_prefilldecode.json.gz", "prefill"),
    # ... and a DECODE step (a FULL HIP graph, aligned with its capture trace) AITER's paged decode.
    (f"{INFERENCE}/sglang_decode/sglang_Qwen3-8B_decode.json.gz", "decode"),
    # vLLM V1 eager on B200 (one request's 888-token prompt): TRT-LLM's Blackwell FMHA context kernel
    # (fmhaSm100aKernel_...PersistentContext) under vllm::unified_attention_with_output, no shape naming sequences.
    ("tracelens/b200/eager_trace.json.gz", "prefill"),
])
def test_a_step_without_annotation_is_what_its_kernels_say(public_traces, rel, phase):
    events = read_events(public_traces / rel)
    truth = _split(classify_events(events))
    out = classify_events(_strip_steps(events))
    assert not out["phase_rule"].str.starts_with("annotation:").any()
    assert truth[phase] > 0.999 and _split(out).get(phase, 0) > 0.998, _split(out)


def test_a_step_its_kernels_cannot_place_stays_unknown(public_traces):
    # vLLM V1 on MI300X, one mixed step (PIECEWISE graphs, Triton 2-D unified attention for prompt and decode
    # tokens alike, no per-sequence query lengths): nothing but its annotation tells, so without it: unknown.
    events = read_events(public_traces / f"{INFERENCE}/vllm_prefilldecode_piecewise/graph_execution.json.gz")
    assert set(classify_events(events)["phase"]) == {"mixed"}
    assert set(classify_events(_strip_steps(events))["phase"]) == {"unknown"}


def test_steps_are_cut_after_sampling_on_a_real_generation_loop():
    # HF Llama-3-8B on an H200: one prefill forward and eight decode forwards, each ending in aten::argmax.
    out = ingest_trace(UNANNOTATED / "llama3-8b_plain.json.gz").events.sort("ts_ns")
    steps = cut_steps(out["device"].to_list(), out["ts_ns"].to_list(), out["operator"].to_list())
    assert len(set(steps)) in (9, 10)  # the 9 forwards (and the work after the last sampling, if any)
    truth = ingest_trace(UNANNOTATED / "llama3-8b_annotated.json.gz").events.sort("ts_ns")
    phases = truth["phase"].to_list()
    cut = cut_steps(truth["device"].to_list(), truth["ts_ns"].to_list(), truth["operator"].to_list())
    by_step: dict[int, set] = {}
    for s, p in zip(cut, phases):
        by_step.setdefault(s, set()).add(p)
    assert all(len(p) == 1 for p in by_step.values()), by_step  # no step cut straddles two annotated forwards


# Kernel sequences as vLLM V1 runs them (names from its sources): per step, (kernel, ns, operator).
ROCM_PREFIX_PREFILL = "_fwd_kernel"
ROCM_DECODE = "void paged_attention_ll4mi_QKV_mfma16_kernel<__hip_bfloat16, __hip_bfloat16, 0, 128, 16, 1, 4>(x)"
FA3 = "void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<x>>>(x)"
FA3_COMBINE = "void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdCombine<x>>>(x)"
ARGMAX = "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::ArgMaxOps<float>>>(x)"
GEMM = "Cijk_Alik_Bljk_BBS_BH_MT256x256x64"


def _steps(*steps):
    kernels, dur, ops, step_of = [], [], [], []
    for s, rows in enumerate(steps):
        for kernel, ns, op in rows + [(ARGMAX, 3_000, "topk_filter")]:
            kernels.append(kernel), dur.append(ns), ops.append(op), step_of.append(s)
    return step_of, kernels, dur, ops


def test_rocm_prefix_prefill_step_is_prefill_beside_an_idle_decode_kernel():
    # vLLM V1's ROCm chunked-prefill path launches its paged decode kernel on every step; on the first step of a
    # batch (all prompts) it returns at once, beside the prefix-prefill Triton kernel that does the work.
    first = [(GEMM, 400_000, "gemm"), (ROCM_PREFIX_PREFILL, 300_000, "unified_attention"), (ROCM_DECODE, 4_000, "unified_attention")]
    decode = [(GEMM, 60_000, "gemm"), (ROCM_DECODE, 90_000, "unified_attention")]
    got = step_phases(*_steps(first, *[decode] * 9))
    assert got[0] == ("prefill", "kernels:prefill_idle_decode")
    assert {got[s] for s in range(1, 10)} == {("decode", "kernels:decode")}
    # a step that also carries decode tokens runs the decode kernel as long as the decode steps do: mixed
    busy = [(GEMM, 400_000, "gemm"), (ROCM_PREFIX_PREFILL, 300_000, "unified_attention"), (ROCM_DECODE, 80_000, "unified_attention")]
    assert step_phases(*_steps(busy, *[decode] * 3))[0] == ("mixed", "kernels:prefill_and_decode")
    # with no decode-only step to compare with, a prefill kernel beside a decode kernel decides nothing
    assert 0 not in step_phases(*_steps(busy))


def test_fa3_steps_without_the_split_kv_combine_have_prompt_tokens():
    prefill = [(GEMM, 500_000, "gemm"), (FA3, 200_000, "unified_attention")]
    decode = [(GEMM, 50_000, "gemm"), (FA3, 30_000, "unified_attention"), (FA3_COMBINE, 5_000, "unified_attention")]
    got = step_phases(*_steps(prefill, decode, decode, prefill, decode))
    assert [got[s][0] for s in range(5)] == ["prefill", "decode", "decode", "prefill", "decode"]
    # the same attention with no combine anywhere in the trace: nothing tells its steps apart
    assert step_phases(*_steps(prefill, prefill)) == {}


def test_a_prompt_alone_in_its_batch_is_prefill_whatever_its_decode_launch_costs():
    # vLLM V1 on MI300X with one sequence (tests/fixtures/wild/vllm_v1_mi300x_tp4.json.gz): the idle ll4mi launch
    # beside the prompt's prefix-prefill runs 4.7 µs against 5.9 µs on the decode steps, as a busy one would;
    # its grid [sequences, partitions, KV heads] says the batch is the prompt alone.
    busy = [(GEMM, 400_000, "gemm"), (ROCM_PREFIX_PREFILL, 300_000, "unified_attention"), (ROCM_DECODE, 80_000, "unified_attention")]
    decode = [(GEMM, 60_000, "gemm"), (ROCM_DECODE, 90_000, "unified_attention")]
    step_of, kernels, dur, ops = _steps(busy, *[decode] * 3)

    def grid_x(sequences):  # grid [sequences, partitions, KV heads]; Triton's [batch, heads, query blocks]
        return [sequences if k in (ROCM_DECODE, ROCM_PREFIX_PREFILL) else None for k in kernels]

    assert step_phases(step_of, kernels, dur, ops, grid_x=grid_x(1))[0] == ("prefill", "kernels:prefill_one_sequence")
    assert step_phases(step_of, kernels, dur, ops, grid_x=grid_x(2))[0] == ("mixed", "kernels:prefill_and_decode")
    assert step_phases(step_of, kernels, dur, ops)[0] == ("mixed", "kernels:prefill_and_decode")  # no grids recorded

