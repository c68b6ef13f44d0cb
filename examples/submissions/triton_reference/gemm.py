"""gemm in Triton: out = a @ bᵀ with a [M, K], b [N, K] (fp32 accumulate); bf16/fp16 operands return their
dtype; fp8 e4m3 operands return bf16 scaled by a_scale * b_scale (scalars, or [M] and [N] per row).

A tiled tl.dot kernel (wgmma on Hopper) with grouped tile ordering for L2 reuse and software pipelining
(num_stages); tile shapes, warps and stages are autotuned per (M, N, K). b is read K-major ([N, K] row-major
is the transposed operand wgmma wants for fp8). The scales are applied once in the epilogue.
"""

import torch
import triton
import triton.language as tl
from torch import nn

SCALING_CODES = {"none": 0, "per_tensor": 1, "per_row": 2}


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
def gemm_kernel(a_ptr, b_ptr, c_ptr, a_scale_ptr, b_scale_ptr, M, N, K, stride_am, stride_ak, stride_bn, stride_bk,
                stride_cm, stride_cn, SCALING: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
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
    if SCALING == 1:
        acc = acc * (tl.load(a_scale_ptr).to(tl.float32) * tl.load(b_scale_ptr).to(tl.float32))
    elif SCALING == 2:
        sa = tl.load(a_scale_ptr + rm, mask=rm < M, other=0.0).to(tl.float32)
        sb = tl.load(b_scale_ptr + rn, mask=rn < N, other=0.0).to(tl.float32)
        acc = acc * sa[:, None] * sb[None, :]
    c_ptrs = c_ptr + rm.to(tl.int64)[:, None] * stride_cm + rn[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(rm < M)[:, None] & (rn < N)[None, :])


class Model(nn.Module):
    """out = a @ bᵀ; with fp8 operands out = (a @ bᵀ) * a_scale * b_scale in bf16."""

    def __init__(self, scaling: str = "none") -> None:
        super().__init__()
        if scaling not in SCALING_CODES:
            raise ValueError(f"gemm: unknown scaling {scaling!r}")
        self.scaling = scaling

    def forward(self, a: torch.Tensor, b: torch.Tensor, a_scale: torch.Tensor | None = None,
                b_scale: torch.Tensor | None = None) -> torch.Tensor:
        m, k = a.shape
        n = b.shape[0]
        code = SCALING_CODES[self.scaling]
        out = torch.empty((m, n), dtype=a.dtype if code == 0 else torch.bfloat16, device=a.device)
        if m == 0 or n == 0:
            return out
        if code == 0:
            a_scale = b_scale = a  # unused by the kernel
        else:
            a_scale, b_scale = a_scale.contiguous(), b_scale.contiguous()
        grid = lambda meta: (triton.cdiv(m, meta["BLOCK_M"]) * triton.cdiv(n, meta["BLOCK_N"]),)  # noqa: E731
        gemm_kernel[grid](a, b, out, a_scale, b_scale, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                          out.stride(0), out.stride(1), SCALING=code)
        return out
