"""mrope reference (Qwen2-VL multimodal RoPE: frequency bands take the t, h or w position)."""

import torch
from torch import nn

from kernels_eval.operators._common import randn


class Model(nn.Module):
    """Rotate the first rotary_dim dims of every head of q [T, Hq*D] and k [T, Hkv*D]. Frequency i uses
    cos/sin[axis(i), t, i] where axis(i) follows mrope_section (contiguous t|h|w bands, or vLLM's interleaved
    pattern). Returns {"q", "k"} (fresh tensors; in place is allowed)."""

    def __init__(self, head_size: int, rotary_dim: int, mrope_section: list, mrope_interleaved: bool = False,
                 is_neox_style: bool = True) -> None:
        super().__init__()
        self.d, self.rd = int(head_size), int(rotary_dim)
        self.section = [int(s) for s in mrope_section]
        self.interleaved, self.neox = bool(mrope_interleaved), bool(is_neox_style)

    def _axis(self, half: int, device) -> torch.Tensor:
        i = torch.arange(half, device=device)
        if self.interleaved:
            h = (i % 3 == 1) & (i < 3 * self.section[1])
            w = (i % 3 == 2) & (i < 3 * self.section[2])
            return torch.where(h, 1, torch.where(w, 2, 0))
        t_end, h_end = self.section[0], self.section[0] + self.section[1]
        return torch.where(i < t_end, 0, torch.where(i < h_end, 1, 2))

    def _rotate(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        t = x.shape[0]
        heads = x.reshape(t, -1, self.d).float()
        half = self.rd // 2
        if self.neox:
            x1, x2 = heads[..., :half], heads[..., half:self.rd]
        else:
            x1, x2 = heads[..., 0:self.rd:2], heads[..., 1:self.rd:2]
        r1, r2 = x1 * cos - x2 * sin, x2 * cos + x1 * sin
        out = heads.clone()
        if self.neox:
            out[..., :half], out[..., half:self.rd] = r1, r2
        else:
            out[..., 0:self.rd:2], out[..., 1:self.rd:2] = r1, r2
        return out.reshape(x.shape).to(x.dtype)

    def forward(self, q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> dict:
        half = self.rd // 2
        axis = self._axis(half, q.device)
        freq = torch.arange(half, device=q.device)
        c = cos[axis, :, freq].transpose(0, 1).float()[:, None, :]
        s = sin[axis, :, freq].transpose(0, 1).float()[:, None, :]
        return {"q": self._rotate(q, c, s), "k": self._rotate(k, c, s)}


def make_inputs(*, token_count: int, num_query_heads: int, num_kv_heads: int, head_size: int, rotary_dim: int,
                device="cpu", generator=None) -> dict:
    """q, k and the per-axis cos/sin [3, T, rd/2] of (t, h, w) positions of an image-plus-text prompt."""
    half = rotary_dim // 2
    pos = (randn((3, token_count, 1), dtype=torch.float32, device=device, generator=generator).abs() * 500).floor()
    inv_freq = torch.pow(10000.0, -torch.arange(half, device=device, dtype=torch.float32) * 2 / rotary_dim)
    angle = pos * inv_freq
    kw = dict(dtype=torch.bfloat16, device=device, generator=generator)
    return {"q": randn((token_count, num_query_heads * head_size), **kw),
            "k": randn((token_count, num_kv_heads * head_size), **kw),
            "cos": angle.cos().contiguous(), "sin": angle.sin().contiguous()}
