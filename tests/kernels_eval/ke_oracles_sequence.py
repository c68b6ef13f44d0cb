"""Independent float64 formulations of the attention, cache and delta-rule operators (see ke_oracles)."""

from __future__ import annotations

import math

import torch

D = torch.float64


def f(x):
    return x.to(D)


def _silu(x):
    return x / (1 + torch.exp(-x))


def _softmax_attend(q, k, v, scale, visible):
    """q [D], k/v [L, D]; visible [L] bool."""
    s = (k @ q) * scale
    s = torch.where(visible, s, torch.full_like(s, -math.inf))
    p = torch.exp(s - s.max())
    return (p / p.sum()) @ v


def attention_forward(i, init):
    q, k, v, cu = f(i["q"]), f(i["k"]), f(i["v"]), i["cu_seqlens_q"].tolist()
    out = torch.zeros_like(q)
    for s in range(len(cu) - 1):
        rows = range(cu[s], cu[s + 1])
        for t in rows:
            for h in range(q.shape[1]):
                ks, vs = k[cu[s]:cu[s + 1], h], v[cu[s]:cu[s + 1], h]
                everything = torch.ones(len(rows), dtype=torch.bool)
                out[t, h] = _softmax_attend(q[t, h], ks, vs, q.shape[-1] ** -0.5, everything)
    return {"out": out}


