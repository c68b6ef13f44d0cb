"""From what one op recorded to a complete benchmark problem: the registry operator whose reference
computes the same thing, with the catalogue's parameter names (and, for what one op cannot show,
kwargs gathered over the whole trace: an MoE block's two grouped GEMMs and its router; paged-cache
block sizes)."""

from __future__ import annotations

from ingest.shapes import op_args_view


# A contiguous (HF) KV cache has no block size; its problems take the one every catalogue paged
# attention problem uses.
CONTIGUOUS_BLOCK_SIZE = 16


def _sdpa_problem(kw: dict) -> tuple[str, dict]:
    # SDPA's is_causal is top-left aligned, so a causal call is a plain causal prefill only where
    # q_len == kv_len; a one-query call is decode only without it (HF passes is_causal=False there,
    # and a [B, 1, 1, kv] mask can only hide keys: padding or unused static-cache slots).
    q_lens, kv_lens = kw.get("seq_lens"), kw.get("kv_lens", kw.get("seq_lens"))
    if not isinstance(q_lens, list) or not q_lens or "v_head_dim" in kw or "is_causal" not in kw:
        return "attention_forward", kw
    heads, kv_heads = kw["num_heads"], kw.get("num_kv_heads", kw["num_heads"])
    common = {"num_query_heads": heads, "num_kv_heads": kv_heads, "head_size": kw["head_dim"], "dtype": kw["dtype"]}
    if set(q_lens) == {1} and len(set(kv_lens)) == 1 and not kw["is_causal"]:
        return "paged_attention_decode", {"num_seqs": len(q_lens), "ctx_len": kv_lens[0],
                                          "block_size": CONTIGUOUS_BLOCK_SIZE, **common}
    if q_lens == kv_lens and not kw.get("attn_mask"):
        if kw["is_causal"]:
            return "unified_attention", {"num_seqs": len(q_lens), "seq_lens": q_lens,
                                         "block_size": CONTIGUOUS_BLOCK_SIZE, **common}
        if heads == kv_heads:  # bidirectional, equal heads: the vision-encoder operator
            return "attention_forward", {k: kw[k] for k in ("num_heads", "head_dim", "seq_lens", "dtype")}
    return "attention_forward", kw


def _unified_problem(kw: dict, step) -> tuple[str, dict]:
    # The registry's unified_attention takes kv lengths only (its queries are all the tokens), so
    # a step annotation completes it where it proves every sequence is a whole prompt of one
    # length (Σk = Σq and n·Σq² = (Σq)²; for one sequence, Σq·k = q²); a decode-only step is paged
    # decode over the mean context.
    tokens = kw.get("num_tokens")
    if step is None or tokens is None or "num_query_heads" not in kw:
        return "unified_attention", kw
    heads = {k: kw[k] for k in ("num_query_heads", "num_kv_heads", "head_size", "dtype", "kv_dtype", "block_size") if k in kw}
    n, q, k, qq = step.context_reqs, step.context_q, step.context_kv, step.context_qq
    if n == 1 and q:  # upstream vLLM names carry Σq·k, not Σk: one sequence's kv length is Σq·k / q
        qq = q * q
        k = k if k is not None else (step.context_qk // q if step.context_qk and step.context_qk % q == 0 else None)
    if not step.generation_reqs and n and q == k == tokens and qq is not None and n * qq == q * q and q % n == 0:
        return "unified_attention", {"num_seqs": n, "seq_lens": [q // n] * n, **heads}
    gen, gen_kv = step.generation_reqs, step.generation_kv
    if not step.context_reqs and gen and gen == tokens and gen_kv:
        return "paged_attention_decode", {"num_seqs": gen, "ctx_len": round(gen_kv / gen), **heads}
    return "unified_attention", kw


def to_problem(operator: str, kwargs: dict, step=None) -> tuple[str, dict]:
    """The registry operator and kwargs the recorded kwargs describe (unchanged where they already do,
    or where the trace cannot say more)."""
    if operator == "attention_forward":
        return _sdpa_problem(kwargs)
    if operator == "unified_attention":
        return _unified_problem(kwargs, step)
    return operator, kwargs


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


_PAGED = ("unified_attention", "paged_attention_decode")


def fill_block_size(operators: list[str], kwargs_list: list[dict]) -> list[dict]:
    """Attention problems whose op does not show the KV cache take the trace's one cache block size
    (from its cache writes), when the trace has exactly one."""
    sizes = {kw["block_size"] for op, kw in zip(operators, kwargs_list) if op == "reshape_and_cache" and "block_size" in kw}
    if len(sizes) != 1:
        return kwargs_list
    (size,) = sizes
    return [dict(kw, block_size=size) if op in _PAGED and kw and "block_size" not in kw else kw
            for op, kw in zip(operators, kwargs_list)]
