"""moe_count_and_sort reference: per-expert counts, their prefix sum and the expert-sorted slot indices."""

import torch
from torch import nn

from kernels_eval.operators._common import topk_routing


class Model(nn.Module):
    """expert_token_counts [E], cumsum [E+1] (exclusive, starting at 0), sorted_token_ids = flat slot indices
    stably sorted by expert (int32)."""

    def __init__(self, num_experts: int = 128, block_size: int = 128) -> None:
        super().__init__()
        self.num_experts, self.block_size = int(num_experts), int(block_size)

    def forward(self, topk_ids: torch.Tensor) -> dict:
        flat = topk_ids.flatten().long()
        counts = torch.bincount(flat, minlength=self.num_experts)[: self.num_experts].to(torch.int32)
        cumsum = torch.zeros(self.num_experts + 1, dtype=torch.int32, device=topk_ids.device)
        cumsum[1:] = torch.cumsum(counts, 0)
        order = torch.sort(flat, stable=True).indices.to(torch.int32)
        return {"sorted_token_ids": order, "expert_token_counts": counts, "cumsum": cumsum}


def make_inputs(*, token_count: int, top_k: int, num_experts: int, device="cpu", generator=None) -> dict:
    """Router top-k ids (distinct experts per token)."""
    _, ids = topk_routing(token_count, num_experts, top_k, device=device, generator=generator)
    return {"topk_ids": ids}
