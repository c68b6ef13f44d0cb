"""per_token_group_quant_fp8 in Triton (DeepSeek-style 1 x group_size activation quantisation).

scales[t, g] = max(amax|x[t, gG:(g+1)G]| / 448, 1e-10); quantized = fp8(x / scale). The [T, H] input is
viewed as T * H / G contiguous groups of G; a program quantises BLOCK_M groups (about 4096 elements) and
writes their scales, which are contiguous in the [T, H / G] output. Offsets are 64-bit: the catalogue's
largest input has 2.2e10 elements.
"""

import torch
import triton
import triton.language as tl
from torch import nn

FP8 = torch.float8_e4m3fn
FP8_MAX = float(torch.finfo(FP8).max)
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
def group_quant_fp8_kernel(x_ptr, q_ptr, scale_ptr, n_rows, n_cols, fp8_max, min_scale,
                           rows_log2, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < n_rows
    rows64 = rows.to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    mask = row_ok[:, None] & (cols[None, :] < n_cols)
    offs = rows64[:, None] * n_cols + cols[None, :]
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    scale = tl.maximum(tl.math.div_rn(tl.max(tl.abs(x), axis=1), fp8_max), min_scale)
    q = tl.clamp(tl.math.div_rn(x, scale[:, None]), -fp8_max, fp8_max)
    tl.store(q_ptr + offs, q.to(q_ptr.dtype.element_ty), mask=mask)
    tl.store(scale_ptr + rows64, scale, mask=row_ok)


class Model(nn.Module):
    """scales[t, g] = max(amax|x[t, gG:(g+1)G]|, 1e-10) / fp8_max; quantized = fp8(x / scale)."""

    def __init__(self, group_size: int) -> None:
        super().__init__()
        self.group_size = int(group_size)

    def forward(self, x: torch.Tensor) -> dict:
        t, h = x.shape
        g = self.group_size
        if h % g:
            raise ValueError(f"per_token_group_quant_fp8: hidden {h} is not a multiple of group_size {g}")
        x = x.contiguous()
        q = torch.empty((t, h), dtype=FP8, device=x.device)
        scales = torch.empty((t, h // g), dtype=torch.float32, device=x.device)
        n_groups = t * (h // g)
        if n_groups:
            group_quant_fp8_kernel[lambda meta: (triton.cdiv(n_groups, meta["BLOCK_M"]),)](
                x, q, scales, n_groups, g, FP8_MAX, 1e-10, rows_log2=max(n_groups, 1).bit_length(),
                BLOCK_N=triton.next_power_of_2(g))
        return {"quantized": q, "scales": scales}
