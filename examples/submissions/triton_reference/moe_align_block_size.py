"""moe_align_block_size in Triton: flat (token, slot) indices grouped by expert, each expert's run padded with
the sentinel T*k to a multiple of block_size; expert_ids per block; num_tokens_post_pad.

Three steps. (1) One program histograms the flat topk_ids in chunks (tl.histogram, no atomics), rounds each
count up to a block, and writes the exclusive prefix of the padded counts (each expert's first slot: a cursor),
their inclusive prefix (run ends), the counts and the total. (2) The host reads the total (the outputs' length
depends on the data, as the reference's does; one device sync). (3) One launch places everything: each program
scatters a chunk of indices to `cursor[e]++` (atomics, so the order inside a run is unspecified; the contract
compares runs as multisets) and fills a range of blocks with their expert id and the padding slots of those
blocks with the sentinel. Padding and indices never share a slot, so no initialising fill is needed.
"""

import torch
import triton
import triton.language as tl
from torch import nn


@triton.jit
def moe_align_prefix_kernel(ids_ptr, counts_ptr, cursor_ptr, ends_ptr, total_ptr, n, num_experts, block_size,
                            BLOCK: tl.constexpr, BINS: tl.constexpr):
    counts = tl.zeros((BINS,), dtype=tl.int32)
    offs = tl.arange(0, BLOCK)
    for start in range(0, n, BLOCK):
        o = start + offs
        ok = o < n
        e = tl.load(ids_ptr + o, mask=ok, other=0).to(tl.int32)
        counts += tl.histogram(e, BINS, mask=ok)
    bins = tl.arange(0, BINS)
    padded = tl.where(bins < num_experts, (counts + block_size - 1) // block_size * block_size, 0)
    ends = tl.cumsum(padded, 0)
    tl.store(counts_ptr + bins, counts, mask=bins < num_experts)
    tl.store(cursor_ptr + bins, ends - padded, mask=bins < num_experts)
    tl.store(ends_ptr + bins, ends, mask=bins < num_experts)
    tl.store(total_ptr, tl.sum(padded, 0))


@triton.jit
def moe_align_place_kernel(ids_ptr, cursor_ptr, ends_ptr, counts_src_ptr, sorted_ptr, expert_ids_ptr, n,
                           n_blocks, num_experts, block_size, BLOCK: tl.constexpr, BLOCK_B: tl.constexpr,
                           BINS: tl.constexpr, BLOCK_S: tl.constexpr):
    pid = tl.program_id(0)
    # indices -> their expert's next free slot
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    ok = offs < n
    e = tl.load(ids_ptr + offs, mask=ok, other=0).to(tl.int32)
    slot = tl.atomic_add(cursor_ptr + e, 1, mask=ok)
    tl.store(sorted_ptr + slot, offs.to(tl.int32), mask=ok)
    # blocks -> expert id, padding slots -> sentinel n
    b = pid * BLOCK_B + tl.arange(0, BLOCK_B)
    b_ok = b < n_blocks
    bins = tl.arange(0, BINS)
    ends = tl.load(ends_ptr + bins, mask=bins < num_experts, other=2147483647)
    first = b * block_size
    expert = tl.sum((ends[None, :] <= first[:, None]).to(tl.int32), 1)
    tl.store(expert_ids_ptr + b, expert, mask=b_ok)
    end = tl.load(ends_ptr + expert, mask=b_ok, other=0)
    count = tl.load(counts_src_ptr + expert, mask=b_ok, other=0)
    start = end - (count + block_size - 1) // block_size * block_size
    j = tl.arange(0, BLOCK_S)
    pos = first[:, None] + j[None, :]
    pad = b_ok[:, None] & (j[None, :] < block_size) & (pos - start[:, None] >= count[:, None])
    tl.store(sorted_ptr + pos, tl.full((BLOCK_B, BLOCK_S), 0, tl.int32) + n, mask=pad)


class Model(nn.Module):
    """sorted_token_ids (flat indices grouped by expert, runs padded with T*k), expert_ids, num_tokens_post_pad."""

    def __init__(self, block_size: int, num_experts: int) -> None:
        super().__init__()
        self.block_size, self.num_experts = int(block_size), int(num_experts)

    def forward(self, topk_ids: torch.Tensor) -> dict:
        flat = topk_ids.reshape(-1)
        if flat.stride(0) != 1:
            flat = flat.contiguous()
        n, e, bs = flat.numel(), self.num_experts, self.block_size
        dev = topk_ids.device
        bins = triton.next_power_of_2(max(e, 1))
        block = min(4096, triton.next_power_of_2(max(n, 16)))
        scratch = torch.empty(3 * e, dtype=torch.int32, device=dev)
        cursor, ends, counts = scratch[:e], scratch[e:2 * e], scratch[2 * e:]
        post_pad = torch.empty(1, dtype=torch.int32, device=dev)
        moe_align_prefix_kernel[(1,)](flat, counts, cursor, ends, post_pad, n, e, bs, BLOCK=block, BINS=bins,
                                      num_warps=4)
        total = int(post_pad.item())
        sorted_ids = torch.empty(total, dtype=torch.int32, device=dev)
        n_blocks = total // bs
        expert_ids = torch.empty(n_blocks, dtype=torch.int32, device=dev)
        block_b = max(1, min(16, 4096 // triton.next_power_of_2(bs)))
        grid = max(triton.cdiv(n, 1024), triton.cdiv(n_blocks, block_b), 1)
        moe_align_place_kernel[(grid,)](flat, cursor, ends, counts, sorted_ids, expert_ids, n, n_blocks, e, bs,
                                        BLOCK=1024, BLOCK_B=block_b, BINS=bins,
                                        BLOCK_S=triton.next_power_of_2(bs), num_warps=4)
        return {"sorted_token_ids": sorted_ids, "expert_ids": expert_ids, "num_tokens_post_pad": post_pad}
