"""Hostile: writes 100,000 forged records straight into the observation channel (the pipe whose write end the
worker holds; harness/observe.py), then computes honestly: an evaluator that de-duplicates them with list scans
spends minutes of CPU (quadratic), and every line lands in the row's fallbacks."""

import os
import sys

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

LINES = 100_000


class Model(nn.Module):
    def __init__(self, eps: float = 1e-6, **_):
        super().__init__()
        self.eps = float(eps)

    def forward(self, x, weight, **_):
        fd = int(sys.argv[3])  # the observation channel's write end (harness/worker.py main)
        block = []
        for i in range(LINES):
            block.append(f"host\tforged record {i}\n")
            if len(block) == 1000:
                os.write(fd, "".join(block).encode())
                block = []
        return honest(x, weight, self.eps)
