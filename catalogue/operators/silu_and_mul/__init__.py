"""silu_and_mul: x = [gate | up] on the last dim; out = silu(gate) * up (bf16)."""

from math import prod

from catalogue.operators._common import Smoke

INIT_KEYS = ()
INPUT_KEYS = ("shape",)
PATH = "fp32_vector"
OUTPUTS = ("out",)
INPLACE: dict[str, str] = {}
TOLERANCE = {"atol": 2e-2, "rtol": 2e-2}
SMOKE = (Smoke({}, {"shape": [5, 96]}), Smoke({}, {"shape": [1, 2, 32]}))


def _rows_half(shape):
    return prod(shape[:-1]), shape[-1] // 2


def flops(*, shape, **_):
    """silu (4) and the product (1) per output element."""
    rows, half = _rows_half(shape)
    return 5 * rows * half


def bytes_read(*, shape, **_):
    """x, bf16."""
    return 2 * prod(shape)


def bytes_written(*, shape, **_):
    """out (half the last dim), bf16."""
    rows, half = _rows_half(shape)
    return 2 * rows * half
