"""group_norm: GroupNorm of x[N, C, *spatial] with num_groups groups of channels (statistics per sample and
group), then per-channel scale and shift; fp32 math, out in the input dtype. No torch reference yet (a
modelled, not benchmarkable, operator)."""

from math import prod

from catalogue.operators._common import Smoke, elt

TRAITS = frozenset({"not_serving"})
INIT_KEYS = ("num_groups",)
INPUT_KEYS = ("shape", "dtype")
PATH = "fp32_vector"
OUTPUTS = ("out",)
INPLACE: dict[str, str] = {}
TOLERANCE = {"atol": 3e-2, "rtol": 2e-2}
SMOKE = (Smoke({"num_groups": 2}, {"shape": [2, 4, 3, 3], "dtype": "bf16"}),
         Smoke({"num_groups": 4}, {"shape": [1, 8, 16], "dtype": "fp16"}))


def check(*, shape, num_groups, **_):
    """Reject a group count that does not divide the channels."""
    if num_groups < 1 or shape[1] % num_groups:
        raise ValueError(f"group_norm: num_groups {num_groups} must divide C {shape[1]}")


def flops(*, shape, **_):
    """Sum, sum of squares, centre, normalise, scale, shift: 7 per element."""
    return 7 * prod(shape)


def bytes_read(*, shape, dtype="bf16", **_):
    """x and the weight and bias (in x's dtype)."""
    return elt(dtype) * (prod(shape) + 2 * shape[1])


def bytes_written(*, shape, dtype="bf16", **_):
    """out."""
    return elt(dtype) * prod(shape)
