"""causal_conv1d in Triton: out[c, t] = act(bias[c] + sum_j weight[c, j] * s[c, t + j]), s = [state | x] in time
(Mamba / Qwen3-Next short convolution, prefill with the previous width-1 inputs carried in).

x [dim, T] is channel-major with T contiguous, and T is often odd (a row then starts at any 2-byte offset), so
the long kernel (T >= 8, width <= 9) tiles the FLAT array x.view(-1) rather than the rows: program p owns the
BLOCK outputs [p * BLOCK, (p + 1) * BLOCK) (BLOCK a power of two <= T, at most 1024: one 16-byte vector a
thread at 4 warps), an aligned chunk that it loads and stores as [BLOCK // 8, 8] tiles of 16-byte vectors,
unmasked except in the array's first and last chunks. The taps' shifted inputs x[f - 1 .. f - (width - 1)]
are not loaded again (an unaligned load costs a scalar load an element): each thread also loads the aligned
vector before its own (an L1/L2 hit: it is the neighbouring thread's), splits both into their 16 elements in
registers (reshape + split, no data movement) and re-joins the ones each tap needs. The loads go out before
the chunk's channel (f0 // T) is known.

- Fast chunk (almost all at long T): inside one row c, past its first width-1 tokens. One channel: weight
  and bias are scalars, every shifted input is the flat neighbour.
- Boundary chunk (holds a row start or a row's first width-1 tokens; BLOCK <= T: at most rows c0, c0 + 1):
  each element takes its own channel's taps by a select. T % 8 == 0: rows start on a vector, so channel and
  token are per vector and only the (static) columns of a row's first vector that reach back past it select
  a state value. Odd T: the flat-neighbour sums are computed for the whole chunk, then the <= 2 * (width - 1)
  outputs at a row's first tokens (whose inputs reach into the state) are recomputed as scalars and selected in.
- T < 8 (decode, T = 1) or width > 9: the tile kernel, [channels, tokens] tiles with gathered (masked)
  shifted inputs and state; launch-bound.

fp32 accumulation in the reference's tap order (the GPU fuses each multiply-add), optional SiLU (approximate
division), cast to x's dtype. HBM sees x and out once; one launch per call, nothing else on the device.
"""

import torch
import triton
import triton.language as tl
from torch import nn

VEC = 8  # elements per thread-vector in the long kernel (16 bytes of bf16)
MAX_BLOCK = 1024  # outputs per program of the long kernel (4 warps: one 16-byte vector a thread)


@triton.jit
def _split8(v, R: tl.constexpr):
    """[R, 8] -> its 8 columns as [R] tensors (in-thread: the 8 columns of a row live in one thread)."""
    a, b = tl.split(tl.reshape(v, (R, 4, 2)))  # a: columns 0 2 4 6, b: 1 3 5 7
    a0, a1 = tl.split(tl.reshape(a, (R, 2, 2)))  # a0: 0 4, a1: 2 6
    b0, b1 = tl.split(tl.reshape(b, (R, 2, 2)))  # b0: 1 5, b1: 3 7
    e0, e4 = tl.split(a0)
    e2, e6 = tl.split(a1)
    e1, e5 = tl.split(b0)
    e3, e7 = tl.split(b1)
    return e0, e1, e2, e3, e4, e5, e6, e7


@triton.jit
def _join8(e0, e1, e2, e3, e4, e5, e6, e7, R: tl.constexpr):
    """The inverse of _split8: 8 [R] columns -> [R, 8]."""
    a = tl.reshape(tl.join(tl.join(e0, e4), tl.join(e2, e6)), (R, 4))
    b = tl.reshape(tl.join(tl.join(e1, e5), tl.join(e3, e7)), (R, 4))
    return tl.reshape(tl.join(a, b), (R, 8))


