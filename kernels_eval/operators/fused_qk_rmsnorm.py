"""fused_qk_rmsnorm reference (Qwen3 per-head q/k norm on the packed qkv projection)."""

import torch
from torch import nn

from kernels_eval.operators._common import dtype_of, randn


class Model(nn.Module):
    """Normalise each q head with q_weight and each k head with k_weight; v unchanged; same packed layout."""

    def __init__(self, head_num: int, kv_head_num: int, size_per_head: int = 128, eps: float = 1e-6) -> None:
        super().__init__()
        self.head_num, self.kv_head_num = int(head_num), int(kv_head_num)
        self.d = int(size_per_head)
        self.eps = float(eps)

    def _norm(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        # Round the normalised value to the input dtype before the weight multiply (HF Qwen3 order).
        normed = (xf * torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + self.eps)).to(x.dtype)
        return (normed.float() * w.float()).to(x.dtype)

    def forward(self, hidden_states: torch.Tensor, q_weight: torch.Tensor, k_weight: torch.Tensor) -> torch.Tensor:
        t = hidden_states.shape[0]
        q_size, kv_size = self.head_num * self.d, self.kv_head_num * self.d
        q, k, v = hidden_states.split([q_size, kv_size, kv_size], dim=-1)
        q = self._norm(q.reshape(t, self.head_num, self.d), q_weight).reshape(t, q_size)
        k = self._norm(k.reshape(t, self.kv_head_num, self.d), k_weight).reshape(t, kv_size)
        return torch.cat([q, k, v], dim=-1)


def make_inputs(*, num_tokens: int, head_num: int, kv_head_num: int, size_per_head: int = 128,
                dtype: str = "fp16", device="cpu", generator=None) -> dict:
    """Packed qkv rows and per-head weights near 1."""
    dt = dtype_of(dtype)
    width = (head_num + 2 * kv_head_num) * size_per_head
    return {"hidden_states": randn((num_tokens, width), dtype=dt, device=device, generator=generator),
            "q_weight": randn((size_per_head,), dtype=dt, device=device, generator=generator, scale=0.1, shift=1.0),
            "k_weight": randn((size_per_head,), dtype=dt, device=device, generator=generator, scale=0.1, shift=1.0)}
