"""linear_sigmoid_mul in Triton (Qwen2-MoE shared-expert gate): out = sigmoid(h @ Wᵀ + bias) * post_mul_mat.

The gate GEMM [T, H] x [N, H]ᵀ runs as a tiled tl.dot kernel (fp32 accumulate, grouped tile order,
autotuned tiles and stages, the same kernel shape as gemm.py); bias, sigmoid and the product with
post_mul_mat are fused into the epilogue, so the [T, N] gate never goes to memory.
"""

import torch
import triton
import triton.language as tl
from torch import nn


def _configs():
    out = []
    for bm, bn, bk, warps, stages in ((128, 256, 64, 8, 3), (128, 128, 64, 8, 4), (128, 128, 64, 4, 4),
                                      (64, 256, 64, 4, 4), (64, 128, 64, 4, 4), (128, 64, 64, 4, 4),
                                      (64, 64, 128, 4, 4), (32, 64, 128, 4, 5), (128, 256, 128, 8, 3),
                                      (64, 128, 128, 4, 4),
                                      # skinny M (decode): narrow N tiles so enough programs stream the weight
                                      (16, 128, 128, 4, 4), (16, 64, 256, 4, 3), (16, 32, 256, 4, 4),
                                      (16, 32, 512, 4, 3), (32, 32, 256, 4, 4)):
        out.append(triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8},
                                 num_warps=warps, num_stages=stages))
    return out


def prune_configs(configs, named_args, **kwargs):
    """Drop tiles far taller than M (they only add masked rows); the tallest remaining tiles come first."""
    cap = max(16, triton.next_power_of_2(named_args["M"]))
    kept = [c for c in configs if c.kwargs["BLOCK_M"] <= cap]
    return sorted(kept, key=lambda c: -c.kwargs["BLOCK_M"])


@triton.autotune(configs=_configs(), key=["M", "N", "K"], prune_configs_by={"early_config_prune": prune_configs})
@triton.jit
def linear_sigmoid_mul_kernel(a_ptr, b_ptr, c_ptr, bias_ptr, mul_ptr, M, N, K, stride_am, stride_ak, stride_bn,
                              stride_bk, stride_cm, stride_cn, stride_mm, BLOCK_M: tl.constexpr,
                              BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    pid = tl.program_id(0)
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    # Grouped order: GROUP_M row tiles sweep the column tiles together, so their b tiles stay in L2.
    per_group = GROUP_M * tiles_n
    first_m = (pid // per_group) * GROUP_M
    group_rows = tl.minimum(tiles_m - first_m, GROUP_M)
    pid_m = first_m + (pid % per_group) % group_rows
    pid_n = (pid % per_group) // group_rows

    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    # Rows/columns past the edge read a valid row (mod M/N); their results are masked at the store.
    am = (rm % M).to(tl.int64)
    bn = (rn % N).to(tl.int64)
    a_ptrs = a_ptr + am[:, None] * stride_am + rk[None, :] * stride_ak
    b_ptrs = b_ptr + bn[None, :] * stride_bn + rk[:, None] * stride_bk
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for kt in range(0, tl.cdiv(K, BLOCK_K)):
        k_left = K - kt * BLOCK_K
        a = tl.load(a_ptrs, mask=rk[None, :] < k_left, other=0.0)
        b = tl.load(b_ptrs, mask=rk[:, None] < k_left, other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    col_ok = rn < N
    mask = (rm < M)[:, None] & col_ok[None, :]
    bias = tl.load(bias_ptr + rn, mask=col_ok, other=0.0).to(tl.float32)
    post = tl.load(mul_ptr + rm.to(tl.int64)[:, None] * stride_mm + rn[None, :], mask=mask, other=0.0).to(tl.float32)
    acc = tl.sigmoid(acc + bias[None, :]) * post
    c_ptrs = c_ptr + rm.to(tl.int64)[:, None] * stride_cm + rn[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=mask)


class Model(nn.Module):
    """out = sigmoid(hidden_states @ weightᵀ + bias) * post_mul_mat, fp32 math, post_mul_mat's dtype out."""

    def forward(self, hidden_states: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
                post_mul_mat: torch.Tensor) -> torch.Tensor:
        m, k = hidden_states.shape
        n = weight.shape[0]
        post = post_mul_mat if post_mul_mat.stride(-1) == 1 else post_mul_mat.contiguous()
        out = torch.empty((m, n), dtype=post_mul_mat.dtype, device=hidden_states.device)
        if m == 0 or n == 0:
            return out
        grid = lambda meta: (triton.cdiv(m, meta["BLOCK_M"]) * triton.cdiv(n, meta["BLOCK_N"]),)  # noqa: E731
        linear_sigmoid_mul_kernel[grid](
            hidden_states, weight, out, bias.contiguous(), post, m, n, k, hidden_states.stride(0),
            hidden_states.stride(1), weight.stride(0), weight.stride(1), out.stride(0), out.stride(1), post.stride(0))
        return out
