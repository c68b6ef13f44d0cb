"""gated_delta_rule_update in Triton (Qwen3-Next fused sigmoid-gating recurrent delta rule): per sequence b, value
head h (q/k head h // (Hv/Hq)) and token t, with the state S [K, V] of pool row initial_state_indices[b]:
g = -exp(A_log) softplus(a + dt_bias), beta = sigmoid(b), q and k l2-normalised (eps 1e-6) if asked;
S = exp(g) S; S += k (beta (v - Sᵀ k))ᵀ; o_t = Sᵀ (q K^-0.5). Returns out (v's dtype) and the pool, whose rows
are updated in place (the contract allows it).

One launch. A program owns a [K, BLOCK_V] column slice of one (sequence, head) state, held in fp32 registers for
the whole sequence (the value columns of the delta rule are independent: Sᵀk, the delta and Sᵀq are all per
column), and walks the tokens in order; the state is read once and written once. It runs in one warp (two for
32-column slices), so the two reductions over K per token are warp shuffles, and it is software-pipelined by
hand: the next token's loads are issued before this token's state math, and the next token's gate, beta and
normalisation (which do not depend on the state) are computed after it. All math is fp32 in the reference's
order; the normalisation divides with div_rn and sqrt_rn as torch does. BLOCK_V is the widest slice that still
gives every SM a few programs. It is latency-bound: one dependent state step per token (on an H200 about 1.2 µs
a token, 9.9 ms for 8192 tokens of 32 heads, 0.05 of the roofline).

A chunked (WY / UT-transform) form was built and measured on the H200 (commit 9d5f985,
benchmarks/results/triton_reference/gdr_chunked_diag_*.txt, run8_gated_delta_chunked_progress.jsonl): with
Triton 3.6 its output kernel faulted (8 warps) or came out wrong (4 warps) in the tensor-core form, and the form
that is correct there (fp32 FMA dots) was 3.1-4.5x slower than this kernel at every catalogue shape. So every
sequence takes this kernel.
"""

import torch
import triton
import triton.language as tl
from torch import nn


@triton.jit
def _token_inputs(q_ptrs, k_ptrs, v_ptrs, a_ptr, b_ptr, t, T, k_ok, v_ok, q_st, k_st, v_st, a_st, b_st):
    """Raw loads of token t (the last token again past the end: the prefetch after the last step)."""
    t = tl.minimum(t, T - 1).to(tl.int64)
    q = tl.load(q_ptrs + t * q_st, mask=k_ok, other=0.0).to(tl.float32)
    k = tl.load(k_ptrs + t * k_st, mask=k_ok, other=0.0).to(tl.float32)
    v = tl.load(v_ptrs + t * v_st, mask=v_ok, other=0.0).to(tl.float32)
    a = tl.load(a_ptr + t * a_st).to(tl.float32)
    b = tl.load(b_ptr + t * b_st).to(tl.float32)
    return q, k, v, a, b


@triton.jit
def _token_terms(q, k, a, b, neg_a_exp, dt_bias, scale, sp_beta, sp_threshold, USE_L2: tl.constexpr):
    """The state-free terms of a token: scaled (normalised) q, (normalised) k, exp(g) and beta."""
    if USE_L2:
        q = tl.math.div_rn(q, tl.maximum(tl.sqrt_rn(tl.sum(q * q, 0)), 1e-6))
        k = tl.math.div_rn(k, tl.maximum(tl.sqrt_rn(tl.sum(k * k, 0)), 1e-6))
    x = a + dt_bias
    bx = sp_beta * x
    # log1p(e) = log(1 + e) * e / ((1 + e) - 1): exact rounding of 1 + e compensated (torch uses log1p)
    e = tl.exp(bx)
    u = 1.0 + e
    log1p = tl.where(u == 1.0, e, tl.log(u) * tl.math.div_rn(e, u - 1.0))
    softplus = tl.where(bx > sp_threshold, x, tl.math.div_rn(log1p, sp_beta))
    decay = tl.exp(neg_a_exp * softplus)
    beta = tl.sigmoid(b)
    return q * scale, k, decay, beta


