"""Exploit (GPU): a kernel doing four passes over each row (the honest kernel does one), and a global
`sys.settrace` tracer, set at import, that edits the profiler records the worker collects as the function building
them (`kineto_records`) returns: every record of the submission's kernel is squeezed to an eighth of its length.
Once this forged a 41 µs time (roofline fraction 1.53) for a kernel that takes 330 µs."""

import sys

import torch
import triton
import triton.language as tl
from torch import nn

SQUEEZE = 8


def _squeeze(records) -> None:
    names = records.get("names") or []
    own = {i for i, n in enumerate(names) if "rms_norm_passes" in str(n)}
    for row in records.get("rows") or []:
        if row[5] in own:
            row[3] = row[2] + max(1, (row[3] - row[2]) // SQUEEZE)


def _local(frame, event, arg):
    if event == "return" and isinstance(arg, dict) and "rows" in arg:
        try:
            _squeeze(arg)
        except Exception:  # noqa: BLE001 - a record of another form is left as it is
            pass
    return _local


def _tracer(frame, event, arg):
    return _local if frame.f_code.co_name == "kineto_records" else None


sys.settrace(_tracer)


@triton.jit
def rms_norm_passes_kernel(x_ptr, w_ptr, out_ptr, n_cols, stride_x, stride_out, eps, BLOCK: tl.constexpr,
                           PASSES: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for p in range(PASSES):
        x = tl.load(x_ptr + row * stride_x + cols + p * 0, mask=mask, other=0.0, volatile=True).to(tl.float32)
        acc += x * x
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    inv = tl.rsqrt(tl.sum(acc, axis=0) / (n_cols * PASSES) + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * stride_out + cols, (x * inv * w).to(out_ptr.dtype.element_ty), mask=mask)


class Model(nn.Module):
    def __init__(self, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = float(eps)

    def forward(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        x2 = x.reshape(-1, x.shape[-1]).contiguous()
        out = torch.empty_like(x2)
        block = triton.next_power_of_2(x2.shape[1])
        rms_norm_passes_kernel[(x2.shape[0],)](x2, weight, out, x2.shape[1], x2.stride(0), out.stride(0), self.eps,
                                               BLOCK=block, PASSES=4, num_warps=8 if block >= 2048 else 4)
        return out.view(x.shape)
