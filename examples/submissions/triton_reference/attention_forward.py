"""attention_forward in Triton: varlen bidirectional attention (vision encoders) of q [sum Lq, Hq, D] over k, v
[sum Lk, Hkv, D] packed by cu_seqlens_q / cu_seqlens_k, no mask, scale D^-0.5; Hq a multiple of Hkv (GQA).

Flash attention. The grid's first axis runs over query tiles of BLOCK_M rows of one sequence, laid out as
tile(s, i) = cu_seqlens_q[s] // BLOCK_M + s + i, so its size, total_q // BLOCK_M + num_seqs, needs no device
sync; a program finds its sequence by binary search over cu_seqlens_q and leaves if its tile is past the
sequence's queries. The second axis is the query head. A program keeps its Q tile on chip and walks the
sequence's keys BLOCK_N at a time (full tiles without key masks, one masked tail), with an online softmax (exp2,
fp32 statistics) and both products on tensor cores (tl.dot; P cast to the input dtype as flash attention does).

The head is one tile of BLOCK_D = next_power_of_2(D) columns, masked to the D real ones (D = 72 pads to 128),
and K is loaded already transposed ([BLOCK_D, BLOCK_N], d along the contiguous axis), the layout the paged
unified_attention kernel uses. (An earlier version split D = 72 into a 64-column body and a 16-column tail
tile; it hit an illegal memory access on the H200 under Triton 3.6, most likely in its 16-wide, 32-byte
swizzled wgmma operands, the class of Hopper small-tile wgmma bugs of triton issues #11366 and #10629.)
At the catalogue's head sizes (72 and 128) every operand tile here is 128 wide along its contiguous axis
(128-byte swizzle). Strides are passed in units of VEC elements (8 when every stride is a multiple of 8 and the
tensors are 16-byte aligned, as for contiguous D = 72), so Triton sees 16-byte aligned rows and issues vector
loads (and pipelines them with cp.async) although a 72-element head is not a multiple of 16; the old kernel's
loads were 2-byte scalar ones. Tile shapes, warps and stages are autotuned per (total_q, D). A sequence without
keys gives zeros.
"""

import math

import torch
import triton
import triton.language as tl
from torch import nn


def _configs():
    return [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=w, num_stages=s)
            for bm, bn, w, s in ((128, 128, 8, 2), (128, 64, 8, 3), (128, 64, 4, 3), (128, 128, 8, 3),
                                 (64, 128, 4, 3), (64, 64, 4, 3))]


def prune_configs(configs, named_args, **kwargs):
    """Short inputs keep only the 64-row tiles (taller ones would be mostly masked rows); heads wider than 128
    keep the 64-key tiles (Q, K and V stages must fit shared memory)."""
    args = {**named_args, **kwargs}
    keep = [c for c in configs
            if (args["total_q"] > 64 or c.kwargs["BLOCK_M"] == 64)
            and (args["BLOCK_D"] <= 128 or c.kwargs["BLOCK_N"] == 64)]
    return keep or configs[-1:]


@triton.jit
def _kv_step(q, acc, m, l, kt_base, v_base, start, kv_len, scale_log2, k_s0, v_s0, d_ok,
             VEC: tl.constexpr, EVEN_D: tl.constexpr, BLOCK_N: tl.constexpr, MASKED: tl.constexpr):
    """One BLOCK_N-key step of the online softmax; MASKED only for the sequence's last, partial tile."""
    n = start + tl.arange(0, BLOCK_N)
    n_ok = n < kv_len
    # K^T tile [BLOCK_D, BLOCK_N]: key n's row starts at n * k_s0 * VEC elements (a multiple of VEC)
    kt_ptrs = kt_base + (n.to(tl.int64) * k_s0 * VEC)[None, :]
    v_ptrs = v_base + (n.to(tl.int64) * v_s0 * VEC)[:, None]
    if MASKED:
        kt = tl.load(kt_ptrs, mask=d_ok[:, None] & n_ok[None, :], other=0.0)
    elif EVEN_D:
        kt = tl.load(kt_ptrs)
    else:
        kt = tl.load(kt_ptrs, mask=d_ok[:, None], other=0.0)
    scores = tl.dot(q, kt) * scale_log2
    if MASKED:
        scores = tl.where(n_ok[None, :], scores, float("-inf"))
    m_new = tl.maximum(m, tl.max(scores, 1))
    alpha = tl.exp2(m - m_new)
    p = tl.exp2(scores - m_new[:, None])
    l = l * alpha + tl.sum(p, 1)
    if MASKED:
        v = tl.load(v_ptrs, mask=n_ok[:, None] & d_ok[None, :], other=0.0)
    elif EVEN_D:
        v = tl.load(v_ptrs)
    else:
        v = tl.load(v_ptrs, mask=d_ok[None, :], other=0.0)
    acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
    return acc, m_new, l


