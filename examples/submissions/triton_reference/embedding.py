"""embedding in Triton: out[t] = weight[input_ids[t]] (row gather from a [V, H] table).

A program copies BLOCK_M token rows, BLOCK_N columns at a time: the ids are loaded once, the rows read with
64-bit offsets and written to the contiguous output. Only the gathered rows move.
"""

import torch
import triton
import triton.language as tl
from torch import nn


@triton.jit
def embedding_kernel(ids_ptr, w_ptr, out_ptr, n_tokens, hidden, w_stride, BLOCK_M: tl.constexpr,
                     BLOCK_N: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < n_tokens
    ids = tl.load(ids_ptr + rows, mask=row_ok, other=0).to(tl.int64)
    src = w_ptr + ids[:, None] * w_stride
    dst = out_ptr + rows.to(tl.int64)[:, None] * hidden
    cols = tl.arange(0, BLOCK_N)
    for start in range(0, hidden, BLOCK_N):
        c = start + cols
        mask = row_ok[:, None] & (c[None, :] < hidden)
        tl.store(dst + c[None, :], tl.load(src + c[None, :], mask=mask), mask=mask)


class Model(nn.Module):
    """out[t] = weight[input_ids[t]]."""

    def forward(self, input_ids: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        ids = input_ids.reshape(-1)
        if ids.stride(0) != 1:
            ids = ids.contiguous()
        if weight.stride(1) != 1:
            weight = weight.contiguous()
        hidden = weight.shape[1]
        out = torch.empty((*input_ids.shape, hidden), dtype=weight.dtype, device=weight.device)
        n = ids.numel()
        if n and hidden:
            block_n = min(triton.next_power_of_2(hidden), 4096)
            block_m = max(1, min(16, 4096 // block_n))
            while block_m > 1 and triton.cdiv(n, block_m) < 264:
                block_m //= 2
            embedding_kernel[(triton.cdiv(n, block_m),)](ids, weight, out, n, hidden, weight.stride(0),
                                                         BLOCK_M=block_m, BLOCK_N=block_n,
                                                         num_warps=max(1, min(8, block_m * block_n // 1024)))
        return out
