"""per_token_group_quant_fp8 reference (DeepSeek-style 1x128 activation quantisation)."""

import torch
from torch import nn

from kernels_eval.operators._common import FP8_MAX, quantize_fp8, randn


class Model(nn.Module):
    """scales[t, g] = max(amax|x[t, gG:(g+1)G]|, 1e-10) / fp8_max; quantized = fp8(x / scale)."""

    def __init__(self, group_size: int) -> None:
        super().__init__()
        self.group_size = int(group_size)

    def forward(self, x: torch.Tensor) -> dict:
        t, h = x.shape
        groups = x.float().reshape(t, h // self.group_size, self.group_size)
        scales = (groups.abs().amax(dim=-1) / FP8_MAX).clamp(min=1e-10)
        q = quantize_fp8(groups, scales.unsqueeze(-1)).reshape(t, h)
        return {"quantized": q, "scales": scales}


def make_inputs(*, token_count: int, hidden_size: int, device="cpu", generator=None) -> dict:
    """bf16 activations."""
    return {"x": randn((token_count, hidden_size), dtype=torch.bfloat16, device=device, generator=generator)}
