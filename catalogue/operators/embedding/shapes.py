"""embedding's kwargs (token_count, hidden_size, vocab_size) from the lookup's table and indices."""

from __future__ import annotations

import math

from catalogue.op_args import Args, generic


def extract(a: Args) -> dict:
    if len(a.tensors) < 2:
        return generic(a)
    weight, idx = a.tensors[0][1], a.tensors[1][1]
    return {"token_count": math.prod(idx), "hidden_size": weight[-1], "vocab_size": weight[0], "dtype": a.tensors[0][2]}
