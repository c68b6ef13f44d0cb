"""Serving traces from the wild (tests/fixtures/wild, tests/fixtures/SOURCES.md): vLLM V1 with no step
annotation, tensor-parallel over 4 GPUs, on H100 (FlashAttention 3, piecewise CUDA graphs) and on MI300X (the
ROCm chunked-prefill path). Each is one prompt of ~1000 tokens and then decode steps (the source's 1000 input
and 10 output tokens; the first 3 of its 10 steps are cut).

The truth is computed here from the raw JSON with rules of this file's own, checked by hand against the traces,
never with the taxonomy: a family per kernel name (KERNEL_FAMILIES), steps ended by the sampling kernel
(aten::argmax's ArgMaxOps reduction, once per step), and the step's phase from what the source ran: its first
step holds the prompt (on MI300X the prefix-prefill kernel's grid [1, 16, 9] is one sequence of 1025-1152 query
tokens, and the paged-decode kernel's grid [1, 5, 2] one sequence: no decode token beside it), every later step
one decode token."""

from __future__ import annotations

import re
from pathlib import Path

import polars as pl
import pytest

from ingest.classify import classify_events
from ingest.pipeline import ingest_trace, read_events
from tests.fixtures.cut_trace import GPU_CATS, load

WILD = Path(__file__).resolve().parents[1] / "fixtures" / "wild"
H100 = WILD / "vllm_v1_h100_tp4.json.gz"
MI300X = WILD / "vllm_v1_mi300x_tp4.json.gz"

# Every kernel of the two traces, by what it computes (read by hand from the names and from where each runs in
# a layer: QKV GEMM, the two `triton_poi_fused_cat_N` kernels, the KV-cache write, attention, ...).
KERNEL_FAMILIES = [
    # cuBLAS / CUTLASS / hipBLASLt GEMMs, their split-K reductions (splitKreduce, hipBLASLt's GSU post pass) and
    # vLLM's ROCm skinny GEMM (wvSplitK, the LM head of a one-sequence batch)
    ("gemm", r"^sm90_xmma_gemm|cutlass_80_tensorop_\w*gemm|splitKreduce_kernel|^Cijk_|wvSplitK"),
    ("communication", r"^ncclDevKernel_|cross_device_reduce_1stage"),
    # FlashAttention 3's forward and split-KV combine; ROCm's prefix-prefill Triton kernel and ll4mi paged decode
    ("attention", r"FlashAttnFwdSm90|FlashAttnFwdCombine|^_fwd_kernel$|paged_attention_ll4mi_"),
    ("norm", r"rsqrt|rms_norm_kernel"),
    ("activation", r"silu"),
    ("kv_cache", r"reshape_and_cache"),
    ("sampling", r"ArgMaxOps"),
    # vLLM's rotary embedding (RotaryEmbedding.forward_native under torch.compile): Inductor names the kernel after
    # its cat alone; a pair per layer, q's and k's, between the QKV GEMM and the KV-cache write.
    ("rope", r"^triton_poi_fused_cat_\d+$"),
    # the vocab-parallel embedding lookup with its masks (Inductor fused the all-reduce's input into the name)
    ("embedding", r"^triton_poi_fused_\w*embedding"),
    ("memcpy", r"^Memcpy|direct_copy_kernel"),
    ("memset", r"^Memset|FillFunctor"),
    # FA3's scheduler metadata, the sampler's index and position arithmetic
    ("other", r"prepare_varlen_num_blocks|index_elementwise_kernel|CUDAFunctorOnSelf_add"),
]
# The catalogue's operators by family (an operator's name says its family; `other` is no family's work).
OPERATOR_FAMILY = {
    "gemm": "gemm", "communication": "communication", "unified_attention": "attention",
    "paged_attention_decode": "attention", "attention_forward": "attention", "fused_add_rms_norm": "norm",
    "rms_norm": "norm", "silu_and_mul": "activation", "reshape_and_cache": "kv_cache", "topk_filter": "sampling",
    "fused_qkv_rope": "rope", "embedding": "embedding", "memcpy": "memcpy", "memset": "memset", "other": "other",
}
TRACES = {"h100": H100, "mi300x": MI300X}


def _family(kernel: str) -> str:
    found = [family for family, pattern in KERNEL_FAMILIES if re.search(pattern, kernel)]
    assert len(found) == 1, (kernel, found)
    return found[0]


