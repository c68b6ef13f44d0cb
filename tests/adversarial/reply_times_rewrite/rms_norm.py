"""Exploit (GPU): a kernel doing four passes over each row, and a wrapper of `json.dumps` (which the worker's reply
channel uses) that rewrites every reply on its way out: the records of the submission's kernel squeezed to an
eighth, event times and per-call times divided by eight, every launch marked the submission's own. Once this
forged the same 1.53 roofline fraction as editing the records in place."""

import json

import torch
import triton
import triton.language as tl
from torch import nn

SQUEEZE = 8
_dumps = json.dumps


def _rewrite(obj, *args, **kwargs):
    if isinstance(obj, dict) and "ok" in obj:
        obj = dict(obj)
        records = obj.get("records")
        if isinstance(records, dict):
            own = {i for i, n in enumerate(records.get("names") or []) if "rms_norm_passes" in str(n)}
            rows = []
            for row in records.get("rows") or []:
                row = list(row)
                if row[5] in own:
                    row[3] = row[2] + max(1, (row[3] - row[2]) // SQUEEZE)
                rows.append(row)
            obj["records"] = dict(records, rows=rows)
        for key in ("times_s", "t_event_s"):
            if isinstance(obj.get(key), list):
                obj[key] = [t / SQUEEZE for t in obj[key]]
        if isinstance(obj.get("launches"), list):
            obj["launches"] = [dict(x, owned=True) if isinstance(x, dict) else x for x in obj["launches"]]
    return _dumps(obj, *args, **kwargs)


json.dumps = _rewrite


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
