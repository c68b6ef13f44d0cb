"""causal_conv1d in Triton: out[c, t] = act(bias[c] + sum_j weight[c, j] * s[c, t + j]), s = [state | x] in time
(Mamba / Qwen3-Next short convolution, prefill with the previous width-1 inputs carried in).

A program owns a [BLOCK_C channels, BLOCK_T tokens] tile of the channel-major x [dim, T]: it loads the taps
and bias once and, for each of the WIDTH taps (unrolled), the tile shifted by the tap, taking the columns that
fall before t = 0 from initial_state. fp32 accumulation in the reference's order, optional SiLU, cast to x's
dtype. The shifted loads overlap, so HBM sees x about once.
"""

import torch
import triton
import triton.language as tl
from torch import nn


@triton.jit
def causal_conv1d_kernel(x_ptr, w_ptr, b_ptr, state_ptr, out_ptr, dim, tokens, x_stride, w_stride, state_stride,
                         out_stride, state_len, WIDTH: tl.constexpr, SILU: tl.constexpr, BLOCK_C: tl.constexpr,
                         BLOCK_T: tl.constexpr):
    c = tl.program_id(0) * BLOCK_C + tl.arange(0, BLOCK_C)
    t = tl.program_id(1) * BLOCK_T + tl.arange(0, BLOCK_T)
    c_ok = c < dim
    c64 = c.to(tl.int64)
    bias = tl.load(b_ptr + c, mask=c_ok, other=0.0).to(tl.float32)
    acc = tl.zeros((BLOCK_C, BLOCK_T), dtype=tl.float32) + bias[:, None]
    for j in tl.static_range(WIDTH):
        tt = t + (j - (WIDTH - 1))  # time index into x; negative -> state
        w = tl.load(w_ptr + c64 * w_stride + j, mask=c_ok, other=0.0).to(tl.float32)
        in_x = c_ok[:, None] & (tt[None, :] >= 0) & (tt[None, :] < tokens)
        in_s = c_ok[:, None] & (tt[None, :] < 0) & (t[None, :] < tokens)
        xv = tl.load(x_ptr + c64[:, None] * x_stride + tt[None, :], mask=in_x, other=0.0).to(tl.float32)
        sv = tl.load(state_ptr + c64[:, None] * state_stride + (state_len + tt)[None, :], mask=in_s,
                     other=0.0).to(tl.float32)
        acc += w[:, None] * (xv + sv)
    if SILU:
        acc = acc * (1.0 / (1.0 + tl.exp(-acc)))
    mask = c_ok[:, None] & (t[None, :] < tokens)
    tl.store(out_ptr + c64[:, None] * out_stride + t[None, :], acc.to(out_ptr.dtype.element_ty), mask=mask)


class Model(nn.Module):
    """act(bias + causal depthwise conv of [initial_state | x]) per channel; x is channel-major [dim, T]."""

    def __init__(self, activation: str | None = "silu") -> None:
        super().__init__()
        if activation not in (None, "silu", "swish"):
            raise ValueError(f"causal_conv1d: unsupported activation {activation!r}")
        self.activation = activation

    def forward(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
                initial_state: torch.Tensor) -> torch.Tensor:
        dim, tokens = x.shape
        width = weight.shape[1]
        x = x if x.stride(1) == 1 else x.contiguous()
        weight = weight if weight.stride(1) == 1 else weight.contiguous()
        bias = bias.contiguous()
        state = initial_state[0]
        state = state if state.stride(-1) == 1 else state.contiguous()
        out = torch.empty((dim, tokens), dtype=x.dtype, device=x.device)
        if dim and tokens:
            block_t = min(triton.next_power_of_2(tokens), 256)
            block_c = max(1, min(64, 4096 // block_t))
            while block_c > 1 and triton.cdiv(dim, block_c) * triton.cdiv(tokens, block_t) < 264:
                block_c //= 2
            grid = (triton.cdiv(dim, block_c), triton.cdiv(tokens, block_t))
            causal_conv1d_kernel[grid](x, weight, bias, state, out, dim, tokens, x.stride(0), weight.stride(0),
                                       state.stride(0), out.stride(0), state.shape[-1], WIDTH=width,
                                       SILU=self.activation is not None, BLOCK_C=block_c, BLOCK_T=block_t,
                                       num_warps=max(1, min(8, block_c * block_t // 512)))
        return out
