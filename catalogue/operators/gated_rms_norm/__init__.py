"""gated_rms_norm: out = rms_norm(x) * weight * act(z) (norm_before_gate) or rms_norm(x * act(z)) * weight."""

from catalogue.operators._common import Smoke

INIT_KEYS = ("eps", "norm_before_gate", "activation")
INPUT_KEYS = ("rows", "hidden_size")
PATH = "fp32_vector"
OUTPUTS = ("out",)
INPLACE: dict[str, str] = {}
TOLERANCE = {"atol": 2e-2, "rtol": 2e-2}
SMOKE = (Smoke({"eps": 1e-6, "norm_before_gate": True, "activation": "silu"}, {"rows": 8, "hidden_size": 32}),
         Smoke({"eps": 1e-6, "norm_before_gate": False, "activation": "sigmoid"}, {"rows": 3, "hidden_size": 32}))


def flops(*, rows, hidden_size, **_):
    """rms_norm (3) + silu (4) + gate product (1) per element, one rsqrt per row."""
    return rows * (8 * hidden_size + 1)


def bytes_read(*, rows, hidden_size, **_):
    """x, z and weight (bf16)."""
    return 4 * rows * hidden_size + 2 * hidden_size


def bytes_written(*, rows, hidden_size, **_):
    """out, bf16."""
    return 2 * rows * hidden_size
