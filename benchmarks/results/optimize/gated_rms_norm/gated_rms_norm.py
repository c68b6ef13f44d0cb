"""gated_rms_norm in Triton (Qwen3-Next / FLA RMSNormGated): with norm_before_gate,
out = rms_norm(x) * weight * act(z); otherwise out = rms_norm(x * act(z)) * weight; act is silu or sigmoid.

The catalogue's rows are one head wide (128), so a program normalises BLOCK_M rows at once (about 4096
elements of x and of z per program); rows wider than 16384 take two passes.
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


@triton.jit
def _gate(z, SILU: tl.constexpr):
    if SILU:
        return z * tl.sigmoid(z)
    else:
        return tl.sigmoid(z)


@row_autotune
@triton.jit
def gated_rms_norm_kernel(x_ptr, z_ptr, w_ptr, out_ptr, n_rows, n_cols, x_stride, z_stride, out_stride, eps,
                          rows_log2, NORM_BEFORE_GATE: tl.constexpr, SILU: tl.constexpr,
                          BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, ONE_PASS: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < n_rows
    rows64 = rows.to(tl.int64)
    x_row = x_ptr + rows64[:, None] * x_stride
    z_row = z_ptr + rows64[:, None] * z_stride
    o_row = out_ptr + rows64[:, None] * out_stride
    cols = tl.arange(0, BLOCK_N)
    if ONE_PASS:
        mask = row_ok[:, None] & (cols[None, :] < n_cols)
        x = tl.load(x_row + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        g = _gate(tl.load(z_row + cols[None, :], mask=mask, other=0.0).to(tl.float32), SILU)
        if not NORM_BEFORE_GATE:
            x = x * g
        inv = tl.rsqrt(tl.sum(x * x, axis=1) / n_cols + eps)
        w = tl.load(w_ptr + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
        y = x * inv[:, None] * w[None, :]
        if NORM_BEFORE_GATE:
            y = y * g
        tl.store(o_row + cols[None, :], y.to(out_ptr.dtype.element_ty), mask=mask)
    else:
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for start in range(0, n_cols, BLOCK_N):
            c = start + cols
            mask = row_ok[:, None] & (c[None, :] < n_cols)
            x = tl.load(x_row + c[None, :], mask=mask, other=0.0).to(tl.float32)
            if not NORM_BEFORE_GATE:
                x = x * _gate(tl.load(z_row + c[None, :], mask=mask, other=0.0).to(tl.float32), SILU)
            acc += x * x
        inv = tl.rsqrt(tl.sum(acc, axis=1) / n_cols + eps)
        for start in range(0, n_cols, BLOCK_N):
            c = start + cols
            mask = row_ok[:, None] & (c[None, :] < n_cols)
            x = tl.load(x_row + c[None, :], mask=mask, other=0.0).to(tl.float32)
            g = _gate(tl.load(z_row + c[None, :], mask=mask, other=0.0).to(tl.float32), SILU)
            if not NORM_BEFORE_GATE:
                x = x * g
            w = tl.load(w_ptr + c, mask=c < n_cols, other=0.0).to(tl.float32)
            y = x * inv[:, None] * w[None, :]
            if NORM_BEFORE_GATE:
                y = y * g
            tl.store(o_row + c[None, :], y.to(out_ptr.dtype.element_ty), mask=mask)


def _rows(t: torch.Tensor, n_cols: int) -> torch.Tensor:
    t2 = t.reshape(-1, n_cols)
    return t2 if t2.stride(-1) == 1 else t2.contiguous()


class Model(nn.Module):
    """norm_before_gate: rms_norm(x) * w * act(z); otherwise rms_norm(x * act(z)) * w."""

    def __init__(self, eps: float = 1e-6, norm_before_gate: bool = True, activation: str = "silu") -> None:
        super().__init__()
        if activation not in ("silu", "swish", "sigmoid"):
            raise ValueError(f"gated_rms_norm: unsupported activation {activation!r}")
        self.eps = float(eps)
        self.norm_before_gate = bool(norm_before_gate)
        self.activation = activation

    def forward(self, x: torch.Tensor, weight: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        n_cols = x.shape[-1]
        x2, z2 = _rows(x, n_cols), _rows(z, n_cols)
        out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
        o2 = out.view(-1, n_cols)
        n_rows = x2.shape[0]
        if n_rows:
            cfg = row_config(n_rows, n_cols)
            gated_rms_norm_kernel[lambda meta: (triton.cdiv(n_rows, meta["BLOCK_M"]),)](
                x2, z2, weight.contiguous(), o2, n_rows, n_cols, x2.stride(0), z2.stride(0), o2.stride(0),
                self.eps, NORM_BEFORE_GATE=self.norm_before_gate, SILU=self.activation != "sigmoid",
                rows_log2=max(n_rows, 1).bit_length(), BLOCK_N=cfg["BLOCK_N"], ONE_PASS=cfg["ONE_PASS"])
        return out
