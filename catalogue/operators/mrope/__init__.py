"""mrope: multimodal (t, h, w) rotary embedding of q [T, Hq*D] and k [T, Hkv*D] from per-axis cos/sin [3, T, rd/2]."""

from catalogue.operators._common import Smoke

INIT_KEYS = ("head_size", "rotary_dim", "mrope_section", "mrope_interleaved", "is_neox_style")
INPUT_KEYS = ("token_count", "num_query_heads", "num_kv_heads", "head_size", "rotary_dim")
PATH = "fp32_vector"
OUTPUTS = ("q", "k")
# vLLM rotates q and k in place.
INPLACE = {"q": "q", "k": "k"}
TOLERANCE = {"atol": 2e-2, "rtol": 2e-2}
_INIT = {"head_size": 32, "rotary_dim": 32, "mrope_section": [4, 6, 6], "mrope_interleaved": False,
         "is_neox_style": True}
SMOKE = (Smoke(_INIT, {"token_count": 5, "num_query_heads": 4, "num_kv_heads": 1, "head_size": 32, "rotary_dim": 32}),
         Smoke(dict(_INIT, mrope_interleaved=True, is_neox_style=False),
               {"token_count": 4, "num_query_heads": 2, "num_kv_heads": 2, "head_size": 32, "rotary_dim": 32}))


def flops(*, token_count, num_query_heads, num_kv_heads, rotary_dim, **_):
    """3 per rotated element (two products and a sum)."""
    return 3 * token_count * (num_query_heads + num_kv_heads) * rotary_dim


def bytes_read(*, token_count, num_query_heads, num_kv_heads, head_size, rotary_dim, **_):
    """q, k (bf16) and the fp32 cos and sin tables [3, T, rd/2]."""
    return 2 * token_count * (num_query_heads + num_kv_heads) * head_size + 2 * 4 * 3 * token_count * (rotary_dim // 2)


def bytes_written(*, token_count, num_query_heads, num_kv_heads, head_size, **_):
    """Rotated q and k (bf16)."""
    return 2 * token_count * (num_query_heads + num_kv_heads) * head_size
