"""fused_add_rms_norm reference: the bf16 sum becomes the new residual and is normalised."""

import torch
from torch import nn

from kernels_eval.operators._common import randn


class Model(nn.Module):
    """residual' = x + residual (rounded to bf16); out = rms_norm(residual') * weight."""

    def __init__(self, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = float(eps)

    def forward(self, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor) -> dict:
        summed = (x.float() + residual.float()).to(residual.dtype)
        sf = summed.float()
        inv = torch.rsqrt(sf.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return {"out": (sf * inv * weight.float()).to(x.dtype), "residual": summed}


def make_inputs(*, token_count: int, hidden_size: int, device="cpu", generator=None) -> dict:
    """A layer output x, a residual stream and a weight near 1."""
    shape = (token_count, hidden_size)
    return {"x": randn(shape, dtype=torch.bfloat16, device=device, generator=generator, scale=0.5),
            "residual": randn(shape, dtype=torch.bfloat16, device=device, generator=generator),
            "weight": randn((hidden_size,), dtype=torch.bfloat16, device=device, generator=generator,
                            scale=0.1, shift=1.0)}
