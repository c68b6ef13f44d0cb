"""block_scaled_mm: out[m, n] = sum over K blocks of (a_blk @ b_blk^T) * a_scales[m, kb] * b_scales[nb, kb];
a [M, K] and b [N, K] fp8 e4m3, scales fp32, out fp32."""

from catalogue.operators._common import Smoke, cdiv

INIT_KEYS = ("group_n", "group_k")
INPUT_KEYS = ("m", "n", "k", "group_n", "group_k")
PATH = "fp8_tensor"
OUTPUTS = ("out",)
INPLACE: dict[str, str] = {}
TOLERANCE = {"atol": 1e-2, "rtol": 1e-2}
SMOKE = (Smoke({"group_n": 32, "group_k": 32}, {"m": 5, "n": 64, "k": 96, "group_n": 32, "group_k": 32}),)


def flops(*, m, n, k, group_k, **_):
    """2MNK for the products, plus rescaling each K block's partial sum by two scales and accumulating it
    (3 per output per block, less the first accumulate)."""
    return 2 * m * n * k + (3 * cdiv(k, group_k) - 1) * m * n


def bytes_read(*, m, n, k, group_n, group_k, **_):
    """fp8 a and b, fp32 a_scales [M, K/gk] and b_scales [N/gn, K/gk]."""
    kb = cdiv(k, group_k)
    return m * k + n * k + 4 * m * kb + 4 * cdiv(n, group_n) * kb


def bytes_written(*, m, n, **_):
    """fp32 out [M, N]."""
    return 4 * m * n
