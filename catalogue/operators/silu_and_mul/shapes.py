"""silu_and_mul's kwargs (its input's shape [T, 2I]) from the op's recorded args."""

from __future__ import annotations

from catalogue.op_args import Args


def extract(a: Args) -> dict:
    ts = a.nd(1)[:2]
    if not ts:
        return {}
    _, x, t = max(ts, key=lambda e: e[1][-1])  # the input is [T, 2I]; the output [T, I]
    return {"shape": x, "dtype": t}
