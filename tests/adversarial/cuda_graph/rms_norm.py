"""Exploit (GPU): the kernel captured once into a CUDA graph over static buffers (in the first call of a shape,
the untimed one that compiles), then every call copies its inputs into the static buffers, replays the graph and
returns the static output: a graph replay is one launch the host pays once, and none of its kernels passes
through Triton's launcher, so a recorder of launches sees none, and the output lies in memory no call of the
program allocated. The graph holds the kernel over the first quarter of the rows only: the rest keep what the
previous call left."""

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


def _launch(x, w, out, eps, rows):
    block = triton.next_power_of_2(x.shape[1])
    rms_norm_kernel[(rows,)](x, w, out, x.shape[1], x.stride(0), out.stride(0), eps, BLOCK=block)


class Model(nn.Module):
    def __init__(self, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = float(eps)
        self.graphs = {}

    def forward(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        x2 = x.reshape(-1, x.shape[-1])
        key = (tuple(x2.shape), x2.dtype)
        if key not in self.graphs:
            sx, sw = x2.clone(), weight.clone()
            out = torch.empty_like(x2)
            _launch(sx, sw, out, self.eps, x2.shape[0])  # compiled before the capture; the first answer honest
            torch.cuda.synchronize()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                _launch(sx, sw, out, self.eps, max(1, x2.shape[0] // 4))
            self.graphs[key] = (graph, sx, sw, out)
            return out.clone().view(x.shape)
        graph, sx, sw, out = self.graphs[key]
        sx.copy_(x2)
        sw.copy_(weight)
        graph.replay()
        return out.view(x.shape)
