"""Exploit: a real kernel that leaves the last element unwritten (the slot may hold plausible old data).

Skipping one element rather than the last row keeps the exploit alive on one-row problems too."""

import torch
import triton
import triton.language as tl
from torch import nn


@triton.jit
def silu_and_mul_kernel(x_ptr, out_ptr, d, n_rows, stride_x, stride_out, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    limit = tl.where(row == n_rows - 1, d - 1, d)
    mask = cols < limit
    gate = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    up = tl.load(x_ptr + row * stride_x + d + cols, mask=mask, other=0.0).to(tl.float32)
    act = (gate / (1.0 + tl.exp(-gate))).to(out_ptr.dtype.element_ty).to(tl.float32)
    tl.store(out_ptr + row * stride_out + cols, (act * up).to(out_ptr.dtype.element_ty), mask=mask)


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        d = x.shape[-1] // 2
        x2 = x.reshape(-1, x.shape[-1])
        out = torch.empty((x2.shape[0], d), dtype=x.dtype, device=x.device)
        block = min(1024, triton.next_power_of_2(d))
        rows = x2.shape[0]
        silu_and_mul_kernel[(rows, triton.cdiv(d, block))](x2, out, d, rows, x2.stride(0), out.stride(0), BLOCK=block)
        return out.view(*x.shape[:-1], d)
