"""fused_moe: out[t] = sum_j topk_weights[t, j] * W2[e] (silu(W1g[e] h_t) * W1u[e] h_t), e = topk_ids[t, j];
w1 [E, 2I, H] (gate rows first), w2 [E, H, I] bf16, fp32 out (the catalogue's interface)."""

from catalogue.operators._common import Smoke, expected_distinct

TRAITS = frozenset({"moe_from_grouped_mm"})

INIT_KEYS = ("num_experts", "intermediate_size", "top_k")
INPUT_KEYS = ("token_count", "hidden_size", "intermediate_size", "num_experts", "top_k")
PATH = "bf16_tensor"
OUTPUTS = ("out",)
INPLACE: dict[str, str] = {}
TOLERANCE = {"atol": 2e-2, "rtol": 2e-2}
SMOKE = (Smoke({"num_experts": 4, "intermediate_size": 32, "top_k": 2},
               {"token_count": 6, "hidden_size": 64, "intermediate_size": 32, "num_experts": 4, "top_k": 2}),)


def activated_experts(token_count: int, num_experts: int, top_k: int) -> float:
    """Expected number of distinct experts hit by T tokens routed uniformly top-k."""
    return expected_distinct(token_count, num_experts, top_k)


def flops(*, token_count, hidden_size, intermediate_size, top_k, **_):
    """6·T·k·H·I: gate+up (4HI) and down (2HI) per routed (token, expert) pair."""
    return 6 * token_count * top_k * hidden_size * intermediate_size


def bytes_read(*, token_count, hidden_size, intermediate_size, num_experts, top_k, **_):
    """hidden_states, weights of the activated experts only, fp32 topk_weights and int32 topk_ids."""
    n_act = activated_experts(token_count, num_experts, top_k)
    return round(2 * token_count * hidden_size + n_act * 3 * hidden_size * intermediate_size * 2
                 + 8 * token_count * top_k)


def bytes_written(*, token_count, hidden_size, **_):
    """fp32 out [T, H]."""
    return 4 * token_count * hidden_size
