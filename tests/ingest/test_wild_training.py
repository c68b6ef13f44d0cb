"""Training traces from the wild (tests/fixtures/wild, tests/fixtures/SOURCES.md): expert-parallel
communication, backward marked by a pipeline schedule's annotations, kernel roles before operators.

The truth here is computed from the raw JSON with plain rules of its own (DeepEP's `::ep::` namespace,
the annotation enclosing a launch on its thread, autograd's thread), never with the taxonomy."""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

import polars as pl
import pytest

from ingest.pipeline import ingest_trace
from ingest.taxonomy import load_taxonomy
from tests.fixtures.cut_trace import load

WILD = Path(__file__).resolve().parents[1] / "fixtures" / "wild"
DUALPIPE = WILD / "deepseek_v3_dualpipe_h800.json.gz"
NOT_FORWARD = {"other", "communication", "memcpy", "memset"}


@pytest.fixture(scope="module")
def dualpipe():
    return ingest_trace(DUALPIPE)


def _truth(path: Path) -> list[dict]:
    """Per GPU activity: its name, ns, the innermost user annotation enclosing its launch on the launching
    thread (None where none does), and whether an autograd engine node encloses that launch."""
    events = load(path)["traceEvents"]
    launches = {e["args"]["correlation"]: e for e in events
                if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})}
    notes = [e for e in events if e.get("cat") == "user_annotation"]
    nodes = [e for e in events if e.get("cat") == "cpu_op" and e["name"].startswith("autograd::engine::")]
    rows = []
    for e in events:
        if e.get("cat") not in ("kernel", "gpu_memcpy", "gpu_memset") or e.get("ph") != "X":
            continue
        launch = launches.get(e["args"].get("correlation"))
        inner, autograd = None, False
        if launch is not None:
            autograd = any(n["tid"] == launch["tid"] and n["ts"] <= launch["ts"] <= n["ts"] + n["dur"] for n in nodes)
            around = [n for n in notes if n["tid"] == launch["tid"] and n["ts"] <= launch["ts"] <= n["ts"] + n["dur"]]
            inner = min(around, key=lambda n: n["dur"])["name"] if around else None
        rows.append({"kernel": e["name"], "ns": round(e["dur"] * 1000), "annotation": inner,
                     "autograd": autograd})
    return rows


def test_dualpipe_time_is_conserved_to_the_ns(dualpipe):
    truth = _truth(DUALPIPE)
    assert dualpipe.summary["gpu_ns"] == dualpipe.summary["file_gpu_ns"] == sum(r["ns"] for r in truth)
    assert int(dualpipe.events["dur_ns"].sum()) == sum(r["ns"] for r in truth)


def test_deepep_all_to_all_is_communication(dualpipe):
    truth_ns = sum(r["ns"] for r in _truth(DUALPIPE) if "::ep::" in r["kernel"])
    comm = dualpipe.events.filter(pl.col("operator") == "communication")
    assert int(comm["dur_ns"].sum()) == truth_ns
    share = truth_ns / dualpipe.summary["gpu_ns"]
    assert share > 0.4  # DeepEP's dispatch / combine / notify: 45% of this window, once all `other`
    assert set(comm["shape"]) == {"{}"}


def test_backward_chunks_of_the_schedule_are_never_forward_operators(dualpipe):
    truth = _truth(DUALPIPE)
    backward = [r for r in truth if r["autograd"] or re.search(r"\((B|W)\)$", r["annotation"] or "")]
    forward_gemm = [r for r in truth if re.search(r"\(F\)$", r["annotation"] or "") and "grouped_gemm" in r["kernel"]
                    and "GemmKernel" in r["kernel"]]
    assert len(backward) > 50 and forward_gemm
    events = dualpipe.events.with_row_index("i")
    rows = events.to_dicts()
    # rows keep file order of GPU activities only up to sorting: match by (kernel, ns, order of appearance)
    by_key = defaultdict(list)
    for r in sorted(rows, key=lambda r: r["ts_ns"]):
        by_key[(r["kernel"], r["dur_ns"])].append(r)
    seen = defaultdict(int)
    for r in truth:
        key = (r["kernel"], r["ns"])
        r["operator"] = by_key[key][seen[key]]["operator"] if seen[key] < len(by_key[key]) else None
        seen[key] += 1
    wrong = [(r["kernel"][:60], r["annotation"], r["operator"]) for r in backward if r["operator"] not in NOT_FORWARD]
    assert not wrong
    assert {r["operator"] for r in forward_gemm} == {"gemm"}  # the same GEMMs in a forward chunk stay GEMMs
    # one answer per kernel among backward work, whichever thread launched it
    answers = defaultdict(set)
    for r in backward:
        answers[r["kernel"]].add(r["operator"])
    assert all(len(a) == 1 for a in answers.values()), {k[:60]: a for k, a in answers.items() if len(a) > 1}
    assert not dualpipe.events.filter(pl.col("phase") != "unknown").height  # a training step has no serving phase


