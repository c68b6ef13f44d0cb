"""batch_norm: training-mode BatchNorm of x[N, C, *spatial] (statistics per channel over N and the spatial
dims, then normalise, scale, shift); fp32 math, out in the input dtype. No torch reference yet (a modelled,
not benchmarkable, operator)."""

from math import prod

from catalogue.operators._common import Smoke, elt

INIT_KEYS = ()
INPUT_KEYS = ("shape", "dtype")
PATH = "fp32_vector"
OUTPUTS = ("out",)
INPLACE: dict[str, str] = {}
TOLERANCE = {"atol": 3e-2, "rtol": 2e-2}
SMOKE = (Smoke({}, {"shape": [2, 4, 3, 3], "dtype": "bf16"}), Smoke({}, {"shape": [3, 8], "dtype": "fp32"}))


def flops(*, shape, **_):
    """Sum, sum of squares, centre, normalise, scale, shift: 7 per element (as layer_norm)."""
    return 7 * prod(shape)


def bytes_read(*, shape, dtype="bf16", **_):
    """x twice (a statistics pass, then the normalising pass) and fp32 weight, bias, running mean and var."""
    return 2 * elt(dtype) * prod(shape) + 4 * 4 * shape[1]


def bytes_written(*, shape, dtype="bf16", **_):
    """out, plus fp32 saved mean and inverse std per channel."""
    return elt(dtype) * prod(shape) + 2 * 4 * shape[1]
