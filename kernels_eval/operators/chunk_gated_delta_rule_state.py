"""chunk_gated_delta_rule_state reference (FLA chunk_gated_delta_rule_fwd_h: inter-chunk state recurrence)."""

import torch
from torch import nn

from kernels_eval.operators._common import randn, randperm
from kernels_eval.operators.chunk_delta_rule_output import chunk_cumulative_decay


class Model(nn.Module):
    """Per sequence b and value head (k head = head // (Hv/Hk)), state S [K, V] starts at
    initial_state[initial_state_indices[b]]; for each chunk c: h[b, c] = S; v_new = u - w S;
    S = exp(g_last) S + kᵀ (exp(g_last - g_j) v_new_j). Returns h, v_new and final_state = the pool with
    rows initial_state_indices replaced by the final S (fp32)."""

    def __init__(self, chunk_size: int = 64) -> None:
        super().__init__()
        self.cs = int(chunk_size)

    def forward(self, k: torch.Tensor, w: torch.Tensor, u: torch.Tensor, g: torch.Tensor,
                initial_state: torch.Tensor, initial_state_indices: torch.Tensor) -> dict:
        b, t, hk, kd = k.shape
        hv, vd = u.shape[2:]
        nc = -(-t // self.cs)
        kh = k[:, :, torch.arange(hv, device=k.device) // (hv // hk)].float()   # [b, t, hv, kd]
        idx = initial_state_indices.long()
        state = initial_state[idx].float()                                        # [b, hv, kd, vd]
        h = torch.empty(b, nc, hv, kd, vd, dtype=k.dtype, device=k.device)
        v_new = torch.empty_like(u)
        for c in range(nc):
            lo, hi = c * self.cs, min(t, (c + 1) * self.cs)
            h[:, c] = state.to(k.dtype)
            vc = u[:, lo:hi].float() - torch.einsum("bthk,bhkv->bthv", w[:, lo:hi].float(), state)
            v_new[:, lo:hi] = vc.to(u.dtype)
            g_last = g[:, hi - 1].float()                                          # [b, hv]
            weight = (g_last[:, None] - g[:, lo:hi].float()).exp()                 # [b, len, hv]
            state = state * g_last.exp()[..., None, None] + torch.einsum("bthk,bthv->bhkv", kh[:, lo:hi],
                                                                          vc * weight[..., None])
        final = initial_state.float().clone()
        final[idx] = state
        return {"h": h, "v_new": v_new, "final_state": final}


def make_inputs(*, batch_size: int, token_count: int, num_k_heads: int, num_v_heads: int, key_dim: int,
                value_dim: int, state_count: int, chunk_size: int = 64, device="cpu", generator=None) -> dict:
    """k, w, u as the chunked GDN pipeline produces them, cumulative decays g, a state pool and distinct
    pool slots for the batch's sequences."""
    if state_count < batch_size:
        raise ValueError(f"chunk_gated_delta_rule_state: state_count {state_count} < batch_size {batch_size}")
    kw = dict(dtype=torch.bfloat16, device=device, generator=generator)
    return {"k": randn((batch_size, token_count, num_k_heads, key_dim), **kw, scale=key_dim ** -0.5),
            "w": randn((batch_size, token_count, num_v_heads, key_dim), **kw, scale=key_dim ** -0.5),
            "u": randn((batch_size, token_count, num_v_heads, value_dim), **kw),
            "g": chunk_cumulative_decay(batch_size, token_count, num_v_heads, chunk_size, device=device,
                                        generator=generator),
            "initial_state": randn((state_count, num_v_heads, key_dim, value_dim), dtype=torch.float32,
                                   device=device, generator=generator, scale=0.1),
            "initial_state_indices": randperm(state_count, device=device, generator=generator)[:batch_size]
            .to(torch.int32)}
