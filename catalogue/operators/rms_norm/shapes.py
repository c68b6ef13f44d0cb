"""rms_norm's kwargs (token_count, hidden_size, eps) from a norm op's recorded args, or an Inductor kernel's buffers."""

from __future__ import annotations

from catalogue.op_args import Args, row_count


_FLOATS = ("bf16", "fp16", "fp32")


def _inductor_norm(a: Args) -> dict:
    # An Inductor kernel's arguments are its buffers: the norm weight [H], activations [..., H]
    # and, where the embedding lookup was fused in, the table [vocab, H]; the activations are
    # the ones with the fewest rows.
    weights = [d for _, d, t in a.tensors if len(d) == 1 and t in _FLOATS]
    if not weights:
        return {}
    hidden = weights[-1][0]
    rows = [(row_count(d), t) for _, d, t in a.tensors if len(d) >= 2 and d[-1] == hidden and t in _FLOATS]
    if not rows:
        return {}
    tokens, t = min(rows)
    return {"token_count": tokens, "hidden_size": hidden, "dtype": t}


def extract(a: Args) -> dict:
    if a.op.startswith("triton_"):
        return _inductor_norm(a)
    if not a.tensors:
        return {}
    _, x, t = (a.nd(2) or a.tensors)[0]
    out = {"token_count": row_count(x), "hidden_size": x[-1], "dtype": t}
    eps = a.floats()
    if eps:
        out["eps"] = eps[0]
    return out
