"""fused_rmsnorm_quant reference: fused add + RMSNorm + dynamic per-token fp8 quantisation."""

import torch
from torch import nn

from kernels_eval.operators._common import fp8_scale, quantize_fp8, randn


class Model(nn.Module):
    """residual_out = x + residual (bf16); y = rms_norm(residual_out) * weight (fp32);
    scale = amax|y| / fp8_max per row (1 where the row is zero);
    returns (fp8(y / scale), scale [T, 1], residual_out)."""

    def __init__(self, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = float(eps)

    def forward(self, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor):
        summed = (x.float() + residual.float()).to(residual.dtype)
        sf = summed.float()
        y = sf * torch.rsqrt(sf.pow(2).mean(dim=-1, keepdim=True) + self.eps) * weight.float()
        scale = fp8_scale(y.abs().amax(dim=-1, keepdim=True))
        scale = torch.where(scale == 0, torch.ones_like(scale), scale)
        return quantize_fp8(y, scale), scale, summed


def make_inputs(*, token_count: int, hidden_size: int, device="cpu", generator=None) -> dict:
    """Layer output, residual stream and a weight near 1."""
    shape = (token_count, hidden_size)
    return {"x": randn(shape, dtype=torch.bfloat16, device=device, generator=generator, scale=0.5),
            "residual": randn(shape, dtype=torch.bfloat16, device=device, generator=generator),
            "weight": randn((hidden_size,), dtype=torch.bfloat16, device=device, generator=generator,
                            scale=0.1, shift=1.0)}
