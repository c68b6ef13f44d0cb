"""chunk_delta_rule_output: chunked gated delta-rule output, per chunk c and position i:
o_i = scale * (exp(g_i) q_i h_c + sum_{j<=i in chunk} exp(g_i - g_j) (q_i . k_j) v_j); GQA q/k heads."""

from catalogue.operators._common import Smoke, cdiv

INIT_KEYS = ("chunk_size",)
INPUT_KEYS = ("token_count", "num_v_heads", "value_dim", "num_q_heads", "chunk_size", "key_dim", "batch_size")
PATH = "bf16_tensor"
OUTPUTS = ("out",)
INPLACE: dict[str, str] = {}
TOLERANCE = {"atol": 2e-3, "rtol": 2e-2}
SMOKE = (Smoke({"chunk_size": 8}, {"token_count": 13, "num_v_heads": 4, "value_dim": 16, "num_q_heads": 2,
                                    "chunk_size": 8, "key_dim": 16, "batch_size": 1}),)


def flops(*, token_count, num_v_heads, value_dim, key_dim, chunk_size, batch_size=1, **_):
    """Per (chunk, head): q·h (2cKV), the dense intra-chunk tiles q·kᵀ and P·v (2c²K + 2c²V), and the
    decay/accumulate/scale elementwise steps (3cV + 2c²). The chunked interface fixes dense c×c tiles."""
    c, K, V = chunk_size, key_dim, value_dim
    chunks = cdiv(token_count, c)
    per = 2 * c * K * V + 2 * c * c * K + 2 * c * c * V + 3 * c * V + 2 * c * c
    return batch_size * num_v_heads * chunks * per


def bytes_read(*, token_count, num_v_heads, value_dim, num_q_heads, key_dim, chunk_size, batch_size=1, **_):
    """q, k [B,T,Hq,K], v [B,T,Hv,V], per-chunk states h [B,NC,Hv,K,V] (bf16), fp32 g [B,T,Hv]."""
    B, T = batch_size, token_count
    return (2 * 2 * B * T * num_q_heads * key_dim + 2 * B * T * num_v_heads * value_dim
            + 2 * B * cdiv(T, chunk_size) * num_v_heads * key_dim * value_dim + 4 * B * T * num_v_heads)


def bytes_written(*, token_count, num_v_heads, value_dim, batch_size=1, **_):
    """out [B, T, Hv, V] bf16."""
    return 2 * batch_size * token_count * num_v_heads * value_dim
