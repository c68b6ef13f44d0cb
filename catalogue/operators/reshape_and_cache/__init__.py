"""reshape_and_cache: scatter key/value [T, Hkv, D] into key_cache/value_cache [blocks, bs, Hkv, D] at
slot_mapping (int64; -1 = skip). In place by contract: only the written slots are traffic."""

from catalogue.operators._common import Smoke

TRAITS = frozenset({"kv_cache_write"})

INIT_KEYS = ()
INPUT_KEYS = ("shape", "block_size")
PATH = "fp32_vector"
OUTPUTS = ("key_cache", "value_cache")
INPLACE = {"key_cache": "key_cache", "value_cache": "value_cache"}
TOLERANCE = {"atol": 0, "rtol": 0}
SMOKE = (Smoke({}, {"shape": [5, 2, 32], "block_size": 4}), Smoke({}, {"shape": [1, 4, 16], "block_size": 16}))


def flops(**_):
    """Pure data movement."""
    return 0


def bytes_read(*, shape, **_):
    """key and value (bf16) and the int64 slot mapping."""
    tokens, heads, dim = shape
    return 2 * 2 * tokens * heads * dim + 8 * tokens


def bytes_written(*, shape, **_):
    """One K and one V row per token into the caches (bf16)."""
    tokens, heads, dim = shape
    return 2 * 2 * tokens * heads * dim
