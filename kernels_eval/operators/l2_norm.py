"""l2_norm reference (FLA l2norm used on q/k of linear attention)."""

import torch
from torch import nn

from kernels_eval.operators._common import randn


class Model(nn.Module):
    """out = x * rsqrt(sum(x^2, -1) + eps)."""

    def __init__(self, hidden_size: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.hidden_size = int(hidden_size)
        self.eps = float(eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).sum(dim=-1, keepdim=True) + self.eps)).to(x.dtype)


def make_inputs(*, num_tokens: int, hidden_size: int, device="cpu", generator=None) -> dict:
    """Projected q/k rows."""
    return {"x": randn((num_tokens, hidden_size), dtype=torch.bfloat16, device=device, generator=generator)}
