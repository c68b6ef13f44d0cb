"""fp8_blockscale_fused_moe: fused_moe on fp8 e4m3 activations (per token, per 128-column scale a_scale) and fp8 weights
with 128x128 block scales (fc1_scale [E, 2I/128, H/128], fc2_scale [E, H/128, I/128]); bf16 out."""

from catalogue.operators._common import Smoke, cdiv, expected_distinct

INIT_KEYS = ("num_experts", "intermediate_size", "top_k")
INPUT_KEYS = ("token_count", "hidden_size", "intermediate_size", "num_experts", "top_k")
PATH = "fp8_tensor"
OUTPUTS = ("out",)
INPLACE: dict[str, str] = {}
TOLERANCE = {"atol": 2e-2, "rtol": 3e-2}
BLOCK = 128
SMOKE = (Smoke({"num_experts": 4, "intermediate_size": 128, "top_k": 2},
               {"token_count": 3, "hidden_size": 256, "intermediate_size": 128, "num_experts": 4, "top_k": 2}),)


def flops(*, token_count, hidden_size, intermediate_size, top_k, **_):
    """6·T·k·H·I on the fp8 path (scale multiplies are not counted)."""
    return 6 * token_count * top_k * hidden_size * intermediate_size


def bytes_read(*, token_count, hidden_size, intermediate_size, num_experts, top_k, **_):
    """fp8 hidden_states + a_scale, activated experts' fp8 weights + block scales, topk weights/ids."""
    n_act = expected_distinct(token_count, num_experts, top_k)
    hb, ib, i2b = cdiv(hidden_size, BLOCK), cdiv(intermediate_size, BLOCK), cdiv(2 * intermediate_size, BLOCK)
    per_expert = 3 * hidden_size * intermediate_size + 4 * (i2b * hb + hb * ib)
    return round(token_count * hidden_size + 4 * token_count * hb + n_act * per_expert + 8 * token_count * top_k)


def bytes_written(*, token_count, hidden_size, **_):
    """bf16 out [T, H]."""
    return 2 * token_count * hidden_size
