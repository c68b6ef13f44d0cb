"""batch_norm's kwargs (its input's shape) from the op's args."""

from __future__ import annotations

from catalogue.op_args import Args


def extract(a: Args) -> dict:
    if not a.tensors:
        return {}
    _, x, t = a.tensors[0]
    return {"shape": x, "dtype": t}
