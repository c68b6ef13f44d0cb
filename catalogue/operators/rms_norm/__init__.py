"""rms_norm: out = x * rsqrt(mean(x^2) + eps) * weight per row (fp32 math, bf16 in/out)."""

from catalogue.operators._common import Smoke

INIT_KEYS = ("eps",)
INPUT_KEYS = ("token_count", "hidden_size")
PATH = "fp32_vector"
OUTPUTS = ("out",)
INPLACE: dict[str, str] = {}
TOLERANCE = {"atol": 2e-2, "rtol": 2e-2}
SMOKE = (Smoke({"eps": 1e-6}, {"token_count": 7, "hidden_size": 64}),
         Smoke({"eps": 1e-6}, {"token_count": 1, "hidden_size": 128}))


def flops(*, token_count, hidden_size, **_):
    """Square, sum and normalise-multiply per element (3), one rsqrt per row."""
    return token_count * (3 * hidden_size + 1)


def bytes_read(*, token_count, hidden_size, **_):
    """x and weight, bf16."""
    return 2 * token_count * hidden_size + 2 * hidden_size


def bytes_written(*, token_count, hidden_size, **_):
    """out, bf16."""
    return 2 * token_count * hidden_size
