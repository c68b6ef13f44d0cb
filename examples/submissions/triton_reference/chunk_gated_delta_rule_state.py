"""chunk_gated_delta_rule_state in Triton (FLA chunk_gated_delta_rule_fwd_h): per sequence b and value head (k head =
head // (Hv/Hk)) the state S [K, V] starts at pool row initial_state_indices[b]; for each chunk c: h[b, c] = S (k's
dtype), v_new = u - w S (u's dtype), S = exp(g_last) S + kᵀ (exp(g_last - g_j) v_new_j) with the fp32 v_new.
Returns h, v_new and the pool, whose rows are updated in place (the contract allows it).

One launch. A program owns a [K, BLOCK_V] column slice of one (sequence, head) state in fp32 registers and walks
the chunks in order (columns are independent: w S and kᵀ x are per column); the chunk's w, u, k and g loads do
not depend on the state, so Triton's pipeliner prefetches them (num_stages). Both products run on tensor cores
(tl.dot) without giving up the reference's fp32 operands: the fp32 one (S, then x = exp(g_last - g_j) v_new) is
split into bf16 hi + lo parts and multiplied as two bf16 dots into one fp32 accumulator (w and k are bf16, so
every product is exact and the split leaves ~2^-16 of relative error, against ~2^-9 for rounding S or x to bf16,
which FLA does and which fails the tolerance on long sequences). BLOCK_V is the widest slice that still spreads
the (sequence, head) pairs over every SM: the chunk walk is serial, so parallelism comes only from the slices.
"""

import torch
import triton
import triton.language as tl
from torch import nn


@triton.jit
def _split_dot(a, x, acc):
    """acc + a @ x for bf16 a and fp32 x, as two bf16 tensor-core products (x = hi + lo)."""
    hi = x.to(tl.bfloat16)
    lo = (x - hi.to(tl.float32)).to(tl.bfloat16)
    return tl.dot(a, lo, tl.dot(a, hi, acc))


