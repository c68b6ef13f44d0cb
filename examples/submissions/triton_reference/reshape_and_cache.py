"""reshape_and_cache in Triton (vLLM reshape_and_cache_flash layout: cache [blocks, block_size, Hkv, D]).

Writes key[t] / value[t] into the cache slot slot_mapping[t] (block = slot // block_size, offset = slot %
block_size) in place and returns the caches; tokens with slot -1 (CUDA-graph padding) are skipped. One
program copies one token's Hkv * D keys and values; only the touched slots are read or written, which is
the operator's in-place contract (the reference returns updated copies instead).
"""

import torch
import triton
import triton.language as tl
from torch import nn


@triton.jit
def reshape_and_cache_kernel(key_ptr, value_ptr, kc_ptr, vc_ptr, slot_ptr, row_elems, block_size,
                             key_stride, value_stride, kc_block_stride, kc_slot_stride, vc_block_stride,
                             vc_slot_stride, BLOCK: tl.constexpr):
    t = tl.program_id(0)
    slot = tl.load(slot_ptr + t).to(tl.int64)
    if slot >= 0:
        block = slot // block_size
        offset = slot % block_size
        cols = tl.arange(0, BLOCK)
        mask = cols < row_elems
        t64 = t.to(tl.int64)
        k = tl.load(key_ptr + t64 * key_stride + cols, mask=mask)
        v = tl.load(value_ptr + t64 * value_stride + cols, mask=mask)
        tl.store(kc_ptr + block * kc_block_stride + offset * kc_slot_stride + cols, k.to(kc_ptr.dtype.element_ty),
                 mask=mask)
        tl.store(vc_ptr + block * vc_block_stride + offset * vc_slot_stride + cols, v.to(vc_ptr.dtype.element_ty),
                 mask=mask)


def _token_rows(t: torch.Tensor) -> torch.Tensor:
    """[T, H, D] with each token's H * D elements contiguous."""
    if t.stride(2) == 1 and t.stride(1) == t.shape[2]:
        return t
    return t.contiguous()


class Model(nn.Module):
    """key_cache/value_cache with row slot_mapping[t] set to key[t]/value[t] (in place); slot -1 skipped."""

    def forward(self, key: torch.Tensor, value: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
                slot_mapping: torch.Tensor) -> dict:
        tokens, heads, dim = key.shape
        key, value = _token_rows(key), _token_rows(value)
        for cache in (key_cache, value_cache):
            if cache.stride(3) != 1 or cache.stride(2) != dim:
                raise ValueError("reshape_and_cache: each cache slot's [Hkv, D] must be contiguous")
        slots = slot_mapping.contiguous()
        row = heads * dim
        if tokens:
            reshape_and_cache_kernel[(tokens,)](
                key, value, key_cache, value_cache, slots, row, key_cache.shape[1], key.stride(0), value.stride(0),
                key_cache.stride(0), key_cache.stride(1), value_cache.stride(0), value_cache.stride(1),
                BLOCK=triton.next_power_of_2(row), num_warps=max(1, min(8, row // 512)))
        return {"key_cache": key_cache, "value_cache": value_cache}
