"""l2_norm: out = x * rsqrt(sum(x^2) + eps) per row (FLA l2norm; bf16 in/out)."""

from catalogue.operators._common import Smoke

INIT_KEYS = ("hidden_size",)
INPUT_KEYS = ("num_tokens", "hidden_size")
PATH = "fp32_vector"
OUTPUTS = ("out",)
INPLACE: dict[str, str] = {}
TOLERANCE = {"atol": 2e-2, "rtol": 2e-2}
SMOKE = (Smoke({"hidden_size": 64}, {"num_tokens": 9, "hidden_size": 64}),)


def flops(*, num_tokens, hidden_size, **_):
    """Square, sum, scale per element."""
    return 3 * num_tokens * hidden_size


def bytes_read(*, num_tokens, hidden_size, **_):
    """x, bf16."""
    return 2 * num_tokens * hidden_size


def bytes_written(*, num_tokens, hidden_size, **_):
    """out, bf16."""
    return 2 * num_tokens * hidden_size
