"""mla_decode_attention reference (DeepSeek MLA decode on the compressed latent cache)."""

import torch
from torch import nn

from kernels_eval.operators._attention import attend
from kernels_eval.operators._common import randn


class Model(nn.Module):
    """Sequence b owns seq_lens[b] consecutive rows of kv_cache [sum L, 1, r+rope]; every head attends with
    K = the whole row and V = its first r columns; scale (r+rope)^-0.5. Returns out [B, h, r]."""

    def __init__(self, nhead: int, kv_lora_rank: int, qk_rope_head_dim: int) -> None:
        super().__init__()
        self.nhead, self.r, self.rope = int(nhead), int(kv_lora_rank), int(qk_rope_head_dim)

    def forward(self, q: torch.Tensor, kv_cache: torch.Tensor, seq_lens: torch.Tensor) -> torch.Tensor:
        out = torch.empty(q.shape[0], self.nhead, self.r, dtype=q.dtype, device=q.device)
        scale = (self.r + self.rope) ** -0.5
        start = 0
        for b, L in enumerate(seq_lens.tolist()):
            rows = kv_cache[start:start + int(L)]                      # [L, 1, r+rope]
            # One query row whose h heads all share the single latent KV head (GQA group = h).
            o = attend(q[b:b + 1], rows, rows[..., :self.r], causal=False, scale=scale)
            out[b] = o[0].to(q.dtype)
            start += int(L)
        return out


def make_inputs(*, batch_size: int, ctx_len: int, nhead: int, kv_lora_rank: int, qk_rope_head_dim: int,
                device="cpu", generator=None) -> dict:
    """Absorbed queries [B, h, r+rope], the latent cache and per-sequence lengths."""
    d = kv_lora_rank + qk_rope_head_dim
    kw = dict(dtype=torch.bfloat16, device=device, generator=generator)
    return {"q": randn((batch_size, nhead, d), **kw), "kv_cache": randn((batch_size * ctx_len, 1, d), **kw),
            "seq_lens": torch.full((batch_size,), ctx_len, dtype=torch.int32, device=device)}
