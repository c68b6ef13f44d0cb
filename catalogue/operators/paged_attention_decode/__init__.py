"""paged_attention_decode: one query token per sequence over a vLLM-layout paged cache
(k_cache [blocks, Hkv, D/x, bs, x], v_cache [blocks, Hkv, D, bs]); GQA; scale D^-0.5."""

from catalogue.operators._common import Smoke, TENSOR_PATH, cdiv, elt

TRAITS = frozenset({"attention", "paged_kv"})
INIT_KEYS = ()
INPUT_KEYS = ("num_seqs", "ctx_len", "num_query_heads", "num_kv_heads", "head_size", "block_size", "dtype")
OUTPUTS = ("out",)
INPLACE: dict[str, str] = {}
TOLERANCE = {"atol": 2e-2, "rtol": 2e-2}
SMOKE = (Smoke({}, {"num_seqs": 3, "ctx_len": 20, "num_query_heads": 4, "num_kv_heads": 2, "head_size": 32,
                    "block_size": 8, "dtype": "bf16"}),
         Smoke({}, {"num_seqs": 2, "ctx_len": 9, "num_query_heads": 2, "num_kv_heads": 2, "head_size": 64,
                    "block_size": 16, "dtype": "fp16"}))



def phase_of_shape(shape: dict) -> str | None:
    """Decode: one query token per sequence, whatever the shape."""
    return "decode"


def path(*, dtype="bf16", **_):
    """Tensor path of the cache dtype."""
    return TENSOR_PATH[dtype]


def flops(*, num_seqs, ctx_len, num_query_heads, head_size, **_):
    """4·Hq·D per (sequence, context token)."""
    return 4 * num_query_heads * head_size * num_seqs * ctx_len


def bytes_read(*, num_seqs, ctx_len, num_query_heads, num_kv_heads, head_size, block_size, dtype="bf16", **_):
    """query, the ctx_len used K and V tokens per sequence, used block-table entries, seq_lens."""
    b = elt(dtype)
    return (b * num_seqs * num_query_heads * head_size + 2 * b * num_seqs * ctx_len * num_kv_heads * head_size
            + 4 * num_seqs * cdiv(ctx_len, block_size) + 4 * num_seqs)


def bytes_written(*, num_seqs, num_query_heads, head_size, dtype="bf16", **_):
    """out [B, Hq, D]."""
    return elt(dtype) * num_seqs * num_query_heads * head_size