@triton.jit
def _shifted(s, k: tl.constexpr, R: tl.constexpr):
    """[R, 8] tile of x[f - 8 + k] for the chunk's flat indices f, from the 16 split elements s = prev | cur."""
    return _join8(s[k], s[k + 1], s[k + 2], s[k + 3], s[k + 4], s[k + 5], s[k + 6], s[k + 7], R)


@triton.jit
def _window(s, k: tl.constexpr):
    """s[k], ..., s[k + 7] (k a compile-time index into the 16 split elements)."""
    return s[k], s[k + 1], s[k + 2], s[k + 3], s[k + 4], s[k + 5], s[k + 6], s[k + 7]


@triton.jit
def _gathered_input(x_ptrs, state_ptrs, t, ok, SH: tl.constexpr):
    """The tap input for outputs at x_ptrs: x[f - SH] when t >= SH, else the state column (state_ptrs)."""
    xv = tl.load(x_ptrs - SH, mask=ok & (t >= SH), other=0.0).to(tl.float32)
    if SH > 0:
        xv += tl.load(state_ptrs, mask=ok & (t < SH), other=0.0).to(tl.float32)
    return xv


@triton.jit
def _silu(a, SILU: tl.constexpr):
    if SILU:
        a = a * tl.fdiv(1.0, 1.0 + tl.exp(-a))  # approximate division (div.full): ~2 ulp
    return a


@triton.jit
def _tap_inputs(cur, prev, WIDTH: tl.constexpr, R: tl.constexpr):
    """The 16 tap inputs around a thread's vector: the vector before it (elements 0-7; unused at width 1) and
    its own (8-15), each split into its 8 columns ([R] each)."""
    e = _split8(cur, R)
    if WIDTH > 1:
        p = _split8(prev.to(tl.float32), R)
    else:
        p = e
    return (p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], e[0], e[1], e[2], e[3], e[4], e[5], e[6], e[7])


@triton.jit
def _fast_acc(cur, prev, w_ptr, bias, WIDTH: tl.constexpr, R: tl.constexpr):
    """Pre-activation outputs of a chunk inside one row past its first WIDTH - 1 tokens: scalar weights
    (w_ptr: the row's taps), every tap input the flat neighbour from the split registers."""
    s = _tap_inputs(cur, prev, WIDTH, R)
    a0 = tl.zeros((R,), tl.float32) + bias
    a1 = a0
    a2 = a0
    a3 = a0
    a4 = a0
    a5 = a0
    a6 = a0
    a7 = a0
    for j in tl.static_range(WIDTH):
        w = tl.load(w_ptr + j).to(tl.float32)
        # tap j reads x[f - (WIDTH - 1 - j)]: s index 8 - (WIDTH - 1 - j) for output column 0
        x0, x1, x2, x3, x4, x5, x6, x7 = _window(s, 8 - (WIDTH - 1) + j)
        a0 += w * x0
        a1 += w * x1
        a2 += w * x2
        a3 += w * x3
        a4 += w * x4
        a5 += w * x5
        a6 += w * x6
        a7 += w * x7
    return _join8(a0, a1, a2, a3, a4, a5, a6, a7, R)


@triton.jit
def _aligned_in(s, K: tl.constexpr, start, second, sp0, sp1, WIDTH: tl.constexpr):
    """Tap input s[K] (the element K - 8 places after the vector's first). K < 8 lies in the vector before: if
    this vector starts a row (start), the input is that row's state column K - 8 + WIDTH - 1 instead (sp0 /
    sp1: the state rows of c0 / c0 + 1, picked by second)."""
    if K >= 8:
        return s[K]
    else:
        st = tl.where(second, tl.load(sp1 + (K - 8 + WIDTH - 1)).to(tl.float32),
                      tl.load(sp0 + (K - 8 + WIDTH - 1)).to(tl.float32))
        return tl.where(start, st, s[K])


