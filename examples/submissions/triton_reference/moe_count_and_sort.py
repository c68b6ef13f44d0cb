"""moe_count_and_sort in Triton: per-expert counts of the flat topk_ids, their exclusive prefix [E+1], and the
flat indices grouped by expert.

Two launches. (1) One program histograms the ids in chunks (tl.histogram, no atomics) and writes the counts,
the prefix and a cursor per expert (its run's first slot). (2) Each program scatters a chunk of indices to
`cursor[e]++` (atomics: the order inside a run is unspecified, which the contract allows, comparing runs as
multisets). No device sync; every output element is written once.
"""

import torch
import triton
import triton.language as tl
from torch import nn


@triton.jit
def moe_count_kernel(ids_ptr, counts_ptr, cumsum_ptr, cursor_ptr, n, num_experts, BLOCK: tl.constexpr,
                     BINS: tl.constexpr):
    counts = tl.zeros((BINS,), dtype=tl.int32)
    offs = tl.arange(0, BLOCK)
    for start in range(0, n, BLOCK):
        o = start + offs
        ok = o < n
        counts += tl.histogram(tl.load(ids_ptr + o, mask=ok, other=0).to(tl.int32), BINS, mask=ok)
    bins = tl.arange(0, BINS)
    live = bins < num_experts
    counts = tl.where(live, counts, 0)
    ends = tl.cumsum(counts, 0)
    tl.store(counts_ptr + bins, counts, mask=live)
    tl.store(cursor_ptr + bins, ends - counts, mask=live)
    tl.store(cumsum_ptr + 1 + bins, ends, mask=live)
    tl.store(cumsum_ptr, 0)


@triton.jit
def moe_sort_scatter_kernel(ids_ptr, cursor_ptr, sorted_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = offs < n
    e = tl.load(ids_ptr + offs, mask=ok, other=0).to(tl.int32)
    slot = tl.atomic_add(cursor_ptr + e, 1, mask=ok)
    tl.store(sorted_ptr + slot, offs.to(tl.int32), mask=ok)


class Model(nn.Module):
    """sorted_token_ids (flat indices grouped by expert), expert_token_counts [E], cumsum [E+1]."""

    def __init__(self, num_experts: int = 128, block_size: int = 128) -> None:
        super().__init__()
        self.num_experts, self.block_size = int(num_experts), int(block_size)

    def forward(self, topk_ids: torch.Tensor) -> dict:
        flat = topk_ids.reshape(-1)
        if flat.stride(0) != 1:
            flat = flat.contiguous()
        n, e, dev = flat.numel(), self.num_experts, topk_ids.device
        counts = torch.empty(e, dtype=torch.int32, device=dev)
        cumsum = torch.empty(e + 1, dtype=torch.int32, device=dev)
        cursor = torch.empty(e, dtype=torch.int32, device=dev)
        sorted_ids = torch.empty(n, dtype=torch.int32, device=dev)
        bins = triton.next_power_of_2(max(e, 1))
        moe_count_kernel[(1,)](flat, counts, cumsum, cursor, n, e,
                               BLOCK=min(4096, triton.next_power_of_2(max(n, 16))), BINS=bins, num_warps=4)
        if n:
            moe_sort_scatter_kernel[(triton.cdiv(n, 1024),)](flat, cursor, sorted_ids, n, BLOCK=1024, num_warps=4)
        return {"sorted_token_ids": sorted_ids, "expert_token_counts": counts, "cumsum": cumsum}
