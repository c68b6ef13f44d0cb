"""unified_attention in Triton: varlen causal attention of q [sum q_len, Hq, D] over a paged KV cache
[blocks, bs, Hkv, D] through block_table (vLLM V1's unified kernel contract), bottom-right causal, GQA,
scale 1/sqrt(D).

Flash attention over pages. The grid's first axis runs over query tiles of BLOCK_M rows of one sequence, laid
out as tile(s, i) = cu_seqlens_q[s] // BLOCK_M + s + i, so its size, total_q // BLOCK_M + num_seqs, needs no
device sync; a program finds its sequence by binary search over cu_seqlens_q and leaves if its tile is past
the sequence's queries. The second axis is the query head. A program keeps its Q tile in registers and walks
the keys it may see (up to the causal limit of its last row) BLOCK_N at a time, looking each key's page up in
the block table (unmasked steps for the keys every row sees, masked ones near the diagonal), with an online softmax (exp2, fp32 statistics) and both products on tensor cores (tl.dot;
P cast to the cache dtype as flash attention does). Rows that see no key give zeros.
"""

import math

import torch
import triton
import triton.language as tl
from torch import nn


@triton.jit
def _kv_step(q, acc, m, l, k_base, v_base, table_row, start, kv_end, limit, scale_log2, k_s0, k_s1, v_s0, v_s1,
             d_ok, BS: tl.constexpr, BLOCK_N: tl.constexpr, MASKED: tl.constexpr):
    """One BLOCK_N-key step of the online softmax. MASKED applies the key range and the causal limit; the
    tiles that every row of the Q tile sees in full skip both."""
    n = start + tl.arange(0, BLOCK_N)
    if MASKED:
        n_ok = n < kv_end
    else:
        n_ok = n >= 0
    phys = tl.load(table_row + n // BS, mask=n_ok, other=0).to(tl.int64)
    kt = tl.load(k_base + (phys * k_s0 + (n % BS) * k_s1)[None, :], mask=d_ok[:, None] & n_ok[None, :], other=0.0)
    scores = tl.dot(q, kt) * scale_log2
    if MASKED:
        scores = tl.where(n_ok[None, :] & (n[None, :] <= limit[:, None]), scores, float("-inf"))
        m_new = tl.maximum(m, tl.max(scores, 1))
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)  # rows that see no key yet
    else:
        m_new = tl.maximum(m, tl.max(scores, 1))
        m_use = m_new
    alpha = tl.exp2(m - m_use)
    p = tl.exp2(scores - m_use[:, None])
    l = l * alpha + tl.sum(p, 1)
    v = tl.load(v_base + (phys * v_s0 + (n % BS) * v_s1)[:, None], mask=n_ok[:, None] & d_ok[None, :], other=0.0)
    acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
    return acc, m_new, l


