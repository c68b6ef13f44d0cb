"""An op's recorded inputs (Input Dims / Input type / Concrete Inputs of a profiler row) as the operators' shape
extraction reads them (catalogue/operators/<op>/shapes.py), torch-free."""

from __future__ import annotations

import math
import re


_DTYPES = {
    "c10::BFloat16": "bf16",
    "c10::Half": "fp16",
    "float": "fp32",
    "double": "fp64",
    "c10::Float8_e4m3fn": "fp8_e4m3fn",
    "c10::Float8_e4m3fnuz": "fp8_e4m3fnuz",
    "c10::Float8_e5m2": "fp8_e5m2",
    "c10::Float8_e5m2fnuz": "fp8_e5m2fnuz",
    "c10::Float4_e2m1fn_x2": "fp4_e2m1fn_x2",
    "c10::Float8_e8m0fnu": "fp8_e8m0fnu",
    "unsigned char": "uint8",
    "signed char": "int8",
    "int": "int32",
    "long int": "int64",
    "bool": "bool",
}


def dtype_name(torch_type: str | None) -> str | None:
    """Short dtype name (bf16, fp16, fp8_e4m3fn, ...) of a profiler `Input type` entry."""
    if not torch_type:
        return None
    return _DTYPES.get(torch_type, torch_type.replace("c10::", "").lower())


class Args:
    """An op's recorded inputs: tensors (position, dims, dtype) and concrete scalars, and the other
    ops of its chain (`context`: (name, Args) pairs, outermost first)."""

    def __init__(self, op: str, dims, types, concrete, context=()):
        self.op = op or ""
        self.context = context
        dims = dims if isinstance(dims, list) else []
        types = types if isinstance(types, list) else []
        concrete = concrete if isinstance(concrete, list) else []
        self.tensors: list[tuple[int, list[int], str | None]] = []
        for i, d in enumerate(dims):
            t = types[i] if i < len(types) else None
            if isinstance(d, list) and d and all(isinstance(x, int) for x in d) and t not in ("Scalar", "ScalarList"):
                self.tensors.append((i, d, dtype_name(t)))
        self.positional = [c if isinstance(c, str) else "" for c in concrete]
        self.concrete = [c for c in concrete if isinstance(c, str) and c != ""]

    def nd(self, min_rank: int) -> list[tuple[int, list[int], str | None]]:
        return [t for t in self.tensors if len(t[1]) >= min_rank]

    def floats(self) -> list[float]:
        out = []
        for c in self.concrete:
            if re.fullmatch(r"-?\d*\.\d*(e-?\d+)?|-?\d+e-?\d+", c):
                out.append(float(c))
        return out

    def ints(self) -> list[int]:
        return [int(c) for c in self.concrete if re.fullmatch(r"-?\d+", c)]

    def bools(self) -> list[bool]:
        return [c == "True" for c in self.concrete if c in ("True", "False")]

    def has_tensor(self, position: int) -> bool:
        return any(i == position for i, _, _ in self.tensors)

    def outer(self, name: re.Pattern) -> list["Args"]:
        """The chain's other ops whose name matches, innermost first."""
        return [a for n, a in reversed(self.context) if name.search(n)]


def row_count(d: list[int]) -> int:
    """Rows of a [..., H] tensor: the product of every dimension but the last."""
    return math.prod(d[:-1]) if len(d) > 1 else d[0]


def generic(a: Args) -> dict:
    """The first input's dims and dtype: the shape of an op without an extractor of its own."""
    if not a.tensors:
        return {}
    _, d, t = a.tensors[0]
    return {"shape": d, "dtype": t}


def op_args_view(name: str | None, op_args: dict, context=()) -> Args:
    return Args(name or "", op_args.get("dims"), op_args.get("types"), op_args.get("concrete"), context)
