"""gated_delta_rule_update in Triton (Qwen3-Next fused sigmoid-gating recurrent delta rule): per sequence b, value
head h (q/k head h // (Hv/Hq)) and token t, with the state S [K, V] of pool row initial_state_indices[b]:
g = -exp(A_log) softplus(a + dt_bias), beta = sigmoid(b), q and k l2-normalised (eps 1e-6) if asked;
S = exp(g) S; S += k (beta (v - Sᵀ k))ᵀ; o_t = Sᵀ (q K^-0.5). Returns out (v's dtype) and the pool, whose rows
are updated in place (the contract allows it).

Two paths. Decode and short prompts (T < CHUNKED_FROM = 64 tokens, or non-bf16 q/k/v) take the token-serial
kernel; longer sequences take the chunked (WY / UT-transform) form of flash-linear-attention's
chunk_gated_delta_rule.

Token-serial path: one launch. A program owns a [K, BLOCK_V] column slice of one (sequence, head) state, held in
fp32 registers for the whole sequence (the value columns of the delta rule are independent: Sᵀk, the delta and
Sᵀq are all per column), and walks the tokens in order; the state is read once and written once. It runs in one
warp (two for 32-column slices), so the two reductions over K per token are warp shuffles, and it is
software-pipelined by hand: the next token's loads are issued before this token's state math, and the next
token's gate, beta and normalisation (which do not depend on the state) are computed after it. All math is fp32
in the reference's order; the normalisation divides with div_rn and sqrt_rn as torch does. BLOCK_V is the widest
slice that still gives every SM a few programs. It is latency-bound: one dependent state step per token (on an
H200 about 1.2 us a token, 9.9 ms for 8192 tokens of 32 heads, 0.05 of the roofline), hence the chunked path.

Chunked path (chunks of C = 64 tokens; gc = the in-chunk cumulative log-decay, S0 the state at the chunk's
start). Unrolling the recurrence over a chunk, the deltas d_j = beta_j (v_j - (exp(g_j) S_{j-1})ᵀ k_j) satisfy
(I + L) d = beta v - diag(beta exp(gc)) k S0 with L_ij = beta_i exp(gc_i - gc_j) k_i.k_j (i > j), so with
A = (I + L)^-1: d = u - w S0, u = A (beta v), w = A (beta exp(gc) k); then
o_i = scale (exp(gc_i) q_i S0 + sum_{j <= i} exp(gc_i - gc_j) (q_i.k_j) d_j) and
S_end = exp(gc_last) S0 + sum_j exp(gc_last - gc_j) k_j d_jᵀ (derived from the reference's recurrence and checked
against it in fp32 under the interpreter). Three launches, fp32 scratch of [B, Hv, T, .] rows:
  prepare (parallel over sequence x chunk x head): gate, beta, gc (tl.cumsum), k's 1/norm, L from one bf16 k kᵀ
    dot, A by forward substitution on the 64 x 64 tile in registers (row i of A - I from the rows above it),
    then w and u;
  state (parallel over sequence x head x value slice, serial over chunks): stores h_c = S0 (fp32), v_new = u - w S0
    (written over u), S = exp(gc_last) S0 + kᵀ (exp(gc_last - gc_j) v_new_j); the pool row is read and written once;
  output (parallel over sequence x chunk x head x value slice): the chunk's outputs from h_c and v_new.
The scratch is w, u/v_new, gc, 1/norm(k) and h: for 8192 tokens of 32 heads at K = V = 128 about 0.54 GB, written
and read once each (~0.1 ms of an H200's bandwidth).
q and k are never stored normalised: the dots take the raw bf16 q/k (exact products in the fp32 accumulator)
and the 1/norm row scales are applied to the fp32 results. Every product with an fp32 operand keeps fp32
accuracy on tensor cores by splitting that operand into bf16 hi + lo (two dots; three when both operands are
fp32, dropping lo x lo: ~2^-16 relative error, where TF32 or bf16 rounding (~2^-9) would compound over the
chunks of the state walk). The chunked path has not yet been measured on a GPU (it is checked for correctness
under the interpreter and compiled for sm_90 only); CHUNKED_FROM and the value slices are untuned guesses.
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
    g, beta = _gate(a, b, neg_a_exp, dt_bias, sp_beta, sp_threshold)
    return q * scale, k, tl.exp(g), beta


@triton.jit
def _gate(a, b, neg_a_exp, dt_bias, sp_beta, sp_threshold):
    """The log-decay g = -exp(A_log) softplus(a + dt_bias) and beta = sigmoid(b) (elementwise)."""
    x = a + dt_bias
    bx = sp_beta * x
    # log1p(e) = log(1 + e) * e / ((1 + e) - 1): exact rounding of 1 + e compensated (torch uses log1p)
    e = tl.exp(bx)
    u = 1.0 + e
    log1p = tl.where(u == 1.0, e, tl.log(u) * tl.math.div_rn(e, u - 1.0))
    softplus = tl.where(bx > sp_threshold, x, tl.math.div_rn(log1p, sp_beta))
    return neg_a_exp * softplus, tl.sigmoid(b)


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


# ---- the chunked path (T >= CHUNKED_FROM) ------------------------------------------------------------------

@triton.jit
def _dot_bx(a, x, acc):
    """acc + a @ x for bf16 a and fp32 x, as two bf16 tensor-core products (x = hi + lo)."""
    hi = x.to(tl.bfloat16)
    lo = (x - hi.to(tl.float32)).to(tl.bfloat16)
    return tl.dot(a, lo, tl.dot(a, hi, acc))


@triton.jit
def _dot_xb(x, b, acc):
    """acc + x @ b for fp32 x and bf16 b, as two bf16 tensor-core products (x = hi + lo)."""
    hi = x.to(tl.bfloat16)
    lo = (x - hi.to(tl.float32)).to(tl.bfloat16)
    return tl.dot(lo, b, tl.dot(hi, b, acc))


@triton.jit
def _dot_xx(x, y, acc):
    """acc + x @ y for fp32 x and y, as three bf16 tensor-core products (hi hi + hi lo + lo hi; lo lo dropped)."""
    x_hi = x.to(tl.bfloat16)
    x_lo = (x - x_hi.to(tl.float32)).to(tl.bfloat16)
    y_hi = y.to(tl.bfloat16)
    y_lo = (y - y_hi.to(tl.float32)).to(tl.bfloat16)
    return tl.dot(x_hi, y_hi, tl.dot(x_lo, y_hi, tl.dot(x_hi, y_lo, acc)))


@triton.jit
def gdr_chunk_prepare_kernel(A_log_ptr, a_ptr, dt_bias_ptr, k_ptr, v_ptr, b_ptr, w_ptr, u_ptr, gc_ptr, rk_ptr, T, NC,
                             HV, GROUP, K, V, sp_beta, sp_threshold, k_sb, k_st, k_sh, v_sb, v_st, v_sh, a_sb, a_st,
                             a_sh, b_sb, b_st, b_sh, USE_L2: tl.constexpr, CHUNK: tl.constexpr, BLOCK_K: tl.constexpr,
                             BLOCK_V: tl.constexpr):
    """Per (sequence, chunk, value head): gc (in-chunk cumulative log-decay), rk (k's 1/norm), beta, the unit lower
    triangular A = (I + strict_lower(beta_i exp(gc_i - gc_j) k_i.k_j))^-1, w = A (beta exp(gc) k), u = A (beta v)."""
    pid = tl.program_id(0)
    bb = (pid // NC).to(tl.int64)
    c = pid % NC
    hh = tl.program_id(1)
    hq = hh // GROUP
    rt = tl.arange(0, CHUNK)
    rk = tl.arange(0, BLOCK_K)
    tt = c * CHUNK + rt
    t_ok = tt < T
    k_ok = rk < K
    tt64 = tt.to(tl.int64)
    k_base = k_ptr + bb * k_sb + hq * k_sh
    kx = tl.load(k_base + tt64[:, None] * k_st + rk[None, :], mask=t_ok[:, None] & k_ok[None, :], other=0.0)
    kt = tl.load(k_base + tt64[None, :] * k_st + rk[:, None], mask=k_ok[:, None] & t_ok[None, :], other=0.0)
    if USE_L2:
        kf = kx.to(tl.float32)
        rkn = tl.math.div_rn(1.0, tl.maximum(tl.sqrt_rn(tl.sum(kf * kf, 1)), 1e-6))
    else:
        rkn = tl.full((CHUNK,), 1.0, tl.float32)
    neg_a_exp = -tl.exp(tl.load(A_log_ptr + hh).to(tl.float32))
    dt_bias = tl.load(dt_bias_ptr + hh).to(tl.float32)
    a = tl.load(a_ptr + bb * a_sb + hh * a_sh + tt64 * a_st, mask=t_ok, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + bb * b_sb + hh * b_sh + tt64 * b_st, mask=t_ok, other=0.0).to(tl.float32)
    g, beta = _gate(a, b, neg_a_exp, dt_bias, sp_beta, sp_threshold)
    gc = tl.cumsum(tl.where(t_ok, g, 0.0), 0)
    beta = tl.where(t_ok, beta, 0.0)

    # -L (strictly lower), then forward substitution row by row: N = A - I satisfies N_i = -L_i - sum_j L_ij N_j
    strict = rt[:, None] > rt[None, :]
    kk = tl.dot(kx, kt)  # bf16 products are exact, fp32 sums
    coef = (beta * rkn)[:, None] * rkn[None, :]
    n = tl.where(strict, -(kk * coef) * tl.exp(tl.where(strict, gc[:, None] - gc[None, :], 0.0)), 0.0)
    for i in range(1, CHUNK):
        row = tl.sum(tl.where(rt[:, None] == i, n, 0.0), 0)
        row = row + tl.sum(row[:, None] * n, 0)
        n = tl.where(rt[:, None] == i, row[None, :], n)
    a_mat = n + tl.where(rt[:, None] == rt[None, :], 1.0, 0.0)

    row_base = (bb * HV + hh) * T + tt64  # this head's rows of the [B, HV, T, ...] scratch
    tl.store(gc_ptr + row_base, gc, mask=t_ok)
    tl.store(rk_ptr + row_base, rkn, mask=t_ok)
    w = _dot_xb(a_mat * (beta * tl.exp(gc) * rkn)[None, :], kx, tl.zeros((CHUNK, BLOCK_K), dtype=tl.float32))
    tl.store(w_ptr + row_base[:, None] * K + rk[None, :], w, mask=t_ok[:, None] & k_ok[None, :])
    a_beta = a_mat * beta[None, :]
    v_base = v_ptr + bb * v_sb + hh * v_sh
    for v0 in range(0, V, BLOCK_V):
        rv = v0 + tl.arange(0, BLOCK_V)
        m = t_ok[:, None] & (rv < V)[None, :]
        vx = tl.load(v_base + tt64[:, None] * v_st + rv[None, :], mask=m, other=0.0)
        u = _dot_xb(a_beta, vx, tl.zeros((CHUNK, BLOCK_V), dtype=tl.float32))
        tl.store(u_ptr + row_base[:, None] * V + rv[None, :], u, mask=m)


@triton.jit
def gdr_chunk_state_kernel(k_ptr, w_ptr, u_ptr, gc_ptr, rk_ptr, state_ptr, idx_ptr, h_ptr, T, NC, HV, GROUP, K, V,
                           k_sb, k_st, k_sh, s_sn, s_sh, s_sk, CHUNK: tl.constexpr, BLOCK_K: tl.constexpr,
                           BLOCK_V: tl.constexpr, STAGES: tl.constexpr):
    """Per (sequence, value head, value slice), serial over chunks: h_c = S; v_new = u - w S (written over u);
    S = exp(gc_last) S + kᵀ (exp(gc_last - gc_j) v_new_j)."""
    pid = tl.program_id(0)
    bb = (pid // HV).to(tl.int64)
    hh = pid % HV
    hq = hh // GROUP
    rk = tl.arange(0, BLOCK_K)
    rv = tl.program_id(1) * BLOCK_V + tl.arange(0, BLOCK_V)
    rt = tl.arange(0, CHUNK)
    k_ok = rk < K
    v_ok = rv < V
    s_mask = k_ok[:, None] & v_ok[None, :]
    row = tl.load(idx_ptr + bb).to(tl.int64)
    s_ptrs = state_ptr + row * s_sn + hh * s_sh + rk[:, None] * s_sk + rv[None, :]
    S = tl.load(s_ptrs, mask=s_mask, other=0.0)

    bh = bb * HV + hh
    h_ptrs = h_ptr + bh * NC * K * V + rk[:, None] * V + rv[None, :]
    k_base = k_ptr + bb * k_sb + hq * k_sh
    for c in tl.range(0, NC, num_stages=STAGES):
        tt = c * CHUNK + rt
        t_ok = tt < T
        rows = bh * T + tt.to(tl.int64)
        tl.store(h_ptrs, S, mask=s_mask)
        h_ptrs += K * V
        w = tl.load(w_ptr + rows[:, None] * K + rk[None, :], mask=t_ok[:, None] & k_ok[None, :], other=0.0)
        u_ptrs = u_ptr + rows[:, None] * V + rv[None, :]
        u = tl.load(u_ptrs, mask=t_ok[:, None] & v_ok[None, :], other=0.0)
        vn = u - _dot_xx(w, S, tl.zeros((CHUNK, BLOCK_V), dtype=tl.float32))
        tl.store(u_ptrs, vn, mask=t_ok[:, None] & v_ok[None, :])
        last = bh * T + tl.minimum(c * CHUNK + CHUNK, T) - 1
        g_last = tl.load(gc_ptr + last)
        gc = tl.load(gc_ptr + rows, mask=t_ok, other=0.0)
        rkn = tl.load(rk_ptr + rows, mask=t_ok, other=0.0)
        x = tl.where(t_ok[:, None], vn * (tl.exp(g_last - gc) * rkn)[:, None], 0.0)
        kt = tl.load(k_base + tt.to(tl.int64)[None, :] * k_st + rk[:, None], mask=k_ok[:, None] & t_ok[None, :],
                     other=0.0)
        S = S * tl.exp(g_last) + _dot_bx(kt, x, tl.zeros((BLOCK_K, BLOCK_V), dtype=tl.float32))
    tl.store(s_ptrs, S, mask=s_mask)


@triton.jit
def gdr_chunk_output_kernel(q_ptr, k_ptr, vn_ptr, h_ptr, gc_ptr, rk_ptr, out_ptr, T, NC, HV, GROUP, K, V, scale, q_sb,
                            q_st, q_sh, k_sb, k_st, k_sh, o_sb, o_st, o_sh, USE_L2: tl.constexpr,
                            CHUNK: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_V: tl.constexpr, DOTS: tl.constexpr):
    """Per (sequence, chunk, value head, value slice): o = scale (exp(gc) q h_c + causal(q kᵀ exp(gc_i - gc_j)) v_new)
    with q and k normalised through their 1/norm row scales."""
    pid = tl.program_id(0)
    bb = (pid // NC).to(tl.int64)
    c = pid % NC
    hh = tl.program_id(1)
    hq = hh // GROUP
    rt = tl.arange(0, CHUNK)
    rk = tl.arange(0, BLOCK_K)
    rv = tl.program_id(2) * BLOCK_V + tl.arange(0, BLOCK_V)
    tt = c * CHUNK + rt
    t_ok = tt < T
    k_ok = rk < K
    v_ok = rv < V
    tt64 = tt.to(tl.int64)
    bh = bb * HV + hh
    rows = bh * T + tt64

    q = tl.load(q_ptr + bb * q_sb + hq * q_sh + tt64[:, None] * q_st + rk[None, :], mask=t_ok[:, None] & k_ok[None, :],
                other=0.0)
    kt = tl.load(k_ptr + bb * k_sb + hq * k_sh + tt64[None, :] * k_st + rk[:, None], mask=k_ok[:, None] & t_ok[None, :],
                 other=0.0)
    h = tl.load(h_ptr + (bh * NC + c) * K * V + rk[:, None] * V + rv[None, :], mask=k_ok[:, None] & v_ok[None, :],
                other=0.0)
    vn = tl.load(vn_ptr + rows[:, None] * V + rv[None, :], mask=t_ok[:, None] & v_ok[None, :], other=0.0)
    gc = tl.load(gc_ptr + rows, mask=t_ok, other=0.0)
    rkn = tl.load(rk_ptr + rows, mask=t_ok, other=0.0)
    if USE_L2:
        qf = q.to(tl.float32)
        rqn = tl.math.div_rn(1.0, tl.maximum(tl.sqrt_rn(tl.sum(qf * qf, 1)), 1e-6))
    else:
        rqn = tl.full((CHUNK,), 1.0, tl.float32)

    if DOTS == 2:  # fp32 FMA dots, no tensor cores
        qf = q.to(tl.float32)
        inter = tl.dot(qf, h, input_precision="ieee") * (tl.exp(gc) * rqn)[:, None]
        scores = tl.dot(qf, kt.to(tl.float32), input_precision="ieee")
    else:
        inter = _dot_bx(q, h, tl.zeros((CHUNK, BLOCK_V), dtype=tl.float32)) * (tl.exp(gc) * rqn)[:, None]
        scores = tl.dot(q, kt)  # bf16 products are exact, fp32 sums
    causal = rt[:, None] >= rt[None, :]
    decay = tl.exp(tl.where(causal, gc[:, None] - gc[None, :], 0.0))  # masked first: no inf above the diagonal
    p = tl.where(causal, scores * (rqn[:, None] * rkn[None, :]) * decay, 0.0)
    if DOTS == 0:  # tensor cores, the intra-chunk product accumulated onto the inter-chunk one
        out = scale * _dot_xx(p, vn, inter)
    elif DOTS == 1:  # tensor cores, the two parts summed after
        out = scale * (_dot_xx(p, vn, tl.zeros((CHUNK, BLOCK_V), dtype=tl.float32)) + inter)
    else:
        out = scale * tl.dot(p, vn, inter, input_precision="ieee")
    tl.store(out_ptr + bb * o_sb + hh * o_sh + tt64[:, None] * o_st + rv[None, :], out.to(out_ptr.dtype.element_ty),
             mask=t_ok[:, None] & v_ok[None, :])


CHUNK = 64  # tokens per chunk of the chunked path
CHUNKED_FROM = 64  # the chunked path from this many tokens on; decode and short prompts walk token by token
# Launch settings of the chunked path's three kernels (state_block_v None: state_block_v_for decides).
CHUNKED_LAUNCH = {'prepare_warps': 8, 'state_block_v': None, 'state_warps': 8, 'state_stages': 2, 'output_block_v': 32, 'output_warps': 8, 'output_dots': 2}


def state_block_v_for(pairs: int, value_dim: int) -> int:
    """The chunked state walk's value slice (16 to 64 columns): the widest that still gives every SM a program."""
    for bv in (64, 32):
        if pairs * triton.cdiv(value_dim, bv) >= 132:
            return min(bv, max(16, triton.next_power_of_2(value_dim)))
    return 16


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
        if t >= CHUNKED_FROM and q.dtype == k.dtype == v.dtype == torch.bfloat16:
            self._chunked(A_log, a, dt_bias, q, k, v, b, state, initial_state_indices, out, scale)
            return {"out": out, "final_state": state}
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

    def _chunked(self, A_log, a, dt_bias, q, k, v, b, state, idx, out, scale) -> None:
        """Three launches: prepare (parallel over chunks and heads), the state walk (serial over chunks), output."""
        bsz, t, hq, kd = q.shape
        hv, vd = v.shape[2:]
        nc = triton.cdiv(t, CHUNK)
        group = hv // hq
        bk = max(16, triton.next_power_of_2(kd))
        w = torch.empty((bsz, hv, t, kd), dtype=torch.float32, device=q.device)
        u = torch.empty((bsz, hv, t, vd), dtype=torch.float32, device=q.device)  # u, then v_new in place
        gc = torch.empty((bsz, hv, t), dtype=torch.float32, device=q.device)
        rk = torch.empty((bsz, hv, t), dtype=torch.float32, device=q.device)
        h = torch.empty((bsz, hv, nc, kd, vd), dtype=torch.float32, device=q.device)
        launch = CHUNKED_LAUNCH
        gdr_chunk_prepare_kernel[(bsz * nc, hv)](
            A_log, a, dt_bias, k, v, b, w, u, gc, rk, t, nc, hv, group, kd, vd, self.beta, self.threshold,
            k.stride(0), k.stride(1), k.stride(2), v.stride(0), v.stride(1), v.stride(2), a.stride(0), a.stride(1),
            a.stride(2), b.stride(0), b.stride(1), b.stride(2), USE_L2=self.l2, CHUNK=CHUNK, BLOCK_K=bk,
            BLOCK_V=min(64, max(16, triton.next_power_of_2(vd))), num_warps=launch["prepare_warps"])
        bv = launch["state_block_v"] or state_block_v_for(bsz * hv, vd)
        gdr_chunk_state_kernel[(bsz * hv, triton.cdiv(vd, bv))](
            k, w, u, gc, rk, state, idx, h, t, nc, hv, group, kd, vd, k.stride(0), k.stride(1), k.stride(2),
            state.stride(0), state.stride(1), state.stride(2), CHUNK=CHUNK, BLOCK_K=bk, BLOCK_V=bv,
            STAGES=launch["state_stages"], num_warps=launch["state_warps"])
        # wider slices than 32 spill registers on sm_90 (ptxas -v)
        bv = min(launch["output_block_v"], max(16, triton.next_power_of_2(vd)))
        gdr_chunk_output_kernel[(bsz * nc, hv, triton.cdiv(vd, bv))](
            q, k, u, h, gc, rk, out, t, nc, hv, group, kd, vd, scale, q.stride(0), q.stride(1), q.stride(2),
            k.stride(0), k.stride(1), k.stride(2), out.stride(0), out.stride(1), out.stride(2), USE_L2=self.l2,
            CHUNK=CHUNK, BLOCK_K=bk, BLOCK_V=bv, DOTS=launch["output_dots"], num_warps=launch["output_warps"])
