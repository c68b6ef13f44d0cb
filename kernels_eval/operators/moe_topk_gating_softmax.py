"""moe_topk_gating_softmax reference (vLLM topk_softmax without renormalisation)."""

import torch
from torch import nn

from kernels_eval.operators._common import randn


class Model(nn.Module):
    """p = softmax(gating_output, -1) in fp32; (topk_weights, topk_ids) = top-k of p, ids int32, descending.
    With num_expert_groups and topk_group > 0 (DeepSeek-V2 grouped routing) only experts of the topk_group
    groups with the largest max-probability compete (the others count as probability 0)."""

    def __init__(self, top_k: int, num_expert_groups: int = 0, topk_group: int = 0) -> None:
        super().__init__()
        self.top_k, self.groups, self.topk_group = int(top_k), int(num_expert_groups), int(topk_group)

    def forward(self, gating_output: torch.Tensor) -> dict:
        p = self.scores(gating_output)
        weights, ids = p.topk(self.top_k, dim=-1)
        return {"topk_weights": weights, "topk_ids": ids.to(torch.int32)}

    def scores(self, gating_output: torch.Tensor) -> torch.Tensor:
        """Every expert's routing probability, 0 outside the kept groups: what top-k selects from."""
        p = torch.softmax(gating_output.float(), dim=-1)
        if self.groups > 0 and self.topk_group > 0:
            t, e = p.shape
            grouped = p.reshape(t, self.groups, e // self.groups)
            best = grouped.amax(dim=-1).topk(self.topk_group, dim=-1).indices
            keep = torch.zeros(t, self.groups, dtype=torch.bool, device=p.device).scatter_(1, best, True)
            p = torch.where(keep[:, :, None], grouped, torch.zeros_like(grouped)).reshape(t, e)
        return p


def tie_scores(model: Model, inputs: dict) -> dict:
    """For the judge: ids may differ from the reference's where the probabilities they select are near-equal
    (a kernel's exp and division round differently from torch's; seen on H200: 2 of 108,208 ids)."""
    return {"topk_ids": (model.scores(inputs["gating_output"]), "topk_weights")}


def make_inputs(*, token_count: int, num_experts: int, device="cpu", generator=None) -> dict:
    """fp32 router logits (continuous, so ties have probability zero)."""
    return {"gating_output": randn((token_count, num_experts), dtype=torch.float32, device=device,
                                   generator=generator, scale=2.0)}
