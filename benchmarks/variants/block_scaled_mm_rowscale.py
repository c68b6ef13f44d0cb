"""block_scaled_mm in Triton: DeepSeek-V3 style fp8 GEMM, out = Σ over K blocks kb of
(a[:, kb] @ b[:, kb]ᵀ) * a_scales[m, kb] * b_scales[n // group_n, kb], with a [M, K] and b [N, K] fp8 e4m3,
scales fp32 (1 x group_k activation blocks, group_n x group_k weight tiles), out fp32.

A tiled tl.dot kernel (fp8 wgmma on Hopper) with grouped tile ordering for L2 reuse and software pipelining;
tile shapes, warps and stages are autotuned per (M, N, K). BLOCK_K divides group_k (128 for the catalogue's
128 x 128 blocks), so every K step lies in one scale block: its fp8 product is taken with a fresh accumulator
and promoted into the fp32 sum scaled by the rows' a scales and the columns' b scales. That promotion every
≤ 128 products is also what keeps Hopper's reduced-precision fp8 accumulation (Triton's default there) from
drifting over long K. b is read K-major ([N, K] row-major is the transposed operand fp8 wgmma wants).
"""

import torch
import triton
import triton.language as tl
from torch import nn


def _configs():
    out = []
    # Every config compiles for sm_90 without register spills: the fresh per-block product beside the running
    # sum doubles the accumulator registers, so 128-row tiles take 8 warps and none is wider than 128 x 128
    # or 64 x 256.
    for bm, bn, warps, stages in ((128, 128, 8, 3), (128, 128, 8, 4), (64, 256, 8, 3), (64, 128, 4, 3),
                                  (64, 128, 4, 4), (64, 128, 8, 4), (128, 64, 4, 4), (128, 64, 8, 4), (64, 64, 4, 4),
                                  # skinny M: narrow tiles so enough programs stream the weight
                                  (32, 128, 4, 4), (32, 64, 4, 4), (16, 128, 4, 4), (16, 64, 4, 4)):
        out.append(triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "GROUP_M": 8}, num_warps=warps, num_stages=stages))
    return out


def prune_configs(configs, named_args, **kwargs):
    """Drop tiles far taller than M (they only add masked rows); the tallest remaining tiles come first."""
    cap = max(16, triton.next_power_of_2(named_args["M"]))
    kept = [c for c in configs if c.kwargs["BLOCK_M"] <= cap]
    return sorted(kept, key=lambda c: -c.kwargs["BLOCK_M"])


@triton.autotune(configs=_configs(), key=["M", "N", "K"], prune_configs_by={"early_config_prune": prune_configs})
@triton.jit
def block_scaled_mm_kernel(a_ptr, b_ptr, c_ptr, as_ptr, bs_ptr, M, N, K, stride_am, stride_ak, stride_bn, stride_bk,
                           stride_cm, stride_cn, stride_asm, stride_ask, stride_bsn, stride_bsk,
                           GROUP_N: tl.constexpr, GROUP_K: tl.constexpr, BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr,
                           BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
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
    as_ptrs = as_ptr + am * stride_asm
    bs_ptrs = bs_ptr + (bn // GROUP_N) * stride_bsn
    bs_tile = bs_ptr + (pid_n * BLOCK_N // GROUP_N) * stride_bsn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for kt in range(0, tl.cdiv(K, BLOCK_K)):
        if EVEN_K:
            a = tl.load(a_ptrs)
            b = tl.load(b_ptrs)
        else:
            k_left = K - kt * BLOCK_K
            a = tl.load(a_ptrs, mask=rk[None, :] < k_left, other=0.0)
            b = tl.load(b_ptrs, mask=rk[:, None] < k_left, other=0.0)
        kb = kt * BLOCK_K // GROUP_K
        sa = tl.load(as_ptrs + kb * stride_ask)
        if GROUP_N % BLOCK_N == 0:  # the tile's columns share one b scale: one FMA per element
            sb = tl.load(bs_tile + kb * stride_bsk)
            acc += tl.dot(a, b) * (sa * sb)[:, None]
        else:
            sb = tl.load(bs_ptrs + kb * stride_bsk)
            acc += tl.dot(a, b) * sa[:, None] * sb[None, :]
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    c_ptrs = c_ptr + rm.to(tl.int64)[:, None] * stride_cm + rn[None, :] * stride_cn
    tl.store(c_ptrs, acc, mask=(rm < M)[:, None] & (rn < N)[None, :])


def _block_k(group_k: int) -> int:
    """The K step: the largest power of two dividing group_k, at most 128 (fp8 wgmma's natural K tile)."""
    step = group_k & -group_k
    if step < 16:
        raise ValueError(f"block_scaled_mm: group_k {group_k} has no power-of-two divisor >= 16 for tl.dot")
    return min(step, 128)


class Model(nn.Module):
    """out = (a * a_scales over K blocks) @ (b * b_scales over group_n x group_k tiles)ᵀ in fp32."""

    def __init__(self, group_n: int, group_k: int) -> None:
        super().__init__()
        self.group_n, self.group_k = int(group_n), int(group_k)

    def forward(self, a: torch.Tensor, b: torch.Tensor, a_scales: torch.Tensor, b_scales: torch.Tensor) -> torch.Tensor:
        m, k = a.shape
        n = b.shape[0]
        out = torch.empty((m, n), dtype=torch.float32, device=a.device)
        if m == 0 or n == 0:
            return out
        if k == 0:
            raise ValueError("block_scaled_mm: K = 0 has no scale blocks")
        block_k = _block_k(self.group_k)
        grid = lambda meta: (triton.cdiv(m, meta["BLOCK_M"]) * triton.cdiv(n, meta["BLOCK_N"]),)  # noqa: E731
        block_scaled_mm_kernel[grid](
            a, b, out, a_scales, b_scales, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
            out.stride(0), out.stride(1), a_scales.stride(0), a_scales.stride(1), b_scales.stride(0),
            b_scales.stride(1), GROUP_N=self.group_n, GROUP_K=self.group_k, BLOCK_K=block_k, EVEN_K=k % block_k == 0)
        return out
