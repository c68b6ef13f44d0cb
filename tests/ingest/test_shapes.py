"""Shape kwargs from real ops' Input Dims / Input type / Concrete Inputs, and the canonical shape key."""

from __future__ import annotations

import gzip
import json
import math

import polars as pl
import pytest

from ingest.classify import classify_events
from ingest.graphs import capture_traces_for, read_captures
from ingest.pipeline import read_events
from ingest.shapes import canonical_json, shape_kwargs

B200 = "tracelens/b200/eager_trace.json.gz"
SGL_PREFILL = "tracelens/inference/sglang_prefilldecode/sglang_Qwen3-8B_prefilldecode.json.gz"
SGL_CAPTURE = "tracelens/inference/sglang_decode/capture_traces/bs_32_rank0.json.gz"
VLLM_PIECEWISE = "tracelens/inference/vllm_prefilldecode_piecewise/graph_execution.json.gz"

_cache: dict = {}


def first_op(path, name: str) -> dict:
    """The recorded args of the first cpu_op called `name` in a raw fixture file."""
    if path not in _cache:
        with gzip.open(path) as f:
            _cache[path] = [e for e in json.load(f)["traceEvents"] if e.get("cat") == "cpu_op" and "Input Dims" in e.get("args", {})]
    for e in _cache[path]:
        if e["name"] == name:
            a = e["args"]
            return {"dims": a["Input Dims"], "types": a["Input type"], "concrete": a.get("Concrete Inputs")}
    raise AssertionError(f"{path} has no {name}")


@pytest.mark.parametrize(
    "rel,op,weight_is_nk",
    [
        (B200, "aten::linear", True),  # F.linear(x, W[N, K])
        (B200, "aten::mm", False),  # mm(A[M, K], B[K, N])
        (SGL_PREFILL, "aten::mm", False),
        (SGL_PREFILL, "aiter::gemm_a16w16", True),
        (VLLM_PIECEWISE, "vllm::rocm_unquantized_gemm", True),
    ],
)
def test_gemm_mnk(public_traces, rel, op, weight_is_nk):
    args = first_op(public_traces / rel, op)
    x, w = [d for d in args["dims"] if len(d) == 2][:2]
    n, k = (w[0], w[1]) if weight_is_nk else (w[1], w[0])
    assert x[1] == k
    assert shape_kwargs("gemm", op, args) == {"m": x[0], "n": n, "k": k, "dtype": "bf16"}


def test_addmm_skips_the_bias(public_traces):
    args = first_op(public_traces / B200, "aten::addmm")
    bias, x, w = args["dims"][:3]
    assert len(bias) == 1
    assert shape_kwargs("gemm", "aten::addmm", args) == {"m": x[0], "n": w[1], "k": w[0], "dtype": "bf16"}


def test_rms_norm_tokens_hidden_eps(public_traces):
    args = first_op(public_traces / B200, "_C::rms_norm")
    out = args["dims"][0]
    eps = float(args["concrete"][3])
    assert shape_kwargs("rms_norm", "_C::rms_norm", args) == {"token_count": out[0], "hidden_size": out[1], "eps": eps, "dtype": "bf16"}
    add = first_op(public_traces / SGL_PREFILL, "aiter::add_rmsnorm")
    got = shape_kwargs("fused_add_rms_norm", "aiter::add_rmsnorm", add)
    assert (got["token_count"], got["hidden_size"]) == tuple(add["dims"][0]) and got["eps"] == pytest.approx(1e-6)


def test_rope_heads_from_flattened_q_k(public_traces):
    args = first_op(public_traces / B200, "_C::rotary_embedding")
    positions, q, k, _, cache, _ = args["dims"]
    head = int(args["concrete"][3])
    assert shape_kwargs("fused_qkv_rope", "_C::rotary_embedding", args) == {
        "total_tokens": positions[0],
        "num_heads": q[1] // head,
        "num_kv_heads": k[1] // head,
        "head_dim": head,
        "rope_dim": cache[1],
        "is_neox_style": args["concrete"][5] == "True",
        "dtype": "bf16",
    }


