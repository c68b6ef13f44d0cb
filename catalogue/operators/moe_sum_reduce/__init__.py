"""moe_sum_reduce: out[t] = routed_scaling_factor * sum_j expert_outputs[t, j] (bf16, fp32 accumulate)."""

from catalogue.operators._common import Smoke

INIT_KEYS = ("routed_scaling_factor",)
INPUT_KEYS = ("token_count", "top_k", "hidden_size")
PATH = "fp32_vector"
OUTPUTS = ("out",)
INPLACE: dict[str, str] = {}
TOLERANCE = {"atol": 2e-2, "rtol": 2e-2}
SMOKE = (Smoke({"routed_scaling_factor": 1.0}, {"token_count": 5, "top_k": 4, "hidden_size": 32}),
         Smoke({"routed_scaling_factor": 2.5}, {"token_count": 2, "top_k": 8, "hidden_size": 16}))


def flops(*, token_count, top_k, hidden_size, **_):
    """k-1 adds and one scale per output element."""
    return token_count * top_k * hidden_size


def bytes_read(*, token_count, top_k, hidden_size, **_):
    """expert_outputs [T, k, H] bf16."""
    return 2 * token_count * top_k * hidden_size


def bytes_written(*, token_count, hidden_size, **_):
    """out [T, H] bf16."""
    return 2 * token_count * hidden_size
