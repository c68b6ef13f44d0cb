"""silu_and_mul in Triton (vLLM SiluAndMul): out = silu(x[..., :d]) * x[..., d:], d = last_dim // 2.

silu is computed in fp32 and rounded to x's dtype before the product, as vLLM and the reference do.
Programs take [BLOCK_M, BLOCK_N] tiles of the output (rows on grid axis 0, so any row count fits);
the tile shape and warp count are autotuned per (d, row-count bucket).
"""

import torch
import triton
import triton.language as tl
from torch import nn

CONFIGS = [triton.Config({"BLOCK_M": m, "BLOCK_N": n}, num_warps=w)
           for m, n, w in ((1, 1024, 4), (1, 2048, 8), (2, 1024, 4), (4, 1024, 8), (2, 2048, 8), (8, 512, 8),
                           (4, 512, 4), (1, 512, 2))]


@triton.autotune(configs=CONFIGS, key=["d", "rows_log2"])
@triton.jit
def silu_and_mul_kernel(x_ptr, out_ptr, n_rows, d, x_stride, out_stride, rows_log2,
                        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    rows64 = rows.to(tl.int64)
    mask = (rows < n_rows)[:, None] & (cols < d)[None, :]
    gate_ptr = x_ptr + rows64[:, None] * x_stride + cols[None, :]
    gate = tl.load(gate_ptr, mask=mask, other=0.0).to(tl.float32)
    up = tl.load(gate_ptr + d, mask=mask, other=0.0).to(tl.float32)
    act = (gate * tl.sigmoid(gate)).to(out_ptr.dtype.element_ty).to(tl.float32)
    tl.store(out_ptr + rows64[:, None] * out_stride + cols[None, :], (act * up).to(out_ptr.dtype.element_ty),
             mask=mask)


class Model(nn.Module):
    """out = silu(x[..., :d]) * x[..., d:2d] with d = last_dim // 2."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        d = x.shape[-1] // 2
        x2 = x.reshape(-1, x.shape[-1])
        if x2.stride(-1) != 1:
            x2 = x2.contiguous()
        out = torch.empty((*x.shape[:-1], d), dtype=x.dtype, device=x.device)
        o2 = out.view(-1, d)
        n_rows = x2.shape[0]
        if n_rows and d:
            grid = lambda meta: (triton.cdiv(n_rows, meta["BLOCK_M"]), triton.cdiv(d, meta["BLOCK_N"]))  # noqa: E731
            silu_and_mul_kernel[grid](x2, o2, n_rows, d, x2.stride(0), o2.stride(0), max(n_rows, 1).bit_length())
        return out
