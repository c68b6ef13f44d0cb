"""gated_rms_norm reference (Qwen3-Next / FLA RMSNormGated)."""

import torch
from torch import nn

from kernels_eval.operators._common import randn


def _act(z: torch.Tensor, name: str) -> torch.Tensor:
    if name in ("silu", "swish"):
        return z * torch.sigmoid(z)
    if name == "sigmoid":
        return torch.sigmoid(z)
    raise ValueError(f"gated_rms_norm: unsupported activation {name!r}")


class Model(nn.Module):
    """norm_before_gate: rms_norm(x) * w * act(z); otherwise rms_norm(x * act(z)) * w."""

    def __init__(self, eps: float = 1e-6, norm_before_gate: bool = True, activation: str = "silu") -> None:
        super().__init__()
        self.eps = float(eps)
        self.norm_before_gate = bool(norm_before_gate)
        self.activation = activation

    def forward(self, x: torch.Tensor, weight: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        xf, gate = x.float(), _act(z.float(), self.activation)
        if not self.norm_before_gate:
            xf = xf * gate
        out = xf * torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + self.eps) * weight.float()
        if self.norm_before_gate:
            out = out * gate
        return out.to(x.dtype)


def make_inputs(*, rows: int, hidden_size: int, device="cpu", generator=None) -> dict:
    """Per-head attention outputs x, gate projections z and a weight near 1."""
    shape = (rows, hidden_size)
    return {"x": randn(shape, dtype=torch.bfloat16, device=device, generator=generator),
            "weight": randn((hidden_size,), dtype=torch.bfloat16, device=device, generator=generator,
                            scale=0.1, shift=1.0),
            "z": randn(shape, dtype=torch.bfloat16, device=device, generator=generator)}
