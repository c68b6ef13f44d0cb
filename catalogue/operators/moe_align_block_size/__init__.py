"""moe_align_block_size: stable sort of flat topk_ids by expert, each expert's run padded to a multiple of block_size
with the sentinel T*k; expert_ids per block; num_tokens_post_pad."""

from math import exp, lgamma, log

from catalogue.operators._common import Smoke, cdiv

INIT_KEYS = ("block_size", "num_experts")
INPUT_KEYS = ("token_count", "num_experts", "top_k")
PATH = "fp32_vector"
OUTPUTS = ("sorted_token_ids", "expert_ids", "num_tokens_post_pad")
INPLACE: dict[str, str] = {}
TOLERANCE = {"atol": 0, "rtol": 0}
# Order inside one expert's run is implementation-defined (atomics): compare it as a multiset per run.
ORDER_FREE_OUTPUTS = ("sorted_token_ids",)
# sorted_token_ids and expert_ids are as long as the padded runs need: the host must read that length
# before allocating them (the reference does too), so that one device-to-host read is not a fallback.
DATA_DEPENDENT_SIZE = True
SMOKE = (Smoke({"block_size": 4, "num_experts": 8}, {"token_count": 5, "num_experts": 8, "top_k": 2}),
         Smoke({"block_size": 16, "num_experts": 16}, {"token_count": 1, "num_experts": 16, "top_k": 4}))


def expected_padded_tokens(token_count: int, num_experts: int, top_k: int, block_size: int) -> float:
    """Expected length of the padded sorted array when each token picks top_k distinct experts uniformly:
    per expert the count is Binomial(T, k/E), and its run is rounded up to a block."""
    p = top_k / num_experts
    if p >= 1.0:
        return num_experts * cdiv(token_count, block_size) * block_size
    total = 0.0
    for c in range(1, token_count + 1):
        log_pmf = (lgamma(token_count + 1) - lgamma(c + 1) - lgamma(token_count - c + 1)
                   + c * log(p) + (token_count - c) * log(1.0 - p))
        if log_pmf < -60 and c > token_count * p:
            break
        total += exp(log_pmf) * cdiv(c, block_size)
    return num_experts * total * block_size


def flops(**_):
    """Integer work only."""
    return 0


def bytes_read(*, token_count, top_k, **_):
    """int32 topk_ids [T, k]."""
    return 4 * token_count * top_k


def bytes_written(*, token_count, num_experts, top_k, block_size, **_):
    """int32 sorted ids (expected padded length), one expert id per block, one count."""
    padded = expected_padded_tokens(token_count, num_experts, top_k, block_size)
    return round(4 * padded + 4 * padded / block_size + 4)