def unified_attention(i, init):
    q, kc, vc = f(i["q"]), f(i["k_cache"]), f(i["v_cache"])
    bs, hkv, d = kc.shape[1:]
    cu, lens, table = i["cu_seqlens_q"].tolist(), i["seqused_k"].tolist(), i["block_table"].tolist()
    out = torch.zeros_like(q)
    group = q.shape[1] // hkv
    for s, kv_len in enumerate(lens):
        k = torch.stack([kc[table[s][p // bs], p % bs] for p in range(kv_len)])  # [L, Hkv, D]
        v = torch.stack([vc[table[s][p // bs], p % bs] for p in range(kv_len)])
        q_len = cu[s + 1] - cu[s]
        for r in range(q_len):
            visible = torch.arange(kv_len) <= kv_len - q_len + r
            for h in range(q.shape[1]):
                out[cu[s] + r, h] = _softmax_attend(q[cu[s] + r, h], k[:, h // group], v[:, h // group], d ** -0.5,
                                                    visible)
    return {"out": out}


def paged_attention_decode(i, init):
    q, kc, vc = f(i["query"]), f(i["k_cache"]), f(i["v_cache"])
    _, hkv, d, bs = vc.shape
    x = kc.shape[-1]
    table, lens = i["block_tables"].tolist(), i["seq_lens"].tolist()
    out = torch.zeros_like(q)
    group = q.shape[1] // hkv
    for s, L in enumerate(lens):
        for h in range(q.shape[1]):
            kv = h // group
            k = torch.stack([torch.stack([kc[table[s][p // bs], kv, c // x, p % bs, c % x] for c in range(d)])
                             for p in range(L)])
            v = torch.stack([vc[table[s][p // bs], kv, :, p % bs] for p in range(L)])
            out[s, h] = _softmax_attend(q[s, h], k, v, d ** -0.5, torch.ones(L, dtype=torch.bool))
    return {"out": out}


def mla_decode_attention(i, init):
    q, cache = f(i["q"]), f(i["kv_cache"])[:, 0]
    r = init["kv_lora_rank"]
    out = torch.zeros(q.shape[0], q.shape[1], r, dtype=D)
    start = 0
    for b, L in enumerate(i["seq_lens"].tolist()):
        rows = cache[start:start + L]
        for h in range(q.shape[1]):
            everything = torch.ones(L, dtype=torch.bool)
            out[b, h] = _softmax_attend(q[b, h], rows, rows[:, :r], q.shape[-1] ** -0.5, everything)
        start += L
    return {"out": out}


def reshape_and_cache(i, init):
    kc, vc = f(i["key_cache"]).clone(), f(i["value_cache"]).clone()
    bs = kc.shape[1]
    for t, slot in enumerate(i["slot_mapping"].tolist()):
        if slot >= 0:
            kc[slot // bs, slot % bs] = f(i["key"][t])
            vc[slot // bs, slot % bs] = f(i["value"][t])
    return {"key_cache": kc, "value_cache": vc}


def chunk_delta_rule_output(i, init):
    q, k, v, h, g = f(i["q"]), f(i["k"]), f(i["v"]), f(i["h"]), f(i["g"])
    cs = init["chunk_size"]
    b_n, t_n, hq, kd = q.shape
    hv = v.shape[2]
    out = torch.zeros(v.shape, dtype=D)
    for b in range(b_n):
        for hd in range(hv):
            qh = hd // (hv // hq)
            for t in range(t_n):
                c = t // cs
                acc = math.exp(g[b, t, hd]) * (q[b, t, qh] @ h[b, c, hd])
                for j in range(c * cs, t + 1):
                    acc = acc + math.exp(g[b, t, hd] - g[b, j, hd]) * float(q[b, t, qh] @ k[b, j, qh]) * v[b, j, hd]
                out[b, t, hd] = acc * kd ** -0.5
    return {"out": out}


def chunk_gated_delta_rule_state(i, init):
    k, w, u, g = f(i["k"]), f(i["w"]), f(i["u"]), f(i["g"])
    pool, idx = f(i["initial_state"]).clone(), i["initial_state_indices"].tolist()
    cs = init["chunk_size"]
    b_n, t_n, hk, _ = k.shape
    hv = u.shape[2]
    nc = -(-t_n // cs)
    h_out = torch.zeros(b_n, nc, hv, *pool.shape[2:], dtype=D)
    v_new = torch.zeros(u.shape, dtype=D)
    for b in range(b_n):
        for hd in range(hv):
            state = pool[idx[b], hd].clone()
            for c in range(nc):
                h_out[b, c, hd] = state
                last = min(t_n, (c + 1) * cs) - 1
                update = torch.zeros_like(state)
                for j in range(c * cs, last + 1):
                    v_new[b, j, hd] = u[b, j, hd] - w[b, j, hd] @ state
                    update += math.exp(g[b, last, hd] - g[b, j, hd]) * torch.outer(k[b, j, hd // (hv // hk)],
                                                                                    v_new[b, j, hd])
                state = math.exp(g[b, last, hd]) * state + update
            pool[idx[b], hd] = state
    return {"h": h_out, "v_new": v_new, "final_state": pool}


def gated_delta_rule_update(i, init):
    q, k, v = f(i["q"]), f(i["k"]), f(i["v"])
    pool, idx = f(i["initial_state"]).clone(), i["initial_state_indices"].tolist()
    b_n, t_n, hq, kd = q.shape
    hv = v.shape[2]
    out = torch.zeros(v.shape, dtype=D)
    for b in range(b_n):
        for hd in range(hv):
            state = pool[idx[b], hd].clone()
            for t in range(t_n):
                qt, kt = q[b, t, hd // (hv // hq)], k[b, t, hd // (hv // hq)]
                if init["use_qk_l2norm"]:
                    qt, kt = qt / max(float(qt.norm()), 1e-6), kt / max(float(kt.norm()), 1e-6)
                x = float(i["a"][b, t, hd]) + float(i["dt_bias"][hd])
                softplus = x if x > 20.0 else math.log1p(math.exp(x))
                decay = math.exp(-math.exp(float(i["A_log"][hd])) * softplus)
                beta = 1 / (1 + math.exp(-float(i["b"][b, t, hd])))
                state = decay * state
                state = state + torch.outer(kt, beta * (v[b, t, hd] - state.T @ kt))
                out[b, t, hd] = state.T @ qt * kd ** -0.5
            pool[idx[b], hd] = state
    return {"out": out, "final_state": pool}
