"""convolution's kwargs (N, C, H, W, K, R, S, stride, padding, dilation, groups) from a convolution op's args."""

from __future__ import annotations

import json
import re

from catalogue.op_args import Args, generic


# Positions of (stride, padding, dilation, groups, transposed) in each convolution op's schema.
_CONV_ARGS = {
    "aten::convolution": (3, 4, 5, 8, 6),
    "aten::_convolution": (3, 4, 5, 8, 6),
    "aten::conv1d": (3, 4, 5, 6, None),
    "aten::conv2d": (3, 4, 5, 6, None),
    "aten::conv3d": (3, 4, 5, 6, None),
    "aten::cudnn_convolution": (3, 2, 4, 5, None),
    "aten::miopen_convolution": (4, 3, 5, 6, None),
    "aten::miopen_depthwise_convolution": (4, 3, 5, 6, None),
}


def _int_list(text: str) -> list[int] | None:
    try:
        value = json.loads(text)
    except ValueError:
        return None
    if isinstance(value, int):
        value = [value]
    return value if isinstance(value, list) and all(isinstance(v, int) for v in value) else None


def _conv_from(a: Args) -> dict | None:
    positions = _CONV_ARGS.get(a.op)
    ts = [t for t in a.tensors if t[0] < 2]
    if positions is None or len(ts) < 2 or ts[0][0] != 0 or ts[1][0] != 1:
        return None
    (_, x, t), (_, w, _) = ts[0], ts[1]
    if len(x) not in (3, 4) or len(w) != len(x):
        return None  # 3-D convolutions are not the modelled operator: left to the generic shape
    if len(x) == 3:  # conv1d as a 2-D convolution of height 1
        x, w = [x[0], x[1], 1, x[2]], [w[0], w[1], 1, w[2]]
    out = {"N": x[0], "C": x[1], "H": x[2], "W": x[3], "K": w[0], "R": w[2], "S": w[3], "dtype": t,
           "groups": x[1] // w[1] if w[1] and x[1] % w[1] == 0 else None}
    stride, padding, dilation, groups, transposed = positions
    pos = a.positional
    if transposed is not None and transposed < len(pos) and pos[transposed] == "True":
        out["transposed"] = True  # a transposed convolution is not the forward problem the work model counts
    for key, at, fill in (("stride", stride, 1), ("padding", padding, 0), ("dilation", dilation, 1)):
        value = _int_list(pos[at]) if at < len(pos) and pos[at] else None
        if value is not None and len(value) == 1:
            value = [fill, value[0]] if len(ts[0][1]) == 3 else value * 2
        if value is not None and len(value) == 2:
            out[key] = value
    if groups < len(pos) and re.fullmatch(r"\d+", pos[groups] or ""):
        out["groups"] = int(pos[groups])
    return out


def extract(a: Args) -> dict:
    # aten::convolution keeps one argument order across backends; cudnn/miopen reorder padding and stride.
    candidates = [a] + [o for _, o in reversed(a.context)]
    ranked = sorted(candidates, key=lambda o: (o.op not in ("aten::convolution", "aten::_convolution"),
                                                o.op not in _CONV_ARGS))
    for o in ranked:
        out = _conv_from(o)
        if out is not None:
            return out
    return generic(a)
