"""mla_decode_attention in Triton: DeepSeek MLA decode on the compressed latent cache. Sequence b owns seq_lens[b]
consecutive rows of kv_cache [sum L, 1, r + rope]; its h absorbed query heads q [B, h, r + rope] all attend to
the one latent head with K = the whole row and V = its first r columns, scale (r + rope)^-0.5; out [B, h, r].

Split-KV (flash-decoding) over grouped heads. Phase 1: a program owns (sequence, block of BLOCK_H heads,
split); the heads share every cache row, so they are the M dimension of the tensor-core products. It walks
its share of the sequence's rows BLOCK_N at a time, loading each latent tile [BLOCK_N, r] once and using it
both as Kᵀ (QKᵀ = q_latent·latentᵀ + q_rope·ropeᵀ, two dots) and as V; online softmax with exp2 and fp32
statistics, P cast to the cache dtype for PV. With one split it normalises and writes the output; otherwise
it writes its unnormalised partial, running max and sum, and phase 2 merges the splits of each (sequence,
head). A sequence's first row is the sum of the lengths before it, summed in the kernel. The split count
comes from the mean length (kv_cache rows / batch, host-known: no sync) and the program count, and each
sequence divides its own length into that many BLOCK_N-aligned ranges. A sequence of length 0 gives zeros.
"""

import math

import torch
import triton
import triton.language as tl
from torch import nn

BLOCK_H = 16  # heads per program: the smallest tensor-core M
BLOCK_N = 64  # latent rows per step; a [32, 512] bf16 tile is 32 KiB, two stages in flight
KEYS_PER_SPLIT = 64  # a split shorter than two steps costs more in the merge than it saves
TARGET_PROGRAMS = 264  # two waves of 132 SMs
MAX_SPLITS = 32
LENS_CHUNK = 1024


@triton.jit
def mla_decode_kernel(q_ptr, kv_ptr, lens_ptr, out_ptr, part_ptr, ml_ptr, scale_log2, n_heads, num_splits,
                      q_s0, q_s1, kv_s0, out_s0, out_s1, R: tl.constexpr, ROPE: tl.constexpr,
                      BLOCK_H: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_ROPE: tl.constexpr, BLOCK_N: tl.constexpr,
                      LENS_CHUNK: tl.constexpr, DIRECT: tl.constexpr):
    b = tl.program_id(0)
    hb = tl.program_id(1)
    sp = tl.program_id(2)
    first = tl.zeros((), dtype=tl.int64)
    for i in range(0, b, LENS_CHUNK):
        idx = i + tl.arange(0, LENS_CHUNK)
        first += tl.sum(tl.load(lens_ptr + idx, mask=idx < b, other=0).to(tl.int64), 0)
    seq_len = tl.load(lens_ptr + b)
    per_split = tl.cdiv(tl.cdiv(seq_len, num_splits), BLOCK_N) * BLOCK_N
    lo = sp * per_split
    hi = tl.minimum(seq_len, lo + per_split)

    heads = hb * BLOCK_H + tl.arange(0, BLOCK_H)
    h_ok = heads < n_heads
    r = tl.arange(0, BLOCK_R)
    r_ok = r < R
    e = tl.arange(0, BLOCK_ROPE)
    e_ok = e < ROPE
    q_rows = q_ptr + b.to(tl.int64) * q_s0 + heads[:, None] * q_s1
    q_lat = tl.load(q_rows + r[None, :], mask=h_ok[:, None] & r_ok[None, :], other=0.0)
    q_rope = tl.load(q_rows + R + e[None, :], mask=h_ok[:, None] & e_ok[None, :], other=0.0)
    kv_rows = kv_ptr + first * kv_s0
    m = tl.full((BLOCK_H,), float("-inf"), dtype=tl.float32)
    l = tl.zeros((BLOCK_H,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_H, BLOCK_R), dtype=tl.float32)
    for start in range(lo, hi, BLOCK_N):
        n = start + tl.arange(0, BLOCK_N)
        n_ok = n < hi
        row = kv_rows + n.to(tl.int64)[:, None] * kv_s0
        lat = tl.load(row + r[None, :], mask=n_ok[:, None] & r_ok[None, :], other=0.0)  # K's first r columns, V
        rope = tl.load(row + R + e[None, :], mask=n_ok[:, None] & e_ok[None, :], other=0.0)
        scores = tl.dot(q_lat, tl.trans(lat))
        scores = tl.dot(q_rope, tl.trans(rope), scores) * scale_log2
        scores = tl.where(n_ok[None, :], scores, float("-inf"))
        m_new = tl.maximum(m, tl.max(scores, 1))
        alpha = tl.exp2(m - m_new)
        p = tl.exp2(scores - m_new[:, None])
        l = l * alpha + tl.sum(p, 1)
        acc = tl.dot(p.to(lat.dtype), lat, acc * alpha[:, None])
        m = m_new
    mask = h_ok[:, None] & r_ok[None, :]
    if DIRECT:
        o = tl.where(l[:, None] > 0, acc / tl.where(l > 0, l, 1.0)[:, None], 0.0)
        tl.store(out_ptr + b.to(tl.int64) * out_s0 + heads[:, None] * out_s1 + r[None, :],
                 o.to(out_ptr.dtype.element_ty), mask=mask)
    else:
        slot = (b.to(tl.int64) * n_heads + heads) * num_splits + sp  # [B, h, splits]
        tl.store(part_ptr + slot[:, None] * R + r[None, :], acc, mask=mask)
        tl.store(ml_ptr + slot * 2, m, mask=h_ok)
        tl.store(ml_ptr + slot * 2 + 1, l, mask=h_ok)


