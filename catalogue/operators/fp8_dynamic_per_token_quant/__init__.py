"""fp8_dynamic_per_token_quant: scale = amax(|x|)/fp8_max per row; q = fp8(x / scale) (bf16 in)."""

from catalogue.operators._common import Smoke

INIT_KEYS = ()
INPUT_KEYS = ("token_count", "hidden_size")
PATH = "fp32_vector"
OUTPUTS = ("q", "scale")
INPLACE: dict[str, str] = {}
# fp8 e4m3 has 3 mantissa bits: one rounding step is 1/8 relative; compare dequantised values.
TOLERANCE = {"atol": 1e-3, "rtol": 0.13}
SMOKE = (Smoke({}, {"token_count": 4, "hidden_size": 64}),)


def flops(*, token_count, hidden_size, **_):
    """One scale multiply per element and one reciprocal per row (abs/max are not FLOPs)."""
    return token_count * (hidden_size + 1)


def bytes_read(*, token_count, hidden_size, **_):
    """x, bf16."""
    return 2 * token_count * hidden_size


def bytes_written(*, token_count, hidden_size, **_):
    """fp8 q and one fp32 scale per row."""
    return token_count * hidden_size + 4 * token_count
