"""Independent float64 formulations of every operator, written as per-token / per-block loops so that they
share no code or vectorisation strategy with kernels_eval.operators. Each takes (inputs, init) and returns
{output name: float64 tensor}."""

from __future__ import annotations

import math

import torch

D = torch.float64
FP8_MAX = 448.0


def f(x):
    return x.to(D)


def _rms(x, eps):
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps)


def _silu(x):
    return x / (1 + torch.exp(-x))


def rms_norm(i, init):
    return {"out": _rms(f(i["x"]), init.get("eps", 1e-6)) * f(i["weight"])}


def fused_add_rms_norm(i, init):
    s = f((f(i["x"]) + f(i["residual"])).to(i["residual"].dtype))
    return {"out": _rms(s, init.get("eps", 1e-6)) * f(i["weight"]), "residual": s}


def silu_and_mul(i, init):
    x = f(i["x"])
    d = x.shape[-1] // 2
    return {"out": _silu(x[..., :d]) * x[..., d:2 * d]}


def l2_norm(i, init):
    x = f(i["x"])
    return {"out": x / torch.sqrt((x * x).sum(-1, keepdim=True) + 1e-6)}


def layer_norm(i, init):
    x = f(i["x"])
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return {"out": (x - mu) / torch.sqrt(var + 1e-5) * f(i["weight"]) + f(i["bias"])}


def gated_rms_norm(i, init):
    x, z = f(i["x"]), f(i["z"])
    gate = _silu(z) if init["activation"] == "silu" else 1 / (1 + torch.exp(-z))
    if init["norm_before_gate"]:
        return {"out": _rms(x, init["eps"]) * f(i["weight"]) * gate}
    return {"out": _rms(x * gate, init["eps"]) * f(i["weight"])}


def fused_qk_rmsnorm(i, init):
    x = f(i["hidden_states"]).clone()
    d, hq, hkv = init["size_per_head"], init["head_num"], init["kv_head_num"]
    for head in range(hq + hkv):
        w = f(i["q_weight"] if head < hq else i["k_weight"])
        cols = slice(head * d, (head + 1) * d)
        x[:, cols] = _rms(x[:, cols], 1e-6) * w
    return {"out": x}


def _rotate_pairs(x, lo_idx, hi_idx, cos, sin):
    """x [..., D]; rotate dimension pairs (lo_idx[p], hi_idx[p]) by angle with cos/sin [..., P]."""
    out = x.clone()
    for p, (a, b) in enumerate(zip(lo_idx, hi_idx)):
        out[..., a] = x[..., a] * cos[..., p] - x[..., b] * sin[..., p]
        out[..., b] = x[..., b] * cos[..., p] + x[..., a] * sin[..., p]
    return out


def fused_qkv_rope(i, init):
    qkv, pos = f(i["qkv"]), f(i["positions"])
    hq, hkv, d, rd = init["num_heads"], init["num_kv_heads"], init["head_dim"], init["rope_dim"]
    t, half = qkv.shape[0], rd // 2
    theta = torch.stack([pos * 10000.0 ** (-2.0 * p / rd) for p in range(half)], dim=-1)[:, None, :]
    q = qkv[:, :hq * d].reshape(t, hq, d)
    k = qkv[:, hq * d:(hq + hkv) * d].reshape(t, hkv, d)
    v = qkv[:, (hq + hkv) * d:].reshape(t, hkv, d)
    lo, hi = list(range(half)), list(range(half, rd))
    return {"q": _rotate_pairs(q, lo, hi, theta.cos(), theta.sin()),
            "k": _rotate_pairs(k, lo, hi, theta.cos(), theta.sin()), "v": v}


