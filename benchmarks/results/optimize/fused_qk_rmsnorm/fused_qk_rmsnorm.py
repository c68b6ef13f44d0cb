"""fused_qk_rmsnorm in Triton (Qwen3 per-head q/k RMSNorm on the packed qkv projection).

The packed rows [T, (Hq + 2 Hkv) * D] are viewed as T * (Hq + 2 Hkv) head rows of D. Each program takes
BLOCK_M head rows: q heads are normalised with q_weight, k heads with k_weight (the normalised value is
rounded to the input dtype before the weight multiply, HF Qwen3 order) and v heads are copied exactly.
"""

import torch
import triton
import triton.language as tl
from torch import nn

MAX_FUSED_COLS = 4096  # widest row kept in registers (fp32: 64 KB per program, 8 warps)
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
def fused_qk_rmsnorm_kernel(x_ptr, qw_ptr, kw_ptr, out_ptr, n_rows, heads_per_token, q_heads, qk_heads, n_cols, eps,
                            rows_log2, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    col_ok = cols < n_cols
    mask = (rows < n_rows)[:, None] & col_ok[None, :]
    offs = rows.to(tl.int64)[:, None] * n_cols + cols[None, :]
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    head = rows % heads_per_token
    is_q = head < q_heads
    is_v = head >= qk_heads
    inv = tl.rsqrt(tl.sum(x * x, axis=1) / n_cols + eps)
    normed = (x * inv[:, None]).to(out_ptr.dtype.element_ty).to(tl.float32)
    qw = tl.load(qw_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)
    kw = tl.load(kw_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)
    w = tl.where(is_q[:, None], qw[None, :], kw[None, :])
    y = tl.where(is_v[:, None], x, normed * w)
    tl.store(out_ptr + offs, y.to(out_ptr.dtype.element_ty), mask=mask)


class Model(nn.Module):
    """Normalise each q head with q_weight and each k head with k_weight; v unchanged; same packed layout."""

    def __init__(self, head_num: int, kv_head_num: int, size_per_head: int = 128, eps: float = 1e-6) -> None:
        super().__init__()
        self.head_num, self.kv_head_num = int(head_num), int(kv_head_num)
        self.d = int(size_per_head)
        self.eps = float(eps)

    def forward(self, hidden_states: torch.Tensor, q_weight: torch.Tensor, k_weight: torch.Tensor) -> torch.Tensor:
        x = hidden_states.contiguous()
        heads = self.head_num + 2 * self.kv_head_num
        n_rows = x.shape[0] * heads
        out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
        if n_rows:
            fused_qk_rmsnorm_kernel[lambda meta: (triton.cdiv(n_rows, meta["BLOCK_M"]),)](
                x, q_weight.contiguous(), k_weight.contiguous(), out, n_rows, heads, self.head_num,
                self.head_num + self.kv_head_num, self.d, self.eps, rows_log2=max(n_rows, 1).bit_length(),
                BLOCK_N=triton.next_power_of_2(self.d))
        return out
