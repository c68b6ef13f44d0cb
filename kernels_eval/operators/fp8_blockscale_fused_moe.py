"""fp8_blockscale_fused_moe reference (DeepSeek-V3 / Qwen3 fp8 checkpoints: 128x128 weight blocks, 1x128
activation blocks)."""

import torch
from torch import nn

from kernels_eval.operators._common import block_quantize, expand_blocks, group_quantize_rows, randn, topk_routing
from kernels_eval.operators.fused_moe import moe_forward


class Model(nn.Module):
    """fused_moe on dequantised operands: h = hidden_states * a_scale (per token, per 128 columns),
    W1[e] = w1[e] * fc1_scale[e] tiles, W2[e] = w2[e] * fc2_scale[e] tiles; bf16 out [T, H]."""

    def __init__(self, num_experts: int, intermediate_size: int, top_k: int, scale_block_n: int = 128,
                 scale_block_k: int = 128) -> None:
        super().__init__()
        self.num_experts, self.inter, self.top_k = int(num_experts), int(intermediate_size), int(top_k)
        self.bn, self.bk = int(scale_block_n), int(scale_block_k)

    def forward(self, hidden_states: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor, topk_weights: torch.Tensor,
                topk_ids: torch.Tensor, a_scale: torch.Tensor, fc1_scale: torch.Tensor,
                fc2_scale: torch.Tensor) -> torch.Tensor:
        t, h = hidden_states.shape
        x = hidden_states.float() * a_scale.float().repeat_interleave(self.bk, dim=1)[:, :h]

        def dequant(e):
            n1, k1 = w1.shape[1:]
            n2, k2 = w2.shape[1:]
            return (w1[e].float() * expand_blocks(fc1_scale[e].float(), self.bn, self.bk, n1, k1),
                    w2[e].float() * expand_blocks(fc2_scale[e].float(), self.bn, self.bk, n2, k2))

        out = moe_forward(x, topk_weights, topk_ids, self.num_experts, self.inter, dequant)
        return out.to(torch.bfloat16)


def make_inputs(*, token_count: int, hidden_size: int, intermediate_size: int, num_experts: int, top_k: int,
                device="cpu", generator=None) -> dict:
    """fp8 activations with per-(token, 128 columns) scales, block-quantised experts and top-k routing."""
    kw = dict(dtype=torch.bfloat16, device=device, generator=generator)
    hidden, a_scale = group_quantize_rows(randn((token_count, hidden_size), **kw), 128, min_scale=1e-12)
    # One expert at a time: DeepSeek-sized pools (256 x 4096 x 7168) would need ~100 GB of fp32 temporaries.
    w1_parts, w2_parts = [], []
    for _ in range(num_experts):
        w1_parts.append(block_quantize(randn((2 * intermediate_size, hidden_size), **kw, scale=hidden_size ** -0.5),
                                       128, 128))
        w2_parts.append(block_quantize(randn((hidden_size, intermediate_size), **kw, scale=intermediate_size ** -0.5),
                                       128, 128))
    w1, fc1 = torch.stack([p[0] for p in w1_parts]), torch.stack([p[1] for p in w1_parts])
    w2, fc2 = torch.stack([p[0] for p in w2_parts]), torch.stack([p[1] for p in w2_parts])
    weights, ids = topk_routing(token_count, num_experts, top_k, device=device, generator=generator)
    return {"hidden_states": hidden, "w1": w1, "w2": w2, "topk_weights": weights, "topk_ids": ids,
            "a_scale": a_scale, "fc1_scale": fc1, "fc2_scale": fc2}
