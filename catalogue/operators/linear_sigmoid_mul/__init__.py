"""linear_sigmoid_mul: out = sigmoid(hidden_states @ weight^T + bias) * post_mul_mat (bf16; Qwen2-MoE shared gate)."""

from catalogue.operators._common import Smoke

INIT_KEYS = ()
INPUT_KEYS = ("token_count", "hidden_size", "out_features")
PATH = "bf16_tensor"
OUTPUTS = ("out",)
INPLACE: dict[str, str] = {}
TOLERANCE = {"atol": 2e-2, "rtol": 2e-2}
SMOKE = (Smoke({}, {"token_count": 5, "hidden_size": 64, "out_features": 48}),)


def flops(*, token_count, hidden_size, out_features, **_):
    """2TNH for the GEMM plus the gating product per output (sigmoid and bias are not counted)."""
    return 2 * token_count * out_features * hidden_size + token_count * out_features


def bytes_read(*, token_count, hidden_size, out_features, **_):
    """hidden_states, weight, bias, post_mul_mat (bf16)."""
    return 2 * (token_count * hidden_size + out_features * hidden_size + out_features + token_count * out_features)


def bytes_written(*, token_count, out_features, **_):
    """out [T, N] bf16."""
    return 2 * token_count * out_features