def mrope(i, init):
    d, rd, sec = init["head_size"], init["rotary_dim"], init["mrope_section"]
    half = rd // 2
    axis = []
    for p in range(half):
        if init["mrope_interleaved"]:
            axis.append(1 if p % 3 == 1 and p < 3 * sec[1] else 2 if p % 3 == 2 and p < 3 * sec[2] else 0)
        else:
            axis.append(0 if p < sec[0] else 1 if p < sec[0] + sec[1] else 2)
    cos = torch.stack([f(i["cos"])[axis[p], :, p] for p in range(half)], dim=-1)[:, None, :]
    sin = torch.stack([f(i["sin"])[axis[p], :, p] for p in range(half)], dim=-1)[:, None, :]
    if init["is_neox_style"]:
        lo, hi = list(range(half)), list(range(half, rd))
    else:
        lo, hi = list(range(0, rd, 2)), list(range(1, rd, 2))
    out = {}
    for name in ("q", "k"):
        x = f(i[name])
        heads = x.reshape(x.shape[0], -1, d)
        out[name] = _rotate_pairs(heads, lo, hi, cos, sin).reshape(x.shape)
    return out


def fp8_dynamic_per_token_quant(i, init):
    x = f(i["x"])
    scale = x.abs().amax(-1).clamp(min=1e-12) / FP8_MAX
    return {"q": x / scale[:, None], "scale": scale}


