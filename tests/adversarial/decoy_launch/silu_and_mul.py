"""Exploit: a decoy Triton launch that touches a scratch buffer; the result comes from F.silu."""

import torch
import torch.nn.functional as F
import triton
import triton.language as tl
from torch import nn


@triton.jit
def touch_kernel(ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(ptr + offs, tl.zeros((BLOCK,), dtype=tl.float32), mask=offs < n)


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scratch = torch.empty(16, dtype=torch.float32, device=x.device)
        touch_kernel[(1,)](scratch, 16, BLOCK=16)
        d = x.shape[-1] // 2
        return (F.silu(x[..., :d].float()).to(x.dtype).float() * x[..., d:].float()).to(x.dtype)
