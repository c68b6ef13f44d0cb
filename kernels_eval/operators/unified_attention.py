"""unified_attention reference: varlen causal attention over a paged KV cache (vLLM V1 unified kernel)."""

import torch
from torch import nn

from kernels_eval.operators._attention import attend
from kernels_eval.operators._common import randn, randperm


class Model(nn.Module):
    """Sequence s has q rows cu_seqlens_q[s]:cu_seqlens_q[s+1] and seqused_k[s] keys stored at
    block_table[s, p // bs] * bs + p % bs of k_cache/v_cache [blocks, bs, Hkv, D]; its queries are the last
    q_len of its kv positions (bottom-right causal). Scale 1/sqrt(D)."""

    def forward(self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, cu_seqlens_q: torch.Tensor,
                seqused_k: torch.Tensor, block_table: torch.Tensor) -> torch.Tensor:
        _, bs, hkv, d = k_cache.shape
        k_flat, v_flat = k_cache.reshape(-1, hkv, d), v_cache.reshape(-1, hkv, d)
        out = torch.empty_like(q)
        qb, kv_lens = cu_seqlens_q.tolist(), seqused_k.tolist()
        for s, kv_len in enumerate(kv_lens):
            if qb[s + 1] == qb[s]:
                continue
            pos = torch.arange(int(kv_len), device=q.device)
            slots = block_table[s, pos // bs].long() * bs + pos % bs
            o = attend(q[qb[s]:qb[s + 1]], k_flat[slots], v_flat[slots], causal=True, scale=d ** -0.5)
            out[qb[s]:qb[s + 1]] = o.to(q.dtype)
        return out


def make_inputs(*, num_seqs: int, seq_lens: list, num_query_heads: int, num_kv_heads: int, head_size: int,
                block_size: int, query_lens: list | None = None, device="cpu", generator=None) -> dict:
    """q rows, a KV pool with spare blocks, and block tables pointing at randomly placed blocks."""
    if len(seq_lens) != num_seqs:
        raise ValueError(f"unified_attention: num_seqs={num_seqs} but {len(seq_lens)} seq_lens")
    q_lens = list(query_lens) if query_lens is not None else list(seq_lens)
    need = [-(-L // block_size) for L in seq_lens]
    width = max(need)
    pool = sum(need) + 8
    kw = dict(dtype=torch.bfloat16, device=device, generator=generator)
    perm = randperm(pool, device=device, generator=generator).to(torch.int32)
    table = torch.zeros((num_seqs, width), dtype=torch.int32, device=device)
    used = 0
    for s, n in enumerate(need):
        table[s, :n] = perm[used:used + n]
        used += n
    cu = [0]
    for L in q_lens:
        cu.append(cu[-1] + L)
    return {"q": randn((cu[-1], num_query_heads, head_size), **kw),
            "k_cache": randn((pool, block_size, num_kv_heads, head_size), **kw),
            "v_cache": randn((pool, block_size, num_kv_heads, head_size), **kw),
            "cu_seqlens_q": torch.tensor(cu, dtype=torch.int32, device=device),
            "seqused_k": torch.tensor(seq_lens, dtype=torch.int32, device=device),
            "block_table": table}
