"""silu_and_mul reference (vLLM SiluAndMul): gate is the first half of the last dim, up the second."""

import torch
from torch import nn

from kernels_eval.operators._common import randn


class Model(nn.Module):
    """out = silu(x[..., :d]) * x[..., d:2d] with d = last_dim // 2 (silu rounded to bf16 first, as vLLM)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        d = x.shape[-1] // 2
        gate, up = x[..., :d].float(), x[..., d:2 * d]
        act = (gate * torch.sigmoid(gate)).to(x.dtype)
        return (act.float() * up.float()).to(x.dtype)


def make_inputs(*, shape: list, device="cpu", generator=None) -> dict:
    """gate_up projection output [..., 2I]."""
    return {"x": randn(tuple(int(d) for d in shape), dtype=torch.bfloat16, device=device, generator=generator)}