@triton.autotune(configs=_configs(), key=["total_q", "HEAD_DIM"],
                 prune_configs_by={"early_config_prune": prune_configs})
@triton.jit
def attention_forward_kernel(q_ptr, k_ptr, v_ptr, cu_q_ptr, cu_k_ptr, out_ptr, scale_log2, num_seqs, total_q,
                             q_s0, q_s1, k_s0, k_s1, v_s0, v_s1, out_s0, out_s1, GROUP: tl.constexpr,
                             HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, VEC: tl.constexpr,
                             BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    # strides are in units of VEC elements: every row offset below is a multiple of VEC
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
        d = tl.arange(0, BLOCK_D)
        d_ok = d < HEAD_DIM
        EVEN_D: tl.constexpr = HEAD_DIM == BLOCK_D
        h64 = h.to(tl.int64)
        q_rows = q_ptr + (tok * q_s0 * VEC + h64 * q_s1 * VEC)[:, None]
        q = tl.load(q_rows + d[None, :], mask=row_ok[:, None] & d_ok[None, :], other=0.0)
        hk = (h // GROUP).to(tl.int64)
        kt_base = k_ptr + (k_start * k_s0 * VEC + hk * k_s1 * VEC) + d[:, None]
        v_base = v_ptr + (k_start * v_s0 * VEC + hk * v_s1 * VEC) + d[None, :]
        m = tl.full((BLOCK_M,), float("-inf"), dtype=tl.float32)
        l = tl.zeros((BLOCK_M,), dtype=tl.float32)
        acc = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)
        full_end = kv_len // BLOCK_N * BLOCK_N
        for start in range(0, full_end, BLOCK_N):
            acc, m, l = _kv_step(q, acc, m, l, kt_base, v_base, start, kv_len, scale_log2, k_s0, v_s0, d_ok,
                                 VEC, EVEN_D, BLOCK_N, False)
        for start in range(full_end, kv_len, BLOCK_N):
            acc, m, l = _kv_step(q, acc, m, l, kt_base, v_base, start, kv_len, scale_log2, k_s0, v_s0, d_ok,
                                 VEC, EVEN_D, BLOCK_N, True)
        o = tl.where(l[:, None] > 0, acc / tl.where(l > 0, l, 1.0)[:, None], 0.0)
        o_rows = out_ptr + (tok * out_s0 * VEC + h64 * out_s1 * VEC)[:, None]
        tl.store(o_rows + d[None, :], o.to(out_ptr.dtype.element_ty), mask=row_ok[:, None] & d_ok[None, :])


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
        block_d = max(16, triton.next_power_of_2(d))
        strides = (q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1), out.stride(0),
                   out.stride(1))
        # 8 elements = 16 bytes: the widest vector load; only when every row start is a multiple of it
        aligned = all(x % 8 == 0 for x in strides) and all(t.data_ptr() % 16 == 0 for t in (q, k, v, out))
        vec = 8 if aligned else 1
        grid = lambda meta: (total_q // meta["BLOCK_M"] + num_seqs, hq)  # noqa: E731
        attention_forward_kernel[grid](
            q, k, v, cu_seqlens_q, cu_seqlens_k, out, d ** -0.5 * math.log2(math.e), num_seqs, total_q,
            *(x // vec for x in strides), GROUP=hq // hkv, HEAD_DIM=d, BLOCK_D=block_d, VEC=vec)
        return out
