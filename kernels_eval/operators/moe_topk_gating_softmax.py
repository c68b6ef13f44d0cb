"""moe_topk_gating_softmax reference (vLLM topk_softmax without renormalisation)."""

import torch
from torch import nn

from kernels_eval.operators._common import randn


class Model(nn.Module):
    """p = softmax(gating_output, -1) in fp32; (topk_weights, topk_ids) = top-k of p, ids int32, descending."""

    def __init__(self, top_k: int) -> None:
        super().__init__()
        self.top_k = int(top_k)

    def forward(self, gating_output: torch.Tensor) -> dict:
        weights, ids = torch.softmax(gating_output.float(), dim=-1).topk(self.top_k, dim=-1)
        return {"topk_weights": weights, "topk_ids": ids.to(torch.int32)}


def make_inputs(*, token_count: int, num_experts: int, device="cpu", generator=None) -> dict:
    """fp32 router logits (continuous, so ties have probability zero)."""
    return {"gating_output": randn((token_count, num_experts), dtype=torch.float32, device=device,
                                   generator=generator, scale=2.0)}
