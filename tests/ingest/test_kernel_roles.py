"""Kernel role before operator, on real traces: a copy, cast or fill kernel is that wherever it runs, so one
kernel name never lands in two operators and no GEMM or attention problem holds a copy's time."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import polars as pl
import pytest

from ingest.pipeline import ingest_trace
from ingest.taxonomy import load_taxonomy

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
TRACES = [
    "traces/hta/trace_diff/control/control.json.gz",  # A100 training (2022): copies under aten::matmul's reshape
    "traces/tracelens/b200/eager_trace.json.gz",  # vLLM V1 on B200: copies under vLLM's custom ops
    "unannotated/llama3-8b_plain.json.gz",  # HF generation on H200: casts and SDPA's mask fill
    "wild/deepseek_v3_dualpipe_h800.json.gz",  # DeepSeek-V3 training step: copies under autograd Functions
]
# aten's copy and fill kernels by the functor names PyTorch gives them (independent of the taxonomy's patterns)
COPY = ("direct_copy_kernel_cuda", "bfloat16_copy_kernel_cuda", "float16_copy_kernel_cuda", "CatArrayBatchedCopy")
FILL = ("FillFunctor<",)


@lru_cache(maxsize=None)
def _events(rel: str) -> pl.DataFrame:
    return ingest_trace(FIXTURES / rel).events


@pytest.mark.parametrize("rel", TRACES)
def test_copies_and_fills_are_one_operator_wherever_they_run(rel):
    events = _events(rel)
    copies = events.filter(pl.any_horizontal(*(pl.col("kernel").str.contains(w, literal=True) for w in COPY)))
    fills = events.filter(pl.any_horizontal(*(pl.col("kernel").str.contains(w, literal=True) for w in FILL)))
    assert copies.height or fills.height
    assert set(copies["operator"]) <= {"memcpy"} and set(fills["operator"]) <= {"memset"}
    assert set(copies["shape"]) | set(fills["shape"]) <= {"{}"}  # no op's shape is a copy's


def test_copies_inside_matmul_are_copies():
    # A100 training: `aten::matmul > aten::reshape > aten::clone > aten::copy_` under autograd's view backward
    events = _events("traces/hta/trace_diff/control/control.json.gz")
    under_matmul = events.filter(pl.col("op_chain").list.contains("aten::matmul"))
    copies = under_matmul.filter(pl.col("kernel").str.contains("copy_kernel_cuda", literal=True))
    assert copies.height == 12 and set(copies["operator"]) == {"memcpy"} and set(copies["shape"]) == {"{}"}
    assert set(under_matmul.filter(pl.col("operator") == "gemm")["kernel"].str.contains("copy").to_list()) <= {False}


def test_an_autocast_cast_inside_linear_is_no_gemm_problem(tmp_path):
    """tests/fixtures/wild/autocast_linear_cast_derived.json.gz (DERIVED by tests/fixtures/wild_cuts.py from a real
    H200 trace: HF's casts wrapped in `aten::linear` as autocast records them)."""
    import yaml

    from ingest.taxonomy import default_document
    from release.admission import refusals

    path = FIXTURES / "wild" / "autocast_linear_cast_derived.json.gz"
    events = ingest_trace(path).events
    casts = events.filter(pl.col("op_chain").list.contains("aten::linear") & pl.col("op_chain").list.contains("aten::_to_copy"))
    assert casts.height > 20 and set(casts["operator"]) == {"memcpy"} and set(casts["shape"]) == {"{}"}
    gemm = events.filter(pl.col("operator") == "gemm")
    assert not gemm["shape"].str.contains("b_dtype").any()
    # The taxonomy without roles makes those casts a GEMM problem that never ran (fp32 x bf16), which the
    # release's admission check refuses by name.
    doc = default_document()
    del doc["roles"]
    old = tmp_path / "taxonomy.yaml"
    old.write_text(yaml.safe_dump(doc))
    before = ingest_trace(path, taxonomy=old).events
    fake = before.filter(pl.col("op_chain").list.contains("aten::_to_copy") & (pl.col("operator") == "gemm"))
    assert fake.height == casts.height and fake["shape"].str.contains('"b_dtype":"bf16","dtype":"fp32"').sum() > 20
    by_kernel = before.group_by("operator", "shape", "kernel").agg(pl.col("dur_ns").sum().alias("gpu_ns"))
    refused = refusals(fake.select("operator", "shape").unique(), by_kernel)
    assert refused and {r.operator for r in refused} == {"gemm"} and all(r.own_share == 0.0 for r in refused)


# No public trace of training under torch.autocast was found (tests/fixtures/SOURCES.md); the real training traces
# below run copies inside GEMM ops the way autocast's casts do: the bias copy aten::addmm runs before its GEMM
# (ROCm, MI250) and the layout copies under aten::mm / aten::matmul (A100).
MI250 = "traces/hta/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz"
TRAINING = [MI250, "traces/hta/negative_queue_length_values_check/rank0.json.gz",
            "traces/hta/trace_diff/control/control.json.gz"]
# GEMM kernels by the libraries' own spellings (hipBLASLt/Tensile `Cijk_`, cuBLAS / CUTLASS names, cuBLAS's
# split-K reduction, cuBLASLt's epilogue pass); independent of the taxonomy's patterns
GEMM_KERNEL = r"^Cijk_|gemm|gemv|cutlass|splitKreduce|nvjet|xmma|cublasLtEpilogue"
NOT_GEMM_WORK = r"copy|Copy|Memcpy|FillFunctor|Memset|elementwise_kernel"


def _mi250_truth() -> list[tuple[str, int, str]]:
    """(kernel, ns, family) per GPU activity of the MI250 training step, from the raw JSON by kernel name and the
    thread that launched it (autograd's engine thread runs backward, which is never a forward operator)."""
    from tests.fixtures.cut_trace import load

    events = load(FIXTURES / MI250)["traceEvents"]
    launch_tid = {e["args"]["correlation"]: e["tid"] for e in events
                  if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})}
    autograd_tids = {e["tid"] for e in events if e.get("cat") == "cpu_op" and e["name"].startswith("autograd::engine::")}
    rows = []
    for e in events:
        if e.get("cat") not in ("kernel", "gpu_memcpy", "gpu_memset"):
            continue
        name, backward = e["name"], launch_tid.get(e["args"].get("correlation")) in autograd_tids
        if name.startswith("Memcpy") or "direct_copy_kernel" in name:
            family = "memcpy"
        elif "FillFunctor" in name or name.startswith("Memset"):
            family = "memset"
        elif name.startswith("Cijk_") and not backward:
            family = "gemm"
        else:
            family = "other"
        rows.append((name, round(e["dur"] * 1000), family))
    return rows


