"""linear_sigmoid_mul reference (Qwen2-MoE shared-expert gating fused with its product)."""

import torch
from torch import nn

from kernels_eval.operators._common import randn


class Model(nn.Module):
    """out = sigmoid(hidden_states @ weightᵀ + bias) * post_mul_mat, fp32 math, bf16 out."""

    def forward(self, hidden_states: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
                post_mul_mat: torch.Tensor) -> torch.Tensor:
        gate = hidden_states.float() @ weight.float().T + bias.float()
        return (torch.sigmoid(gate) * post_mul_mat.float()).to(post_mul_mat.dtype)


def make_inputs(*, token_count: int, hidden_size: int, out_features: int, device="cpu", generator=None) -> dict:
    """Hidden states, a gate projection scaled to keep logits O(1), a bias and the expert output to gate."""
    kw = dict(dtype=torch.bfloat16, device=device, generator=generator)
    return {"hidden_states": randn((token_count, hidden_size), **kw),
            "weight": randn((out_features, hidden_size), **kw, scale=hidden_size ** -0.5),
            "bias": randn((out_features,), **kw, scale=0.1),
            "post_mul_mat": randn((token_count, out_features), **kw)}
