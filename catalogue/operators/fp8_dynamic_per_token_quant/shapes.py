"""The kwargs of a quantisation op (token_count, hidden_size, group_size for a grouped one) from its args."""

from __future__ import annotations

from catalogue.op_args import Args, generic, row_count


def extract(a: Args) -> dict:
    wide = [e for e in a.tensors if e[2] in ("bf16", "fp16", "fp32") and len(e[1]) >= 2]
    if not wide:
        return generic(a)
    _, x, t = wide[0]
    out = {"token_count": row_count(x), "hidden_size": x[-1], "dtype": t}
    ints = [i for i in a.ints() if i in (32, 64, 128, 256)]
    if "group" in a.op and ints:
        out["group_size"] = ints[0]
    return out
