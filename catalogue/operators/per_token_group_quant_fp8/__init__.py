"""per_token_group_quant_fp8: per (row, group of G) scale = amax/fp8_max (min 1e-10); q = fp8(x / scale)."""

from catalogue.operators._common import Smoke

INIT_KEYS = ("group_size",)
INPUT_KEYS = ("token_count", "hidden_size")
PATH = "fp32_vector"
OUTPUTS = ("quantized", "scales")
INPLACE: dict[str, str] = {}
TOLERANCE = {"atol": 1e-3, "rtol": 0.13}
SMOKE = (Smoke({"group_size": 32}, {"token_count": 3, "hidden_size": 128}),)


def flops(*, token_count, hidden_size, group_size, **_):
    """One divide per element and one per group."""
    return token_count * hidden_size + token_count * hidden_size // group_size


def bytes_read(*, token_count, hidden_size, **_):
    """x, bf16."""
    return 2 * token_count * hidden_size


def bytes_written(*, token_count, hidden_size, group_size, **_):
    """fp8 quantized values and fp32 scales [T, H/G]."""
    return token_count * hidden_size + 4 * token_count * hidden_size // group_size
