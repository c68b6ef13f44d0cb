"""chunk_gated_delta_rule_state: walk chunks carrying state S [K, V] per (sequence, head): emit h_c = S (bf16),
v_new = u - w S, then S = exp(g_last) S + k^T (exp(g_last - g_j) v_new_j); the state pool row
initial_state[idx] is updated (in place by contract)."""

from catalogue.operators._common import Smoke, cdiv

INIT_KEYS = ("chunk_size",)
INPUT_KEYS = ("token_count", "num_v_heads", "state_count", "value_dim", "key_dim", "num_k_heads", "batch_size")
PATH = "bf16_tensor"
OUTPUTS = ("h", "v_new", "final_state")
INPLACE = {"final_state": "initial_state"}
TOLERANCE = {"atol": 2e-3, "rtol": 2e-2}
SMOKE = (Smoke({"chunk_size": 8}, {"token_count": 19, "num_v_heads": 4, "state_count": 3, "value_dim": 16,
                                    "key_dim": 16, "num_k_heads": 2, "batch_size": 1}),)


def _used_states(batch_size, state_count):
    return min(batch_size, state_count)


def flops(*, token_count, num_v_heads, value_dim, key_dim, chunk_size=64, batch_size=1, **_):
    """Per head: w·S and kᵀ·v_new (4TKV), v_new and its decay (2TV), decay terms (T), and per chunk the state
    decay and accumulate (2KV)."""
    K, V, T = key_dim, value_dim, token_count
    per_head = 4 * T * K * V + 2 * T * V + T + cdiv(T, chunk_size) * 2 * K * V
    return batch_size * num_v_heads * per_head


def bytes_read(*, token_count, num_v_heads, state_count, value_dim, key_dim, num_k_heads, batch_size=1, **_):
    """k, w, u (bf16), g (fp32), the used fp32 state rows and the int32 state indices."""
    B, T = batch_size, token_count
    return (2 * B * T * num_k_heads * key_dim + 2 * B * T * num_v_heads * key_dim + 2 * B * T * num_v_heads * value_dim
            + 4 * B * T * num_v_heads + 4 * _used_states(B, state_count) * num_v_heads * key_dim * value_dim + 4 * B)


def bytes_written(*, token_count, num_v_heads, state_count, value_dim, key_dim, chunk_size=64, batch_size=1, **_):
    """h per chunk (bf16), v_new (bf16) and the updated fp32 state rows."""
    B, T = batch_size, token_count
    return (2 * B * cdiv(T, chunk_size) * num_v_heads * key_dim * value_dim + 2 * B * T * num_v_heads * value_dim
            + 4 * _used_states(B, state_count) * num_v_heads * key_dim * value_dim)
