"""rms_norm reference (vLLM semantics): fp32 math, cast to the input dtype at the end."""

import torch
from torch import nn

from kernels_eval.operators._common import randn


class Model(nn.Module):
    """out = x * rsqrt(mean(x^2, -1) + eps) * weight."""

    def __init__(self, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = float(eps)

    def forward(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        inv = torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return (xf * inv * weight.float()).to(x.dtype)


def make_inputs(*, token_count: int, hidden_size: int, device="cpu", generator=None) -> dict:
    """Activations of a residual stream (std 1) and a weight near 1."""
    return {"x": randn((token_count, hidden_size), dtype=torch.bfloat16, device=device, generator=generator),
            "weight": randn((hidden_size,), dtype=torch.bfloat16, device=device, generator=generator,
                            scale=0.1, shift=1.0)}