def test_flash_attention_under_a_python_function_is_named_by_its_kernel(dualpipe):
    fwd = dualpipe.events.filter(pl.col("kernel").str.contains("flash::compute_attn_ws<", literal=True))
    assert fwd.height and set(fwd["operator"]) == {"attention_forward"}
    assert set(fwd["shape"]) == {"{}"}  # the Function's own args are no attention call's shape
    bwd = dualpipe.events.filter(pl.col("kernel").str.contains("FlashAttnBwd", literal=True))
    assert bwd.height and set(bwd["operator"]) == {"other"}


def test_copies_are_copies_whatever_op_ran_them(dualpipe):
    copies = dualpipe.events.filter(pl.col("kernel").str.contains("direct_copy_kernel_cuda|^_copy_tensor_kernel$"))
    assert copies.height and set(copies["operator"]) == {"memcpy"} and set(copies["shape"]) == {"{}"}


# Kernel names as vLLM's ROCm skinny GEMMs and custom all-reduce, DeepEP's intranode / low-latency kernels,
# Transformer Engine's userbuffers, TRT-LLM's MoE all-to-all and aten's casts spell them (no public trace here
# runs most of them; the DualPipe fixture above runs DeepEP's internode ones).
@pytest.mark.parametrize("kernel,chain,operator", [
    ("void wvSplitK_hf_sml_<__hip_bfloat16, 64, 2, 16, 8, 2, 1>(int, int, int, __hip_bfloat16 const*)", (), "gemm"),
    ("void wvSplitKQ_hf_<__hip_fp8_e4m3, 64, 2, 16, 8, 2, 1>(int, int, int, float const*)", (), "gemm"),
    ("void LLGemm1_kernel<__hip_bfloat16, 1024>(__hip_bfloat16 const*, __hip_bfloat16 const*)", (), "gemm"),
    ("void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>(vllm::RankData*, vllm::RankSignals)", ("vllm::all_reduce",), "communication"),
    ("void vllm::cross_device_reduce_2stage<half, 8>(vllm::RankData*, vllm::RankSignals)", (), "communication"),
    ("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", ("autograd::engine::evaluate_function: SendBackward",), "communication"),
    ("void deep_ep::intranode::notify_dispatch<8>(int const*, int*, int)", (), "communication"),
    ("void deep_ep::internode_ll::combine<8, 7168>(void*, int const*)", ("aten::linear",), "communication"),
    ("void userbuffers_fp16_sum_inplace_gpu_rr_rs<8>(int, int, int, int, int, void**)", (), "communication"),
    ("void tensorrt_llm::kernels::moe_comm::moeA2ADispatchKernel<8>(x)", ("trtllm::moe_a2a_dispatch",), "communication"),
    (("void at::native::vectorized_elementwise_kernel<4, at::native::float16_copy_kernel_cuda(at::TensorIteratorBase&)"
      "::{lambda(float)#1}, std::array<char*, 2ul> >(int, at::native::float16_copy_kernel_cuda)"),
     ("aten::linear", "aten::to", "aten::_to_copy", "aten::copy_"), "memcpy"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, std::array<char*, 1ul> >(int)",
     ("vllm::unified_attention_with_output",), "memset"),
    ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::func_wrapper_t<float>>>(x)",
     ("aten::matmul", "aten::sum"), "other"),
    ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float>>>(x)",
     ("aten::rms_norm",), "rms_norm"),  # a norm's reduction is its own work
])
def test_kernel_role_before_operator(kernel, chain, operator):
    assert load_taxonomy().classify(kernel, "kernel", chain).operator == operator


def test_role_of_names_what_is_no_operators_compute():
    tax = load_taxonomy()
    assert tax.role_of("void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda>", "gemm") == "copy"
    assert tax.role_of("void at::native::reduce_kernel<512, 1>", "gemm") == "reduction"
    assert tax.role_of("void at::native::reduce_kernel<512, 1>", "rms_norm") is None
    assert tax.role_of("nvjet_tst_128x256_64x4_2x1_v_bz_coopA_TNT", "gemm") is None