@triton.jit
def mla_decode_merge_kernel(part_ptr, ml_ptr, out_ptr, out_s0, out_s1, n_heads, num_splits, R: tl.constexpr,
                            BLOCK_R: tl.constexpr, BLOCK_S: tl.constexpr):
    b = tl.program_id(0).to(tl.int64)
    h = tl.program_id(1)
    sp = tl.arange(0, BLOCK_S)
    sp_ok = sp < num_splits
    slot = (b * n_heads + h) * num_splits + sp
    m = tl.load(ml_ptr + slot * 2, mask=sp_ok, other=float("-inf"))
    l = tl.load(ml_ptr + slot * 2 + 1, mask=sp_ok, other=0.0)
    m_max = tl.max(m, 0)
    m_max = tl.where(m_max == float("-inf"), 0.0, m_max)
    w = tl.exp2(m - m_max)
    total = tl.sum(l * w, 0)
    r = tl.arange(0, BLOCK_R)
    r_ok = r < R
    part = tl.load(part_ptr + slot[:, None] * R + r[None, :], mask=sp_ok[:, None] & r_ok[None, :], other=0.0)
    o = tl.sum(part * w[:, None], 0)
    o = tl.where(total > 0, o / tl.where(total > 0, total, 1.0), 0.0)
    tl.store(out_ptr + b * out_s0 + h * out_s1 + r, o.to(out_ptr.dtype.element_ty), mask=r_ok)


class Model(nn.Module):
    """softmax(q kᵀ (r + rope)^-0.5) v per sequence, K = the latent cache rows, V = their first r columns."""

    def __init__(self, nhead: int, kv_lora_rank: int, qk_rope_head_dim: int) -> None:
        super().__init__()
        self.nhead, self.r, self.rope = int(nhead), int(kv_lora_rank), int(qk_rope_head_dim)

    def forward(self, q: torch.Tensor, kv_cache: torch.Tensor, seq_lens: torch.Tensor) -> torch.Tensor:
        batch = q.shape[0]
        out = torch.empty(batch, self.nhead, self.r, dtype=q.dtype, device=q.device)
        if batch == 0 or self.nhead == 0:
            return out
        if q.stride(-1) != 1:
            q = q.contiguous()
        if kv_cache.stride(-1) != 1:
            kv_cache = kv_cache.contiguous()
        seq_lens = seq_lens.contiguous()
        head_blocks = triton.cdiv(self.nhead, BLOCK_H)
        mean_len = triton.cdiv(kv_cache.shape[0], batch)
        splits = max(1, min(triton.cdiv(mean_len, KEYS_PER_SPLIT), triton.cdiv(TARGET_PROGRAMS, batch * head_blocks),
                            MAX_SPLITS))
        block_r = max(16, triton.next_power_of_2(self.r))
        direct = splits == 1
        if direct:
            part = ml = out
        else:
            part = torch.empty(batch * self.nhead * splits * self.r, dtype=torch.float32, device=q.device)
            ml = torch.empty(batch * self.nhead * splits * 2, dtype=torch.float32, device=q.device)
        mla_decode_kernel[(batch, head_blocks, splits)](
            q, kv_cache, seq_lens, out, part, ml, (self.r + self.rope) ** -0.5 * math.log2(math.e), self.nhead,
            splits, q.stride(0), q.stride(1), kv_cache.stride(0), out.stride(0), out.stride(1), R=self.r,
            ROPE=self.rope, BLOCK_H=BLOCK_H, BLOCK_R=block_r, BLOCK_ROPE=max(16, triton.next_power_of_2(self.rope)),
            BLOCK_N=BLOCK_N, LENS_CHUNK=LENS_CHUNK, DIRECT=direct, num_warps=4, num_stages=2)
        if not direct:
            mla_decode_merge_kernel[(batch, self.nhead)](part, ml, out, out.stride(0), out.stride(1), self.nhead,
                                                         splits, R=self.r, BLOCK_R=block_r,
                                                         BLOCK_S=triton.next_power_of_2(splits), num_warps=4)
        return out