@triton.jit
def gated_delta_rule_update_kernel(A_log_ptr, a_ptr, dt_bias_ptr, q_ptr, k_ptr, v_ptr, b_ptr, state_ptr, idx_ptr,
                                   out_ptr, T, HV, GROUP, K, V, scale, sp_beta, sp_threshold, q_sb, q_st, q_sh, k_sb,
                                   k_st, k_sh, v_sb, v_st, v_sh, a_sb, a_st, a_sh, b_sb, b_st, b_sh, s_sn, s_sh, s_sk,
                                   o_sb, o_st, o_sh, USE_L2: tl.constexpr, BLOCK_K: tl.constexpr,
                                   BLOCK_V: tl.constexpr):
    pid = tl.program_id(0)
    bb = pid // HV
    hh = pid % HV
    hq = hh // GROUP
    rk = tl.arange(0, BLOCK_K)
    rv = tl.program_id(1) * BLOCK_V + tl.arange(0, BLOCK_V)
    k_ok = rk < K
    v_ok = rv < V
    row = tl.load(idx_ptr + bb).to(tl.int64)
    s_ptrs = state_ptr + row * s_sn + hh * s_sh + rk[:, None] * s_sk + rv[None, :]
    s_mask = k_ok[:, None] & v_ok[None, :]
    S = tl.load(s_ptrs, mask=s_mask, other=0.0)

    neg_a_exp = -tl.exp(tl.load(A_log_ptr + hh).to(tl.float32))
    dt_bias = tl.load(dt_bias_ptr + hh).to(tl.float32)
    bb64 = bb.to(tl.int64)
    q_ptrs = q_ptr + bb64 * q_sb + hq * q_sh + rk
    k_ptrs = k_ptr + bb64 * k_sb + hq * k_sh + rk
    v_ptrs = v_ptr + bb64 * v_sb + hh * v_sh + rv
    a_ptrs = a_ptr + bb64 * a_sb + hh * a_sh
    b_ptrs = b_ptr + bb64 * b_sb + hh * b_sh
    o_ptrs = out_ptr + bb64 * o_sb + hh * o_sh + rv

    q_raw, k_raw, v, a, b = _token_inputs(q_ptrs, k_ptrs, v_ptrs, a_ptrs, b_ptrs, 0, T, k_ok, v_ok, q_st, k_st, v_st,
                                          a_st, b_st)
    q, k, decay, beta = _token_terms(q_raw, k_raw, a, b, neg_a_exp, dt_bias, scale, sp_beta, sp_threshold, USE_L2)
    for t in range(0, T):
        q_raw, k_raw, v_next, a, b = _token_inputs(q_ptrs, k_ptrs, v_ptrs, a_ptrs, b_ptrs, t + 1, T, k_ok, v_ok, q_st,
                                                   k_st, v_st, a_st, b_st)
        S = S * decay
        kv = tl.sum(S * k[:, None], 0)
        delta = (v - kv) * beta
        S = S + k[:, None] * delta[None, :]
        o = tl.sum(S * q[:, None], 0)
        tl.store(o_ptrs, o.to(out_ptr.dtype.element_ty), mask=v_ok)
        o_ptrs += o_st
        v = v_next
        q, k, decay, beta = _token_terms(q_raw, k_raw, a, b, neg_a_exp, dt_bias, scale, sp_beta, sp_threshold, USE_L2)
    tl.store(s_ptrs, S, mask=s_mask)


def block_v_for(programs_per_slice: int, value_dim: int) -> int:
    """The widest value slice (8 to 32 columns) that still leaves about four programs per SM of an H200."""
    for bv in (32, 16):
        if programs_per_slice * triton.cdiv(value_dim, bv) >= 4 * 132:
            return min(bv, triton.next_power_of_2(value_dim))
    return min(8, triton.next_power_of_2(value_dim))


class Model(nn.Module):
    """out [B, T, Hv, V] and final_state (the pool, updated in place at initial_state_indices)."""

    def __init__(self, softplus_beta: float = 1.0, softplus_threshold: float = 20.0, scale: float | None = None,
                 use_qk_l2norm: bool = True) -> None:
        super().__init__()
        self.beta, self.threshold = float(softplus_beta), float(softplus_threshold)
        self.scale, self.l2 = scale, bool(use_qk_l2norm)

    def forward(self, A_log, a, dt_bias, q, k, v, b, initial_state, initial_state_indices) -> dict:
        bsz, t, hq, kd = q.shape
        hv, vd = v.shape[2:]
        scale = self.scale if self.scale is not None else kd ** -0.5
        out = torch.empty_like(v)
        if bsz == 0 or t == 0 or hv == 0 or vd == 0:
            return {"out": out, "final_state": initial_state}
        if q.stride(3) != 1:
            q = q.contiguous()
        if k.stride(3) != 1:
            k = k.contiguous()
        if v.stride(3) != 1:
            v = v.contiguous()
        state = initial_state
        if state.stride(3) != 1:
            raise ValueError("gated_delta_rule_update: initial_state must have unit stride along value_dim")
        bv = block_v_for(bsz * hv, vd)
        grid = (bsz * hv, triton.cdiv(vd, bv))
        gated_delta_rule_update_kernel[grid](
            A_log, a, dt_bias, q, k, v, b, state, initial_state_indices, out, t, hv, hv // hq, kd, vd, scale,
            self.beta, self.threshold, q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2),
            v.stride(0), v.stride(1), v.stride(2), a.stride(0), a.stride(1), a.stride(2), b.stride(0), b.stride(1),
            b.stride(2), state.stride(0), state.stride(1), state.stride(2), out.stride(0), out.stride(1),
            out.stride(2), USE_L2=self.l2, BLOCK_K=triton.next_power_of_2(kd), BLOCK_V=bv,
            num_warps=1 if bv <= 16 else 2)
        return {"out": out, "final_state": state}