def per_token_group_quant_fp8(i, init):
    x, g = f(i["x"]), init["group_size"]
    t, h = x.shape
    scales = torch.empty(t, h // g, dtype=D)
    for c in range(h // g):
        scales[:, c] = (x[:, c * g:(c + 1) * g].abs().amax(-1) / FP8_MAX).clamp(min=1e-10)
    return {"quantized": x / scales.repeat_interleave(g, 1), "scales": scales}


def fused_rmsnorm_quant(i, init):
    s = f((f(i["x"]) + f(i["residual"])).to(i["residual"].dtype))
    y = _rms(s, 1e-5) * f(i["weight"])
    scale = y.abs().amax(-1, keepdim=True) / FP8_MAX
    return {"quantized": y / scale, "scale": scale, "residual_out": s}


def moe_sum_reduce(i, init):
    return {"out": f(i["expert_outputs"]).sum(1) * init["routed_scaling_factor"]}


def moe_topk_gating_softmax(i, init):
    x = f(i["gating_output"])
    p = torch.exp(x - x.max(-1, keepdim=True).values)
    p = p / p.sum(-1, keepdim=True)
    groups, keep_n = init.get("num_expert_groups", 0), init.get("topk_group", 0)
    if groups and keep_n:
        size = p.shape[1] // groups
        for t in range(p.shape[0]):
            best = sorted(range(groups), key=lambda g: -float(p[t, g * size:(g + 1) * size].max()))[:keep_n]
            for g in range(groups):
                if g not in best:
                    p[t, g * size:(g + 1) * size] = 0
    order = torch.argsort(p, dim=-1, descending=True)[:, :init["top_k"]]
    return {"topk_weights": torch.gather(p, 1, order), "topk_ids": f(order)}


def topk_filter(i, init):
    x = f(i["logits"])
    kth = torch.sort(x, dim=-1, descending=True).values[:, init["top_k"] - 1:init["top_k"]]
    return {"out": torch.where(x >= kth, x, torch.full_like(x, -math.inf))}


def moe_align_block_size(i, init):
    ids = i["topk_ids"].flatten().tolist()
    bs, sentinel = init["block_size"], len(ids)
    sorted_ids, experts = [], []
    for e in range(init["num_experts"]):
        run = [n for n, x in enumerate(ids) if x == e]
        if run:
            run += [sentinel] * (-len(run) % bs)
            sorted_ids += run
            experts += [e] * (len(run) // bs)
    return {"sorted_token_ids": torch.tensor(sorted_ids, dtype=D), "expert_ids": torch.tensor(experts, dtype=D),
            "num_tokens_post_pad": torch.tensor([len(sorted_ids)], dtype=D)}


def moe_count_and_sort(i, init):
    ids, e_n = i["topk_ids"].flatten().tolist(), init["num_experts"]
    counts = [ids.count(e) for e in range(e_n)]
    cumsum = [0]
    for c in counts:
        cumsum.append(cumsum[-1] + c)
    order = [n for e in range(e_n) for n, x in enumerate(ids) if x == e]
    return {"sorted_token_ids": torch.tensor(order, dtype=D), "expert_token_counts": torch.tensor(counts, dtype=D),
            "cumsum": torch.tensor(cumsum, dtype=D)}


def causal_conv1d(i, init):
    x, w, b, st = f(i["x"]), f(i["weight"]), f(i["bias"]), f(i["initial_state"])[0]
    dim, t = x.shape
    width = w.shape[1]
    history = torch.cat([st, x], dim=1)  # position p of x sits at column p + width - 1
    out = torch.empty(dim, t, dtype=D)
    for p in range(t):
        acc = b.clone()
        for lag in range(width):
            acc += w[:, width - 1 - lag] * history[:, p + width - 1 - lag]
        out[:, p] = _silu(acc) if init["activation"] else acc
    return {"out": out}


def block_scaled_mm(i, init):
    a, b, sa, sb = f(i["a"]), f(i["b"]), f(i["a_scales"]), f(i["b_scales"])
    gn, gk = init["group_n"], init["group_k"]
    m, k = a.shape
    n = b.shape[0]
    out = torch.zeros(m, n, dtype=D)
    for kb in range(k // gk):
        part = a[:, kb * gk:(kb + 1) * gk] @ b[:, kb * gk:(kb + 1) * gk].T
        out += part * sa[:, kb:kb + 1] * sb[torch.arange(n) // gn, kb][None, :]
    return {"out": out}


def gemm(i, init):
    acc = f(i["a"]) @ f(i["b"]).T
    if init["scaling"] == "per_row":
        acc = acc * f(i["a_scale"])[:, None] * f(i["b_scale"])[None, :]
    elif init["scaling"] == "per_tensor":
        acc = acc * f(i["a_scale"]) * f(i["b_scale"])
    return {"out": acc}


def linear_sigmoid_mul(i, init):
    gate = f(i["hidden_states"]) @ f(i["weight"]).T + f(i["bias"])
    return {"out": f(i["post_mul_mat"]) / (1 + torch.exp(-gate))}


def embedding(i, init):
    w = f(i["weight"])
    return {"out": torch.stack([w[t] for t in i["input_ids"].tolist()])}


def _moe(h, weights, ids, w1_of, w2_of, inter):
    out = torch.zeros(h.shape, dtype=D)
    for t in range(h.shape[0]):
        for j in range(ids.shape[1]):
            e = int(ids[t, j])
            gu = w1_of(e) @ h[t]
            out[t] += float(weights[t, j]) * (w2_of(e) @ (_silu(gu[:inter]) * gu[inter:]))
    return out


def fused_moe(i, init):
    w1, w2 = f(i["w1"]), f(i["w2"])
    return {"out": _moe(f(i["hidden_states"]), f(i["topk_weights"]), i["topk_ids"], lambda e: w1[e],
                        lambda e: w2[e], init["intermediate_size"])}


def _dequant_tiles(w, scales, bn=128, bk=128):
    out = f(w).clone()
    for r in range(scales.shape[0]):
        for c in range(scales.shape[1]):
            out[r * bn:(r + 1) * bn, c * bk:(c + 1) * bk] *= float(scales[r, c])
    return out


def fp8_blockscale_fused_moe(i, init):
    h = f(i["hidden_states"]).clone()
    for c in range(i["a_scale"].shape[1]):
        h[:, c * 128:(c + 1) * 128] *= f(i["a_scale"][:, c:c + 1])
    return {"out": _moe(h, f(i["topk_weights"]), i["topk_ids"], lambda e: _dequant_tiles(i["w1"][e], i["fc1_scale"][e]),
                        lambda e: _dequant_tiles(i["w2"][e], i["fc2_scale"][e]), init["intermediate_size"])}


# Sequence operators (attention, caches, delta rule) live beside this file.
from .ke_oracles_sequence import *  # noqa: E402,F401,F403
