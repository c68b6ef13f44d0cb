"""fused_rmsnorm_quant: residual_out = x + residual; y = rms_norm(residual_out) * w; per-row dynamic fp8 quant of y."""

from catalogue.operators._common import Smoke

INIT_KEYS = ()
INPUT_KEYS = ("token_count", "hidden_size")
PATH = "fp32_vector"
OUTPUTS = ("quantized", "scale", "residual_out")
INPLACE = {"residual_out": "residual"}
TOLERANCE = {"atol": 2e-2, "rtol": 0.13}
SMOKE = (Smoke({}, {"token_count": 5, "hidden_size": 64}),)


def flops(*, token_count, hidden_size, **_):
    """Add (1) + rms_norm (3) + quant divide (1) per element; rsqrt and scale per row."""
    return token_count * (5 * hidden_size + 2)


def bytes_read(*, token_count, hidden_size, **_):
    """x, residual, weight (bf16)."""
    return 4 * token_count * hidden_size + 2 * hidden_size


def bytes_written(*, token_count, hidden_size, **_):
    """fp8 quantized, fp32 scale per row, bf16 residual_out."""
    return token_count * hidden_size + 4 * token_count + 2 * token_count * hidden_size
