"""chunk_delta_rule_output in Triton (FLA chunk_fwd_o for gated delta-rule / GDN prefill): in chunk c, position i,
value head h (q/k head h // (Hv/Hq)): o_i = scale (exp(g_i) q_i h_c + sum_{j <= i in c} exp(g_i - g_j) (q_i . k_j) v_j),
scale = K^-0.5 unless given; out in v's dtype.

One launch, no recurrence: a program owns one chunk of one (sequence, value head) and a BLOCK_V slice of the
values. Three tensor-core products per program: q h_c and q kᵀ take bf16 operands, so their products are exact
and only the fp32 sums differ from the reference; the decayed causal scores P = (q kᵀ) exp(g_i - g_j) are fp32,
as in the reference, so P v runs as two bf16 dots on P's hi and lo bf16 parts (~2^-16 relative error instead of
the 2^-9 of rounding P to bf16). Everything else (the exp(g_i) row scale, the sum, the scale) is fp32 in the
reference's order, rounded once at the store. The chunk's rows are padded to a tl.dot size (16) and masked;
BLOCK_V narrows from 128 until the launch fills the SMs twice (short prompts).
"""

import torch
import triton
import triton.language as tl
from torch import nn


@triton.jit
def chunk_delta_rule_output_kernel(q_ptr, k_ptr, v_ptr, h_ptr, g_ptr, out_ptr, T, NC, GROUP, K, V, scale, q_sb, q_st,
                                   q_sh, k_sb, k_st, k_sh, v_sb, v_st, v_sh, h_sb, h_sc, h_sh, h_sk, g_sb, g_st, g_sh,
                                   o_sb, o_st, o_sh, CHUNK: tl.constexpr, BLOCK_T: tl.constexpr,
                                   BLOCK_K: tl.constexpr, BLOCK_V: tl.constexpr):
    pid = tl.program_id(0)
    bb = (pid // NC).to(tl.int64)
    c = pid % NC
    hh = tl.program_id(1)
    hq = hh // GROUP
    rt = tl.arange(0, BLOCK_T)
    rk = tl.arange(0, BLOCK_K)
    rv = tl.program_id(2) * BLOCK_V + tl.arange(0, BLOCK_V)
    tt = (c * CHUNK + rt).to(tl.int64)
    t_ok = (rt < CHUNK) & (tt < T)
    k_ok = rk < K
    v_ok = rv < V

    q = tl.load(q_ptr + bb * q_sb + hq * q_sh + tt[:, None] * q_st + rk[None, :], mask=t_ok[:, None] & k_ok[None, :],
                other=0.0)
    kt = tl.load(k_ptr + bb * k_sb + hq * k_sh + tt[None, :] * k_st + rk[:, None], mask=k_ok[:, None] & t_ok[None, :],
                 other=0.0)
    h = tl.load(h_ptr + bb * h_sb + c.to(tl.int64) * h_sc + hh * h_sh + rk[:, None] * h_sk + rv[None, :],
                mask=k_ok[:, None] & v_ok[None, :], other=0.0)
    v = tl.load(v_ptr + bb * v_sb + hh * v_sh + tt[:, None] * v_st + rv[None, :], mask=t_ok[:, None] & v_ok[None, :],
                other=0.0)
    g = tl.load(g_ptr + bb * g_sb + hh * g_sh + tt * g_st, mask=t_ok, other=0.0).to(tl.float32)

    inter = tl.dot(q, h) * tl.exp(g)[:, None]
    scores = tl.dot(q, kt)
    causal = rt[:, None] >= rt[None, :]
    p = scores * tl.where(causal, tl.exp(g[:, None] - g[None, :]), 0.0)
    p_hi = p.to(v.dtype)
    p_lo = (p - p_hi.to(tl.float32)).to(v.dtype)
    intra = tl.dot(p_lo, v, tl.dot(p_hi, v))
    out = scale * (inter + intra)
    tl.store(out_ptr + bb * o_sb + hh * o_sh + tt[:, None] * o_st + rv[None, :], out.to(out_ptr.dtype.element_ty),
             mask=t_ok[:, None] & v_ok[None, :])


class Model(nn.Module):
    """out [B, T, Hv, V] in v's dtype."""

    def __init__(self, chunk_size: int = 64, scale: float | None = None) -> None:
        super().__init__()
        self.cs, self.scale = int(chunk_size), scale

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, h: torch.Tensor,
                g: torch.Tensor) -> torch.Tensor:
        b, t, hq, kd = q.shape
        hv, vd = v.shape[2:]
        nc = h.shape[1]
        scale = self.scale if self.scale is not None else kd ** -0.5
        out = torch.empty_like(v)
        if b == 0 or t == 0 or hv == 0 or vd == 0:
            return out
        q = q if q.stride(3) == 1 else q.contiguous()
        k = k if k.stride(3) == 1 else k.contiguous()
        v = v if v.stride(3) == 1 else v.contiguous()
        h = h if h.stride(4) == 1 else h.contiguous()
        bv = min(128, max(16, triton.next_power_of_2(vd)))
        while bv > 32 and b * nc * hv * triton.cdiv(vd, bv) < 2 * 132:
            bv //= 2
        grid = (b * nc, hv, triton.cdiv(vd, bv))
        chunk_delta_rule_output_kernel[grid](
            q, k, v, h, g, out, t, nc, hv // hq, kd, vd, scale, q.stride(0), q.stride(1), q.stride(2), k.stride(0),
            k.stride(1), k.stride(2), v.stride(0), v.stride(1), v.stride(2), h.stride(0), h.stride(1), h.stride(2),
            h.stride(3), g.stride(0), g.stride(1), g.stride(2), out.stride(0), out.stride(1), out.stride(2),
            CHUNK=self.cs, BLOCK_T=max(16, triton.next_power_of_2(self.cs)),
            BLOCK_K=max(16, triton.next_power_of_2(kd)), BLOCK_V=bv, num_warps=8 if bv >= 128 else 4)
        return out
