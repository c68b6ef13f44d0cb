"""gated_delta_rule_update: token-by-token gated delta rule (Qwen3-Next decode) with gate
g = -exp(A_log) softplus(a + dt_bias), beta = sigmoid(b), optional l2-normalised q/k:
S = exp(g) S; S += k (beta (v - S^T k))^T; o = S^T (q scale). State pool rows updated in place by contract."""

from catalogue.operators._common import Smoke

INIT_KEYS = ("softplus_beta", "softplus_threshold", "use_qk_l2norm")
INPUT_KEYS = ("token_count", "num_v_heads", "state_count", "value_dim", "num_q_heads", "key_dim", "batch_size")
PATH = "fp32_vector"
OUTPUTS = ("out", "final_state")
INPLACE = {"final_state": "initial_state"}
TOLERANCE = {"atol": 2e-3, "rtol": 2e-2}
_INIT = {"softplus_beta": 1.0, "softplus_threshold": 20.0, "use_qk_l2norm": True}
SMOKE = (Smoke(_INIT, {"token_count": 5, "num_v_heads": 4, "state_count": 2, "value_dim": 16, "num_q_heads": 2,
                       "key_dim": 16, "batch_size": 1}),
         Smoke(dict(_INIT, use_qk_l2norm=False), {"token_count": 2, "num_v_heads": 2, "state_count": 3,
                                                 "value_dim": 8, "num_q_heads": 2, "key_dim": 8, "batch_size": 2}))


def _used_states(batch_size, state_count):
    return min(batch_size, state_count)


def flops(*, token_count, num_v_heads, value_dim, key_dim, batch_size=1, use_qk_l2norm=True, **_):
    """Per (token, head): decay, Sᵀk, rank-1 update and Sᵀq over the K×V state (5KV + 2(K-1)V), the delta (2V),
    q scaling (K), gate (2) and, with l2norm, normalising q and k (2K)."""
    K, V = key_dim, value_dim
    per = 5 * K * V + 2 * (K - 1) * V + 2 * V + K + 2 + (2 * K if use_qk_l2norm else 0)
    return batch_size * token_count * num_v_heads * per


def bytes_read(*, token_count, num_v_heads, state_count, value_dim, num_q_heads, key_dim, batch_size=1, **_):
    """A_log (fp32), a, dt_bias, q, k, v, b (bf16), the used fp32 state rows and int32 indices."""
    B, T, Hv = batch_size, token_count, num_v_heads
    return (4 * Hv + 2 * B * T * Hv + 2 * Hv + 2 * 2 * B * T * num_q_heads * key_dim + 2 * B * T * Hv * value_dim
            + 2 * B * T * Hv + 4 * _used_states(B, state_count) * Hv * key_dim * value_dim + 4 * B)


def bytes_written(*, token_count, num_v_heads, state_count, value_dim, key_dim, batch_size=1, **_):
    """out (bf16) and the updated fp32 state rows."""
    B = batch_size
    return (2 * B * token_count * num_v_heads * value_dim
            + 4 * _used_states(B, state_count) * num_v_heads * key_dim * value_dim)
