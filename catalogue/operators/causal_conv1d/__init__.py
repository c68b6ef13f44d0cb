"""causal_conv1d: depthwise causal conv over tokens of x [dim, T] with width-1 carried-in state, + bias, then silu."""

from catalogue.operators._common import Smoke

INIT_KEYS = ("activation",)
INPUT_KEYS = ("token_count", "dim", "width")
PATH = "fp32_vector"
OUTPUTS = ("out",)
INPLACE: dict[str, str] = {}
TOLERANCE = {"atol": 2e-2, "rtol": 2e-2}
SMOKE = (Smoke({"activation": "silu"}, {"token_count": 7, "dim": 16, "width": 4}),
         Smoke({"activation": None}, {"token_count": 1, "dim": 8, "width": 3}))


def flops(*, token_count, dim, width, **_):
    """A width-tap multiply-add per output (2*width) and silu (4)."""
    return token_count * dim * (2 * width + 4)


def bytes_read(*, token_count, dim, width, **_):
    """x, weight [dim, width], bias, initial_state [1, dim, width-1] (bf16)."""
    return 2 * (dim * token_count + dim * width + dim + dim * (width - 1))


def bytes_written(*, token_count, dim, **_):
    """out [dim, T], bf16."""
    return 2 * dim * token_count
