"""gemm reference: dense bf16/fp16 GEMM and fp8 GEMM with per-tensor or per-row (x per-channel) scales."""

import torch
from torch import nn

from kernels_eval.operators._common import dtype_of, fp8_scale, quantize_fp8, randn


class Model(nn.Module):
    """out = a @ bᵀ (fp32 accumulate); with fp8 operands out = (a @ bᵀ) * a_scale * b_scale in bf16, a_scale
    and b_scale scalars (per_tensor) or [M] and [N] (per_row)."""

    def __init__(self, scaling: str = "none") -> None:
        super().__init__()
        if scaling not in ("none", "per_tensor", "per_row"):
            raise ValueError(f"gemm: unknown scaling {scaling!r}")
        self.scaling = scaling

    def forward(self, a: torch.Tensor, b: torch.Tensor, a_scale: torch.Tensor | None = None,
                b_scale: torch.Tensor | None = None) -> torch.Tensor:
        acc = a.float() @ b.float().T
        if self.scaling == "none":
            return acc.to(a.dtype)
        if self.scaling == "per_row":
            return (acc * a_scale.float()[:, None] * b_scale.float()[None, :]).to(torch.bfloat16)
        return (acc * a_scale.float() * b_scale.float()).to(torch.bfloat16)


def make_inputs(*, m: int, n: int, k: int, dtype: str = "bf16", scaling: str = "none", device="cpu",
                generator=None) -> dict:
    """Activations and a weight scaled so outputs stay O(1); fp8 operands carry their dequant scales."""
    a = randn((m, k), dtype=torch.bfloat16, device=device, generator=generator)
    b = randn((n, k), dtype=torch.bfloat16, device=device, generator=generator, scale=k ** -0.5)
    if not dtype.startswith("fp8"):
        return {"a": a.to(dtype_of(dtype)), "b": b.to(dtype_of(dtype))}
    if scaling == "per_row":
        sa = fp8_scale(a.float().abs().amax(dim=1).clamp(min=1e-12))
        sb = fp8_scale(b.float().abs().amax(dim=1).clamp(min=1e-12))
        return {"a": quantize_fp8(a, sa[:, None]), "b": quantize_fp8(b, sb[:, None]), "a_scale": sa, "b_scale": sb}
    sa = fp8_scale(a.float().abs().amax().clamp(min=1e-12))
    sb = fp8_scale(b.float().abs().amax().clamp(min=1e-12))
    return {"a": quantize_fp8(a, sa), "b": quantize_fp8(b, sb), "a_scale": sa, "b_scale": sb}
