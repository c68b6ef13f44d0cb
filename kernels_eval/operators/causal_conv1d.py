"""causal_conv1d reference (Mamba/Qwen3-Next short conv, prefill with carried-in state)."""

import torch
from torch import nn

from kernels_eval.operators._common import randn


class Model(nn.Module):
    """out[c, t] = act(bias[c] + sum_j weight[c, j] * s[c, t + j]) with s = [initial_state[0] | x] along time."""

    def __init__(self, activation: str | None = "silu") -> None:
        super().__init__()
        if activation not in (None, "silu", "swish"):
            raise ValueError(f"causal_conv1d: unsupported activation {activation!r}")
        self.activation = activation

    def forward(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
                initial_state: torch.Tensor) -> torch.Tensor:
        dim, tokens = x.shape
        width = weight.shape[1]
        seq = torch.cat([initial_state[0, :, -(width - 1):].float(), x.float()], dim=-1) if width > 1 else x.float()
        out = bias.float()[:, None].expand(dim, tokens).clone()
        for j in range(width):
            out += weight[:, j].float()[:, None] * seq[:, j:j + tokens]
        if self.activation is not None:
            out = out * torch.sigmoid(out)
        return out.to(x.dtype)


def make_inputs(*, token_count: int, dim: int, width: int = 4, device="cpu", generator=None) -> dict:
    """Channel-major x [dim, T], conv taps, bias and the previous width-1 inputs as state."""
    kw = dict(dtype=torch.bfloat16, device=device, generator=generator)
    return {"x": randn((dim, token_count), **kw),
            "weight": randn((dim, width), **kw, scale=0.5),
            "bias": randn((dim,), **kw, scale=0.1),
            "initial_state": randn((1, dim, width - 1), **kw)}
