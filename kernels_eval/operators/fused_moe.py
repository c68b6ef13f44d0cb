"""fused_moe reference (vLLM fused_experts, bf16): SwiGLU experts, top-k weighted sum in fp32."""

import torch
from torch import nn

from kernels_eval.operators._common import randn, topk_routing


def moe_forward(h: torch.Tensor, topk_weights: torch.Tensor, topk_ids: torch.Tensor, num_experts: int,
                inter: int, expert_weights) -> torch.Tensor:
    """sum_j w[t, j] * W2 (silu(gate) * up), (gate, up) = W1 h, for every routed (token, slot) pair;
    `expert_weights(e)` gives the fp32 (W1 [2I, H], W2 [H, I]) of expert e. fp32 out [T, H]."""
    out = torch.zeros(h.shape[0], h.shape[1], dtype=torch.float32, device=h.device)
    flat = topk_ids.flatten().long()
    tokens = torch.arange(h.shape[0], device=h.device).repeat_interleave(topk_ids.shape[1])
    weights = topk_weights.flatten().float()
    for e in torch.unique(flat).tolist():
        if not 0 <= e < num_experts:
            raise ValueError(f"fused_moe: expert id {e} out of range [0, {num_experts})")
        sel = (flat == e).nonzero().flatten()
        w1, w2 = expert_weights(e)
        gate_up = h[tokens[sel]] @ w1.T
        act = torch.nn.functional.silu(gate_up[:, :inter]) * gate_up[:, inter:]
        out.index_add_(0, tokens[sel], (act @ w2.T) * weights[sel, None])
    return out


class Model(nn.Module):
    """w1 [E, 2I, H] (gate rows then up rows), w2 [E, H, I], topk_weights fp32 / topk_ids int32 [T, k]."""

    def __init__(self, num_experts: int, intermediate_size: int, top_k: int) -> None:
        super().__init__()
        self.num_experts, self.inter, self.top_k = int(num_experts), int(intermediate_size), int(top_k)

    def forward(self, hidden_states: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor, topk_weights: torch.Tensor,
                topk_ids: torch.Tensor) -> torch.Tensor:
        return moe_forward(hidden_states.float(), topk_weights, topk_ids, self.num_experts, self.inter,
                           lambda e: (w1[e].float(), w2[e].float()))


def make_inputs(*, token_count: int, hidden_size: int, intermediate_size: int, num_experts: int, top_k: int,
                device="cpu", generator=None) -> dict:
    """Hidden states, experts scaled to keep activations O(1), and softmax top-k routing (distinct experts)."""
    kw = dict(dtype=torch.bfloat16, device=device, generator=generator)
    weights, ids = topk_routing(token_count, num_experts, top_k, device=device, generator=generator)
    return {"hidden_states": randn((token_count, hidden_size), **kw),
            "w1": randn((num_experts, 2 * intermediate_size, hidden_size), **kw, scale=hidden_size ** -0.5),
            "w2": randn((num_experts, hidden_size, intermediate_size), **kw, scale=intermediate_size ** -0.5),
            "topk_weights": weights, "topk_ids": ids}
