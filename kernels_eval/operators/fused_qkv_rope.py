"""fused_qkv_rope reference (RTP-LLM fused QKV bias + neox RoPE + split)."""

import torch
from torch import nn

from kernels_eval.operators._common import dtype_of, randn


def _neox(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, rope_dim: int) -> torch.Tensor:
    half = rope_dim // 2
    x1, x2 = x[..., :half].float(), x[..., half:rope_dim].float()
    rotated = torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1).to(x.dtype)
    return torch.cat([rotated, x[..., rope_dim:]], dim=-1)


class Model(nn.Module):
    """Add qkv_bias if given, split [T, (Hq+2Hkv)D] into q [T,Hq,D], k, v [T,Hkv,D] and rotate the first rope_dim
    dims of q and k (neox halves) by angle pos * base^(-2i/rope_dim)."""

    def __init__(self, num_heads: int, num_kv_heads: int, head_dim: int, rope_dim: int,
                 rope_base: float = 10000.0) -> None:
        super().__init__()
        self.hq, self.hkv, self.d, self.rd = int(num_heads), int(num_kv_heads), int(head_dim), int(rope_dim)
        self.base = float(rope_base)

    def forward(self, qkv: torch.Tensor, positions: torch.Tensor, qkv_bias: torch.Tensor | None = None):
        if qkv_bias is not None:
            qkv = (qkv.float() + qkv_bias.float()).to(qkv.dtype)
        t = qkv.shape[0]
        nq, nkv = self.hq * self.d, self.hkv * self.d
        q = qkv[:, :nq].reshape(t, self.hq, self.d)
        k = qkv[:, nq:nq + nkv].reshape(t, self.hkv, self.d)
        v = qkv[:, nq + nkv:nq + 2 * nkv].reshape(t, self.hkv, self.d)
        exponent = torch.arange(0, self.rd, 2, device=qkv.device, dtype=torch.float32) / self.rd
        angle = positions.float()[:, None] * torch.pow(self.base, -exponent)[None, :]
        cos, sin = angle.cos()[:, None, :], angle.sin()[:, None, :]
        return _neox(q, cos, sin, self.rd), _neox(k, cos, sin, self.rd), v.contiguous()


def make_inputs(*, total_tokens: int, num_heads: int, num_kv_heads: int, head_dim: int, dtype: str = "bf16",
                with_bias: bool = False, device="cpu", generator=None) -> dict:
    """Packed qkv rows and positions of a decode batch at scattered context lengths."""
    dt = dtype_of(dtype)
    width = (num_heads + 2 * num_kv_heads) * head_dim
    g_pos = randn((total_tokens,), dtype=torch.float32, device=device, generator=generator)
    inputs = {"qkv": randn((total_tokens, width), dtype=dt, device=device, generator=generator),
              "positions": (g_pos.abs() * 2000).to(torch.int32)}
    if with_bias:
        inputs["qkv_bias"] = randn((width,), dtype=dt, device=device, generator=generator, scale=0.1)
    return inputs
