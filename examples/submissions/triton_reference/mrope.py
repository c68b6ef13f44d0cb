"""mrope in Triton: Qwen2-VL multimodal RoPE, q [T, Hq*D] and k [T, Hkv*D] rotated in place (vLLM's contract).

Frequency i takes cos/sin[axis(i), t, i] with axis(i) from mrope_section (contiguous t|h|w bands, or vLLM's
interleaved pattern), computed in the kernel. A program owns BLOCK_H heads of one token of q or of k (the
grid's second axis runs over q's head blocks, then k's): it loads the token's rotary cos/sin once, rotates the
first rotary_dim dims of each head in fp32 (neox halves or GPT-J pairs) and writes them back; the dims past
rotary_dim are neither read nor written.
"""

import torch
import triton
import triton.language as tl
from torch import nn


@triton.jit
def mrope_kernel(q_ptr, k_ptr, cos_ptr, sin_ptr, q_stride, k_stride, cs_axis_stride, cs_token_stride,
                 q_heads, kv_heads, q_blocks, sec_t, sec_h, sec_w, HEAD_DIM: tl.constexpr, HALF: tl.constexpr,
                 NEOX: tl.constexpr, INTERLEAVED: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_HALF: tl.constexpr):
    t = tl.program_id(0).to(tl.int64)
    hb = tl.program_id(1)
    is_q = hb < q_blocks
    # scalar selects (head counts of 1 arrive as constexprs, which an if/else could not merge)
    n_heads = tl.where(is_q, q_heads, kv_heads)
    first = tl.where(is_q, hb, hb - q_blocks) * BLOCK_H
    if is_q:
        base = q_ptr + t * q_stride
    else:
        base = k_ptr + t * k_stride
    heads = first + tl.arange(0, BLOCK_H)
    i = tl.arange(0, BLOCK_HALF)
    if INTERLEAVED:
        axis = tl.where((i % 3 == 1) & (i < 3 * sec_h), 1, tl.where((i % 3 == 2) & (i < 3 * sec_w), 2, 0))
    else:
        axis = tl.where(i < sec_t, 0, tl.where(i < sec_t + sec_h, 1, 2))
    fmask = i < HALF
    cs_off = axis.to(tl.int64) * cs_axis_stride + t * cs_token_stride + i
    cos = tl.load(cos_ptr + cs_off, mask=fmask, other=0.0).to(tl.float32)[None, :]
    sin = tl.load(sin_ptr + cs_off, mask=fmask, other=0.0).to(tl.float32)[None, :]
    mask = (heads < n_heads)[:, None] & fmask[None, :]
    row = base + heads[:, None].to(tl.int64) * HEAD_DIM
    if NEOX:
        p1 = row + i[None, :]
        p2 = p1 + HALF
    else:
        p1 = row + 2 * i[None, :]
        p2 = p1 + 1
    x1 = tl.load(p1, mask=mask, other=0.0)
    x2 = tl.load(p2, mask=mask, other=0.0)
    dt = x1.dtype
    x1 = x1.to(tl.float32)
    x2 = x2.to(tl.float32)
    tl.store(p1, (x1 * cos - x2 * sin).to(dt), mask=mask)
    tl.store(p2, (x2 * cos + x1 * sin).to(dt), mask=mask)


class Model(nn.Module):
    """q and k with their first rotary_dim dims of every head rotated by per-axis (t, h, w) cos/sin; in place."""

    def __init__(self, head_size: int, rotary_dim: int, mrope_section: list, mrope_interleaved: bool = False,
                 is_neox_style: bool = True) -> None:
        super().__init__()
        self.d, self.rd = int(head_size), int(rotary_dim)
        self.section = [int(s) for s in mrope_section]
        self.interleaved, self.neox = bool(mrope_interleaved), bool(is_neox_style)

    def forward(self, q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> dict:
        t = q.shape[0]
        for x in (q, k):
            if x.stride(-1) != 1:
                raise ValueError("mrope: q and k rows must be contiguous (they are rotated in place)")
        if cos.stride(-1) != 1 or cos.stride() != sin.stride():
            cos, sin = cos.contiguous(), sin.contiguous()
        q_heads, kv_heads = q.shape[1] // self.d, k.shape[1] // self.d
        half = self.rd // 2
        block_half = triton.next_power_of_2(max(half, 1))
        block_h = max(1, min(16, 2048 // block_half))
        q_blocks, k_blocks = triton.cdiv(q_heads, block_h), triton.cdiv(kv_heads, block_h)
        if t and half and q_blocks + k_blocks:
            s = self.section + [0] * (3 - len(self.section))
            mrope_kernel[(t, q_blocks + k_blocks)](
                q, k, cos, sin, q.stride(0), k.stride(0), cos.stride(0), cos.stride(1), q_heads, kv_heads, q_blocks,
                s[0], s[1], s[2], HEAD_DIM=self.d, HALF=half, NEOX=self.neox, INTERLEAVED=self.interleaved,
                BLOCK_H=block_h, BLOCK_HALF=block_half, num_warps=4)
        return {"q": q, "k": k}
