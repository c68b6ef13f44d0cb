"""moe_count_and_sort: per-expert counts of flat topk_ids, their exclusive cumsum [E+1], and the flat indices
stably sorted by expert (no padding)."""

from catalogue.operators._common import Smoke

INIT_KEYS = ("num_experts", "block_size")
INPUT_KEYS = ("token_count", "top_k", "num_experts")
PATH = "fp32_vector"
OUTPUTS = ("sorted_token_ids", "expert_token_counts", "cumsum")
INPLACE: dict[str, str] = {}
TOLERANCE = {"atol": 0, "rtol": 0}
# Order inside one expert's run is implementation-defined (atomics): compare it as a multiset per run.
ORDER_FREE_OUTPUTS = ("sorted_token_ids",)
SMOKE = (Smoke({"num_experts": 8, "block_size": 4}, {"token_count": 6, "top_k": 2, "num_experts": 8}),)


def flops(**_):
    """Integer work only."""
    return 0


def bytes_read(*, token_count, top_k, **_):
    """int32 topk_ids [T, k]."""
    return 4 * token_count * top_k


def bytes_written(*, token_count, top_k, num_experts, **_):
    """int32 sorted ids [T*k], counts [E], cumsum [E+1]."""
    return 4 * token_count * top_k + 4 * num_experts + 4 * (num_experts + 1)
