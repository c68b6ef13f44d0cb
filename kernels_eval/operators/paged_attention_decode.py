"""paged_attention_decode reference (vLLM paged_attention_v1/v2 cache layout)."""

import torch
from torch import nn

from kernels_eval.operators._attention import attend
from kernels_eval.operators._common import dtype_of, randn, randperm


class Model(nn.Module):
    """One query per sequence over seq_lens[s] keys; key p sits in block block_tables[s, p // bs] at offset
    p % bs. k_cache [blocks, Hkv, D/x, bs, x] (x = 16 bytes of elements), v_cache [blocks, Hkv, D, bs]."""

    def forward(self, query: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_tables: torch.Tensor,
                seq_lens: torch.Tensor) -> torch.Tensor:
        blocks, hkv, d, bs = v_cache.shape
        k_rows = k_cache.permute(0, 3, 1, 2, 4).reshape(blocks * bs, hkv, d)
        v_rows = v_cache.permute(0, 3, 1, 2).reshape(blocks * bs, hkv, d)
        out = torch.zeros_like(query)
        for s, L in enumerate(seq_lens.tolist()):
            if L <= 0:
                continue
            pos = torch.arange(int(L), device=query.device)
            slots = block_tables[s, pos // bs].long() * bs + pos % bs
            o = attend(query[s:s + 1], k_rows[slots], v_rows[slots], causal=False, scale=d ** -0.5)
            out[s] = o[0].to(query.dtype)
        return out


def make_inputs(*, num_seqs: int, ctx_len: int, num_query_heads: int, num_kv_heads: int, head_size: int,
                block_size: int = 16, dtype: str = "bf16", device="cpu", generator=None) -> dict:
    """Queries, a cache pool with spare blocks and block tables at random block positions."""
    dt = dtype_of(dtype)
    x = 16 // torch.tensor([], dtype=dt).element_size()
    per_seq = -(-ctx_len // block_size)
    pool = num_seqs * per_seq + 16
    kw = dict(dtype=dt, device=device, generator=generator)
    table = randperm(pool, device=device, generator=generator)[: num_seqs * per_seq]
    return {"query": randn((num_seqs, num_query_heads, head_size), **kw),
            "k_cache": randn((pool, num_kv_heads, head_size // x, block_size, x), **kw),
            "v_cache": randn((pool, num_kv_heads, head_size, block_size), **kw),
            "block_tables": table.reshape(num_seqs, per_seq).to(torch.int32),
            "seq_lens": torch.full((num_seqs,), ctx_len, dtype=torch.int32, device=device)}
