"""Kernels that their neighbours on a stream name: a row whose kernel name alone says too little takes the work
the kernels just before or after it on its device and stream say it belongs to. Rows keep no shape either way."""

from __future__ import annotations

import re

import polars as pl

from catalogue.registry import operators_with

# What the operators declare (catalogue.vocabulary.OPERATOR_TRAITS), read here instead of their names.
_CONVOLUTION = operators_with("hosts_gemm_kernels")
_JOINS_CONVOLUTION = operators_with("dense_gemm") | _CONVOLUTION
_CACHE_WRITES = operators_with("kv_cache_write")
(_QKV_ROTARY,) = operators_with("qkv_rotary")  # exactly one operator is the rotation before the cache write


def _lanes(events: pl.DataFrame) -> tuple[list[int], list[tuple], dict[int, int]]:
    """The kernel rows in time order per (device, stream): row numbers, each one's lane, each row's position."""
    kernel_rows = (events.select("device", "stream", "ts_ns", "category").with_row_index("row")
                   .filter(pl.col("category") == "kernel").sort("device", "stream", "ts_ns", "row"))
    rows = kernel_rows["row"].to_list()
    lanes = list(zip(kernel_rows["device"].to_list(), kernel_rows["stream"].to_list()))
    return rows, lanes, {row: k for k, row in enumerate(rows)}


def join_convolution_neighbours(events: pl.DataFrame, operators: list[str], kwargs_list: list[dict], ops: list,
                                 rules: list[str]) -> None:
    """Rows without an op whose kernel name alone made them `gemm` take, in place, the work they sit inside
    when the kernels just before and after them on their stream say what that is: between two convolution
    kernels a GEMM is that convolution's (cuDNN's Winograd runs volta_sgemm between its transforms), and
    beside backward kernels it is backward work (`other`), as a kernel of a backward op is. Unshaped either
    way. Seen in kineto's ResNet-50 training sample, whose kernels launched before the profile's window have
    no launch row. A convolution's helper kernel that its name alone made `convolution` (MIOpen's transposes,
    cuDNN's FFT and layout kernels, which its gradients run too) is backward work between two backward kernels."""
    candidates = [i for i, (operator, rule, op) in enumerate(zip(operators, rules, ops))
                  if operator in _JOINS_CONVOLUTION and op is None and rule.startswith("kernel_rules")]
    if not candidates:
        return
    rows, lanes, position = _lanes(events)
    for i in candidates:
        k = position.get(i)
        if k is None or k == 0 or k + 1 == len(rows) or not (lanes[k - 1] == lanes[k] == lanes[k + 1]):
            continue
        around = {_conv_or_backward(operators[rows[k - 1]], rules[rows[k - 1]]),
                  _conv_or_backward(operators[rows[k + 1]], rules[rows[k + 1]])}
        if operators[i] in _CONVOLUTION:
            if around == {_BACKWARD}:
                operators[i], kwargs_list[i] = "other", {}
        elif len(around) == 1 and around <= _CONVOLUTION:
            operators[i], kwargs_list[i] = next(iter(around)), {}
        elif None not in around:
            operators[i], kwargs_list[i] = "other", {}


_BACKWARD = "backward"  # the taxonomy's rule name for backward-pass work


def _conv_or_backward(operator: str, rule: str) -> str | None:
    return _BACKWARD if rule == _BACKWARD else operator if operator in _CONVOLUTION else None


# Inductor names a pointwise kernel after the aten ops it was lowered from; a computed concatenation whose inputs
# were inlined into it (vLLM's rotary embedding under torch.compile: o1 = x1*cos - x2*sin, o2 = x2*cos + x1*sin,
# cat(o1, o2)) can keep the name of its cat alone, as a plain copy does.
_CAT_ONLY = re.compile(r"^triton_poi_fused_cat_\d+$")


def rope_before_cache_write(events: pl.DataFrame, operators: list[str], kwargs_list: list[dict], rules: list[str]) -> None:
    """Inductor `cat` kernels that the KV-cache write follows directly on their stream (q's and k's: the run of
    them before it) are the rotary embedding, in place: nothing but the positional rotation runs between a
    layer's QKV projection and the write of its rotated keys (vLLM V1 on H100 and MI300X). Elsewhere a cat
    kernel stays the copy its name says."""
    if not any(map(_CAT_ONLY.match, (k for k, op in zip(events["kernel"].to_list(), operators) if op == "memcpy"))):
        return
    kernels = events["kernel"].to_list()
    rows, lanes, _ = _lanes(events)
    run: list[int] = []
    for k, i in enumerate(rows):
        if k and lanes[k] != lanes[k - 1]:
            run = []
        if operators[i] == "memcpy" and rules[i].startswith("kernel_rules") and _CAT_ONLY.match(kernels[i]):
            run.append(i)
            continue
        if run and operators[i] in _CACHE_WRITES:
            for j in run:
                operators[j], kwargs_list[j] = _QKV_ROTARY, {}
        run = []
