"""fp8_blockscale_fused_moe in Triton (DeepSeek-V3 / Qwen3 fp8 checkpoints): fused_moe on fp8 e4m3 operands with
fp32 scales, hidden_states per (token, scale_block_k columns) (a_scale), w1/w2 per (scale_block_n x scale_block_k)
tile (fc1_scale [E, 2I/bn, H/bk], fc2_scale [E, H/bn, I/bk]); bf16 out.

The launches of fused_moe.py (routing histogram and scatter, gate/up, down, top-k sum; no host sync), with the
block scales applied where the reference's dequantisation puts them, exactly: every BLOCK_K step lies inside
one scale block (BLOCK_K divides scale_block_k), so gate/up takes the fp8 x fp8 tl.dot of the step (wgmma fp8,
products exact, fp32 sum over at most one scale block, which also bounds Hopper's reduced-precision fp8
accumulation) and adds it times a_scale[row] * fc1_scale[column block] to the fp32 accumulator; when a tile's
columns lie in one scale block (BLOCK_N divides scale_block_n and I is a multiple of it) that is one FMA per
element by a per-row factor, which on an H200 made the largest problems up to 1.22x faster than forming the
scale outer product each step (benchmarks/results/variants/moe/). silu(g) * u
(fp32) is rounded once to bf16 for the down projection, whose fp8 W2 tile is widened to bf16 in registers
(exact for e4m3) for a bf16 tl.dot, scaled per step by fc2_scale; quantising the activation to fp8 instead
would cost ~2% relative error against the reference's fp32 activation. Down writes each slot's weighted fp32
row, the last launch sums a token's k rows in fp32 and rounds to bf16 once (k = 1 writes out directly).
"""

import torch
import triton
import triton.language as tl
from torch import nn


