"""unified_attention: varlen causal attention of q [sum q_len, Hq, D] over a paged KV cache
[num_blocks, block_size, Hkv, D] through block_table; bottom-right causal mask (decode rows see all keys)."""

from catalogue.operators._common import Smoke, cdiv

TRAITS = frozenset({"attention", "paged_kv"})
INIT_KEYS = ()
INPUT_KEYS = ("num_seqs", "seq_lens", "num_query_heads", "num_kv_heads", "head_size", "block_size")
PATH = "bf16_tensor"
OUTPUTS = ("out",)
INPLACE: dict[str, str] = {}
TOLERANCE = {"atol": 2e-2, "rtol": 2e-2}
SMOKE = (Smoke({}, {"num_seqs": 2, "seq_lens": [5, 20], "num_query_heads": 4, "num_kv_heads": 2,
                    "head_size": 32, "block_size": 8}),
         Smoke({}, {"num_seqs": 1, "seq_lens": [3], "num_query_heads": 2, "num_kv_heads": 1,
                    "head_size": 64, "block_size": 16}))



def phase_of_shape(shape: dict) -> str | None:
    """Prefill for a complete problem (its queries are all its tokens, q_len == kv_len); for a call that names
    only its counts, decode when there is one token per sequence."""
    if isinstance(shape.get("seq_lens"), list) and shape["seq_lens"]:
        return "prefill"
    seqs, tokens = shape.get("num_seqs"), shape.get("num_tokens")
    if isinstance(seqs, int) and isinstance(tokens, int) and seqs > 0:
        return "decode" if tokens == seqs else None
    return None


def _q_lens(seq_lens, query_lens):
    return list(query_lens) if query_lens is not None else list(seq_lens)


def flops(*, seq_lens, num_query_heads, head_size, query_lens=None, **_):
    """4·Hq·D per causal (query, key) pair: q(kv-q) + q(q+1)/2 per sequence."""
    pairs = sum(q * (kv - q) + q * (q + 1) // 2 for q, kv in zip(_q_lens(seq_lens, query_lens), seq_lens))
    return 4 * num_query_heads * head_size * pairs


def bytes_read(*, seq_lens, num_query_heads, num_kv_heads, head_size, block_size, query_lens=None, **_):
    """q, the used KV tokens only, cu_seqlens_q [B+1], seqused_k [B] and the used block-table entries."""
    q_tokens = sum(_q_lens(seq_lens, query_lens))
    kv_tokens = sum(seq_lens)
    blocks = sum(cdiv(L, block_size) for L in seq_lens)
    return (2 * q_tokens * num_query_heads * head_size + 2 * 2 * kv_tokens * num_kv_heads * head_size
            + 4 * (len(seq_lens) + 1) + 4 * len(seq_lens) + 4 * blocks)


def bytes_written(*, seq_lens, num_query_heads, head_size, query_lens=None, **_):
    """out [sum q_len, Hq, D] bf16."""
    return 2 * sum(_q_lens(seq_lens, query_lens)) * num_query_heads * head_size