@triton.jit
def _aligned_acc(cur, prev, w_ptr, b_ptr, s_ptr, c0, t0, dim, T, w_stride, s_stride, s_off,
                 WIDTH: tl.constexpr, R: tl.constexpr):
    """Pre-activation outputs of a boundary chunk when T % 8 == 0: every row starts at a vector, so channel
    and token are per vector ([R]: one thread's), and only the columns of a row's first vector that reach back
    past it (statically known) select a state value. Costs about what the fast path does."""
    s = _tap_inputs(cur, prev, WIDTH, R)
    te = t0 + 8 * tl.arange(0, R)
    second = te >= T  # the vector belongs to channel c0 + 1
    start = tl.where(second, te - T, te) == 0  # the vector starts its row
    c1 = tl.minimum(c0 + 1, dim - 1)  # clamped: past the last channel every output is masked
    sp0 = s_ptr + c0 * s_stride + s_off
    sp1 = s_ptr + c1 * s_stride + s_off
    a0 = tl.where(second, tl.load(b_ptr + c1).to(tl.float32), tl.load(b_ptr + c0).to(tl.float32))
    a1 = a0
    a2 = a0
    a3 = a0
    a4 = a0
    a5 = a0
    a6 = a0
    a7 = a0
    for j in tl.static_range(WIDTH):
        w = tl.where(second, tl.load(w_ptr + c1 * w_stride + j).to(tl.float32),
                     tl.load(w_ptr + c0 * w_stride + j).to(tl.float32))
        a0 += w * _aligned_in(s, 8 - (WIDTH - 1) + j, start, second, sp0, sp1, WIDTH)
        a1 += w * _aligned_in(s, 9 - (WIDTH - 1) + j, start, second, sp0, sp1, WIDTH)
        a2 += w * _aligned_in(s, 10 - (WIDTH - 1) + j, start, second, sp0, sp1, WIDTH)
        a3 += w * _aligned_in(s, 11 - (WIDTH - 1) + j, start, second, sp0, sp1, WIDTH)
        a4 += w * _aligned_in(s, 12 - (WIDTH - 1) + j, start, second, sp0, sp1, WIDTH)
        a5 += w * _aligned_in(s, 13 - (WIDTH - 1) + j, start, second, sp0, sp1, WIDTH)
        a6 += w * _aligned_in(s, 14 - (WIDTH - 1) + j, start, second, sp0, sp1, WIDTH)
        a7 += w * _aligned_in(s, 15 - (WIDTH - 1) + j, start, second, sp0, sp1, WIDTH)
    return _join8(a0, a1, a2, a3, a4, a5, a6, a7, R)


@triton.jit
def _row_head(row_x, row_s, w_ptr, bias, k: tl.constexpr, N_LEFT, WIDTH: tl.constexpr):
    """Pre-activation output at token k < WIDTH - 1 of a row (scalar): row_x / row_s point at the row's x and
    its state columns; N_LEFT = elements of x from row_x on (loads past the array are masked)."""
    acc = bias
    for j in tl.static_range(WIDTH):
        if k + j >= WIDTH - 1:  # input token k + j - (WIDTH - 1) >= 0: x
            v = tl.load(row_x + (k + j - (WIDTH - 1)), mask=k + j - (WIDTH - 1) < N_LEFT, other=0.0)
        else:  # before the row: state column k + j
            v = tl.load(row_s + (k + j))
        acc += tl.load(w_ptr + j).to(tl.float32) * v.to(tl.float32)
    return acc


