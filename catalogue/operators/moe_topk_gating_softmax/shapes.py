"""moe_topk_gating_softmax's kwargs (token_count, num_experts, top_k) from a routing op's args."""

from __future__ import annotations

import re

from catalogue.op_args import Args, generic
from catalogue.operators.fused_moe.shapes import extract as moe_extract


_TOPK = re.compile(r"^(TopK|aten::topk)$")


def extract(a: Args) -> dict:
    if "moe_forward" in a.op:
        out = moe_extract(a)
        out = {k: v for k, v in out.items() if k in ("token_count", "num_experts")}
        for topk in a.outer(_TOPK):  # triton_kernels' routing op inside vLLM's moe_forward: topk(logits, k, ...)
            if topk.ints():
                out["top_k"] = topk.ints()[0]
                break
        return out
    ts = a.nd(2)
    if not ts:
        return generic(a)
    logits = ts[-1][1]
    out = {"token_count": logits[0], "num_experts": logits[-1]}
    if len(ts) > 1:
        out["top_k"] = ts[0][1][-1]
    return out
