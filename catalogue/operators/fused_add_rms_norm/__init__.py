"""fused_add_rms_norm: residual = x + residual; out = rms_norm(residual) * weight (bf16)."""

from catalogue.operators._common import Smoke

INIT_KEYS = ("eps",)
INPUT_KEYS = ("token_count", "hidden_size")
PATH = "fp32_vector"
OUTPUTS = ("out", "residual")
# vLLM updates x and residual in place; a candidate may write its outputs there.
INPLACE = {"out": "x", "residual": "residual"}
TOLERANCE = {"atol": 2e-2, "rtol": 2e-2}
SMOKE = (Smoke({"eps": 1e-6}, {"token_count": 6, "hidden_size": 64}),)


def flops(*, token_count, hidden_size, **_):
    """Add, square, sum, normalise-multiply per element (4), one rsqrt per row."""
    return token_count * (4 * hidden_size + 1)


def bytes_read(*, token_count, hidden_size, **_):
    """x, residual, weight (bf16)."""
    return 4 * token_count * hidden_size + 2 * hidden_size


def bytes_written(*, token_count, hidden_size, **_):
    """out and the updated residual (bf16)."""
    return 4 * token_count * hidden_size
