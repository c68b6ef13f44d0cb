"""Helpers shared by the torch references: dtypes, seeded random tensors, fp8 quantisation, routing ids."""

from __future__ import annotations

import torch

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32,
          "fp8": torch.float8_e4m3fn, "fp8_e4m3": torch.float8_e4m3fn}
# NVIDIA's OCP e4m3 (max 448). ROCm gfx942 uses e4m3fnuz (max 240); a port switches both constants.
FP8 = torch.float8_e4m3fn
FP8_MAX = float(torch.finfo(FP8).max)


def dtype_of(name: str) -> torch.dtype:
    """torch dtype of a catalogue dtype name."""
    try:
        return DTYPES[name]
    except KeyError:
        raise ValueError(f"unknown dtype {name!r}; known: {sorted(DTYPES)}") from None


def gen(device, generator: torch.Generator | None) -> torch.Generator:
    """The generator to draw from: the caller's, or a fresh one seeded 0 on `device`."""
    if generator is not None:
        return generator
    g = torch.Generator(device=torch.device(device))
    g.manual_seed(0)
    return g


def randn(shape, *, dtype, device, generator, scale: float = 1.0, shift: float = 0.0) -> torch.Tensor:
    """Normal(shift, scale) samples drawn on the generator's device, then moved to `device`."""
    g = gen(device, generator)
    draw_dtype = dtype if dtype in (torch.float32, torch.bfloat16, torch.float16) else torch.float32
    x = torch.randn(tuple(shape), generator=g, device=g.device, dtype=draw_dtype)
    if scale != 1.0:
        x.mul_(scale)
    if shift != 0.0:
        x.add_(shift)
    return x.to(device=device, dtype=dtype)


def rand(shape, *, device, generator, dtype=torch.float32) -> torch.Tensor:
    """Uniform [0, 1) samples."""
    g = gen(device, generator)
    return torch.rand(tuple(shape), generator=g, device=g.device, dtype=dtype).to(device)


def randperm(n: int, *, device, generator) -> torch.Tensor:
    """A random permutation of range(n) (int64)."""
    g = gen(device, generator)
    return torch.randperm(n, generator=g, device=g.device).to(device)


def topk_routing(tokens: int, experts: int, top_k: int, *, device, generator):
    """Router outputs: `top_k` distinct expert ids per token (int32) and softmax weights (fp32), as a real
    top-k router produces (never the same expert twice for one token)."""
    logits = randn((tokens, experts), dtype=torch.float32, device=device, generator=generator)
    weights, ids = torch.softmax(logits, dim=-1).topk(top_k, dim=-1)
    weights = weights / weights.sum(dim=-1, keepdim=True)
    return weights.contiguous(), ids.to(torch.int32).contiguous()


def fp8_scale(amax: torch.Tensor) -> torch.Tensor:
    """amax / fp8_max, divided with IEEE rounding on every device. PyTorch's CUDA division by a Python scalar
    multiplies by its reciprocal instead (one ulp off for about half the values, where the CPU divides
    exactly), which moves the quantised values that sit at a rounding tie: the same reference would give
    different answers on CPU and GPU. A 0-d divisor on amax's own device keeps it a true division."""
    return amax / amax.new_tensor(FP8_MAX)


def quantize_fp8(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """fp8(x / scale), saturated to the fp8 range; `scale` broadcasts against x."""
    return (x.float() / scale).clamp(-FP8_MAX, FP8_MAX).to(FP8)


# Elements handled per slice when quantising large tensors, so fp32 temporaries stay near 1 GiB.
CHUNK_ELEMENTS = 1 << 28


def group_quantize_rows(x: torch.Tensor, group: int, *, min_scale: float = 1e-10):
    """Quantize x [T, H] to fp8 with one fp32 scale per (row, group of `group` columns), in row slices;
    returns (x_fp8 [T, H], scales [T, H/group])."""
    t, h = x.shape
    q = torch.empty(t, h, dtype=FP8, device=x.device)
    scales = torch.empty(t, h // group, dtype=torch.float32, device=x.device)
    step = max(1, CHUNK_ELEMENTS // max(h, 1))
    for lo in range(0, t, step):
        g = x[lo:lo + step].float().reshape(-1, h // group, group)
        s = fp8_scale(g.abs().amax(dim=-1)).clamp(min=min_scale)
        q[lo:lo + step] = quantize_fp8(g, s.unsqueeze(-1)).reshape(-1, h)
        scales[lo:lo + step] = s
    return q, scales


def block_quantize(w: torch.Tensor, block_n: int, block_k: int):
    """Quantize the last two dims of w [..., N, K] to fp8 with one fp32 scale per (block_n x block_k) tile;
    returns (w_fp8, scales [..., N/bn, K/bk]). A 3-d w (experts) is done one expert at a time."""
    if w.dim() == 3:
        parts = [block_quantize(w[e], block_n, block_k) for e in range(w.shape[0])]
        return torch.stack([p[0] for p in parts]), torch.stack([p[1] for p in parts])
    *lead, n, k = w.shape
    tiles = w.float().reshape(*lead, n // block_n, block_n, k // block_k, block_k)
    scale = fp8_scale(tiles.abs().amax(dim=(-3, -1), keepdim=True).clamp(min=1e-12))
    q = (tiles / scale).clamp(-FP8_MAX, FP8_MAX).to(FP8).reshape(*lead, n, k)
    return q, scale.squeeze(-1).squeeze(-2).contiguous()


def expand_blocks(scales: torch.Tensor, block_n: int, block_k: int, n: int, k: int) -> torch.Tensor:
    """Tile scales [..., N/bn, K/bk] back to [..., N, K]."""
    full = scales.repeat_interleave(block_n, dim=-2).repeat_interleave(block_k, dim=-1)
    return full[..., :n, :k]