@triton.jit
def _boundary_acc(cur, prev, xb, w_ptr, b_ptr, s_ptr, f0, c0, t0, idx, dim, T, N, w_stride, s_stride, s_off,
                  WIDTH: tl.constexpr, R: tl.constexpr):
    """Pre-activation outputs of a boundary chunk at any T (BLOCK <= T: at most channels c0 and c0 + 1): the
    fast path's flat-neighbour sums with each element's own channel's taps (second: c0 + 1), then the first
    WIDTH - 1 tokens of row c0 (if in the chunk) and of row c0 + 1 (if it starts in it), whose inputs reach
    before the row start into the state, replaced by values computed as scalars."""
    s = _tap_inputs(cur, prev, WIDTH, R)
    second = t0 + idx >= T  # the output belongs to channel c0 + 1
    c1 = tl.minimum(c0 + 1, dim - 1)  # clamped: past the last channel every output is masked
    wp0 = w_ptr + c0 * w_stride
    wp1 = w_ptr + c1 * w_stride
    b0 = tl.load(b_ptr + c0).to(tl.float32)
    b1 = tl.load(b_ptr + c1).to(tl.float32)
    acc = tl.where(second, b1, b0)
    for j in tl.static_range(WIDTH):
        w = tl.where(second, tl.load(wp1 + j).to(tl.float32), tl.load(wp0 + j).to(tl.float32))
        if j == WIDTH - 1:
            acc += w * cur
        else:
            acc += w * _shifted(s, 8 - (WIDTH - 1) + j, R)
    q1 = T - t0  # chunk index of row c0 + 1's first token (>= BLOCK: not in the chunk)
    for k in tl.static_range(WIDTH - 1):
        v0 = _row_head(xb - t0, s_ptr + c0 * s_stride + s_off, wp0, b0, k, N - (f0 - t0), WIDTH)
        v1 = _row_head(xb + q1, s_ptr + c1 * s_stride + s_off, wp1, b1, k, N - (f0 + q1), WIDTH)
        acc = tl.where(idx == k - t0, v0, acc)
        acc = tl.where(idx == q1 + k, v1, acc)
    return acc


@triton.jit
def causal_conv1d_long_kernel(x_ptr, w_ptr, b_ptr, s_ptr, out_ptr, dim, T, N, w_stride, s_stride, s_off,
                              WIDTH: tl.constexpr, SILU: tl.constexpr, BLOCK: tl.constexpr,
                              ALIGNED: tl.constexpr):
    """BLOCK (a power of two, 8 <= BLOCK <= T) flat outputs of x [dim, T] (contiguous) per program;
    ALIGNED: T % 8 == 0 (rows start on 16-byte vectors)."""
    R: tl.constexpr = BLOCK // 8
    f0 = tl.program_id(0).to(tl.int64) * BLOCK
    idx = tl.arange(0, R)[:, None] * 8 + tl.arange(0, 8)[None, :]  # [R, 8]: one aligned 16-byte vector a row
    xb = x_ptr + f0
    ob = out_ptr + f0
    if (f0 > 0) & (f0 + BLOCK <= N):
        # the loads go out first: they need no channel (its division waits on them, not they on it)
        cur = tl.load(xb + idx).to(tl.float32)
        prev = tl.load(xb - 8 + idx)
        c0 = f0 // T
        t0 = (f0 - c0 * T).to(tl.int32)  # token of the chunk's first output
        if (t0 >= WIDTH - 1) & (t0 + BLOCK <= T):  # inside one row: one channel, no state
            acc = _fast_acc(cur, prev, w_ptr + c0 * w_stride, tl.load(b_ptr + c0).to(tl.float32), WIDTH, R)
        elif ALIGNED:
            acc = _aligned_acc(cur, prev, w_ptr, b_ptr, s_ptr, c0, t0, dim, T, w_stride, s_stride, s_off, WIDTH, R)
        else:
            acc = _boundary_acc(cur, prev, xb, w_ptr, b_ptr, s_ptr, f0, c0, t0, idx, dim, T, N, w_stride, s_stride,
                                s_off, WIDTH, R)
        tl.store(ob + idx, _silu(acc, SILU).to(out_ptr.dtype.element_ty))
    else:
        # the array's first chunk (no vector before f = 0) or its tail (nothing at or past N)
        f = f0 + idx
        ok = f < N
        cur = tl.load(xb + idx, mask=ok, other=0.0).to(tl.float32)
        prev = tl.load(xb - 8 + idx, mask=(f >= 8) & (f - 8 < N), other=0.0)
        c0 = f0 // T
        t0 = (f0 - c0 * T).to(tl.int32)
        if ALIGNED:
            acc = _aligned_acc(cur, prev, w_ptr, b_ptr, s_ptr, c0, t0, dim, T, w_stride, s_stride, s_off, WIDTH, R)
        else:
            acc = _boundary_acc(cur, prev, xb, w_ptr, b_ptr, s_ptr, f0, c0, t0, idx, dim, T, N, w_stride, s_stride,
                                s_off, WIDTH, R)
        tl.store(ob + idx, _silu(acc, SILU).to(out_ptr.dtype.element_ty), mask=ok)


