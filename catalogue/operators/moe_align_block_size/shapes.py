"""moe_align_block_size's kwargs (token_count, top_k, num_experts, block_size) from a sorting op's args."""

from __future__ import annotations

import re

from catalogue.op_args import Args, generic
from catalogue.operators.fused_moe.shapes import extract as moe_extract


def extract(a: Args) -> dict:
    if "moe_forward" in a.op:
        out = moe_extract(a)
        out = {k: v for k, v in out.items() if k in ("token_count", "num_experts")}
        for sort in a.outer(re.compile(r"^SortTokens$")):  # SortTokens(topk_weights [T, k], topk_ids [T, k], E)
            ids = sort.nd(2)
            if ids and ids[0][1][0] == out.get("token_count"):
                out["top_k"] = ids[0][1][1]
                break
        return out
    ts = a.nd(2)
    if not ts:
        return generic(a)
    ids = ts[0][1]
    out = {"token_count": ids[0], "top_k": ids[-1]}
    ints = a.ints()
    if len(ints) >= 2:
        out["num_experts"], out["block_size"] = ints[0], ints[1]
    return out