@triton.jit
def unified_attention_kernel(q_ptr, k_ptr, v_ptr, cu_q_ptr, kv_lens_ptr, table_ptr, out_ptr, scale_log2, num_seqs,
                             q_s0, q_s1, k_s0, k_s1, k_s2, v_s0, v_s1, v_s2, table_stride, out_s0, out_s1,
                             GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, BS: tl.constexpr, BLOCK_M: tl.constexpr,
                             BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):
    tile = tl.program_id(0)
    h = tl.program_id(1)
    # the sequence of this tile: the largest s with cu_q[s] // BLOCK_M + s <= tile
    lo = tl.zeros((), dtype=tl.int32)
    hi = tl.zeros((), dtype=tl.int32) + num_seqs - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        start_mid = tl.load(cu_q_ptr + mid) // BLOCK_M + mid
        go_up = start_mid <= tile
        lo = tl.where(go_up, mid, lo)
        hi = tl.where(go_up, hi, mid - 1)
    s = lo
    q_start = tl.load(cu_q_ptr + s)
    q_len = tl.load(cu_q_ptr + s + 1) - q_start
    local = tile - (q_start // BLOCK_M + s)
    if local * BLOCK_M < q_len:
        kv_len = tl.load(kv_lens_ptr + s)
        rows = local * BLOCK_M + tl.arange(0, BLOCK_M)  # query index inside the sequence
        row_ok = rows < q_len
        d = tl.arange(0, BLOCK_D)
        d_ok = d < HEAD_DIM
        tok = (q_start + rows).to(tl.int64)
        q = tl.load(q_ptr + tok[:, None] * q_s0 + h * q_s1 + d[None, :], mask=row_ok[:, None] & d_ok[None, :],
                    other=0.0)
        shift = kv_len - q_len
        limit = rows + shift  # row r sees keys j <= limit[r]
        # keys below full_end are seen by every row of the tile; the rest up to kv_end need masks
        full_end = tl.maximum(tl.minimum(local * BLOCK_M + shift + 1, kv_len), 0) // BLOCK_N * BLOCK_N
        kv_end = tl.minimum(kv_len, local * BLOCK_M + BLOCK_M + shift)
        hk = (h // GROUP).to(tl.int64)
        k_base = k_ptr + hk * k_s2 + d[:, None]
        v_base = v_ptr + hk * v_s2 + d[None, :]
        table_row = table_ptr + s.to(tl.int64) * table_stride
        m = tl.full((BLOCK_M,), float("-inf"), dtype=tl.float32)
        l = tl.zeros((BLOCK_M,), dtype=tl.float32)
        acc = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)
        for start in range(0, full_end, BLOCK_N):
            acc, m, l = _kv_step(q, acc, m, l, k_base, v_base, table_row, start, kv_end, limit, scale_log2, k_s0,
                                 k_s1, v_s0, v_s1, d_ok, BS, BLOCK_N, False)
        for start in range(full_end, kv_end, BLOCK_N):
            acc, m, l = _kv_step(q, acc, m, l, k_base, v_base, table_row, start, kv_end, limit, scale_log2, k_s0,
                                 k_s1, v_s0, v_s1, d_ok, BS, BLOCK_N, True)
        o = tl.where(l[:, None] > 0, acc / tl.where(l > 0, l, 1.0)[:, None], 0.0)
        tl.store(out_ptr + tok[:, None] * out_s0 + h * out_s1 + d[None, :], o.to(out_ptr.dtype.element_ty),
                 mask=row_ok[:, None] & d_ok[None, :])


class Model(nn.Module):
    """Causal (bottom-right) attention of each sequence's q rows over its seqused_k paged keys."""

    def forward(self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, cu_seqlens_q: torch.Tensor,
                seqused_k: torch.Tensor, block_table: torch.Tensor) -> torch.Tensor:
        total_q, hq, d = q.shape
        _, bs, hkv, _ = k_cache.shape
        if q.stride(-1) != 1:
            q = q.contiguous()
        if k_cache.stride(-1) != 1 or v_cache.stride(-1) != 1:
            k_cache, v_cache = k_cache.contiguous(), v_cache.contiguous()
        cu_seqlens_q, seqused_k = cu_seqlens_q.contiguous(), seqused_k.contiguous()
        block_table = block_table.contiguous()
        out = torch.empty_like(q)
        num_seqs = seqused_k.shape[0]
        if total_q == 0 or num_seqs == 0:
            return out
        block_d = max(16, triton.next_power_of_2(d))
        block_m = 64
        block_n = 64 if block_d <= 128 else 32
        grid = (total_q // block_m + num_seqs, hq)
        unified_attention_kernel[grid](
            q, k_cache, v_cache, cu_seqlens_q, seqused_k, block_table, out, d ** -0.5 * math.log2(math.e), num_seqs,
            q.stride(0), q.stride(1), *k_cache.stride()[:3], *v_cache.stride()[:3], block_table.stride(0),
            out.stride(0), out.stride(1), GROUP=hq // hkv, HEAD_DIM=d, BS=bs, BLOCK_M=block_m, BLOCK_N=block_n,
            BLOCK_D=block_d, num_warps=8 if block_d > 128 else 4, num_stages=2)
        return out
