"""gated_delta_rule_update reference (Qwen3-Next fused sigmoid-gating recurrent delta rule)."""

import torch
from torch import nn

from kernels_eval.operators._common import rand, randn, randperm


class Model(nn.Module):
    """For each sequence b, head h (q/k head h // (Hv/Hq)), token t, with state S [K, V] from the pool:
    g = -exp(A_log) softplus(a + dt_bias), beta = sigmoid(b); q, k l2-normalised (eps 1e-6) if asked;
    S = exp(g) S; S += k (beta (v - Sᵀ k))ᵀ; o_t = Sᵀ (q K^-0.5). Returns out and the updated pool (fp32)."""

    def __init__(self, softplus_beta: float = 1.0, softplus_threshold: float = 20.0, scale: float | None = None,
                 use_qk_l2norm: bool = True) -> None:
        super().__init__()
        self.beta, self.threshold = float(softplus_beta), float(softplus_threshold)
        self.scale, self.l2 = scale, bool(use_qk_l2norm)

    def forward(self, A_log, a, dt_bias, q, k, v, b, initial_state, initial_state_indices) -> dict:
        bsz, t, hq, kd = q.shape
        hv = v.shape[2]
        scale = self.scale if self.scale is not None else kd ** -0.5
        head_map = torch.arange(hv, device=q.device) // (hv // hq)
        qh, kh = q[:, :, head_map].float(), k[:, :, head_map].float()
        if self.l2:
            qh = torch.nn.functional.normalize(qh, dim=-1, eps=1e-6)
            kh = torch.nn.functional.normalize(kh, dim=-1, eps=1e-6)
        gate = -A_log.float().exp() * torch.nn.functional.softplus(a.float() + dt_bias.float(), beta=self.beta,
                                                                    threshold=self.threshold)
        beta = torch.sigmoid(b.float())
        idx = initial_state_indices.long()
        state = initial_state[idx].float()                                   # [b, hv, kd, vd]
        # what each step reads, laid out token-major and contiguous ahead of the loop, so that a step is five
        # kernels: a long prefill's reference is a launch-bound loop over its tokens (8k of them in the catalogue)
        decay = gate.exp().transpose(0, 1)[..., None, None].contiguous()     # [t, b, hv, 1, 1]
        k_t = kh.transpose(0, 1).unsqueeze(-2).contiguous()                  # [t, b, hv, 1, kd]
        kb_t = (kh * beta[..., None]).transpose(0, 1).unsqueeze(-1).contiguous()  # beta k, [t, b, hv, kd, 1]
        q_t = (qh * scale).transpose(0, 1).unsqueeze(-2).contiguous()
        v_t = v.float().transpose(0, 1).unsqueeze(-2).contiguous()            # [t, b, hv, 1, vd]
        out_t = torch.empty((t, bsz, hv, 1, v.shape[-1]), dtype=torch.float32, device=v.device)
        for i in range(t):
            state.mul_(decay[i])
            state.addcmul_(kb_t[i], v_t[i] - k_t[i] @ state)                  # S += beta k (v - Sᵀk)ᵀ
            torch.matmul(q_t[i], state, out=out_t[i])
        out = out_t.squeeze(-2).transpose(0, 1).to(v.dtype)
        final = initial_state.float().clone()
        final[idx] = state
        return {"out": out, "final_state": final}


def make_inputs(*, batch_size: int, token_count: int, num_q_heads: int, num_v_heads: int, key_dim: int,
                value_dim: int, state_count: int, device="cpu", generator=None) -> dict:
    """Per-head decay parameters, projections, a state pool and distinct pool slots per sequence."""
    if state_count < batch_size:
        raise ValueError(f"gated_delta_rule_update: state_count {state_count} < batch_size {batch_size}")
    kw = dict(dtype=torch.bfloat16, device=device, generator=generator)
    return {"A_log": (1.0 + 15.0 * rand((num_v_heads,), device=device, generator=generator)).log(),
            "a": randn((batch_size, token_count, num_v_heads), **kw),
            "dt_bias": randn((num_v_heads,), **kw, scale=0.5),
            "q": randn((batch_size, token_count, num_q_heads, key_dim), **kw),
            "k": randn((batch_size, token_count, num_q_heads, key_dim), **kw),
            "v": randn((batch_size, token_count, num_v_heads, value_dim), **kw),
            "b": randn((batch_size, token_count, num_v_heads), **kw),
            "initial_state": randn((state_count, num_v_heads, key_dim, value_dim), dtype=torch.float32,
                                   device=device, generator=generator, scale=0.1),
            "initial_state_indices": randperm(state_count, device=device, generator=generator)[:batch_size]
            .to(torch.int32)}
