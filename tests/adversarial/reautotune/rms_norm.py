"""An autotuned rms_norm that forgets its autotuning after every call, so every call benchmarks its configs again.
Its output is right and its kernels are its own; but its timed calls are not a steady state, and a benchmark's
launches are not the call's result."""

import torch
import triton
import triton.language as tl
from torch import nn


@triton.autotune(configs=[triton.Config({}, num_warps=w) for w in (2, 4, 8)], key=["n_cols"])
@triton.jit
def rms_norm_kernel(x_ptr, w_ptr, out_ptr, n_cols, stride_x, stride_out, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    inv = tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * stride_out + cols, (x * inv * w).to(out_ptr.dtype.element_ty), mask=mask)


class Model(nn.Module):
    def __init__(self, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = float(eps)

    def forward(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        x2 = x.reshape(-1, x.shape[-1]).contiguous()
        out = torch.empty_like(x2)
        rms_norm_kernel.cache.clear()
        rms_norm_kernel[(x2.shape[0],)](x2, weight, out, x2.shape[1], x2.stride(0), out.stride(0), self.eps,
                                        BLOCK=triton.next_power_of_2(x2.shape[1]))
        return out.view(x.shape)
