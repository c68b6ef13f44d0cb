"""paged_attention_decode's kwargs from a paged decode op's args, completed from a step annotation."""

from __future__ import annotations

from catalogue.op_args import Args, generic


def extract(a: Args) -> dict:
    threes, fours = a.nd(3), [e for e in a.tensors if len(e[1]) == 4]
    if not threes:
        return generic(a)
    q = threes[1][1] if len(threes) > 1 and threes[0][1] == threes[1][1] else threes[0][1]
    out = {"num_seqs": q[0], "num_query_heads": q[1], "head_size": q[2], "dtype": threes[0][2]}
    if fours:
        out["num_kv_heads"], out["block_size"] = fours[0][1][2], fours[0][1][1]
    return out


def with_step(kwargs: dict, step) -> dict:
    """The call's kwargs with the mean context length of its step annotation's decode requests."""
    out = dict(kwargs)
    if step.generation_kv and step.generation_reqs:
        out["ctx_len"] = round(step.generation_kv / step.generation_reqs)
    return out
