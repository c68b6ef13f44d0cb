"""layer_norm in Triton: out = (x - mean) * rsqrt(var + eps) * weight + bias (biased variance, fp32 math).

The variance is the mean of squared deviations from the row mean (two-moment form, as the reference),
computed from registers in one pass when the row fits; wider rows take three passes over column chunks.
"""

import torch
import triton
import triton.language as tl
from torch import nn

MAX_FUSED_COLS = 16384  # widest row kept in registers (fp32: 64 KB per program, 8 warps)
TARGET_ELEMENTS = 4096  # elements per program for narrow rows
MIN_PROGRAMS = 264  # two waves of 132 SMs


def row_config(n_rows: int, n_cols: int) -> dict:
    """The heuristic BLOCK_M, BLOCK_N, ONE_PASS and num_warps of a row-wise kernel over [n_rows, n_cols]."""
    block_n = min(triton.next_power_of_2(n_cols), MAX_FUSED_COLS)
    block_m = max(1, min(64, TARGET_ELEMENTS // block_n))
    while block_m > 1 and triton.cdiv(n_rows, block_m) < MIN_PROGRAMS:
        block_m //= 2
    warps = max(1, min(8, block_m * block_n // 512))
    return {"BLOCK_M": block_m, "BLOCK_N": block_n, "ONE_PASS": block_n >= n_cols, "num_warps": warps}


ROW_CONFIGS = [triton.Config({"BLOCK_M": m}, num_warps=w)
               for m in (1, 2, 4, 8, 16, 32, 64) for w in (1, 2, 4, 8, 16)]


def prune_row_configs(configs, named_args, **kwargs):
    """The heuristic tile first (the interpreter runs only the first), then its neighbours with half or double
    the rows or warps: 1-64 rows, 1-16 warps, at most 32K elements and at least 2 per thread."""
    block_n = kwargs["BLOCK_N"]
    base = row_config(named_args["n_rows"], block_n)
    m, w = base["BLOCK_M"], base["num_warps"]
    wanted = []
    for bm, bw in ((m, w), (m, 2 * w), (m, w // 2), (2 * m, w), (2 * m, 2 * w), (m // 2, w)):
        if 1 <= bm <= 64 and 1 <= bw <= 16 and 64 * bw <= bm * block_n <= 32768 and (bm, bw) not in wanted:
            wanted.append((bm, bw))
    by_key = {(c.kwargs["BLOCK_M"], c.num_warps): c for c in configs}
    return [by_key[k] for k in wanted]


def row_autotune(fn):
    """Autotune BLOCK_M and num_warps of a row-wise kernel per (n_cols, log2 n_rows, dtypes)."""
    return triton.autotune(configs=ROW_CONFIGS, key=["n_cols", "rows_log2"],
                           prune_configs_by={"early_config_prune": prune_row_configs})(fn)


@row_autotune
@triton.jit
def layer_norm_kernel(x_ptr, w_ptr, b_ptr, out_ptr, n_rows, n_cols, x_stride, out_stride, eps,
                      rows_log2, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, ONE_PASS: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < n_rows
    rows64 = rows.to(tl.int64)
    x_row = x_ptr + rows64[:, None] * x_stride
    o_row = out_ptr + rows64[:, None] * out_stride
    cols = tl.arange(0, BLOCK_N)
    if ONE_PASS:
        col_ok = cols < n_cols
        mask = row_ok[:, None] & col_ok[None, :]
        x = tl.load(x_row + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        mean = tl.sum(x, axis=1) / n_cols
        xc = tl.where(mask, x - mean[:, None], 0.0)
        rstd = tl.rsqrt(tl.sum(xc * xc, axis=1) / n_cols + eps)
        w = tl.load(w_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)
        b = tl.load(b_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)
        y = xc * rstd[:, None] * w[None, :] + b[None, :]
        tl.store(o_row + cols[None, :], y.to(out_ptr.dtype.element_ty), mask=mask)
    else:
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for start in range(0, n_cols, BLOCK_N):
            c = start + cols
            mask = row_ok[:, None] & (c[None, :] < n_cols)
            acc += tl.load(x_row + c[None, :], mask=mask, other=0.0).to(tl.float32)
        mean = tl.sum(acc, axis=1) / n_cols
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for start in range(0, n_cols, BLOCK_N):
            c = start + cols
            mask = row_ok[:, None] & (c[None, :] < n_cols)
            x = tl.load(x_row + c[None, :], mask=mask, other=0.0).to(tl.float32)
            xc = tl.where(mask, x - mean[:, None], 0.0)
            acc += xc * xc
        rstd = tl.rsqrt(tl.sum(acc, axis=1) / n_cols + eps)
        for start in range(0, n_cols, BLOCK_N):
            c = start + cols
            col_ok = c < n_cols
            mask = row_ok[:, None] & col_ok[None, :]
            x = tl.load(x_row + c[None, :], mask=mask, other=0.0).to(tl.float32)
            w = tl.load(w_ptr + c, mask=col_ok, other=0.0).to(tl.float32)
            b = tl.load(b_ptr + c, mask=col_ok, other=0.0).to(tl.float32)
            y = (x - mean[:, None]) * rstd[:, None] * w[None, :] + b[None, :]
            tl.store(o_row + c[None, :], y.to(out_ptr.dtype.element_ty), mask=mask)


class Model(nn.Module):
    """out = (x - mean) * rsqrt(var + eps) * weight + bias over the last dim."""

    def __init__(self, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = float(eps)

    def forward(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        n_cols = x.shape[-1]
        x2 = x.reshape(-1, n_cols)
        if x2.stride(-1) != 1:
            x2 = x2.contiguous()
        out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
        o2 = out.view(-1, n_cols)
        n_rows = x2.shape[0]
        if n_rows:
            cfg = row_config(n_rows, n_cols)
            layer_norm_kernel[lambda meta: (triton.cdiv(n_rows, meta["BLOCK_M"]),)](
                x2, weight.contiguous(), bias.contiguous(), o2, n_rows, n_cols, x2.stride(0), o2.stride(0),
                self.eps, rows_log2=max(n_rows, 1).bit_length(), BLOCK_N=cfg["BLOCK_N"], ONE_PASS=cfg["ONE_PASS"])
        return out
