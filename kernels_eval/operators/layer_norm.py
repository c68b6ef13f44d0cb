"""layer_norm reference: affine LayerNorm over the last dim, fp32 math."""

import torch
from torch import nn

from kernels_eval.operators._common import randn


class Model(nn.Module):
    """out = (x - mean) * rsqrt(var + eps) * weight + bias (biased variance)."""

    def __init__(self, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = float(eps)

    def forward(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        mean = xf.mean(dim=-1, keepdim=True)
        var = (xf - mean).pow(2).mean(dim=-1, keepdim=True)
        return ((xf - mean) * torch.rsqrt(var + self.eps) * weight.float() + bias.float()).to(x.dtype)


def make_inputs(*, shape: list, device="cpu", generator=None) -> dict:
    """Activations with a non-zero mean, a weight near 1 and a small bias."""
    shape = tuple(int(d) for d in shape)
    h = shape[-1]
    return {"x": randn(shape, dtype=torch.bfloat16, device=device, generator=generator, shift=0.5),
            "weight": randn((h,), dtype=torch.bfloat16, device=device, generator=generator, scale=0.1, shift=1.0),
            "bias": randn((h,), dtype=torch.bfloat16, device=device, generator=generator, scale=0.1)}
