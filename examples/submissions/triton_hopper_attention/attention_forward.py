"""attention_forward in Triton with Hopper's tensor memory accelerator: a variant of the Triton reference's kernel
(examples/submissions/triton_reference/attention_forward.py) for side-by-side timing against it and the library
(benchmarks/attention_vs_library.py --candidate hopper=examples/submissions/triton_hopper_attention); not yet
measured, not part of the reference submission.

What differs from the reference: Q, K and V tiles come through device-side TMA descriptors (tl.make_tensor_descriptor
over the packed [tokens, heads, D] tensors, one head per box: [BLOCK, 1, BLOCK_D]), so a tile is one bulk copy
into swizzled shared memory instead of per-thread cp.async loads with masks, and the key loop is a tl.range with
num_stages, software-pipelined by Triton (the next tiles' copies in flight while the current tile's two wgmma
products run). The box's D extent is BLOCK_D = next_power_of_2(D): past the head's D columns the copy fills zeros
(the descriptor's bound), so Q·Kᵀ is unchanged and V's padding columns are never stored. Keys past a sequence's end
are the next sequence's (or zeros at the tensor's end) and are masked to -inf in the last tile only. The output is
stored with masked pointer stores (a box store would write into the next sequence's rows). Warp specialisation
(tl.range(warp_specialize=True)) is left out: Triton 3.6 targets it at Blackwell.

Device-side descriptors need a global scratch allocator (triton.set_allocator, set here to torch allocations);
the evaluator's trusted replay does not set one, so this form can be timed side by side but not yet scored by
`hotshape eval` (a replay of it would fail to launch). Needs D a multiple of 8 (16-byte row strides, TMA's rule)
and contiguous q/k/v; the catalogue's heads are 72, 80 and 128.
"""

import math

import torch
import triton
import triton.language as tl
from torch import nn


def _configs():
    return [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "STAGES": s}, num_warps=w)
            for bm, bn, w, s in ((128, 128, 8, 2), (128, 64, 8, 3), (128, 64, 4, 3), (128, 128, 8, 3),
                                 (64, 128, 4, 3), (64, 64, 4, 4))]


def prune_configs(configs, named_args, **kwargs):
    """As the reference: short inputs keep only 64-row tiles; heads wider than 128 keep 64-key tiles."""
    args = {**named_args, **kwargs}
    keep = [c for c in configs
            if (args["total_q"] > 64 or c.kwargs["BLOCK_M"] == 64)
            and (args["BLOCK_D"] <= 128 or c.kwargs["BLOCK_N"] == 64)]
    return keep or configs[-1:]


@triton.jit
def _step(q, acc, m, l, k_desc, v_desc, row, hk, start, kv_len, scale_log2, BLOCK_N: tl.constexpr,
          BLOCK_D: tl.constexpr, MASKED: tl.constexpr):
    """One BLOCK_N-key step of the online softmax; MASKED only for the sequence's last, partial tile."""
    k = k_desc.load([row, hk, 0]).reshape(BLOCK_N, BLOCK_D)
    scores = tl.dot(q, k.T) * scale_log2
    if MASKED:
        n = start + tl.arange(0, BLOCK_N)
        scores = tl.where((n < kv_len)[None, :], scores, float("-inf"))
    m_new = tl.maximum(m, tl.max(scores, 1))
    alpha = tl.exp2(m - m_new)
    p = tl.exp2(scores - m_new[:, None])
    l = l * alpha + tl.sum(p, 1)
    v = v_desc.load([row, hk, 0]).reshape(BLOCK_N, BLOCK_D)
    acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
    return acc, m_new, l


@triton.autotune(configs=_configs(), key=["total_q", "HEAD_DIM"],
                 prune_configs_by={"early_config_prune": prune_configs})
