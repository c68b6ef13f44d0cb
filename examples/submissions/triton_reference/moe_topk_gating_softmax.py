"""moe_topk_gating_softmax in Triton (vLLM topk_softmax without renormalisation, optional grouped routing).

One program per token: the E logits are held as a [groups, E / groups] tile, softmaxed in fp32, and (for
DeepSeek-V2 grouped routing) every expert outside the topk_group groups with the largest max-probability
is set to 0. The top_k experts are then taken by top_k rounds of max + lowest-index-of-max, so weights come
out descending and ids as int32.
"""

import torch
import triton
import triton.language as tl
from torch import nn


@triton.jit
def topk_gating_softmax_kernel(logits_ptr, w_ptr, ids_ptr, per_group, logits_stride,
                               GROUPS: tl.constexpr, PER_GROUP: tl.constexpr, TOPK_GROUP: tl.constexpr,
                               TOP_K: tl.constexpr):
    t = tl.program_id(0).to(tl.int64)
    g = tl.arange(0, GROUPS)
    j = tl.arange(0, PER_GROUP)
    expert = g[:, None] * per_group + j[None, :]
    valid = (j < per_group)[None, :] & (g < GROUPS)[:, None]
    x = tl.load(logits_ptr + t * logits_stride + expert, mask=valid, other=float("-inf")).to(tl.float32)
    row_max = tl.max(tl.max(x, axis=1), axis=0)
    e = tl.where(valid, tl.exp(x - row_max), 0.0)
    p = e / tl.sum(tl.sum(e, axis=1), axis=0)
    if TOPK_GROUP > 0:
        gmax = tl.max(p, axis=1)
        keep = g < 0
        for _ in tl.static_range(TOPK_GROUP):
            best = tl.max(gmax, axis=0)
            pick = tl.min(tl.where(gmax == best, g, GROUPS), axis=0)
            keep = keep | (g == pick)
            gmax = tl.where(g == pick, -1.0, gmax)
        p = tl.where(keep[:, None], p, 0.0)
    p = tl.where(valid, p, -1.0)
    big = GROUPS * per_group
    for k in tl.static_range(TOP_K):
        best = tl.max(tl.max(p, axis=1), axis=0)
        idx = tl.min(tl.min(tl.where(p == best, expert, big), axis=1), axis=0)
        tl.store(w_ptr + t * TOP_K + k, best)
        tl.store(ids_ptr + t * TOP_K + k, idx.to(tl.int32))
        p = tl.where(expert == idx, -1.0, p)


class Model(nn.Module):
    """p = softmax(gating_output) in fp32; (topk_weights, topk_ids) = top-k of p (grouped when configured)."""

    def __init__(self, top_k: int, num_expert_groups: int = 0, topk_group: int = 0) -> None:
        super().__init__()
        self.top_k, self.groups, self.topk_group = int(top_k), int(num_expert_groups), int(topk_group)

    def forward(self, gating_output: torch.Tensor) -> dict:
        logits = gating_output if gating_output.stride(-1) == 1 else gating_output.contiguous()
        tokens, experts = logits.shape
        grouped = self.groups > 0 and self.topk_group > 0
        if grouped and (experts % self.groups or self.groups & (self.groups - 1)):
            raise ValueError("moe_topk_gating_softmax: the group count must be a power of two dividing the experts")
        groups = self.groups if grouped else 1
        weights = torch.empty((tokens, self.top_k), dtype=torch.float32, device=logits.device)
        ids = torch.empty((tokens, self.top_k), dtype=torch.int32, device=logits.device)
        if tokens:
            per_group = experts // groups
            topk_gating_softmax_kernel[(tokens,)](
                logits, weights, ids, per_group, logits.stride(0), GROUPS=groups,
                PER_GROUP=triton.next_power_of_2(per_group),
                TOPK_GROUP=self.topk_group if grouped else 0, TOP_K=self.top_k,
                num_warps=max(1, min(4, experts // 128)))
        return {"topk_weights": weights, "topk_ids": ids}
