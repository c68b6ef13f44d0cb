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
    assert args["concrete"][5] == "True"  # neox, as the registry's reference rotates: no flag in the key
    assert shape_kwargs("fused_qkv_rope", "_C::rotary_embedding", args) == {
        "total_tokens": positions[0],
        "num_heads": q[1] // head,
        "num_kv_heads": k[1] // head,
        "head_dim": head,
        "rope_dim": cache[1],
        "dtype": "bf16",
    }
    gptj = dict(args, concrete=args["concrete"][:5] + ["False"])
    assert shape_kwargs("fused_qkv_rope", "_C::rotary_embedding", gptj)["is_neox_style"] is False


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
        "token_count": math.prod(idx), "hidden_size": weight[1], "vocab_size": weight[0], "dtype": "bf16"
    }


VLLM_FULL = "tracelens/inference/vllm_decode_full/capture_traces/graph_capture_rank_0.1773709742341309550.pt.trace.json.gz"


def test_sglang_store_cache_heads_from_set_kv_buffer(public_traces):
    # store_cache sees flat rows [T, Hkv·D] into a one-token-per-slot pool; the enclosing
    # set_kv_buffer range recorded the [T, Hkv, D] split.
    store = first_op(public_traces / SGL_PREFILL, "sglang::store_cache")
    outer = next((n, a) for n, a in _named_ops(public_traces / SGL_PREFILL) if "set_kv_buffer" in n)
    key, _, pool = store["dims"][:3]
    split = outer[1]["dims"][0]
    assert len(key) == len(pool) == 2 and pool[1] == key[1] == split[1] * split[2] and split[0] == key[0]
    got = shape_kwargs("reshape_and_cache", "sglang::store_cache", store, [outer, ("sglang::store_cache", store)])
    assert got == {"shape": split, "block_size": 1, "dtype": "bf16"}
    assert shape_kwargs("reshape_and_cache", "sglang::store_cache", store)["shape"] == key  # without it: flat


def test_vllm_routing_top_k_from_its_topk_op(public_traces):
    moe = first_op(public_traces / VLLM_FULL, "vllm::moe_forward")
    topk = first_op(public_traces / VLLM_FULL, "TopK")
    logits = moe["dims"][1]
    chain = [("vllm::moe_forward", moe), ("TopK", topk)]
    got = shape_kwargs("moe_topk_gating_softmax", "vllm::moe_forward", moe, chain)
    assert got == {"token_count": logits[0], "num_experts": logits[1], "top_k": int(topk["concrete"][1])}


def _named_ops(path):
    first_op(path, "sglang::store_cache")  # fills the cache
    for e in _cache[path]:
        a = e["args"]
        yield e["name"], {"dims": a["Input Dims"], "types": a["Input type"], "concrete": a.get("Concrete Inputs")}


def test_canonical_json_is_sorted_and_compact():
    a = canonical_json({"n": 640, "m": 888, "k": 2880, "dtype": "bf16"})
    b = canonical_json({"dtype": "bf16", "k": 2880, "m": 888, "n": 640})
    assert a == b == '{"dtype":"bf16","k":2880,"m":888,"n":640}'
    assert json.loads(a) == {"dtype": "bf16", "k": 2880, "m": 888, "n": 640}


# Keys beyond the catalogue's parameter names (documented in ingest/shapes.py); `shape` is the
# generic fallback for an op without a dedicated extractor (e.g. an Inductor kernel in a MoE region).
EXTRA_KEYS = {"dtype", "b_dtype", "kv_dtype", "num_tokens", "num_seqs", "batch", "ctx_len", "shape"}


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


VLLM_DECODE = "tracelens/inference/vllm_decode_full/graph_execution.json.gz"


def _classified(public_traces, rel) -> pl.DataFrame:
    path = public_traces / rel
    return classify_events(read_events(path), read_captures(capture_traces_for(path)))


def _step_sums(chain) -> dict:
    """The TraceLens vLLM-style step name's numbers, read with a regex of the test's own."""
    import re

    name = next(c for c in chain if c.startswith("execute_"))
    m = re.match(r"execute_(\d+)_context_(\d+)\(sq(\d+)sk(\d+)sqsq(\d+)sqsk(\d+)\)_generation_(\d+)\(sq(\d+)sk(\d+)", name)
    keys = ("tokens", "ctx", "cq", "ck", "cqq", "cqk", "gen", "gq", "gk")
    return dict(zip(keys, map(int, m.groups())))


def test_sglang_extend_step_of_equal_prompts_is_a_unified_attention_problem(public_traces):
    out = _classified(public_traces, SGL_PREFILL).filter(pl.col("kernel").str.contains("FmhaBatchPrefill"))
    assert out.height and set(out["operator"]) == {"unified_attention"}
    for shape, chain in out.select("shape", "op_chain").unique().rows():
        n = _step_sums(chain)
        # Σk = Σq (no cached prefix) and n·Σq² = (Σq)² (no spread): n prompts of Σq/n tokens each.
        assert n["ck"] == n["cq"] and n["ctx"] * n["cqq"] == n["cq"] ** 2 and n["gen"] == 0
        s = json.loads(shape)
        assert s["seq_lens"] == [n["cq"] // n["ctx"]] * n["ctx"] and s["num_seqs"] == n["ctx"]
        assert s["block_size"] == 1  # SGLang's token pool, as its store_cache rows show


def test_vllm_decode_step_is_a_paged_decode_problem(public_traces):
    out = _classified(public_traces, VLLM_DECODE).filter(pl.col("kernel").str.contains("unified_attention"))
    assert out.height and set(out["operator"]) == {"paged_attention_decode"}
    cache = _classified(public_traces, VLLM_DECODE).filter(pl.col("operator") == "reshape_and_cache")
    (block_size,) = {json.loads(s)["block_size"] for s in cache["shape"]}
    for shape, chain in out.select("shape", "op_chain").unique().rows():
        n = _step_sums(chain)
        assert n["ctx"] == 0 and n["gq"] == n["gen"] == n["tokens"]  # one query per request
        s = json.loads(shape)
        assert (s["num_seqs"], s["ctx_len"], s["block_size"]) == (n["gen"], round(n["gk"] / n["gen"]), block_size)


def test_upstream_vllm_single_prompt_is_a_unified_attention_problem(public_traces):
    # Upstream names carry (Σq_Σq·k): one request with Σq·k = q² read its own q tokens only.
    import re

    out = _classified(public_traces, B200).filter(pl.col("operator") == "unified_attention")
    assert out.height
    for shape, chain in out.select("shape", "op_chain").unique().rows():
        name = next(c for c in chain if c.startswith("execute_"))
        reqs, q, qk = map(int, re.match(r"execute_context_(\d+)\((\d+)_(\d+)\)_generation_0\(0\)$", name).groups())
        assert reqs == 1 and qk == q * q
        s = json.loads(shape)
        assert (s["num_seqs"], s["seq_lens"], s["kv_dtype"]) == (1, [q], "bf16")