@triton.jit
def attention_forward_tma_kernel(q_ptr, k_ptr, v_ptr, cu_q_ptr, cu_k_ptr, out_ptr, scale_log2, num_seqs, total_q,
                                 total_k, HQ: tl.constexpr, HKV: tl.constexpr, HEAD_DIM: tl.constexpr,
                                 BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                                 STAGES: tl.constexpr):
    tile = tl.program_id(0)
    h = tl.program_id(1)
    lo = tl.zeros((), dtype=tl.int32)
    hi = tl.zeros((), dtype=tl.int32) + num_seqs - 1
    while lo < hi:  # the sequence of this tile: the largest s with cu_q[s] // BLOCK_M + s <= tile
        mid = (lo + hi + 1) // 2
        go_up = tl.load(cu_q_ptr + mid) // BLOCK_M + mid <= tile
        lo = tl.where(go_up, mid, lo)
        hi = tl.where(go_up, hi, mid - 1)
    s = lo
    q_start = tl.load(cu_q_ptr + s)
    q_len = tl.load(cu_q_ptr + s + 1) - q_start
    local = tile - (q_start // BLOCK_M + s)
    if local * BLOCK_M < q_len:
        q_desc = tl.make_tensor_descriptor(q_ptr, shape=[total_q, HQ, HEAD_DIM], strides=[HQ * HEAD_DIM, HEAD_DIM, 1],
                                           block_shape=[BLOCK_M, 1, BLOCK_D])
        k_desc = tl.make_tensor_descriptor(k_ptr, shape=[total_k, HKV, HEAD_DIM],
                                           strides=[HKV * HEAD_DIM, HEAD_DIM, 1], block_shape=[BLOCK_N, 1, BLOCK_D])
        v_desc = tl.make_tensor_descriptor(v_ptr, shape=[total_k, HKV, HEAD_DIM],
                                           strides=[HKV * HEAD_DIM, HEAD_DIM, 1], block_shape=[BLOCK_N, 1, BLOCK_D])
        k_start = tl.load(cu_k_ptr + s)
        kv_len = tl.load(cu_k_ptr + s + 1) - k_start
        hk = h // (HQ // HKV)
        q = q_desc.load([q_start + local * BLOCK_M, h, 0]).reshape(BLOCK_M, BLOCK_D)
        m = tl.full((BLOCK_M,), float("-inf"), dtype=tl.float32)
        l = tl.zeros((BLOCK_M,), dtype=tl.float32)
        acc = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)
        full_end = kv_len // BLOCK_N * BLOCK_N
        for start in tl.range(0, full_end, BLOCK_N, num_stages=STAGES):
            acc, m, l = _step(q, acc, m, l, k_desc, v_desc, k_start + start, hk, start, kv_len, scale_log2,
                              BLOCK_N, BLOCK_D, False)
        if full_end < kv_len:
            acc, m, l = _step(q, acc, m, l, k_desc, v_desc, k_start + full_end, hk, full_end, kv_len, scale_log2,
                              BLOCK_N, BLOCK_D, True)
        o = tl.where(l[:, None] > 0, acc / tl.where(l > 0, l, 1.0)[:, None], 0.0)
        rows = local * BLOCK_M + tl.arange(0, BLOCK_M)
        d = tl.arange(0, BLOCK_D)
        tok = (q_start + rows).to(tl.int64)
        o_ptrs = out_ptr + (tok * (HQ * HEAD_DIM) + h * HEAD_DIM)[:, None] + d[None, :]
        tl.store(o_ptrs, o.to(out_ptr.dtype.element_ty), mask=(rows < q_len)[:, None] & (d < HEAD_DIM)[None, :])


def _scratch(size: int, alignment: int, stream):
    """Global memory for the device-side descriptors (Triton asks for it at launch)."""
    return torch.empty(size, dtype=torch.int8, device="cuda" if torch.cuda.is_available() else "cpu")


class Model(nn.Module):
    """For each sequence s: out[s] = softmax(q[s] k[s]ᵀ / sqrt(D)) v[s] (no mask)."""

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens_q: torch.Tensor,
                cu_seqlens_k: torch.Tensor) -> torch.Tensor:
        total_q, hq, d = q.shape
        if d % 8:
            raise ValueError(f"attention_forward (TMA): head size {d} is not a multiple of 8 (16-byte rows)")
        q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
        out = torch.empty_like(q)
        num_seqs = cu_seqlens_q.shape[0] - 1
        if total_q == 0 or num_seqs <= 0:
            return out
        triton.set_allocator(_scratch)
        grid = lambda meta: (total_q // meta["BLOCK_M"] + num_seqs, hq)  # noqa: E731
        attention_forward_tma_kernel[grid](
            q, k, v, cu_seqlens_q.contiguous(), cu_seqlens_k.contiguous(), out, d ** -0.5 * math.log2(math.e),
            num_seqs, total_q, k.shape[0], HQ=hq, HKV=k.shape[1], HEAD_DIM=d,
            BLOCK_D=max(16, triton.next_power_of_2(d)))
        return out
