"""moe_sum_reduce reference: sum the top-k expert outputs of each token."""

import torch
from torch import nn

from kernels_eval.operators._common import randn


class Model(nn.Module):
    """out[t] = routed_scaling_factor * sum_j expert_outputs[t, j] (fp32 accumulate)."""

    def __init__(self, routed_scaling_factor: float = 1.0) -> None:
        super().__init__()
        self.routed_scaling_factor = float(routed_scaling_factor)

    def forward(self, expert_outputs: torch.Tensor) -> torch.Tensor:
        return (expert_outputs.float().sum(dim=1) * self.routed_scaling_factor).to(expert_outputs.dtype)


def make_inputs(*, token_count: int, top_k: int, hidden_size: int, device="cpu", generator=None) -> dict:
    """Weighted expert outputs [T, k, H]."""
    return {"expert_outputs": randn((token_count, top_k, hidden_size), dtype=torch.bfloat16, device=device,
                                    generator=generator, scale=0.1)}
