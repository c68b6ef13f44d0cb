"""layer_norm: affine LayerNorm over the last dim of x (bf16 in/out, fp32 math, eps 1e-5)."""

from math import prod

from catalogue.operators._common import Smoke

INIT_KEYS = ()
INPUT_KEYS = ("shape",)
PATH = "fp32_vector"
OUTPUTS = ("out",)
INPLACE: dict[str, str] = {}
TOLERANCE = {"atol": 3e-2, "rtol": 2e-2}
SMOKE = (Smoke({}, {"shape": [6, 1, 48]}), Smoke({}, {"shape": [1, 64]}))


def flops(*, shape, **_):
    """Mean, centre, square, variance, normalise, scale, shift: 7 per element."""
    return 7 * prod(shape)


def bytes_read(*, shape, **_):
    """x, weight and bias (bf16)."""
    return 2 * prod(shape) + 4 * shape[-1]


def bytes_written(*, shape, **_):
    """out, bf16."""
    return 2 * prod(shape)
