"""gemm: out = a @ b^T with a [M, K], b [N, K] (weight layout). dtype bf16/fp16 (out in that dtype) or fp8_e4m3
with scaling per_tensor (scalar a_scale, b_scale) or per_row (a_scale [M], b_scale [N]); fp8 out is bf16."""

from catalogue.operators._common import Smoke, TENSOR_PATH, elt

TRAITS = frozenset({"dense_gemm"})

INIT_KEYS = ("scaling",)
# scaling is both: the Model applies it and make_inputs draws the matching scales.
INPUT_KEYS = ("m", "n", "k", "dtype", "scaling")
OUTPUTS = ("out",)
INPLACE: dict[str, str] = {}
TOLERANCE = {"atol": 2e-2, "rtol": 2e-2}
SCALINGS = ("none", "per_tensor", "per_row")
SMOKE = (Smoke({"scaling": "none"}, {"m": 5, "n": 24, "k": 32, "dtype": "bf16", "scaling": "none"}),
         Smoke({"scaling": "none"}, {"m": 3, "n": 16, "k": 16, "dtype": "fp16", "scaling": "none"}),
         Smoke({"scaling": "per_tensor"}, {"m": 4, "n": 32, "k": 64, "dtype": "fp8_e4m3", "scaling": "per_tensor"}),
         Smoke({"scaling": "per_row"}, {"m": 6, "n": 16, "k": 32, "dtype": "fp8_e4m3", "scaling": "per_row"}))


def check(*, scaling="none", dtype="bf16", **_):
    """Reject a scaling/dtype combination the operator does not define."""
    if scaling not in SCALINGS:
        raise ValueError(f"gemm: scaling {scaling!r} is not one of {SCALINGS}")
    if (scaling == "none") != (dtype in ("bf16", "fp16")):
        raise ValueError(f"gemm: scaling {scaling!r} does not go with dtype {dtype!r}")


def path(*, dtype="bf16", **_):
    """Tensor path of the operand dtype."""
    return TENSOR_PATH[dtype]


def flops(*, m, n, k, **_):
    """2MNK."""
    return 2 * m * n * k


def bytes_read(*, m, n, k, dtype="bf16", scaling="none", **_):
    """a, b and the fp32 scales."""
    check(scaling=scaling, dtype=dtype)
    scales = {"none": 0, "per_tensor": 8, "per_row": 4 * (m + n)}[scaling]
    return elt(dtype) * (m * k + n * k) + scales


def bytes_written(*, m, n, dtype="bf16", **_):
    """out [M, N]: the operand dtype, bf16 for fp8."""
    return (2 if dtype.startswith("fp8") else elt(dtype)) * m * n
