"""attention_forward: varlen bidirectional (vision-encoder) attention; q, k, v [sum L, H, D] bf16 with cu_seqlens."""

from catalogue.operators._common import Smoke

TRAITS = frozenset({"attention"})
INIT_KEYS = ()
INPUT_KEYS = ("num_heads", "head_dim", "seq_lens")
PATH = "bf16_tensor"
OUTPUTS = ("out",)
INPLACE: dict[str, str] = {}
TOLERANCE = {"atol": 2e-2, "rtol": 2e-2}
SMOKE = (Smoke({}, {"num_heads": 2, "head_dim": 32, "seq_lens": [5, 9]}),
         Smoke({}, {"num_heads": 4, "head_dim": 72, "seq_lens": [1]}))



def phase_of_shape(shape: dict) -> str | None:
    """SDPA / flash / efficient attention: `seq_lens` are the query lengths of the batch. Only autoregressive
    attention is a serving phase: queries reading a longer cache (decode, chunked prefill) or a causal mask.
    Bidirectional attention (diffusion, vision and text encoders) is not."""
    q_lens = shape.get("seq_lens")
    if isinstance(q_lens, list) and q_lens and all(isinstance(q, int) for q in q_lens):
        if max(q_lens) == 1 and "kv_lens" in shape:
            return "decode"
        if "kv_lens" in shape or shape.get("is_causal") is True:
            return "prefill"
    return None


def flops(*, num_heads, head_dim, seq_lens, **_):
    """4·H·D per (query, key) pair; every pair within a sequence is attended (no mask)."""
    return 4 * num_heads * head_dim * sum(L * L for L in seq_lens)


def bytes_read(*, num_heads, head_dim, seq_lens, **_):
    """q, k, v (bf16) and the two int32 cu_seqlens."""
    return 3 * 2 * sum(seq_lens) * num_heads * head_dim + 2 * 4 * (len(seq_lens) + 1)


def bytes_written(*, num_heads, head_dim, seq_lens, **_):
    """out (bf16)."""
    return 2 * sum(seq_lens) * num_heads * head_dim
