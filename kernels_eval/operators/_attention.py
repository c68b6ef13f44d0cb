"""Exact attention in fp32 for one sequence, shared by the attention references."""

import torch


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool, scale: float) -> torch.Tensor:
    """softmax(q kᵀ * scale [+ bottom-right causal mask]) v for q [Lq, Hq, D], k/v [Lk, Hkv, D(v)] with
    Hq a multiple of Hkv (GQA); fp32 math, returns fp32 [Lq, Hq, Dv]."""
    lq, hq, _ = q.shape
    lk, hkv, _ = k.shape
    group = hq // hkv
    qf = q.float().transpose(0, 1)                                  # [Hq, Lq, D]
    kf = k.float().transpose(0, 1).repeat_interleave(group, dim=0)  # [Hq, Lk, D]
    vf = v.float().transpose(0, 1).repeat_interleave(group, dim=0)
    mask, is_causal = None, False
    if causal and lq == lk:
        is_causal = True  # lets SDPA pick a fused kernel instead of materialising an Lq x Lk mask
    elif causal:
        # Bottom-right alignment: query i (of Lq) sees keys j <= i + (Lk - Lq).
        i = torch.arange(lq, device=q.device)[:, None]
        j = torch.arange(lk, device=q.device)[None, :]
        mask = j <= i + (lk - lq)
    out = torch.nn.functional.scaled_dot_product_attention(qf[None], kf[None], vf[None], attn_mask=mask,
                                                           is_causal=is_causal, scale=scale)
    return out[0].transpose(0, 1)
