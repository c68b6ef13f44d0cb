"""group_norm's kwargs (its input's shape, num_groups) from the op's args."""

from __future__ import annotations

import re

from catalogue.op_args import Args


def extract(a: Args) -> dict:
    if not a.tensors:
        return {}
    _, x, t = a.tensors[0]
    out = {"shape": x, "dtype": t}
    if a.op == "aten::native_group_norm":  # (input, weight, bias, N, C, HxW, group, eps)
        groups = a.positional[6] if len(a.positional) > 6 else ""
    else:  # aten::group_norm(input, num_groups, ...), aiter's group norm likewise
        groups = a.positional[1] if len(a.positional) > 1 else ""
    if re.fullmatch(r"\d+", groups):
        out["num_groups"] = int(groups)
    return out