def test_rocm_training_step_families_against_kernel_names():
    truth = _mi250_truth()
    events = _events(MI250)
    assert int(events["dur_ns"].sum()) == sum(ns for _, ns, _ in truth)  # time conserved to the ns
    want: dict[str, int] = {}
    for _, ns, family in truth:
        want[family] = want.get(family, 0) + ns
    got = dict(events.group_by("operator").agg(pl.col("dur_ns").sum()).iter_rows())
    total = sum(want.values())
    wrong = sum(max(0, want.get(f, 0) - got.get(f, 0)) for f in set(want) | set(got))
    assert wrong / total <= 0.02, (want, got)
    # one forward GEMM, one backward GEMM: the backward one is no forward operator
    assert sorted(f for n, _, f in truth if n.startswith("Cijk_")) == ["gemm", "other"]


def test_the_bias_copy_addmm_runs_is_no_gemm_time():
    # ROCm: `aten::linear > aten::addmm` runs direct_copy (bias into the output) before its Tensile GEMM
    events = _events(MI250)
    addmm = events.filter(pl.col("op_chain").list.contains("aten::addmm"))
    copy = addmm.filter(pl.col("kernel").str.contains("direct_copy_kernel_cuda", literal=True))
    assert copy.height == 1 and copy["operator"].to_list() == ["memcpy"] and copy["shape"].to_list() == ["{}"]
    gemm = events.filter(pl.col("operator") == "gemm")
    assert gemm["kernel"].str.starts_with("Cijk_").all() and gemm.height == 1
    assert gemm["shape"].to_list() == ['{"dtype":"fp32","k":128,"m":5,"n":128}']
    # the problem's time is its GEMM kernel's 17.6 us, not the 24.48 us of the op's two kernels
    assert int(gemm["dur_ns"].sum()) == 17600


@pytest.mark.parametrize("rel", TRAINING)
def test_a_gemm_problems_time_is_only_gemm_kernels(rel):
    events = _events(rel)
    gemm = events.filter(pl.col("operator") == "gemm")
    assert gemm.height
    assert gemm["kernel"].str.contains(GEMM_KERNEL).all(), gemm.filter(~pl.col("kernel").str.contains(GEMM_KERNEL))["kernel"].unique().to_list()
    assert not gemm["kernel"].str.contains(NOT_GEMM_WORK).any()
    # and every copy launched under a GEMM op is memcpy with no shape
    under = events.filter(pl.col("op_chain").list.eval(pl.element().is_in(
        ["aten::addmm", "aten::mm", "aten::matmul", "aten::bmm", "aten::linear", "aten::baddbmm"])).list.any())
    copies = under.filter(pl.col("kernel").str.contains("copy_kernel_cuda|Memcpy"))
    assert copies.height and set(copies["operator"]) == {"memcpy"} and set(copies["shape"]) == {"{}"}


def test_the_bias_add_an_older_linear_runs_is_no_gemm():
    # A100 training (2022): `aten::linear` of a 3-D input ran matmul then `aten::add_` (CUDAFunctor_add) for the bias;
    # that add once carried the linear's shape as a GEMM problem
    events = _events("traces/hta/trace_diff/control/control.json.gz")
    adds = events.filter(pl.col("op_chain").list.contains("aten::linear") & pl.col("op_chain").list.contains("aten::add_")
                         & pl.col("kernel").str.contains("CUDAFunctor_add", literal=True))
    assert adds.height == 12 and set(adds["operator"]) == {"other"} and set(adds["shape"]) == {"{}"}
    tax = load_taxonomy()
    assert tax.role_of(adds["kernel"][0], "gemm") == "elementwise"
    assert tax.role_of(adds["kernel"][0], "linear_sigmoid_mul") is None  # a fused op's arithmetic is its own
