"""convolution: 2-D forward convolution out[N, K, P, Q] of x[N, C, H, W] with weight[K, C/groups, R, S]
(stride, padding, dilation per spatial dim, as [h, w]); out in the input dtype. No torch reference yet: a
shaped problem the fleet runs, not a benchmarkable one (catalogue.operators.MODELLED_OPERATORS)."""

from catalogue.operators._common import Smoke, TENSOR_PATH, elt

TRAITS = frozenset({"hosts_gemm_kernels"})

INIT_KEYS = ("K", "C", "R", "S", "stride", "padding", "dilation", "groups")
INPUT_KEYS = ("N", "C", "H", "W", "dtype")
OUTPUTS = ("out",)
INPLACE: dict[str, str] = {}
TOLERANCE = {"atol": 2e-2, "rtol": 2e-2}
SMOKE = (Smoke({"K": 8, "C": 4, "R": 3, "S": 3, "stride": [1, 1], "padding": [1, 1], "dilation": [1, 1], "groups": 1},
               {"N": 2, "C": 4, "H": 8, "W": 8, "dtype": "bf16"}),
         Smoke({"K": 8, "C": 8, "R": 3, "S": 3, "stride": [2, 2], "padding": [1, 1], "dilation": [1, 1], "groups": 8},
               {"N": 1, "C": 8, "H": 9, "W": 7, "dtype": "fp16"}))


def output_hw(*, H, W, R, S, stride=(1, 1), padding=(0, 0), dilation=(1, 1), **_) -> tuple[int, int]:
    """(P, Q): the output height and width."""
    p = (H + 2 * padding[0] - dilation[0] * (R - 1) - 1) // stride[0] + 1
    q = (W + 2 * padding[1] - dilation[1] * (S - 1) - 1) // stride[1] + 1
    return p, q


def check(*, C, K, groups=1, **kw):
    """Reject channel counts the groups do not divide, and an empty output."""
    if groups < 1 or C % groups or K % groups:
        raise ValueError(f"convolution: groups {groups} must divide C {C} and K {K}")
    if min(output_hw(**kw)) < 1:
        raise ValueError("convolution: the kernel does not fit the padded input")


def path(*, dtype="bf16", **_):
    """Implicit GEMM on the tensor path of the operand dtype."""
    return TENSOR_PATH[dtype]


def flops(*, N, C, K, R, S, groups=1, **kw):
    """2 · N·K·P·Q · (C/groups)·R·S: one multiply-add per weight tap per output element."""
    p, q = output_hw(R=R, S=S, **kw)
    return 2 * N * K * p * q * (C // groups) * R * S


def bytes_read(*, N, C, H, W, K, R, S, groups=1, dtype="bf16", **_):
    """x and the weight, once each."""
    return elt(dtype) * (N * C * H * W + K * (C // groups) * R * S)


def bytes_written(*, N, K, R, S, dtype="bf16", **kw):
    """out [N, K, P, Q]."""
    p, q = output_hw(R=R, S=S, **kw)
    return elt(dtype) * N * K * p * q
