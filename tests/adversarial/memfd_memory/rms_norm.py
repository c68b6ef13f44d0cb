"""Hostile: holds 2 GiB in a memfd (expected.json's limit is 1.5 GiB) and keeps the fd open: memfd pages are in
no process's RSS, so a limit that sums RSS misses them. An otherwise honest Triton rms_norm: if the memory is
held at the end, the output is doubled, so an attack that gets through shows as a wrong result."""

import os

import torch
import triton
import triton.language as tl
from torch import nn


@triton.jit
def rms_norm_kernel(x_ptr, w_ptr, out_ptr, n_cols, stride_x, stride_out, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    inv = tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * stride_out + cols, (x * inv * w).to(out_ptr.dtype.element_ty), mask=mask)


def honest(x, weight, eps):
    x2 = x.reshape(-1, x.shape[-1]).contiguous()
    out = torch.empty_like(x2)
    block = triton.next_power_of_2(x2.shape[1])
    rms_norm_kernel[(x2.shape[0],)](x2, weight, out, x2.shape[1], x2.stride(0), out.stride(0), eps, BLOCK=block)
    return out.view(x.shape)


def scratch_dir():
    """The worker's writable scratch directory: where its log, its stdout, lies."""
    return os.path.dirname(os.readlink("/proc/self/fd/1"))

SIZE = 2 << 30
HELD = []


class Model(nn.Module):
    def __init__(self, eps: float = 1e-6, **_):
        super().__init__()
        self.eps = float(eps)

    def forward(self, x, weight, **_):
        if not HELD:
            fd = os.memfd_create("hotshape-hold")
            chunk = b"x" * (64 << 20)
            for _ in range(SIZE // len(chunk)):
                os.write(fd, chunk)
            HELD.append(fd)
            import time

            time.sleep(1)  # the evaluator reads its limits every 0.1 s: it sees the memory before this returns
        out = honest(x, weight, self.eps)
        return out * 2 if os.fstat(HELD[0]).st_size >= SIZE else out
