"""moe_align_block_size reference: group routed (token, slot) indices by expert, padded to block_size."""

import torch
from torch import nn

from kernels_eval.operators._common import topk_routing


class Model(nn.Module):
    """Flat indices i of topk_ids (i = t*k + j), stably sorted by expert; each expert's run padded with the
    sentinel T*k to a multiple of block_size; expert_ids names the expert of each block; experts with no
    tokens get no blocks. Returns sorted_token_ids, expert_ids (int32) and num_tokens_post_pad [1]."""

    def __init__(self, block_size: int, num_experts: int) -> None:
        super().__init__()
        self.block_size, self.num_experts = int(block_size), int(num_experts)

    def forward(self, topk_ids: torch.Tensor) -> dict:
        flat = topk_ids.flatten().long()
        sentinel = flat.numel()
        order = torch.sort(flat, stable=True).indices
        counts = torch.bincount(flat, minlength=self.num_experts)[: self.num_experts]
        padded = (counts + self.block_size - 1) // self.block_size * self.block_size
        total = int(padded.sum())
        sorted_ids = torch.full((total,), sentinel, dtype=torch.int32, device=topk_ids.device)
        starts = torch.cumsum(padded, 0) - padded
        first = torch.cumsum(counts, 0) - counts
        rank_in_expert = torch.arange(flat.numel(), device=flat.device) - first[flat[order]]
        sorted_ids[starts[flat[order]] + rank_in_expert] = order.to(torch.int32)
        expert_ids = torch.repeat_interleave(torch.arange(self.num_experts, device=flat.device, dtype=torch.int32),
                                             padded // self.block_size)
        return {"sorted_token_ids": sorted_ids, "expert_ids": expert_ids,
                "num_tokens_post_pad": torch.tensor([total], dtype=torch.int32, device=topk_ids.device)}


def make_inputs(*, token_count: int, num_experts: int, top_k: int, device="cpu", generator=None) -> dict:
    """Router top-k ids (distinct experts per token)."""
    _, ids = topk_routing(token_count, num_experts, top_k, device=device, generator=generator)
    return {"topk_ids": ids}
