"""block_scaled_mm reference (DeepSeek-V3 style fp8 GEMM: 1 x gk activation blocks, gn x gk weight tiles)."""

import torch
from torch import nn

from kernels_eval.operators._common import block_quantize, expand_blocks, group_quantize_rows, randn

_ROWS_PER_CHUNK = 32768  # bounds the fp32 dequantised copy of a on large M


class Model(nn.Module):
    """out = (a * a_scales over K blocks) @ (b * b_scales over gn x gk tiles)ᵀ in fp32; a [M, K], b [N, K] fp8."""

    def __init__(self, group_n: int, group_k: int) -> None:
        super().__init__()
        self.group_n, self.group_k = int(group_n), int(group_k)

    def forward(self, a: torch.Tensor, b: torch.Tensor, a_scales: torch.Tensor, b_scales: torch.Tensor) -> torch.Tensor:
        m, k = a.shape
        n = b.shape[0]
        b_dq = b.float() * expand_blocks(b_scales, self.group_n, self.group_k, n, k)
        out = torch.empty(m, n, dtype=torch.float32, device=a.device)
        for lo in range(0, m, _ROWS_PER_CHUNK):
            hi = min(m, lo + _ROWS_PER_CHUNK)
            a_dq = a[lo:hi].float() * a_scales[lo:hi].repeat_interleave(self.group_k, dim=1)[:, :k]
            out[lo:hi] = a_dq @ b_dq.T
        return out


def make_inputs(*, m: int, n: int, k: int, group_n: int = 128, group_k: int = 128, device="cpu",
                generator=None) -> dict:
    """Activations quantised per (row, K block) and weights per (gn x gk) tile, as a real fp8 checkpoint."""
    a_q, a_scales = group_quantize_rows(randn((m, k), dtype=torch.bfloat16, device=device, generator=generator),
                                        group_k)
    b = randn((n, k), dtype=torch.bfloat16, device=device, generator=generator, scale=k ** -0.5)
    b_q, b_scales = block_quantize(b, group_n, group_k)
    return {"a": a_q, "b": b_q, "a_scales": a_scales, "b_scales": b_scales}
