"""attention_forward in Triton: varlen bidirectional attention (vision encoders) of q [sum Lq, Hq, D] over k, v
[sum Lk, Hkv, D] packed by cu_seqlens_q / cu_seqlens_k, no mask, scale D^-0.5; Hq a multiple of Hkv (GQA).

Flash attention. The grid's first axis runs over query tiles of BLOCK_M rows of one sequence, laid out as
tile(s, i) = cu_seqlens_q[s] // BLOCK_M + s + i, so its size, total_q // BLOCK_M + num_seqs, needs no device
sync; a program finds its sequence by binary search over cu_seqlens_q and leaves if its tile is past the
sequence's queries. The second axis is the query head. A program keeps its Q tile in registers and walks the
sequence's keys BLOCK_N at a time (unmasked full tiles, one masked tail), with an online softmax (exp2, fp32
statistics) and both products on tensor cores (tl.dot; P cast to the input dtype as flash attention does).

The catalogue's vision encoders use D = 72, which a power-of-two tile would pad to 128 (44% of the MMA work
wasted). The head dimension is instead split into a power-of-two body (64) and a small tail tile (16, masked
to the 8 real columns): two dots for QKᵀ, two accumulators for PV, 80 columns of work. Tile shapes, warps and
stages are autotuned per (total_q, D). A sequence without keys gives zeros.
"""

import math

import torch
import triton
import triton.language as tl
from torch import nn


def _configs():
    return [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=w, num_stages=s)
            for bm, bn, w, s in ((128, 128, 8, 3), (128, 64, 8, 3), (128, 64, 4, 3), (128, 128, 8, 2),
                                 (64, 128, 4, 3), (64, 64, 4, 3))]


def prune_configs(configs, named_args, **kwargs):
    """Short inputs keep only the 64-row tiles (taller ones would be mostly masked rows)."""
    if named_args["total_q"] <= 64:
        return [c for c in configs if c.kwargs["BLOCK_M"] == 64]
    return configs


@triton.jit
def _load_tile(ptrs, n_ok, col_ok, MASK_ROWS: tl.constexpr, MASK_COLS: tl.constexpr):
    """A [BLOCK_N, cols] tile of K or V, masked only where the tile can leave the sequence or the head."""
    if MASK_ROWS and MASK_COLS:
        x = tl.load(ptrs, mask=n_ok[:, None] & col_ok[None, :], other=0.0)
    elif MASK_ROWS:
        x = tl.load(ptrs, mask=n_ok[:, None], other=0.0)
    elif MASK_COLS:
        x = tl.load(ptrs, mask=col_ok[None, :], other=0.0)
    else:
        x = tl.load(ptrs)
    return x


@triton.jit
def _kv_step(q0, q1, acc0, acc1, m, l, k0_ptrs, k1_ptrs, v0_ptrs, v1_ptrs, start, kv_len, scale_log2, k_s0, v_s0,
             d0_ok, d1_ok, BODY_MASK: tl.constexpr, HAS_TAIL: tl.constexpr, BLOCK_N: tl.constexpr,
             MASKED: tl.constexpr):
    """One BLOCK_N-key step of the online softmax; MASKED only for the sequence's last, partial tile."""
    n = start + tl.arange(0, BLOCK_N)
    n_ok = n < kv_len
    rows = (n.to(tl.int64) * k_s0)[:, None]
    scores = tl.dot(q0, tl.trans(_load_tile(k0_ptrs + rows, n_ok, d0_ok, MASKED, BODY_MASK)))
    if HAS_TAIL:
        scores = tl.dot(q1, tl.trans(_load_tile(k1_ptrs + rows, n_ok, d1_ok, MASKED, True)), scores)
    scores = scores * scale_log2
    if MASKED:
        scores = tl.where(n_ok[None, :], scores, float("-inf"))
    m_new = tl.maximum(m, tl.max(scores, 1))
    alpha = tl.exp2(m - m_new)
    p = tl.exp2(scores - m_new[:, None])
    l = l * alpha + tl.sum(p, 1)
    rows = (n.to(tl.int64) * v_s0)[:, None]
    v0 = _load_tile(v0_ptrs + rows, n_ok, d0_ok, MASKED, BODY_MASK)
    acc0 = tl.dot(p.to(v0.dtype), v0, acc0 * alpha[:, None])
    if HAS_TAIL:
        v1 = _load_tile(v1_ptrs + rows, n_ok, d1_ok, MASKED, True)
        acc1 = tl.dot(p.to(v1.dtype), v1, acc1 * alpha[:, None])
    return acc0, acc1, m_new, l


@triton.autotune(configs=_configs(), key=["total_q", "HEAD_DIM"],
                 prune_configs_by={"early_config_prune": prune_configs})
