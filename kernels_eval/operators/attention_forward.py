"""attention_forward reference: varlen bidirectional attention (vision encoders), equal q/k/v heads."""

import torch
from torch import nn

from kernels_eval.operators._attention import attend
from kernels_eval.operators._common import randn


class Model(nn.Module):
    """For each sequence s of cu_seqlens: out[s] = softmax(q[s] k[s]ᵀ / sqrt(D)) v[s] (no mask)."""

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens_q: torch.Tensor,
                cu_seqlens_k: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(q)
        qb, kb = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
        scale = q.shape[-1] ** -0.5
        for s in range(len(qb) - 1):
            if qb[s + 1] > qb[s]:
                o = attend(q[qb[s]:qb[s + 1]], k[kb[s]:kb[s + 1]], v[kb[s]:kb[s + 1]], causal=False, scale=scale)
                out[qb[s]:qb[s + 1]] = o.to(q.dtype)
        return out


def make_inputs(*, seq_lens: list, num_heads: int, head_dim: int, device="cpu", generator=None) -> dict:
    """Packed q, k, v [sum L, H, D] and int32 cumulative sequence starts."""
    total = sum(seq_lens)
    kw = dict(dtype=torch.bfloat16, device=device, generator=generator)
    cu = torch.tensor([0] + list(_cumsum(seq_lens)), dtype=torch.int32, device=device)
    return {"q": randn((total, num_heads, head_dim), **kw), "k": randn((total, num_heads, head_dim), **kw),
            "v": randn((total, num_heads, head_dim), **kw), "cu_seqlens_q": cu, "cu_seqlens_k": cu.clone()}


def _cumsum(xs):
    total = 0
    for x in xs:
        total += x
        yield total
