"""topk_filter in Triton: logits with every value below the row's k-th largest replaced by -inf (fp32).

One program per row finds the exact k-th largest value by radix select: the fp32 bits are mapped to keys whose
integer order is the float order, and four passes over the row (8 bits each, most significant first) build a
256-bin histogram of the keys that share the prefix chosen so far (tl.histogram) and pick the digit where the
count from the top reaches k. A last pass writes the row, -inf where x < k-th value (the reference's float
comparison, so ties at the k-th value are all kept). A row up to ROW_BLOCK columns stays in registers
across the passes (one HBM read); wider rows are re-read per pass.
"""

import torch
import triton
import triton.language as tl
from torch import nn

ROW_BLOCK = 8192


@triton.jit
def _keys(x):
    """int32 keys with the float order, sign bit flipped so digits read as unsigned (x >> s) & 255."""
    bits = x.to(tl.int32, bitcast=True)
    return (bits ^ ((bits >> 31) & 0x7FFFFFFF)) ^ (-2147483648)


@triton.jit
def _pick(hist, k_rem, prefix, SHIFT: tl.constexpr):
    """The digit where the count of keys at or above it first reaches k_rem; the new prefix and k_rem."""
    bins = tl.arange(0, 256)
    above = tl.sum(hist, 0) - tl.cumsum(hist, 0) + hist  # keys whose digit >= bin
    digit = tl.max(tl.where(above >= k_rem, bins, -1), 0)
    at = tl.sum(tl.where(bins == digit, above - hist, 0), 0)  # keys whose digit > chosen
    return prefix | (digit << SHIFT), k_rem - at


@triton.jit
def _matches(key, prefix, SHIFT: tl.constexpr):
    if SHIFT == 24:
        return key == key
    else:
        return (key >> (SHIFT + 8)) == (prefix >> (SHIFT + 8))


@triton.jit
def _pass_in_registers(key, ok, prefix, k_rem, SHIFT: tl.constexpr):
    hist = tl.histogram((key >> SHIFT) & 255, 256, mask=ok & _matches(key, prefix, SHIFT))
    return _pick(hist, k_rem, prefix, SHIFT)


@triton.jit
def _pass_over_row(x_row, n_cols, prefix, k_rem, SHIFT: tl.constexpr, BLOCK: tl.constexpr):
    cols = tl.arange(0, BLOCK)
    hist = tl.zeros((256,), dtype=tl.int32)
    for start in range(0, n_cols, BLOCK):
        c = start + cols
        ok = c < n_cols
        key = _keys(tl.load(x_row + c, mask=ok, other=0.0))
        hist += tl.histogram((key >> SHIFT) & 255, 256, mask=ok & _matches(key, prefix, SHIFT))
    return _pick(hist, k_rem, prefix, SHIFT)


@triton.jit
def topk_filter_kernel(x_ptr, out_ptr, n_cols, x_stride, out_stride, k, BLOCK: tl.constexpr,
                       ONE_PASS: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * x_stride
    o_row = out_ptr + row * out_stride
    cols = tl.arange(0, BLOCK)
    prefix = tl.zeros((), dtype=tl.int32)
    k_rem = tl.zeros((), dtype=tl.int32) + k
    if ONE_PASS:
        ok = cols < n_cols
        x = tl.load(x_row + cols, mask=ok, other=0.0)
        key = _keys(x)
        prefix, k_rem = _pass_in_registers(key, ok, prefix, k_rem, 24)
        prefix, k_rem = _pass_in_registers(key, ok, prefix, k_rem, 16)
        prefix, k_rem = _pass_in_registers(key, ok, prefix, k_rem, 8)
        prefix, k_rem = _pass_in_registers(key, ok, prefix, k_rem, 0)
    else:
        prefix, k_rem = _pass_over_row(x_row, n_cols, prefix, k_rem, 24, BLOCK)
        prefix, k_rem = _pass_over_row(x_row, n_cols, prefix, k_rem, 16, BLOCK)
        prefix, k_rem = _pass_over_row(x_row, n_cols, prefix, k_rem, 8, BLOCK)
        prefix, k_rem = _pass_over_row(x_row, n_cols, prefix, k_rem, 0, BLOCK)
    s = prefix ^ (-2147483648)
    kth = (s ^ ((s >> 31) & 0x7FFFFFFF)).to(tl.float32, bitcast=True)
    if ONE_PASS:
        tl.store(o_row + cols, tl.where(x < kth, float("-inf"), x), mask=ok)
    else:
        for start in range(0, n_cols, BLOCK):
            c = start + cols
            ok = c < n_cols
            x = tl.load(x_row + c, mask=ok, other=0.0)
            tl.store(o_row + c, tl.where(x < kth, float("-inf"), x), mask=ok)


class Model(nn.Module):
    """logits with entries below the row's k-th largest value replaced by -inf."""

    def __init__(self, top_k: int = 50) -> None:
        super().__init__()
        self.top_k = int(top_k)

    def forward(self, logits: torch.Tensor) -> torch.Tensor:
        n_cols = logits.shape[-1]
        x = logits.reshape(-1, n_cols)
        if x.stride(-1) != 1:
            x = x.contiguous()
        out = torch.empty(logits.shape, dtype=logits.dtype, device=logits.device)
        o = out.view(-1, n_cols)
        rows = x.shape[0]
        if rows and n_cols:
            block = min(ROW_BLOCK, triton.next_power_of_2(n_cols))
            topk_filter_kernel[(rows,)](x, o, n_cols, x.stride(0), o.stride(0), min(self.top_k, n_cols),
                                        BLOCK=block, ONE_PASS=block >= n_cols,
                                        num_warps=max(1, min(8, block // 512)))
        return out
