"""chunk_delta_rule_output reference (FLA chunk_fwd_o for gated delta-rule / GDN prefill)."""

import torch
from torch import nn

from kernels_eval.operators._common import rand, randn


def chunk_cumulative_decay(batch: int, tokens: int, heads: int, chunk: int, *, device, generator) -> torch.Tensor:
    """g [B, T, H] fp32: within each chunk the running sum of per-token log-decays in (-0.2, 0], as the
    chunked kernels receive it (monotone non-increasing inside a chunk)."""
    step = -0.2 * rand((batch, tokens, heads), device=device, generator=generator)
    chunks = -(-tokens // chunk)
    padded = torch.nn.functional.pad(step, (0, 0, 0, chunks * chunk - tokens))
    return padded.reshape(batch, chunks, chunk, heads).cumsum(dim=2).reshape(batch, -1, heads)[:, :tokens].contiguous()


class Model(nn.Module):
    """In chunk c (size cs), position i, head h (q/k head h // (Hv/Hq)):
    o_i = scale * (exp(g_i) q_i h_c + sum_{j <= i in c} exp(g_i - g_j) (q_i . k_j) v_j), scale = K^-0.5."""

    def __init__(self, chunk_size: int = 64, scale: float | None = None) -> None:
        super().__init__()
        self.cs, self.scale = int(chunk_size), scale

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, h: torch.Tensor,
                g: torch.Tensor) -> torch.Tensor:
        b, t, hq, kd = q.shape
        hv, vd = v.shape[2:]
        cs, nc = self.cs, h.shape[1]
        scale = self.scale if self.scale is not None else kd ** -0.5
        head_map = torch.arange(hv, device=q.device) // (hv // hq)
        pad = nc * cs - t

        def chunks(x):
            x = torch.nn.functional.pad(x.float(), (0, 0) * (x.dim() - 2) + (0, pad))
            return x.reshape(b, nc, cs, *x.shape[2:])

        qc, kc = chunks(q[:, :, head_map]), chunks(k[:, :, head_map])     # [b, nc, cs, hv, kd]
        vc, gc = chunks(v), chunks(g)                                     # [b, nc, cs, hv, vd], [b, nc, cs, hv]
        inter = torch.einsum("bnihk,bnhkv->bnihv", qc, h.float()) * gc.exp()[..., None]
        scores = torch.einsum("bnihk,bnjhk->bnhij", qc, kc)
        gi = gc.permute(0, 1, 3, 2)                                       # [b, nc, hv, cs]
        causal = torch.ones(cs, cs, dtype=torch.bool, device=q.device).tril()
        decay = torch.where(causal, gi[..., :, None] - gi[..., None, :], float("-inf")).exp()
        intra = torch.einsum("bnhij,bnjhv->bnihv", scores * decay, vc)
        out = (scale * (inter + intra)).reshape(b, nc * cs, hv, vd)[:, :t]
        return out.to(v.dtype)


def make_inputs(*, batch_size: int, token_count: int, num_q_heads: int, num_v_heads: int, key_dim: int,
                value_dim: int, chunk_size: int = 64, device="cpu", generator=None) -> dict:
    """q, k (unit-scale rows), v, per-chunk states h and within-chunk cumulative log-decays g."""
    kw = dict(dtype=torch.bfloat16, device=device, generator=generator)
    nc = -(-token_count // chunk_size)
    return {"q": randn((batch_size, token_count, num_q_heads, key_dim), **kw, scale=key_dim ** -0.5),
            "k": randn((batch_size, token_count, num_q_heads, key_dim), **kw, scale=key_dim ** -0.5),
            "v": randn((batch_size, token_count, num_v_heads, value_dim), **kw),
            "h": randn((batch_size, nc, num_v_heads, key_dim, value_dim), **kw, scale=0.5),
            "g": chunk_cumulative_decay(batch_size, token_count, num_v_heads, chunk_size, device=device,
                                        generator=generator)}
