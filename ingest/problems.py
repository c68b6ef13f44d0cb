"""From what one op recorded to a complete benchmark problem: the registry operator whose reference
computes the same thing, with the catalogue's parameter names (and, for what one op cannot show,
kwargs gathered over the whole trace: an MoE block's two grouped GEMMs and its router; paged-cache
block sizes)."""

from __future__ import annotations

from catalogue.op_args import op_args_view
from catalogue.operators import load_shapes
from catalogue.registry import operators_with


def to_problem(operator: str, kwargs: dict, step=None) -> tuple[str, dict]:
    """The registry operator and kwargs the recorded kwargs describe (unchanged where they already do,
    or where the trace cannot say more)."""
    rules = load_shapes(operator)
    if rules is None or not hasattr(rules, "to_problem"):
        return operator, kwargs
    return rules.to_problem(kwargs, step)


def grouped_mm_call(kwargs: dict) -> tuple | None:
    """(num_experts, rows, k, n, dtype) of one aten::_grouped_mm call's kwargs, or None."""
    if {"num_experts", "m", "n", "k"} <= kwargs.keys() and "b_dtype" not in kwargs:
        return kwargs["num_experts"], kwargs["m"], kwargs["k"], kwargs["n"], kwargs.get("dtype")
    return None


def router_topk(op_args: dict | None) -> tuple[int, int, int] | None:
    """(token_count, num_experts, top_k) of an aten::topk over router logits [T, E], or None."""
    if not op_args:
        return None
    a = op_args_view("aten::topk", op_args)
    ints = a.ints()
    if len(a.tensors) != 1 or len(a.tensors[0][1]) != 2 or not ints:
        return None
    (tokens, experts), top_k = a.tensors[0][1], ints[0]
    return tokens, experts, top_k


def moe_from_grouped_mm(up: tuple, down: tuple, router: tuple | None) -> dict | None:
    """One fused_moe problem from an MoE block's two grouped GEMMs (gate/up [T·k, H]·[E, H, 2I], then
    down [T·k, I]·[E, I, H]) and its router's topk; None where they do not fit together."""
    if router is None or up[0] != down[0] or up[1] != down[1] or up[3] != 2 * down[2] or down[3] != up[2]:
        return None
    tokens, experts, top_k = router
    if experts != up[0] or tokens * top_k != up[1]:
        return None
    return {"token_count": tokens, "hidden_size": up[2], "intermediate_size": down[2], "num_experts": experts,
            "top_k": top_k, "dtype": up[4]}


_PAGED = operators_with("paged_kv")
_CACHE_WRITES = operators_with("kv_cache_write")


def fill_block_size(operators: list[str], kwargs_list: list[dict]) -> list[dict]:
    """Attention problems whose op does not show the KV cache take the trace's one cache block size
    (from its cache writes), when the trace has exactly one."""
    sizes = {kw["block_size"] for op, kw in zip(operators, kwargs_list) if op in _CACHE_WRITES and "block_size" in kw}
    if len(sizes) != 1:
        return kwargs_list
    (size,) = sizes
    return [dict(kw, block_size=size) if op in _PAGED and kw and "block_size" not in kw else kw
            for op, kw in zip(operators, kwargs_list)]
