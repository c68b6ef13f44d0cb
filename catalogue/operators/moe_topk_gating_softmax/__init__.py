"""moe_topk_gating_softmax: p = softmax(gating_output); topk_weights, topk_ids = top-k of p (no renormalisation)."""

from catalogue.operators._common import Smoke

INIT_KEYS = ("top_k", "num_expert_groups", "topk_group")
INPUT_KEYS = ("token_count", "num_experts")
PATH = "fp32_vector"
OUTPUTS = ("topk_weights", "topk_ids")
INPLACE: dict[str, str] = {}
TOLERANCE = {"atol": 1e-5, "rtol": 1e-4}
SMOKE = (Smoke({"top_k": 4}, {"token_count": 6, "num_experts": 16}),
         Smoke({"top_k": 2, "num_expert_groups": 4, "topk_group": 2}, {"token_count": 5, "num_experts": 16}))


def flops(*, token_count, num_experts, **_):
    """Softmax: subtract-max, exp, sum (E-1) and divide per row."""
    return token_count * (4 * num_experts - 1)


def bytes_read(*, token_count, num_experts, **_):
    """fp32 logits."""
    return 4 * token_count * num_experts


def bytes_written(*, token_count, top_k, **_):
    """fp32 weights and int32 ids, [T, k] each."""
    return 8 * token_count * top_k
