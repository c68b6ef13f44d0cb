"""fused_qkv_rope: split packed qkv (+ optional bias), apply neox RoPE (cos/sin from positions) to q and k."""

from catalogue.operators._common import Smoke, elt

TRAITS = frozenset({"qkv_rotary"})

INIT_KEYS = ("num_heads", "num_kv_heads", "head_dim", "rope_dim")
INPUT_KEYS = ("total_tokens", "num_heads", "num_kv_heads", "head_dim", "dtype")
PATH = "fp32_vector"
OUTPUTS = ("q", "k", "v")
INPLACE: dict[str, str] = {}
TOLERANCE = {"atol": 2e-2, "rtol": 2e-2}
SMOKE = (Smoke({"num_heads": 4, "num_kv_heads": 2, "head_dim": 32, "rope_dim": 32},
               {"total_tokens": 5, "num_heads": 4, "num_kv_heads": 2, "head_dim": 32, "dtype": "bf16"}),
         Smoke({"num_heads": 2, "num_kv_heads": 1, "head_dim": 32, "rope_dim": 16},
               {"total_tokens": 3, "num_heads": 2, "num_kv_heads": 1, "head_dim": 32, "dtype": "fp16"}))


def flops(*, total_tokens, num_heads, num_kv_heads, rope_dim, **_):
    """3 per rotated element of q and k, plus the rotary angles (rope_dim/2 per token, 2 per frequency)."""
    half = rope_dim // 2
    return 3 * total_tokens * (num_heads + num_kv_heads) * rope_dim + half * (total_tokens + 2)


def bytes_read(*, total_tokens, num_heads, num_kv_heads, head_dim, dtype="bf16", **_):
    """Packed qkv rows and int32 positions (the catalogue's problems carry no bias)."""
    return elt(dtype) * total_tokens * (num_heads + 2 * num_kv_heads) * head_dim + 4 * total_tokens


def bytes_written(*, total_tokens, num_heads, num_kv_heads, head_dim, dtype="bf16", **_):
    """q, k and v as separate tensors."""
    return elt(dtype) * total_tokens * (num_heads + 2 * num_kv_heads) * head_dim
