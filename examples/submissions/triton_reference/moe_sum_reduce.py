"""moe_sum_reduce in Triton: out[t] = routed_scaling_factor * sum_j expert_outputs[t, j] (fp32 accumulate).

A program owns a [BLOCK_M tokens, BLOCK_N columns] output tile and streams the top_k expert rows of each
token through registers (top_k is a compile-time constant, so the loop is unrolled and its loads issued
together). Tile shape and warps are autotuned per (top_k, hidden, token count to a power of two).
"""

import torch
import triton
import triton.language as tl
from torch import nn

CONFIGS = [triton.Config({"BLOCK_M": m, "BLOCK_N": n}, num_warps=w)
           for m, n, w in ((1, 1024, 4), (1, 2048, 8), (2, 1024, 4), (2, 2048, 8), (4, 512, 4), (1, 512, 2))]


@triton.autotune(configs=CONFIGS, key=["hidden", "TOP_K", "tokens_log2"])
@triton.jit
def moe_sum_reduce_kernel(x_ptr, out_ptr, n_tokens, hidden, tokens_log2, x_stride_t, x_stride_k, out_stride, scale,
                          TOP_K: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    rows64 = rows.to(tl.int64)
    mask = (rows < n_tokens)[:, None] & (cols < hidden)[None, :]
    base = x_ptr + rows64[:, None] * x_stride_t + cols[None, :]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for j in tl.static_range(TOP_K):
        acc += tl.load(base + j * x_stride_k, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + rows64[:, None] * out_stride + cols[None, :], (acc * scale).to(out_ptr.dtype.element_ty),
             mask=mask)


class Model(nn.Module):
    """out[t] = routed_scaling_factor * sum_j expert_outputs[t, j]."""

    def __init__(self, routed_scaling_factor: float = 1.0) -> None:
        super().__init__()
        self.routed_scaling_factor = float(routed_scaling_factor)

    def forward(self, expert_outputs: torch.Tensor) -> torch.Tensor:
        x = expert_outputs if expert_outputs.stride(-1) == 1 else expert_outputs.contiguous()
        n_tokens, top_k, hidden = x.shape
        out = torch.empty((n_tokens, hidden), dtype=x.dtype, device=x.device)
        if n_tokens and hidden:
            def grid(meta):
                return triton.cdiv(n_tokens, meta["BLOCK_M"]), triton.cdiv(hidden, meta["BLOCK_N"])

            moe_sum_reduce_kernel[grid](x, out, n_tokens, hidden, n_tokens.bit_length(), x.stride(0), x.stride(1),
                                        out.stride(0), self.routed_scaling_factor, TOP_K=top_k)
        return out