def _truth(path: Path) -> list[dict]:
    """Per GPU activity in time order: name, ns, family, step (ended by its sampling kernel) and phase."""
    gpu = sorted((e for e in load(path)["traceEvents"] if e.get("cat") in GPU_CATS and e.get("ph") == "X"),
                 key=lambda e: e["ts"])
    rows, step = [], 0
    for e in gpu:
        rows.append({"kernel": e["name"], "ns": round(e["dur"] * 1000), "ts": e["ts"], "family": _family(e["name"]),
                     "step": step, "phase": "prefill" if step == 0 else "decode"})
        step += "ArgMaxOps" in e["name"]
    return rows


@pytest.fixture(scope="module", params=sorted(TRACES))
def trace(request):
    path = TRACES[request.param]
    events = ingest_trace(path).events.sort("ts_ns", maintain_order=True)
    truth = _truth(path)
    assert [r["kernel"] for r in truth] == events["kernel"].to_list()  # the same activities in the same order
    return request.param, ingest_trace(path), events, truth


def test_time_is_conserved_to_the_ns(trace):
    _, result, events, truth = trace
    assert result.summary["gpu_ns"] == result.summary["file_gpu_ns"] == sum(r["ns"] for r in truth)
    assert int(events["dur_ns"].sum()) == sum(r["ns"] for r in truth)
    assert events["dur_ns"].to_list() == [r["ns"] for r in truth]


def _wrong_family_share(events, truth) -> float:
    wrong = sum(r["ns"] for r, op in zip(truth, events["operator"].to_list()) if OPERATOR_FAMILY[op] != r["family"])
    return wrong / sum(r["ns"] for r in truth)


def test_gpu_time_lands_in_its_family(trace):
    name, _, events, truth = trace
    assert set(events["operator"]) <= set(OPERATOR_FAMILY)
    assert _wrong_family_share(events, truth) <= 0.02, name
    # no wrong row carries a shape (these traces record none; a shape would come from a wrong op's args)
    shapes = [s for r, op, s in zip(truth, events["operator"].to_list(), events["shape"].to_list())
              if OPERATOR_FAMILY[op] != r["family"]]
    assert set(shapes) <= {"{}"}


def test_rotary_embedding_and_embedding_are_not_copies_or_collectives(trace):
    _, _, events, truth = trace
    ops = events["operator"].to_list()
    assert {op for r, op in zip(truth, ops) if r["family"] == "rope"} == {"fused_qkv_rope"}
    assert {op for r, op in zip(truth, ops) if r["family"] == "embedding"} == {"embedding"}


def test_a_cat_kernel_without_a_cache_write_after_it_stays_a_copy():
    # the H100 cut with its KV-cache writes taken out: nothing then says its Inductor cat kernels are the rotation
    events = read_events(H100)
    out = classify_events(events.filter(~pl.col("kernel").str.contains("reshape_and_cache", literal=True)))
    cats = out.filter(pl.col("kernel").str.contains(r"^triton_poi_fused_cat_\d+$"))
    assert cats.height > 100 and set(cats["operator"]) == {"memcpy"} and set(cats["shape"]) == {"{}"}


def _shares(rows: list[tuple[str, int]]) -> dict[str, float]:
    total = sum(ns for _, ns in rows)
    out: dict[str, float] = {}
    for phase, ns in rows:
        out[phase] = out.get(phase, 0) + ns / total
    return out


def test_serving_phases_without_annotations_match_the_steps(trace):
    name, _, events, truth = trace
    assert not events["phase_rule"].str.starts_with("annotation:").any()
    ours = _shares(list(zip(events["phase"].to_list(), events["dur_ns"].to_list())))
    real = _shares([(r["phase"], r["ns"]) for r in truth])
    assert 0.6 < real["prefill"] < 0.8  # the prompt's step is most of these three steps' GPU time
    for phase in set(ours) | set(real):
        assert abs(ours.get(phase, 0) - real.get(phase, 0)) <= 0.10, (name, phase, ours, real)
    agree = sum(r["ns"] for r, p in zip(truth, events["phase"].to_list()) if p == r["phase"])
    assert agree / sum(r["ns"] for r in truth) >= 0.99, (name, ours, real)
