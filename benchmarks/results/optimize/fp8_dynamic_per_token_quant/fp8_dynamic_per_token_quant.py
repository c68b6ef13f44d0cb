"""fp8_dynamic_per_token_quant in Triton: scale[t] = max(amax|x[t]|, 1e-12) / 448; q = fp8(x / scale).

Row-wise like rms_norm: BLOCK_M rows per program, the row kept in registers between the amax reduction and
the quantising store (rows wider than 16384 are read twice). fp8 is OCP e4m3 (float8_e4m3fn, max 448);
values are divided by the scale (not multiplied by its reciprocal) to round exactly as the reference.
"""

import torch
import triton
import triton.language as tl
from torch import nn

FP8 = torch.float8_e4m3fn
FP8_MAX = float(torch.finfo(FP8).max)
MAX_FUSED_COLS = 16384  # widest row kept in registers (fp32: 64 KB per program, 8 warps)
TARGET_ELEMENTS = 8192  # elements per program for narrow rows
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
def fp8_per_token_quant_kernel(x_ptr, q_ptr, scale_ptr, n_rows, n_cols, x_stride, q_stride, fp8_max,
                               rows_log2, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, ONE_PASS: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < n_rows
    rows64 = rows.to(tl.int64)
    x_row = x_ptr + rows64[:, None] * x_stride
    q_row = q_ptr + rows64[:, None] * q_stride
    cols = tl.arange(0, BLOCK_N)
    if ONE_PASS:
        mask = row_ok[:, None] & (cols[None, :] < n_cols)
        x = tl.load(x_row + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        scale = tl.math.div_rn(tl.maximum(tl.max(tl.abs(x), axis=1), 1e-12), fp8_max)
        q = tl.clamp(tl.math.div_rn(x, scale[:, None]), -fp8_max, fp8_max)
        tl.store(q_row + cols[None, :], q.to(q_ptr.dtype.element_ty), mask=mask)
    else:
        amax = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for start in range(0, n_cols, BLOCK_N):
            c = start + cols
            mask = row_ok[:, None] & (c[None, :] < n_cols)
            x = tl.load(x_row + c[None, :], mask=mask, other=0.0).to(tl.float32)
            amax = tl.maximum(amax, tl.abs(x))
        scale = tl.math.div_rn(tl.maximum(tl.max(amax, axis=1), 1e-12), fp8_max)
        for start in range(0, n_cols, BLOCK_N):
            c = start + cols
            mask = row_ok[:, None] & (c[None, :] < n_cols)
            x = tl.load(x_row + c[None, :], mask=mask, other=0.0).to(tl.float32)
            q = tl.clamp(tl.math.div_rn(x, scale[:, None]), -fp8_max, fp8_max)
            tl.store(q_row + c[None, :], q.to(q_ptr.dtype.element_ty), mask=mask)
    tl.store(scale_ptr + rows64, scale, mask=row_ok)


class Model(nn.Module):
    """scale[t] = max(amax|x[t]|, 1e-12) / fp8_max; q = fp8(x / scale). Returns (q [T, H], scale [T])."""

    def forward(self, x: torch.Tensor):
        n_cols = x.shape[-1]
        x2 = x.reshape(-1, n_cols)
        if x2.stride(-1) != 1:
            x2 = x2.contiguous()
        n_rows = x2.shape[0]
        q = torch.empty(x.shape, dtype=FP8, device=x.device)
        scale = torch.empty(x.shape[:-1], dtype=torch.float32, device=x.device)
        q2 = q.view(-1, n_cols)
        if n_rows:
            cfg = row_config(n_rows, n_cols)
            fp8_per_token_quant_kernel[lambda meta: (triton.cdiv(n_rows, meta["BLOCK_M"]),)](
                x2, q2, scale, n_rows, n_cols, x2.stride(0), q2.stride(0), FP8_MAX,
                rows_log2=max(n_rows, 1).bit_length(), BLOCK_N=cfg["BLOCK_N"], ONE_PASS=cfg["ONE_PASS"])
        return q, scale
