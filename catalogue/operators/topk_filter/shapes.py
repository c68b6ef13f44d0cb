"""topk_filter's kwargs (seq_len, hidden_size) from a sampler's logits."""

from __future__ import annotations

from catalogue.op_args import Args, generic, row_count


def extract(a: Args) -> dict:
    ts = a.nd(2)
    if not ts:
        return generic(a)
    x = ts[0][1]
    return {"seq_len": row_count(x), "hidden_size": x[-1]}
