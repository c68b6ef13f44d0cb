"""reshape_and_cache reference (vLLM reshape_and_cache_flash: cache [blocks, bs, Hkv, D])."""

import torch
from torch import nn

from kernels_eval.operators._common import randn, randperm


class Model(nn.Module):
    """key_cache/value_cache with row slot_mapping[t] (flat slot = block * bs + offset) set to key[t]/value[t];
    tokens with slot -1 are skipped. The reference returns updated copies; a candidate may update in place."""

    def forward(self, key: torch.Tensor, value: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
                slot_mapping: torch.Tensor) -> dict:
        heads, dim = key.shape[1:]
        k_out, v_out = key_cache.clone(), value_cache.clone()
        keep = slot_mapping >= 0
        slots = slot_mapping[keep].long()
        k_out.view(-1, heads, dim)[slots] = key[keep].to(k_out.dtype)
        v_out.view(-1, heads, dim)[slots] = value[keep].to(v_out.dtype)
        return {"key_cache": k_out, "value_cache": v_out}


def make_inputs(*, shape: list, block_size: int = 16, padded_tokens: int = 0, device="cpu", generator=None) -> dict:
    """New K/V rows, a cache pool with spare blocks and distinct random slots; the last `padded_tokens`
    tokens get slot -1 (CUDA-graph padding)."""
    tokens, heads, dim = (int(d) for d in shape)
    blocks = -(-tokens // block_size) + 4
    kw = dict(dtype=torch.bfloat16, device=device, generator=generator)
    slots = randperm(blocks * block_size, device=device, generator=generator)[:tokens].clone()
    if padded_tokens:
        slots[tokens - padded_tokens:] = -1
    return {"key": randn((tokens, heads, dim), **kw), "value": randn((tokens, heads, dim), **kw),
            "key_cache": randn((blocks, block_size, heads, dim), **kw),
            "value_cache": randn((blocks, block_size, heads, dim), **kw), "slot_mapping": slots.to(torch.int64)}