def test_reshape_and_cache_block_size_and_fp8_cache(public_traces):
    args = first_op(public_traces / B200, "_C_cache_ops::reshape_and_cache_flash")
    key, _, cache = args["dims"][:3]
    got = shape_kwargs("reshape_and_cache", "_C_cache_ops::reshape_and_cache_flash", args)
    assert got == {"shape": key, "block_size": cache[1], "dtype": "bf16", "kv_dtype": "uint8"}


def test_attention_heads(public_traces):
    args = first_op(public_traces / B200, "vllm::unified_attention_with_output")
    q, k = args["dims"][0], args["dims"][1]
    got = shape_kwargs("unified_attention", "vllm::unified_attention_with_output", args)
    assert (got["num_tokens"], got["num_query_heads"], got["head_size"], got["num_kv_heads"]) == (q[0], q[1], q[2], k[1])
    prefill = first_op(public_traces / SGL_PREFILL, "aiter::mha_batch_prefill")
    cu_seqlens_q = prefill["dims"][3]
    assert shape_kwargs("unified_attention", "aiter::mha_batch_prefill", prefill)["num_seqs"] == cu_seqlens_q[0] - 1 == 15


def test_paged_decode_from_sglang_capture(public_traces):
    args = first_op(public_traces / SGL_CAPTURE, "sglang_profiler::attention_paged_attention_ragged_100")
    q, cache = args["dims"][2], args["dims"][3]
    got = shape_kwargs("paged_attention_decode", "sglang_profiler::attention_paged_attention_ragged_100", args)
    assert got == {"num_seqs": q[0], "num_query_heads": q[1], "head_size": q[2], "num_kv_heads": cache[2], "block_size": cache[1], "dtype": "bf16"}


def test_silu_and_mul_takes_the_gate_up_input(public_traces):
    args = first_op(public_traces / SGL_PREFILL, "sgl_kernel::silu_and_mul")
    wide = max(args["dims"][:2], key=lambda d: d[1])
    assert shape_kwargs("silu_and_mul", "sgl_kernel::silu_and_mul", args) == {"shape": wide, "dtype": "bf16"}


def test_embedding(public_traces):
    args = first_op(public_traces / B200, "aten::embedding")
    weight, idx = args["dims"][:2]
    assert shape_kwargs("embedding", "aten::embedding", args) == {
        "token_count": math.prod(idx), "hidden_size": weight[1], "num_embeddings": weight[0], "dtype": "bf16"
    }


def test_canonical_json_is_sorted_and_compact():
    a = canonical_json({"n": 640, "m": 888, "k": 2880, "dtype": "bf16"})
    b = canonical_json({"dtype": "bf16", "k": 2880, "m": 888, "n": 640})
    assert a == b == '{"dtype":"bf16","k":2880,"m":888,"n":640}'
    assert json.loads(a) == {"dtype": "bf16", "k": 2880, "m": 888, "n": 640}


# Keys beyond the catalogue's parameter names (documented in ingest/shapes.py); `shape` is the
# generic fallback for an op without a dedicated extractor (e.g. an Inductor kernel in a MoE region).
EXTRA_KEYS = {"dtype", "b_dtype", "kv_dtype", "num_tokens", "num_seqs", "batch", "is_neox_style", "ctx_len", "shape"}


@pytest.mark.parametrize("rel", [B200, SGL_PREFILL, VLLM_PIECEWISE])
def test_shape_keys_use_catalogue_parameter_names(public_traces, atrex_dir, rel):
    path = public_traces / rel
    out = classify_events(read_events(path), read_captures(capture_traces_for(path)))
    for op_name, shape in out.filter(pl.col("shape") != "{}").select("operator", "shape").unique().rows():
        catalogue = atrex_dir / "data" / op_name / "shapes.json"
        if not catalogue.exists():
            continue  # gemm, embedding, communication, memcpy, memset: not catalogue operators
        names = set()
        for entry in json.loads(catalogue.read_text()).values():
            names |= set(entry.get("init_kwargs") or {}) | set(entry.get("input_kwargs") or {})
        assert set(json.loads(shape)) <= names | EXTRA_KEYS, (op_name, shape)
