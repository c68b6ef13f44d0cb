"""per_token_group_quant_fp8 reference (DeepSeek-style 1x128 activation quantisation)."""

import torch
from torch import nn

from kernels_eval.operators._common import group_quantize_rows, randn


class Model(nn.Module):
    """scales[t, g] = max(amax|x[t, gG:(g+1)G]|, 1e-10) / fp8_max; quantized = fp8(x / scale)."""

    def __init__(self, group_size: int) -> None:
        super().__init__()
        self.group_size = int(group_size)

    def forward(self, x: torch.Tensor) -> dict:
        q, scales = group_quantize_rows(x, self.group_size, min_scale=1e-10)
        return {"quantized": q, "scales": scales}


def make_inputs(*, token_count: int, hidden_size: int, device="cpu", generator=None) -> dict:
    """bf16 activations."""
    return {"x": randn((token_count, hidden_size), dtype=torch.bfloat16, device=device, generator=generator)}