@triton.jit
def chunk_gated_delta_rule_state_kernel(k_ptr, w_ptr, u_ptr, g_ptr, state_ptr, idx_ptr, h_ptr, vn_ptr, T, NC, HV,
                                        GROUP, K, V, k_sb, k_st, k_sh, w_sb, w_st, w_sh, u_sb, u_st, u_sh, g_sb, g_st,
                                        g_sh, s_sn, s_sh, s_sk, h_sb, h_sc, h_sh, h_sk, vn_sb, vn_st, vn_sh,
                                        CHUNK: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_K: tl.constexpr,
                                        BLOCK_V: tl.constexpr, STAGES: tl.constexpr):
    pid = tl.program_id(0)
    bb = (pid // HV).to(tl.int64)
    hh = pid % HV
    hk = hh // GROUP
    rk = tl.arange(0, BLOCK_K)
    rv = tl.program_id(1) * BLOCK_V + tl.arange(0, BLOCK_V)
    rt = tl.arange(0, BLOCK_T)  # the chunk's rows, padded to a tl.dot size
    k_ok = rk < K
    v_ok = rv < V
    s_mask = k_ok[:, None] & v_ok[None, :]
    row = tl.load(idx_ptr + bb).to(tl.int64)
    s_ptrs = state_ptr + row * s_sn + hh * s_sh + rk[:, None] * s_sk + rv[None, :]
    S = tl.load(s_ptrs, mask=s_mask, other=0.0)

    h_ptrs = h_ptr + bb * h_sb + hh * h_sh + rk[:, None] * h_sk + rv[None, :]
    w_base = w_ptr + bb * w_sb + hh * w_sh
    u_base = u_ptr + bb * u_sb + hh * u_sh
    vn_base = vn_ptr + bb * vn_sb + hh * vn_sh
    k_base = k_ptr + bb * k_sb + hk * k_sh
    g_base = g_ptr + bb * g_sb + hh * g_sh
    for c in tl.range(0, NC, num_stages=STAGES):
        tt = c * CHUNK + rt
        t_ok = (rt < CHUNK) & (tt < T)
        tt64 = tt.to(tl.int64)
        tl.store(h_ptrs, S.to(h_ptr.dtype.element_ty), mask=s_mask)
        h_ptrs += h_sc
        w = tl.load(w_base + tt64[:, None] * w_st + rk[None, :], mask=t_ok[:, None] & k_ok[None, :], other=0.0)
        u = tl.load(u_base + tt64[:, None] * u_st + rv[None, :], mask=t_ok[:, None] & v_ok[None, :], other=0.0)
        vc = u.to(tl.float32) - _split_dot(w, S, tl.zeros((BLOCK_T, BLOCK_V), dtype=tl.float32))
        tl.store(vn_base + tt64[:, None] * vn_st + rv[None, :], vc.to(vn_ptr.dtype.element_ty),
                 mask=t_ok[:, None] & v_ok[None, :])
        last = tl.minimum(c * CHUNK + CHUNK, T) - 1
        g_last = tl.load(g_base + last.to(tl.int64) * g_st).to(tl.float32)
        g = tl.load(g_base + tt64 * g_st, mask=t_ok, other=0.0).to(tl.float32)
        x = tl.where(t_ok[:, None], vc * tl.exp(g_last - g)[:, None], 0.0)
        kt = tl.load(k_base + tt64[None, :] * k_st + rk[:, None], mask=k_ok[:, None] & t_ok[None, :], other=0.0)
        S = S * tl.exp(g_last) + _split_dot(kt, x, tl.zeros((BLOCK_K, BLOCK_V), dtype=tl.float32))
    tl.store(s_ptrs, S, mask=s_mask)


def block_v_for(pairs: int, value_dim: int) -> int:
    """The widest value slice (16 to 64 columns) that still gives every SM of an H200 a program."""
    for bv in (64, 32):
        if pairs * triton.cdiv(value_dim, bv) >= 132:
            return min(bv, max(16, triton.next_power_of_2(value_dim)))
    return 16


class Model(nn.Module):
    """h [B, NC, Hv, K, V] (k's dtype), v_new (u's dtype), final_state (the pool, updated in place)."""

    def __init__(self, chunk_size: int = 64) -> None:
        super().__init__()
        self.cs = int(chunk_size)

    def forward(self, k: torch.Tensor, w: torch.Tensor, u: torch.Tensor, g: torch.Tensor,
                initial_state: torch.Tensor, initial_state_indices: torch.Tensor) -> dict:
        b, t, hk, kd = k.shape
        hv, vd = u.shape[2:]
        nc = triton.cdiv(t, self.cs)
        h = torch.empty((b, nc, hv, kd, vd), dtype=k.dtype, device=k.device)
        v_new = torch.empty_like(u)
        if b == 0 or t == 0 or hv == 0 or vd == 0:
            return {"h": h, "v_new": v_new, "final_state": initial_state}
        k = k if k.stride(3) == 1 else k.contiguous()
        w = w if w.stride(3) == 1 else w.contiguous()
        u = u if u.stride(3) == 1 else u.contiguous()
        state = initial_state
        if state.stride(3) != 1:
            raise ValueError("chunk_gated_delta_rule_state: initial_state must have unit stride along value_dim")
        bv = block_v_for(b * hv, vd)
        chunk_gated_delta_rule_state_kernel[(b * hv, triton.cdiv(vd, bv))](
            k, w, u, g, state, initial_state_indices, h, v_new, t, nc, hv, hv // hk, kd, vd, k.stride(0), k.stride(1),
            k.stride(2), w.stride(0), w.stride(1), w.stride(2), u.stride(0), u.stride(1), u.stride(2), g.stride(0),
            g.stride(1), g.stride(2), state.stride(0), state.stride(1), state.stride(2), h.stride(0), h.stride(1),
            h.stride(2), h.stride(3), v_new.stride(0), v_new.stride(1), v_new.stride(2), CHUNK=self.cs,
            BLOCK_T=max(16, triton.next_power_of_2(self.cs)), BLOCK_K=max(16, triton.next_power_of_2(kd)), BLOCK_V=bv,
            STAGES=2, num_warps=8 if bv >= 64 else 4)
        return {"h": h, "v_new": v_new, "final_state": state}
