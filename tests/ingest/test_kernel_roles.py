"""Kernel role before operator, on real traces: a copy, cast or fill kernel is that wherever it runs, so one
kernel name never lands in two operators and no GEMM or attention problem holds a copy's time."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import polars as pl
import pytest

from ingest.pipeline import ingest_trace

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
