"""unified_attention's kwargs from a varlen attention op's args, completed from a step annotation."""

from __future__ import annotations

from catalogue.op_args import Args, generic


def extract(a: Args) -> dict:
    ts = a.nd(3)
    if not ts:
        return generic(a)
    _, q, t = ts[0]
    out = {"num_tokens": q[0], "num_query_heads": q[1], "head_size": q[2], "dtype": t}
    if len(ts) > 1:
        kv = ts[1][1]
        out["num_kv_heads"] = kv[-2]
        if ts[1][2] != t:
            out["kv_dtype"] = ts[1][2]
    cu = [e for e in a.tensors if len(e[1]) == 1 and e[2] == "int32"]
    if cu:
        out["num_seqs"] = cu[0][1][0] - 1  # cu_seqlens_q has one entry per sequence plus one
    return out


def with_step(kwargs: dict, step) -> dict:
    """The call's kwargs with the sequence count of its step annotation, where the call does not record it."""
    out = dict(kwargs)
    reqs = (step.context_reqs or 0) + (step.generation_reqs or 0)
    if "num_seqs" not in out and reqs:
        out["num_seqs"] = reqs
    return out


def to_problem(kw: dict, step) -> tuple[str, dict]:
    """The registry problem a varlen call is where a step annotation completes it (else the call as recorded)."""
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
