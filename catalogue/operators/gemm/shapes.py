"""gemm's kwargs (m, n, k, batch for bmm, b_dtype where the operands differ) from a GEMM op's recorded args."""

from __future__ import annotations

import re

from catalogue.op_args import Args, generic, row_count


_KN_OPS = re.compile(r"^aten::(mm|addmm|matmul|bmm|baddbmm|_scaled_mm|addmv|mv)$|cutlass_scaled_mm|scaled_mm$")


def extract(a: Args) -> dict:
    ts = a.nd(2)
    if re.search(r"addmm|baddbmm", a.op) and ts and a.tensors and a.tensors[0][0] == ts[0][0] and len(ts) > 2:
        ts = ts[1:]  # the bias/accumulator comes first
    styles = ("kn", "nk") if _KN_OPS.search(a.op) else ("nk", "kn")
    for style in styles:
        for (_, x, xt), (_, w, wt) in zip(ts, ts[1:]):
            if style == "kn" and x[-1] == w[-2]:
                k, n = w[-2], w[-1]
            elif style == "nk" and x[-1] == w[-1]:
                n, k = w[-2], w[-1]
            else:
                continue
            out = {"m": x[-2] if len(x) == 3 and len(w) == 3 else row_count(x), "n": n, "k": k, "dtype": xt}
            if len(x) == 3 and len(w) == 3:
                out["batch"] = x[0]
            if wt != xt:
                out["b_dtype"] = wt
            return out
    return generic(a)
