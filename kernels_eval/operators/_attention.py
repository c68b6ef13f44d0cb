"""Exact attention in fp32 for one sequence, shared by the attention references."""

import torch

# Score elements materialised at once (1 GiB of fp32): long prefills (the catalogue reaches 65,556 tokens)
# are processed in query blocks so the reference never depends on which fused SDPA backend is available.
_SCORE_BUDGET = 1 << 28


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool, scale: float) -> torch.Tensor:
    """softmax(q kᵀ * scale [+ bottom-right causal mask]) v for q [Lq, Hq, D], k/v [Lk, Hkv, D(v)] with
    Hq a multiple of Hkv (GQA); fp32 math, returns fp32 [Lq, Hq, Dv]."""
    lq, hq, _ = q.shape
    lk, hkv, _ = k.shape
    group = hq // hkv
    kf = k.float().transpose(0, 1).repeat_interleave(group, dim=0)  # [Hq, Lk, D]
    vf = v.float().transpose(0, 1).repeat_interleave(group, dim=0)  # [Hq, Lk, Dv]
    out = torch.empty(lq, hq, vf.shape[-1], dtype=torch.float32, device=q.device)
    rows = max(1, min(lq, _SCORE_BUDGET // max(1, hq * lk)))
    keys = torch.arange(lk, device=q.device)
    for lo in range(0, lq, rows):
        hi = min(lq, lo + rows)
        scores = torch.matmul(q[lo:hi].float().transpose(0, 1), kf.transpose(1, 2)) * scale  # [Hq, r, Lk]
        if causal:
            # Bottom-right alignment: query i (of Lq) sees keys j <= i + (Lk - Lq).
            limit = torch.arange(lo, hi, device=q.device)[:, None] + (lk - lq)
            scores = scores.masked_fill(keys[None, :] > limit, float("-inf"))
        out[lo:hi] = torch.matmul(torch.softmax(scores, dim=-1), vf).transpose(0, 1)
    return out