@triton.jit
def attention_forward_kernel(q_ptr, k_ptr, v_ptr, cu_q_ptr, cu_k_ptr, out_ptr, scale_log2, num_seqs, total_q,
                             q_s0, q_s1, k_s0, k_s1, v_s0, v_s1, out_s0, out_s1, GROUP: tl.constexpr,
                             HEAD_DIM: tl.constexpr, BLOCK_D0: tl.constexpr, BLOCK_D1: tl.constexpr,
                             BODY_MASK: tl.constexpr, HAS_TAIL: tl.constexpr, BLOCK_M: tl.constexpr,
                             BLOCK_N: tl.constexpr):
    tile = tl.program_id(0)
    h = tl.program_id(1)
    # the sequence of this tile: the largest s with cu_q[s] // BLOCK_M + s <= tile
    lo = tl.zeros((), dtype=tl.int32)
    hi = tl.zeros((), dtype=tl.int32) + num_seqs - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        go_up = tl.load(cu_q_ptr + mid) // BLOCK_M + mid <= tile
        lo = tl.where(go_up, mid, lo)
        hi = tl.where(go_up, hi, mid - 1)
    s = lo
    q_start = tl.load(cu_q_ptr + s)
    q_len = tl.load(cu_q_ptr + s + 1) - q_start
    local = tile - (q_start // BLOCK_M + s)
    if local * BLOCK_M < q_len:
        k_start = tl.load(cu_k_ptr + s).to(tl.int64)
        kv_len = tl.load(cu_k_ptr + s + 1) - tl.load(cu_k_ptr + s)
        rows = local * BLOCK_M + tl.arange(0, BLOCK_M)
        row_ok = rows < q_len
        tok = (q_start + rows).to(tl.int64)
        d0 = tl.arange(0, BLOCK_D0)
        d0_ok = d0 < HEAD_DIM  # all true unless D < 16 (BODY_MASK)
        d1 = BLOCK_D0 + tl.arange(0, BLOCK_D1)
        d1_ok = d1 < HEAD_DIM
        q_rows = q_ptr + tok[:, None] * q_s0 + h * q_s1
        q0 = tl.load(q_rows + d0[None, :], mask=row_ok[:, None] & d0_ok[None, :], other=0.0)
        q1 = tl.load(q_rows + d1[None, :], mask=row_ok[:, None] & d1_ok[None, :], other=0.0)
        hk = (h // GROUP).to(tl.int64)
        k_head = k_ptr + k_start * k_s0 + hk * k_s1
        v_head = v_ptr + k_start * v_s0 + hk * v_s1
        m = tl.full((BLOCK_M,), float("-inf"), dtype=tl.float32)
        l = tl.zeros((BLOCK_M,), dtype=tl.float32)
        acc0 = tl.zeros((BLOCK_M, BLOCK_D0), dtype=tl.float32)
        acc1 = tl.zeros((BLOCK_M, BLOCK_D1), dtype=tl.float32)
        full_end = kv_len // BLOCK_N * BLOCK_N
        for start in range(0, full_end, BLOCK_N):
            acc0, acc1, m, l = _kv_step(q0, q1, acc0, acc1, m, l, k_head + d0[None, :], k_head + d1[None, :],
                                        v_head + d0[None, :], v_head + d1[None, :], start, kv_len, scale_log2,
                                        k_s0, v_s0, d0_ok, d1_ok, BODY_MASK, HAS_TAIL, BLOCK_N, False)
        for start in range(full_end, kv_len, BLOCK_N):
            acc0, acc1, m, l = _kv_step(q0, q1, acc0, acc1, m, l, k_head + d0[None, :], k_head + d1[None, :],
                                        v_head + d0[None, :], v_head + d1[None, :], start, kv_len, scale_log2,
                                        k_s0, v_s0, d0_ok, d1_ok, BODY_MASK, HAS_TAIL, BLOCK_N, True)
        inv = tl.where(l > 0, 1.0 / tl.where(l > 0, l, 1.0), 0.0)
        o_rows = out_ptr + tok[:, None] * out_s0 + h * out_s1
        tl.store(o_rows + d0[None, :], (acc0 * inv[:, None]).to(out_ptr.dtype.element_ty),
                 mask=row_ok[:, None] & d0_ok[None, :])
        if HAS_TAIL:
            tl.store(o_rows + d1[None, :], (acc1 * inv[:, None]).to(out_ptr.dtype.element_ty),
                     mask=row_ok[:, None] & d1_ok[None, :])


class Model(nn.Module):
    """For each sequence s: out[s] = softmax(q[s] k[s]ᵀ / sqrt(D)) v[s] (no mask)."""

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens_q: torch.Tensor,
                cu_seqlens_k: torch.Tensor) -> torch.Tensor:
        total_q, hq, d = q.shape
        hkv = k.shape[1]
        if q.stride(-1) != 1:
            q = q.contiguous()
        if k.stride(-1) != 1 or v.stride(-1) != 1:
            k, v = k.contiguous(), v.contiguous()
        cu_seqlens_q, cu_seqlens_k = cu_seqlens_q.contiguous(), cu_seqlens_k.contiguous()
        out = torch.empty_like(q)
        num_seqs = cu_seqlens_q.shape[0] - 1
        if total_q == 0 or num_seqs <= 0:
            return out
        block_d0 = max(16, 1 << (d.bit_length() - 1))  # the largest power of two <= D
        tail = d - block_d0
        block_d1 = max(16, triton.next_power_of_2(tail)) if tail > 0 else 16
        grid = lambda meta: (total_q // meta["BLOCK_M"] + num_seqs, hq)  # noqa: E731
        attention_forward_kernel[grid](
            q, k, v, cu_seqlens_q, cu_seqlens_k, out, d ** -0.5 * math.log2(math.e), num_seqs, total_q,
            q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1), out.stride(0),
            out.stride(1), GROUP=hq // hkv, HEAD_DIM=d, BLOCK_D0=block_d0, BLOCK_D1=block_d1, BODY_MASK=d < block_d0,
            HAS_TAIL=tail > 0)
        return out
