"""fused_qk_rmsnorm: per-head RMSNorm of the q and k parts of a packed [T, (Hq+2Hkv)*D] qkv row; v passes through."""

from catalogue.operators._common import Smoke, elt

INIT_KEYS = ("head_num", "kv_head_num", "size_per_head")
INPUT_KEYS = ("num_tokens", "head_num", "kv_head_num", "size_per_head", "dtype")
PATH = "fp32_vector"
OUTPUTS = ("out",)
INPLACE: dict[str, str] = {}
TOLERANCE = {"atol": 2e-2, "rtol": 2e-2}
SMOKE = (Smoke({"head_num": 4, "kv_head_num": 2, "size_per_head": 32},
               {"num_tokens": 3, "head_num": 4, "kv_head_num": 2, "size_per_head": 32, "dtype": "fp16"}),)


def flops(*, num_tokens, head_num, kv_head_num, size_per_head, **_):
    """rms_norm of every q and k head: 3 per element plus one rsqrt per head."""
    return num_tokens * (head_num + kv_head_num) * (3 * size_per_head + 1)


def bytes_read(*, num_tokens, head_num, kv_head_num, size_per_head, dtype="fp16", **_):
    """The packed qkv rows and the two D-long weights."""
    b = elt(dtype)
    return b * num_tokens * (head_num + 2 * kv_head_num) * size_per_head + 2 * b * size_per_head


def bytes_written(*, num_tokens, head_num, kv_head_num, size_per_head, dtype="fp16", **_):
    """The packed output rows (q, k normalised; v copied)."""
    return elt(dtype) * num_tokens * (head_num + 2 * kv_head_num) * size_per_head
