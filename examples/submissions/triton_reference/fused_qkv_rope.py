"""fused_qkv_rope in Triton: optional bias add, split of packed qkv into q [T,Hq,D], k, v [T,Hkv,D], and neox
RoPE on the first rope_dim dims of q and k, angles pos * base^(-2i/rope_dim) computed in the kernel.

A program owns BLOCK_H heads of one token (q, k and v heads alike), reads each head row once and writes it to
its output; the three outputs are views into one allocation, so a head's destination is an integer offset.
The bias-added row is rounded to the input dtype before rotation, as the reference does. sin/cos take an
explicit 2*pi range reduction so that large positions stay accurate whatever sin/cos the GPU lowers to.
"""

import math

import torch
import triton
import triton.language as tl
from torch import nn

@triton.jit
def _sincos(angle):
    """sin and cos of fp32 angles after reduction to [-pi, pi]: 2*pi split Cody-Waite style into 6.28125
    (k * 6.28125 is exact for k < 2^16) and the remainder."""
    k = tl.floor(angle * 0.15915494309189535 + 0.5)
    r = (angle - k * 6.28125) - k * 0.0019353071795864769
    return tl.sin(r), tl.cos(r)


@triton.jit
def fused_qkv_rope_kernel(qkv_ptr, bias_ptr, pos_ptr, out_ptr, n_tokens, qkv_stride, q_heads, kv_heads,
                          q_total, k_total, log2_base, HEAD_DIM: tl.constexpr, ROPE_HALF: tl.constexpr,
                          HAS_BIAS: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_D: tl.constexpr,
                          BLOCK_HALF: tl.constexpr):
    t = tl.program_id(0).to(tl.int64)
    heads = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    n_heads = q_heads + 2 * kv_heads
    head_ok = heads < n_heads
    is_q = heads < q_heads
    is_k = (heads >= q_heads) & (heads < q_heads + kv_heads)
    rotate = head_ok & (heads < q_heads + kv_heads)
    # destination row offset inside the packed [q | k | v] output
    dst_row = tl.where(is_q, t * q_heads + heads,
                       tl.where(is_k, t * kv_heads + (heads - q_heads),
                                t * kv_heads + (heads - q_heads - kv_heads)))
    dst = (tl.where(is_q, 0, tl.where(is_k, q_total, q_total + k_total)) + dst_row * HEAD_DIM)
    src = qkv_ptr + t * qkv_stride + heads.to(tl.int64) * HEAD_DIM
    dt = out_ptr.dtype.element_ty

    # pass-through part (dims >= rope_dim of q/k, all of v)
    d = tl.arange(0, BLOCK_D)
    keep = head_ok[:, None] & (d[None, :] < HEAD_DIM) & ((d[None, :] >= 2 * ROPE_HALF) | ~rotate[:, None])
    x = tl.load(src[:, None] + d[None, :], mask=keep, other=0.0)
    if HAS_BIAS:
        b = tl.load(bias_ptr + heads[:, None] * HEAD_DIM + d[None, :], mask=keep, other=0.0)
        x = (x.to(tl.float32) + b.to(tl.float32)).to(dt)
    tl.store(out_ptr + dst[:, None] + d[None, :], x.to(dt), mask=keep)

    # rotated part
    i = tl.arange(0, BLOCK_HALF)
    rmask = rotate[:, None] & (i[None, :] < ROPE_HALF)
    x1 = tl.load(src[:, None] + i[None, :], mask=rmask, other=0.0)
    x2 = tl.load(src[:, None] + ROPE_HALF + i[None, :], mask=rmask, other=0.0)
    if HAS_BIAS:
        b1 = tl.load(bias_ptr + heads[:, None] * HEAD_DIM + i[None, :], mask=rmask, other=0.0)
        b2 = tl.load(bias_ptr + heads[:, None] * HEAD_DIM + ROPE_HALF + i[None, :], mask=rmask, other=0.0)
        x1 = (x1.to(tl.float32) + b1.to(tl.float32)).to(dt)
        x2 = (x2.to(tl.float32) + b2.to(tl.float32)).to(dt)
    x1 = x1.to(tl.float32)
    x2 = x2.to(tl.float32)
    exponent = (2 * i).to(tl.float32) / (2 * ROPE_HALF)
    inv_freq = tl.exp2(-exponent * log2_base)
    pos = tl.load(pos_ptr + t).to(tl.float32)
    sin, cos = _sincos(pos * inv_freq)
    r1 = x1 * cos[None, :] - x2 * sin[None, :]
    r2 = x2 * cos[None, :] + x1 * sin[None, :]
    o = out_ptr + dst[:, None] + i[None, :]
    tl.store(o, r1.to(dt), mask=rmask)
    tl.store(o + ROPE_HALF, r2.to(dt), mask=rmask)


class Model(nn.Module):
    """q, k with neox RoPE on their first rope_dim dims, v; from packed qkv [T, (Hq+2Hkv)D] (+ bias)."""

    def __init__(self, num_heads: int, num_kv_heads: int, head_dim: int, rope_dim: int,
                 rope_base: float = 10000.0) -> None:
        super().__init__()
        self.hq, self.hkv, self.d, self.rd = int(num_heads), int(num_kv_heads), int(head_dim), int(rope_dim)
        self.base = float(rope_base)

    def forward(self, qkv: torch.Tensor, positions: torch.Tensor, qkv_bias: torch.Tensor | None = None):
        t = qkv.shape[0]
        if qkv.stride(-1) != 1:
            qkv = qkv.contiguous()
        positions = positions.contiguous()
        q_total, k_total = t * self.hq * self.d, t * self.hkv * self.d
        out = torch.empty(q_total + 2 * k_total, dtype=qkv.dtype, device=qkv.device)
        q = out[:q_total].view(t, self.hq, self.d)
        k = out[q_total:q_total + k_total].view(t, self.hkv, self.d)
        v = out[q_total + k_total:].view(t, self.hkv, self.d)
        if t:
            n_heads = self.hq + 2 * self.hkv
            block_d = triton.next_power_of_2(self.d)
            block_h = max(1, min(triton.next_power_of_2(n_heads), 4096 // block_d))
            bias = qkv_bias.contiguous() if qkv_bias is not None else qkv
            fused_qkv_rope_kernel[(t, triton.cdiv(n_heads, block_h))](
                qkv, bias, positions, out, t, qkv.stride(0), self.hq, self.hkv, q_total, k_total,
                math.log2(self.base), HEAD_DIM=self.d, ROPE_HALF=self.rd // 2, HAS_BIAS=qkv_bias is not None,
                BLOCK_H=block_h, BLOCK_D=block_d, BLOCK_HALF=triton.next_power_of_2(max(self.rd // 2, 1)),
                num_warps=4)
        return q, k, v
