"""fused_qkv_rope's kwargs from a rotary-embedding op's (positions, q, k, ...) args."""

from __future__ import annotations

import math

from catalogue.op_args import Args, generic


def extract(a: Args) -> dict:
    ts = a.tensors
    if len(ts) < 3 or a.op.startswith("triton_"):
        # An Inductor kernel's arguments are its fused buffers, not (positions, q, k, ...).
        return generic(a)
    positions, q, k = ts[0][1], ts[1][1], ts[2][1]
    tokens = math.prod(positions)
    ints = a.ints()
    head = ints[0] if ints else q[-1]
    out = {
        "total_tokens": tokens,
        "head_dim": head,
        "num_heads": math.prod(q) // max(tokens * head, 1),
        "num_kv_heads": math.prod(k) // max(tokens * head, 1),
        "dtype": ts[1][2],
    }
    if len(ts) > 3:
        out["rope_dim"] = ts[3][1][-1]
    bools = a.bools()
    if bools and not bools[-1]:
        out["is_neox_style"] = False  # GPT-J interleaved pairs: not what the registry's reference rotates
    return out
