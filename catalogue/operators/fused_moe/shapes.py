"""fused_moe's kwargs from an MoE op's args, or one aten::_grouped_mm call's (m, n, k) that ingest joins with the
block's other call and its router."""

from __future__ import annotations

from catalogue.op_args import Args, generic


def _grouped_mm(a: Args) -> dict:
    # aten::_grouped_mm(x[rows, K], w[experts, K, N], offs[experts]): rows = tokens × top_k, which
    # one call cannot split; K and N are hidden and 2×intermediate (gate/up) or the reverse (down).
    ts = a.nd(2)
    if len(ts) < 2 or len(ts[0][1]) != 2 or len(ts[1][1]) != 3 or ts[0][1][1] != ts[1][1][1]:
        return generic(a)
    (_, x, t), (_, w, wt) = ts[0], ts[1]
    out = {"num_experts": w[0], "m": x[0], "n": w[2], "k": w[1], "dtype": t}
    if wt != t:
        out["b_dtype"] = wt
    return out


def extract(a: Args) -> dict:
    ts = a.nd(2)
    if a.op == "aten::_grouped_mm":
        return _grouped_mm(a)
    if not ts or a.op.startswith("triton_"):
        return generic(a)  # an Inductor kernel fused into the MoE region: its own tensor, not the MoE's
    _, x, t = ts[0]
    out = {"token_count": x[0], "hidden_size": x[-1], "dtype": t}
    if len(ts) > 1 and ts[1][1][0] == x[0]:
        out["num_experts"] = ts[1][1][-1]  # router logits [T, E]
    return out