@triton.jit
def moe_route_prefix_kernel(ids_ptr, cursor_ptr, ends_ptr, counts_ptr, total_ptr, n, num_experts,
                            BLOCK_M: tl.constexpr, BLOCK: tl.constexpr, BINS: tl.constexpr):
    counts = tl.zeros((BINS,), dtype=tl.int32)
    offs = tl.arange(0, BLOCK)
    for start in range(0, n, BLOCK):
        o = start + offs
        ok = o < n
        e = tl.load(ids_ptr + o, mask=ok, other=0).to(tl.int32)
        counts += tl.histogram(e, BINS, mask=ok)
    bins = tl.arange(0, BINS)
    padded = tl.where(bins < num_experts, (counts + BLOCK_M - 1) // BLOCK_M * BLOCK_M, 0)
    ends = tl.cumsum(padded, 0)
    tl.store(counts_ptr + bins, counts, mask=bins < num_experts)
    tl.store(cursor_ptr + bins, ends - padded, mask=bins < num_experts)
    tl.store(ends_ptr + bins, ends, mask=bins < num_experts)
    tl.store(total_ptr, tl.sum(padded, 0))


@triton.jit
def moe_route_place_kernel(ids_ptr, cursor_ptr, ends_ptr, counts_ptr, total_ptr, sorted_ptr, block_expert_ptr, n,
                           num_experts, BLOCK_M: tl.constexpr, BLOCK: tl.constexpr, BLOCK_B: tl.constexpr,
                           BINS: tl.constexpr):
    pid = tl.program_id(0)
    # slots -> their expert's next free position (order inside a run is free: rows are independent)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    ok = offs < n
    e = tl.load(ids_ptr + offs, mask=ok, other=0).to(tl.int32)
    pos = tl.atomic_add(cursor_ptr + e, 1, mask=ok)
    tl.store(sorted_ptr + pos, offs, mask=ok)
    # blocks -> expert id, padding positions -> sentinel n
    n_blocks = tl.load(total_ptr) // BLOCK_M
    b = pid * BLOCK_B + tl.arange(0, BLOCK_B)
    b_ok = b < n_blocks
    bins = tl.arange(0, BINS)
    ends = tl.load(ends_ptr + bins, mask=bins < num_experts, other=2147483647)
    first = b * BLOCK_M
    expert = tl.sum((ends[None, :] <= first[:, None]).to(tl.int32), 1)
    tl.store(block_expert_ptr + b, expert, mask=b_ok)
    end = tl.load(ends_ptr + expert, mask=b_ok, other=0)
    count = tl.load(counts_ptr + expert, mask=b_ok, other=0)
    start = end - (count + BLOCK_M - 1) // BLOCK_M * BLOCK_M
    j = tl.arange(0, BLOCK_M)
    p = first[:, None] + j[None, :]
    pad = b_ok[:, None] & (p - start[:, None] >= count[:, None])
    tl.store(sorted_ptr + p, tl.full((BLOCK_B, BLOCK_M), 0, tl.int32) + n, mask=pad)


def _gemm_configs():
    return [triton.Config({"BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8}, num_warps=w, num_stages=s)
            for bn, bk, w, s in ((64, 128, 4, 4), (128, 128, 8, 3), (128, 128, 8, 4), (64, 128, 8, 4),
                                 (64, 128, 8, 3), (64, 64, 4, 4), (128, 64, 8, 4), (128, 128, 4, 3),
                                 (256, 128, 8, 3), (32, 128, 4, 4), (32, 128, 4, 6), (64, 128, 4, 6))]


SMEM_BYTES = 227 * 1024  # Hopper's shared memory per block


def _keep(configs, block_m: int, scale_k: int, b_tiles: int, a_elt: int, acc_tiles: int):
    """Configs whose K step stays inside one scale block, whose pipeline (A tile of a_elt bytes, b_tiles fp8 B
    tiles) fits in shared memory and whose fp32 tiles (acc_tiles) fit in registers; tall M tiles (64, 128) keep
    the wide column tiles, short ones (decode) the narrow ones, which put more programs on the weight stream."""
    kept = []
    for c in configs:
        bn, bk = c.kwargs["BLOCK_N"], c.kwargs["BLOCK_K"]
        smem = c.num_stages * (block_m * bk * a_elt + b_tiles * bk * bn)
        width_ok = bn >= 64 if block_m >= 64 else bn <= 64
        if (scale_k % bk == 0 and smem <= SMEM_BYTES and acc_tiles * block_m * bn <= 4096 * c.num_warps
                and width_ok):
            kept.append(c)
    return kept or [c for c in configs if scale_k % c.kwargs["BLOCK_K"] == 0][:1]


def prune_gate_up_configs(configs, named_args, **kwargs):
    """Gate/up configs for this BLOCK_M: fp8 A and two fp8 B tiles, two accumulators and a step partial."""
    return _keep(configs, kwargs["BLOCK_M"], kwargs["SCALE_K"], 2, 1, 3)


def prune_down_configs(configs, named_args, **kwargs):
    """Down-projection configs for this BLOCK_M: bf16 A, one fp8 B tile, an accumulator and a step partial."""
    return _keep(configs, kwargs["BLOCK_M"], kwargs["SCALE_K"], 1, 2, 2)


@triton.jit
def _tile_order(pid, tiles_m, tiles_n, GROUP_M: tl.constexpr):
    """(M-block, N-tile) of this program in grouped order: GROUP_M M-blocks sweep the N-tiles together."""
    per_group = GROUP_M * tiles_n
    first_m = (pid // per_group) * GROUP_M
    group_rows = tl.minimum(tiles_m - first_m, GROUP_M)
    pid_m = first_m + (pid % per_group) % group_rows
    pid_n = (pid % per_group) // group_rows
    return pid_m, pid_n


@triton.autotune(configs=_gemm_configs(), key=["I", "H", "BLOCK_M", "slots_log2"],
                 prune_configs_by={"early_config_prune": prune_gate_up_configs})
@triton.jit
def moe_gate_up_fp8_kernel(x_ptr, xs_ptr, w1_ptr, ws_ptr, act_ptr, sorted_ptr, block_expert_ptr, total_ptr, n_slots,
                           top_k, tiles_m, I, H, slots_log2, x_st, xs_st, xs_sk, w_se, w_sn, ws_se, ws_sn, ws_sk,
                           act_s, SCALE_N: tl.constexpr, SCALE_K: tl.constexpr, I_ALIGNED: tl.constexpr,
                           BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                           GROUP_M: tl.constexpr):
    tiles_n = tl.cdiv(I, BLOCK_N)
    pid_m, pid_n = _tile_order(tl.program_id(0), tiles_m, tiles_n, GROUP_M)
    if pid_m * BLOCK_M < tl.load(total_ptr):
        e = tl.load(block_expert_ptr + pid_m).to(tl.int64)
        rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        slot = tl.load(sorted_ptr + rows)
        valid = slot < n_slots
        tok = tl.where(valid, slot // top_k, 0).to(tl.int64)
        rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        col = rn % I  # columns past I read a valid row; they are masked at the store
        rk = tl.arange(0, BLOCK_K)
        a_ptrs = x_ptr + tok[:, None] * x_st + rk[None, :]
        g_ptrs = w1_ptr + e * w_se + col[None, :] * w_sn + rk[:, None]
        u_ptrs = g_ptrs + I * w_sn
        as_ptrs = xs_ptr + tok * xs_st
        gs_ptrs = ws_ptr + e * ws_se + (col // SCALE_N) * ws_sn
        us_ptrs = ws_ptr + e * ws_se + ((col + I) // SCALE_N) * ws_sn
        gs_tile = ws_ptr + e * ws_se + (pid_n * BLOCK_N // SCALE_N) * ws_sn
        us_tile = ws_ptr + e * ws_se + ((pid_n * BLOCK_N + I) // SCALE_N) * ws_sn
        acc_g = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        acc_u = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for kt in range(0, tl.cdiv(H, BLOCK_K)):
            k_left = H - kt * BLOCK_K
            kb = (kt * BLOCK_K) // SCALE_K
            a = tl.load(a_ptrs, mask=valid[:, None] & (rk[None, :] < k_left), other=0.0)
            g = tl.load(g_ptrs, mask=rk[:, None] < k_left, other=0.0)
            u = tl.load(u_ptrs, mask=rk[:, None] < k_left, other=0.0)
            sa = tl.load(as_ptrs + kb * xs_sk, mask=valid, other=0.0)
            if SCALE_N % BLOCK_N == 0 and I_ALIGNED:  # one gate and one up scale per tile: one FMA per element
                acc_g += tl.dot(a, g) * (sa * tl.load(gs_tile + kb * ws_sk))[:, None]
                acc_u += tl.dot(a, u) * (sa * tl.load(us_tile + kb * ws_sk))[:, None]
            else:
                sg = tl.load(gs_ptrs + kb * ws_sk)
                su = tl.load(us_ptrs + kb * ws_sk)
                acc_g += tl.dot(a, g) * (sa[:, None] * sg[None, :])
                acc_u += tl.dot(a, u) * (sa[:, None] * su[None, :])
            a_ptrs += BLOCK_K
            g_ptrs += BLOCK_K
            u_ptrs += BLOCK_K
        act = acc_g * tl.sigmoid(acc_g) * acc_u
        tl.store(act_ptr + rows.to(tl.int64)[:, None] * act_s + rn[None, :], act.to(act_ptr.dtype.element_ty),
                 mask=(rn < I)[None, :])


@triton.autotune(configs=_gemm_configs(), key=["H", "I", "BLOCK_M", "slots_log2"],
                 prune_configs_by={"early_config_prune": prune_down_configs})
@triton.jit
def moe_down_fp8_kernel(act_ptr, w2_ptr, ws_ptr, y_ptr, topk_w_ptr, sorted_ptr, block_expert_ptr, total_ptr, n_slots,
                        top_k, tiles_m, H, I, slots_log2, act_s, w_se, w_sn, ws_se, ws_sn, ws_sk, y_s, tw_st, tw_sk,
                        SCALE_N: tl.constexpr, SCALE_K: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                        BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    tiles_n = tl.cdiv(H, BLOCK_N)
    pid_m, pid_n = _tile_order(tl.program_id(0), tiles_m, tiles_n, GROUP_M)
    if pid_m * BLOCK_M < tl.load(total_ptr):
        e = tl.load(block_expert_ptr + pid_m).to(tl.int64)
        rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        slot = tl.load(sorted_ptr + rows)
        valid = slot < n_slots
        rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        col = rn % H
        rk = tl.arange(0, BLOCK_K)
        a_ptrs = act_ptr + rows.to(tl.int64)[:, None] * act_s + rk[None, :]
        b_ptrs = w2_ptr + e * w_se + col[None, :] * w_sn + rk[:, None]
        bs_ptrs = ws_ptr + e * ws_se + (col // SCALE_N) * ws_sn
        bs_tile = ws_ptr + e * ws_se + (pid_n * BLOCK_N // SCALE_N) * ws_sn
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for kt in range(0, tl.cdiv(I, BLOCK_K)):
            k_left = I - kt * BLOCK_K
            a = tl.load(a_ptrs, mask=rk[None, :] < k_left, other=0.0)
            b = tl.load(b_ptrs, mask=rk[:, None] < k_left, other=0.0).to(a.dtype)
            if SCALE_N % BLOCK_N == 0:  # one scale per tile
                acc += tl.dot(a, b) * tl.load(bs_tile + ((kt * BLOCK_K) // SCALE_K) * ws_sk)
            else:
                sb = tl.load(bs_ptrs + ((kt * BLOCK_K) // SCALE_K) * ws_sk)
                acc += tl.dot(a, b) * sb[None, :]
            a_ptrs += BLOCK_K
            b_ptrs += BLOCK_K
        s = tl.where(valid, slot, 0)
        w = tl.load(topk_w_ptr + (s // top_k) * tw_st + (s % top_k) * tw_sk, mask=valid, other=0.0).to(tl.float32)
        tl.store(y_ptr + s.to(tl.int64)[:, None] * y_s + rn[None, :], (acc * w[:, None]).to(y_ptr.dtype.element_ty),
                 mask=valid[:, None] & (rn < H)[None, :])


SUM_CONFIGS = [triton.Config({"BLOCK_T": m, "BLOCK_N": n}, num_warps=w)
               for m, n, w in ((1, 1024, 4), (2, 1024, 4), (1, 2048, 8), (4, 512, 4))]


@triton.autotune(configs=SUM_CONFIGS, key=["H", "TOP_K", "tokens_log2"])
@triton.jit
def moe_slot_sum_kernel(y_ptr, out_ptr, n_tokens, H, tokens_log2, y_s, out_s, TOP_K: tl.constexpr,
                        BLOCK_T: tl.constexpr, BLOCK_N: tl.constexpr):
    t = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (t < n_tokens)[:, None] & (cols < H)[None, :]
    base = y_ptr + (t.to(tl.int64) * TOP_K)[:, None] * y_s + cols[None, :]
    acc = tl.zeros((BLOCK_T, BLOCK_N), dtype=tl.float32)
    for j in tl.static_range(TOP_K):
        acc += tl.load(base + j * y_s, mask=mask, other=0.0)
    tl.store(out_ptr + t.to(tl.int64)[:, None] * out_s + cols[None, :], acc.to(out_ptr.dtype.element_ty),
             mask=mask)


def block_m_for(n_slots: int, num_experts: int) -> int:
    """Padding granule and M tile: about the expected rows per expert, 16 (decode) to 128 (prefill)."""
    per_expert = n_slots / max(num_experts, 1)
    for bm, limit in ((16, 16), (32, 32), (64, 256)):
        if per_expert <= limit:
            return bm
    return 128


class Model(nn.Module):
    """fused_moe on dequantised operands (hidden_states * a_scale, w1 * fc1_scale, w2 * fc2_scale per block);
    bf16 out [T, H]."""

    def __init__(self, num_experts: int, intermediate_size: int, top_k: int, scale_block_n: int = 128,
                 scale_block_k: int = 128) -> None:
        super().__init__()
        self.num_experts, self.inter, self.top_k = int(num_experts), int(intermediate_size), int(top_k)
        self.bn, self.bk = int(scale_block_n), int(scale_block_k)
        if self.bk % 64:
            raise ValueError(f"fp8_blockscale_fused_moe: scale_block_k {self.bk} is not a multiple of 64")

    def forward(self, hidden_states: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor, topk_weights: torch.Tensor,
                topk_ids: torch.Tensor, a_scale: torch.Tensor, fc1_scale: torch.Tensor,
                fc2_scale: torch.Tensor) -> torch.Tensor:
        t, h = hidden_states.shape
        k, e, inter = topk_ids.shape[1], self.num_experts, self.inter
        dev = hidden_states.device
        out = torch.empty((t, h), dtype=torch.bfloat16, device=dev)
        n = t * k
        if n == 0 or h == 0:
            return out
        x = hidden_states if hidden_states.stride(1) == 1 else hidden_states.contiguous()
        w1 = w1 if w1.stride(2) == 1 else w1.contiguous()
        w2 = w2 if w2.stride(2) == 1 else w2.contiguous()
        ids = topk_ids.reshape(-1)
        if ids.stride(0) != 1:
            ids = ids.contiguous()

        bm = block_m_for(n, e)
        bins = triton.next_power_of_2(max(e, 1))
        max_blocks = triton.cdiv(n, bm) + min(e, n)
        scratch = torch.empty(3 * e + 1 + max_blocks * (bm + 1), dtype=torch.int32, device=dev)
        cursor, ends, counts = scratch[:e], scratch[e:2 * e], scratch[2 * e:3 * e]
        total = scratch[3 * e:3 * e + 1]
        block_expert = scratch[3 * e + 1:3 * e + 1 + max_blocks]
        sorted_slots = scratch[3 * e + 1 + max_blocks:]
        moe_route_prefix_kernel[(1,)](ids, cursor, ends, counts, total, n, e, BLOCK_M=bm,
                                      BLOCK=min(4096, triton.next_power_of_2(max(n, 16))), BINS=bins, num_warps=4)
        block_b = max(1, 2048 // bm)
        moe_route_place_kernel[(max(triton.cdiv(n, 1024), triton.cdiv(max_blocks, block_b)),)](
            ids, cursor, ends, counts, total, sorted_slots, block_expert, n, e, BLOCK_M=bm, BLOCK=1024,
            BLOCK_B=block_b, BINS=bins, num_warps=4)

        act = torch.empty((max_blocks * bm, inter), dtype=torch.bfloat16, device=dev)
        slots_log2 = n.bit_length()
        moe_gate_up_fp8_kernel[lambda meta: (max_blocks * triton.cdiv(inter, meta["BLOCK_N"]),)](
            x, a_scale, w1, fc1_scale, act, sorted_slots, block_expert, total, n, k, max_blocks, inter, h, slots_log2,
            x.stride(0), a_scale.stride(0), a_scale.stride(1), w1.stride(0), w1.stride(1), fc1_scale.stride(0),
            fc1_scale.stride(1), fc1_scale.stride(2), act.stride(0), SCALE_N=self.bn, SCALE_K=self.bk,
            I_ALIGNED=inter % self.bn == 0, BLOCK_M=bm)
        y = out if k == 1 else torch.empty((n, h), dtype=torch.float32, device=dev)
        moe_down_fp8_kernel[lambda meta: (max_blocks * triton.cdiv(h, meta["BLOCK_N"]),)](
            act, w2, fc2_scale, y, topk_weights, sorted_slots, block_expert, total, n, k, max_blocks, h, inter,
            slots_log2, act.stride(0), w2.stride(0), w2.stride(1), fc2_scale.stride(0), fc2_scale.stride(1),
            fc2_scale.stride(2), y.stride(0), topk_weights.stride(0), topk_weights.stride(1), SCALE_N=self.bn,
            SCALE_K=self.bk, BLOCK_M=bm)
        if k > 1:
            moe_slot_sum_kernel[lambda meta: (triton.cdiv(t, meta["BLOCK_T"]), triton.cdiv(h, meta["BLOCK_N"]))](
                y, out, t, h, t.bit_length(), y.stride(0), out.stride(0), TOP_K=k)
        return out