@triton.jit
def causal_conv1d_tile_kernel(x_ptr, w_ptr, b_ptr, s_ptr, out_ptr, dim, T, w_stride, s_stride, s_off,
                              WIDTH: tl.constexpr, SILU: tl.constexpr, BLOCK_C: tl.constexpr,
                              BLOCK_T: tl.constexpr):
    """Any T and width, a [BLOCK_C channels, BLOCK_T tokens] tile a program: per-channel taps, gathered
    (masked) shifted inputs and state. For decode (T < 8: T = 1) and widths over 9."""
    c = tl.program_id(0) * BLOCK_C + tl.arange(0, BLOCK_C)
    t = (tl.program_id(1) * BLOCK_T + tl.arange(0, BLOCK_T))[None, :]
    c_ok = c < dim
    ok = c_ok[:, None] & (t < T)
    c64 = c.to(tl.int64)[:, None]
    acc = tl.zeros((BLOCK_C, BLOCK_T), tl.float32) + tl.load(b_ptr + c, mask=c_ok, other=0.0).to(tl.float32)[:, None]
    for j in tl.static_range(WIDTH):
        w = tl.load(w_ptr + c64 * w_stride + j, mask=c_ok[:, None], other=0.0).to(tl.float32)
        acc += w * _gathered_input(x_ptr + c64 * T + t, s_ptr + c64 * s_stride + s_off + j + t, t, ok,
                                   WIDTH - 1 - j)
    tl.store(out_ptr + c64 * T + t, _silu(acc, SILU).to(out_ptr.dtype.element_ty), mask=ok)


def _long_block(tokens: int) -> int:
    """Outputs per program of the long kernel: a power of two <= T (so a chunk spans at most two rows)."""
    return min(MAX_BLOCK, 1 << (tokens.bit_length() - 1))


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
        # flat indexing needs x [dim, T] contiguous; the catalogue's always is (no copy launched then)
        x = x if x.is_contiguous() else x.contiguous()
        weight = weight if weight.stride(1) == 1 else weight.contiguous()
        bias = bias if bias.stride(0) == 1 else bias.contiguous()
        state = initial_state[0]
        state = state if state.stride(-1) == 1 else state.contiguous()
        out = torch.empty((dim, tokens), dtype=x.dtype, device=x.device)
        n = dim * tokens
        if n == 0:
            return out
        # the reference takes the last width-1 state columns
        args = (weight.stride(0), state.stride(0), state.shape[-1] - (width - 1))
        silu = self.activation is not None
        if tokens >= VEC and width - 1 <= VEC:
            block = _long_block(tokens)
            causal_conv1d_long_kernel[(triton.cdiv(n, block),)](
                x, weight, bias, state, out, dim, tokens, n, *args, WIDTH=width, SILU=silu, BLOCK=block,
                ALIGNED=tokens % VEC == 0, num_warps=max(1, min(4, block // 256)))
        else:
            block_t = min(triton.next_power_of_2(tokens), 64)
            block_c = max(1, 128 // block_t)  # decode (T = 1): 128 channels a program, 4 a thread
            causal_conv1d_tile_kernel[(triton.cdiv(dim, block_c), triton.cdiv(tokens, block_t))](
                x, weight, bias, state, out, dim, tokens, *args, WIDTH=width, SILU=silu, BLOCK_C=block_c,
                BLOCK_T=block_t, num_warps=1)
        return out
