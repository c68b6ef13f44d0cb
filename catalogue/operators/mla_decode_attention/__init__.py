"""mla_decode_attention: DeepSeek MLA decode over the latent cache: q [B, h, r+rope], kv_cache [sum L, 1, r+rope]
(K = full row, V = first r columns), out [B, h, r]; scale (r+rope)^-0.5."""

from catalogue.operators._common import Smoke

TRAITS = frozenset({"attention"})
INIT_KEYS = ("nhead", "kv_lora_rank", "qk_rope_head_dim")
INPUT_KEYS = ("batch_size", "ctx_len", "nhead", "kv_lora_rank", "qk_rope_head_dim")
PATH = "bf16_tensor"
OUTPUTS = ("out",)
INPLACE: dict[str, str] = {}
TOLERANCE = {"atol": 2e-2, "rtol": 2e-2}
SMOKE = (Smoke({"nhead": 4, "kv_lora_rank": 64, "qk_rope_head_dim": 16},
               {"batch_size": 2, "ctx_len": 10, "nhead": 4, "kv_lora_rank": 64, "qk_rope_head_dim": 16}),)



def phase_of_shape(shape: dict) -> str | None:
    """Decode: one query token per sequence, whatever the shape."""
    return "decode"


def flops(*, batch_size, ctx_len, nhead, kv_lora_rank, qk_rope_head_dim, **_):
    """2·B·L·h·(d_qk + d_v) with d_qk = r + rope, d_v = r (FlashMLA's count)."""
    return 2 * batch_size * ctx_len * nhead * (2 * kv_lora_rank + qk_rope_head_dim)


def bytes_read(*, batch_size, ctx_len, nhead, kv_lora_rank, qk_rope_head_dim, **_):
    """q, each latent cache row once (shared by all heads), int32 seq_lens."""
    d = kv_lora_rank + qk_rope_head_dim
    return 2 * batch_size * nhead * d + 2 * batch_size * ctx_len * d + 4 * batch_size


def bytes_written(*, batch_size, nhead, kv_lora_rank, **_):
    """out [B, h, r] bf16."""
    return 2 * batch_size * nhead * kv_lora_rank
