"""paged_attention_decode in Triton: one query token per sequence over a vLLM-layout paged cache
(k_cache [blocks, Hkv, D/x, bs, x], v_cache [blocks, Hkv, D, bs]), GQA, scale D^-0.5; split-KV (flash-decoding).

Phase 1: a program owns (sequence, kv head, split): the GROUP query heads that share the kv head, padded to
16 rows, against one contiguous range of the sequence's keys. It walks BLOCK_N keys at a time, looks up each
key's cache block in the block table, loads K transposed straight from the x-interleaved layout and V from
the token-minor layout, and runs an online softmax (exp2, fp32 statistics) with both products on tensor cores
(tl.dot; P cast to the cache dtype as flash attention does). With one split it normalises and writes the
output; otherwise it writes its unnormalised partial, running max and sum. Phase 2 merges the splits of each
(sequence, head) with the usual rescaling. Splits are chosen from the block table's capacity (no device
sync) so that sequences x kv heads x splits fills the GPU. A sequence of length 0 gives zeros.
"""

import math

import torch
import triton
import triton.language as tl
from torch import nn

BLOCK_N = 64
TARGET_PROGRAMS = 264  # two waves of 132 SMs
MAX_SPLITS = 64


@triton.jit
def paged_decode_kernel(q_ptr, k_ptr, v_ptr, table_ptr, lens_ptr, out_ptr, part_ptr, ml_ptr, scale_log2,
                        q_s0, q_s1, k_s0, k_s1, k_s2, k_s3, v_s0, v_s1, v_s2, v_s3, table_stride, out_s0, out_s1,
                        n_q_heads, tokens_per_split, num_splits, GROUP: tl.constexpr, HEAD_DIM: tl.constexpr,
                        X: tl.constexpr, BS: tl.constexpr, BLOCK_G: tl.constexpr, BLOCK_D: tl.constexpr,
                        BLOCK_N: tl.constexpr, DIRECT: tl.constexpr):
    s = tl.program_id(0).to(tl.int64)
    h = tl.program_id(1)
    sp = tl.program_id(2)
    seq_len = tl.load(lens_ptr + s)
    lo = sp * tokens_per_split
    hi = tl.minimum(seq_len, lo + tokens_per_split)
    g = tl.arange(0, BLOCK_G)
    heads = h * GROUP + g
    g_ok = g < GROUP
    d = tl.arange(0, BLOCK_D)
    d_ok = d < HEAD_DIM
    q = tl.load(q_ptr + s * q_s0 + heads[:, None] * q_s1 + d[None, :], mask=g_ok[:, None] & d_ok[None, :],
                other=0.0)
    k_base = k_ptr + h.to(tl.int64) * k_s1 + (d // X)[:, None] * k_s2 + (d % X)[:, None]
    v_base = v_ptr + h.to(tl.int64) * v_s1 + d[:, None] * v_s2
    m = tl.full((BLOCK_G,), float("-inf"), dtype=tl.float32)
    l = tl.zeros((BLOCK_G,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_G, BLOCK_D), dtype=tl.float32)
    for start in range(lo, hi, BLOCK_N):
        n = start + tl.arange(0, BLOCK_N)
        n_ok = n < hi
        phys = tl.load(table_ptr + s * table_stride + n // BS, mask=n_ok, other=0).to(tl.int64)
        off = n % BS
        kt = tl.load(k_base + phys[None, :] * k_s0 + off[None, :] * k_s3, mask=d_ok[:, None] & n_ok[None, :],
                     other=0.0)
        scores = tl.dot(q, kt) * scale_log2
        scores = tl.where(n_ok[None, :], scores, float("-inf"))
        m_new = tl.maximum(m, tl.max(scores, 1))
        alpha = tl.exp2(m - m_new)
        p = tl.exp2(scores - m_new[:, None])
        l = l * alpha + tl.sum(p, 1)
        vt = tl.load(v_base + phys[None, :] * v_s0 + off[None, :] * v_s3, mask=d_ok[:, None] & n_ok[None, :],
                     other=0.0)  # [D, N]: the cache's token-minor rows, 16 contiguous tokens per d
        acc = acc * alpha[:, None] + tl.dot(p.to(vt.dtype), tl.trans(vt))
        m = m_new
    mask = g_ok[:, None] & d_ok[None, :]
    if DIRECT:
        o = tl.where(l[:, None] > 0, acc / tl.where(l > 0, l, 1.0)[:, None], 0.0)
        tl.store(out_ptr + s * out_s0 + heads[:, None] * out_s1 + d[None, :], o.to(out_ptr.dtype.element_ty),
                 mask=mask)
    else:
        row = (s * n_q_heads + heads) * num_splits + sp  # [S, Hq, splits]
        tl.store(part_ptr + row[:, None] * HEAD_DIM + d[None, :], acc, mask=mask)
        tl.store(ml_ptr + row * 2, m, mask=g_ok)
        tl.store(ml_ptr + row * 2 + 1, l, mask=g_ok)


@triton.jit
def paged_decode_merge_kernel(part_ptr, ml_ptr, out_ptr, out_s0, out_s1, n_q_heads, num_splits,
                              HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_S: tl.constexpr):
    s = tl.program_id(0).to(tl.int64)
    h = tl.program_id(1)
    sp = tl.arange(0, BLOCK_S)
    sp_ok = sp < num_splits
    row = (s * n_q_heads + h) * num_splits + sp
    m = tl.load(ml_ptr + row * 2, mask=sp_ok, other=float("-inf"))
    l = tl.load(ml_ptr + row * 2 + 1, mask=sp_ok, other=0.0)
    m_max = tl.max(m, 0)
    m_max = tl.where(m_max == float("-inf"), 0.0, m_max)
    w = tl.exp2(m - m_max)
    total = tl.sum(l * w, 0)
    d = tl.arange(0, BLOCK_D)
    d_ok = d < HEAD_DIM
    part = tl.load(part_ptr + row[:, None] * HEAD_DIM + d[None, :], mask=sp_ok[:, None] & d_ok[None, :], other=0.0)
    o = tl.sum(part * w[:, None], 0)
    o = tl.where(total > 0, o / tl.where(total > 0, total, 1.0), 0.0)
    tl.store(out_ptr + s * out_s0 + h * out_s1 + d, o.to(out_ptr.dtype.element_ty), mask=d_ok)


class Model(nn.Module):
    """softmax(q k^T / sqrt(D)) v per sequence over its seq_lens[s] paged keys; one query token per sequence."""

    def forward(self, query: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_tables: torch.Tensor,
                seq_lens: torch.Tensor) -> torch.Tensor:
        num_seqs, hq, d = query.shape
        _, hkv, _, bs = v_cache.shape
        x = k_cache.shape[-1]
        if query.stride(-1) != 1:
            query = query.contiguous()
        if k_cache.stride(-1) != 1:
            raise ValueError("paged_attention_decode: k_cache's x dimension must be contiguous")
        block_tables, seq_lens = block_tables.contiguous(), seq_lens.contiguous()
        out = torch.empty_like(query)
        if num_seqs == 0:
            return out
        group = hq // hkv
        max_ctx = max(block_tables.shape[1] * bs, 1)
        splits = max(1, min(triton.cdiv(max_ctx, BLOCK_N), triton.cdiv(TARGET_PROGRAMS, num_seqs * hkv), MAX_SPLITS))
        per_split = triton.cdiv(triton.cdiv(max_ctx, splits), BLOCK_N) * BLOCK_N
        splits = triton.cdiv(max_ctx, per_split)
        block_d = max(16, triton.next_power_of_2(d))
        direct = splits == 1
        if direct:
            part = ml = out
        else:
            part = torch.empty(num_seqs * hq * splits * d, dtype=torch.float32, device=query.device)
            ml = torch.empty(num_seqs * hq * splits * 2, dtype=torch.float32, device=query.device)
        paged_decode_kernel[(num_seqs, hkv, splits)](
            query, k_cache, v_cache, block_tables, seq_lens, out, part, ml, d ** -0.5 * math.log2(math.e),
            query.stride(0), query.stride(1), *k_cache.stride()[:4], *v_cache.stride(), block_tables.stride(0),
            out.stride(0), out.stride(1), hq, per_split, splits, GROUP=group, HEAD_DIM=d, X=x, BS=bs,
            BLOCK_G=max(16, triton.next_power_of_2(group)), BLOCK_D=block_d, BLOCK_N=BLOCK_N, DIRECT=direct,
            num_warps=4, num_stages=2)
        if not direct:
            paged_decode_merge_kernel[(num_seqs, hq)](part, ml, out, out.stride(0), out.stride(1), hq, splits,
                                                      HEAD_DIM=d, BLOCK_D=block_d,
                                                      BLOCK_S=triton.next_power_of_2(splits), num_warps=4)
        return out
