"""layer_norm's kwargs (its input's shape) from the op's args."""

from __future__ import annotations

from catalogue.op_args import Args


def extract(a: Args) -> dict:
    if not a.tensors:
        return {}
    return {"shape": a.tensors[0][1], "dtype": a.tensors[0][2]}
