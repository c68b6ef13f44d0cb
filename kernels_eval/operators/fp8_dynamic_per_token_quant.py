"""fp8_dynamic_per_token_quant reference: one dynamic scale per row."""

import torch
from torch import nn

from kernels_eval.operators._common import fp8_scale, quantize_fp8, randn


class Model(nn.Module):
    """scale[t] = max(amax|x[t]|, 1e-12) / fp8_max; q = fp8(x / scale). Returns (q [T, H], scale [T])."""

    def forward(self, x: torch.Tensor):
        xf = x.float()
        scale = fp8_scale(xf.abs().amax(dim=-1, keepdim=True).clamp(min=1e-12))
        return quantize_fp8(xf, scale), scale.squeeze(-1)


def make_inputs(*, token_count: int, hidden_size: int, device="cpu", generator=None) -> dict:
    """bf16 activations."""
    return {"x": randn((token_count, hidden_size), dtype=torch.bfloat16, device=device, generator=generator)}
