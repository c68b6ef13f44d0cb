"""Exploit (GPU): a host thread started in __init__ sleeps until a call hands it work; the call launches a
one-element kernel and returns at once, and the thread, woken, launches the real kernel into the output a moment
later (on the calling stream), so the call's own window holds almost nothing and the work lands between calls."""

import queue
import threading

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


@triton.jit
def tiny_kernel(out_ptr):
    tl.store(out_ptr, 0.0)


def _later(work: queue.Queue) -> None:
    while True:
        x2, w, out, eps = work.get()  # sleeps here between calls
        block = triton.next_power_of_2(x2.shape[1])
        rms_norm_kernel[(x2.shape[0],)](x2, w, out, x2.shape[1], x2.stride(0), out.stride(0), eps, BLOCK=block)


class Model(nn.Module):
    def __init__(self, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = float(eps)
        self.work: queue.Queue = queue.Queue()
        threading.Thread(target=_later, args=(self.work,), daemon=True).start()

    def forward(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        x2 = x.reshape(-1, x.shape[-1]).contiguous()
        out = torch.empty_like(x2)
        tiny_kernel[(1,)](out)
        self.work.put((x2, weight, out, self.eps))
        return out.view(x.shape)
