"""moe_sum_reduce's kwargs (token_count, top_k, hidden_size) from the op's [T, k, H] input."""

from __future__ import annotations

from catalogue.op_args import Args, generic


def extract(a: Args) -> dict:
    ts = a.nd(3)
    if not ts:
        return generic(a)
    x = ts[0][1]
    return {"token_count": x[0], "top_k": x[1], "hidden_size": x[2], "dtype": ts[0][2]}
