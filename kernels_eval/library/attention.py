"""Library paths of the attention operators: torch's scaled_dot_product_attention, each fused backend in turn
(cuDNN, then FlashAttention, then memory-efficient, then the math composition), so the row names the backend that
actually ran.

Layouts the library is given beforehand (untimed; docs/library-baseline.md): a paged KV cache (unified_attention,
paged_attention_decode) is gathered into contiguous per-sequence K/V first, as issue 45 asks; K/V heads are
repeated for GQA only where a backend refuses `enable_gqa`. Packed varlen sequences of one length are one batch
(a view, no copy); of several lengths, a nested (jagged) tensor, which the fused backends run as varlen, else
one call per sequence (device-busy timing counts only their kernels, not the host between them). Outputs are
mapped back to the reference's packed layout after the call, untimed.
"""

from __future__ import annotations

from typing import Iterator

from kernels_eval.library.option import Option

# (name in a row, SDPBackend member name), in order of preference
BACKENDS = (("cuDNN", "CUDNN_ATTENTION"), ("FlashAttention", "FLASH_ATTENTION"),
            ("memory-efficient", "EFFICIENT_ATTENTION"), ("math", "MATH"))
SDPA = "torch.nn.functional.scaled_dot_product_attention"


class Seq:
    """One sequence: q [Lq, Hq, D], k [Lk, Hkv, D], v [Lk, Hkv, Dv] (views or gathered copies) and where its
    output rows go in the packed output."""

    def __init__(self, q, k, v, rows: slice) -> None:
        self.q, self.k, self.v, self.rows = q, k, v, rows


def _call(backend: str, q, k, v, *, causal: bool, scale: float, gqa: bool):
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel([getattr(SDPBackend, backend)]):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale,
                                              **({"enable_gqa": True} if gqa else {}))


def _repeat(seqs: list[Seq]) -> list[Seq]:
    """The sequences with K/V heads repeated to the query heads, packed again in sequence order (so one batch or
    one nested tensor is still a view)."""
    import torch

    group = seqs[0].q.shape[1] // seqs[0].k.shape[1]
    ks = _split(torch.cat([s.k.repeat_interleave(group, dim=1) for s in seqs]), [s.k.shape[0] for s in seqs])
    vs = _split(torch.cat([s.v.repeat_interleave(group, dim=1) for s in seqs]), [s.v.shape[0] for s in seqs])
    return [Seq(s.q, k, v, s.rows) for s, k, v in zip(seqs, ks, vs)]


def sdpa_options(seqs: list[Seq], packed_q, *, causal: bool, scale: float, out_dtype=None) -> Iterator[Option]:
    """SDPA over `seqs` (each one sequence, causal = bottom-right aligned on square sequences only), in order of
    preference: per backend, one batch (sequences of one length, adjacent in memory), a nested tensor, or one
    call per sequence; GQA natively, then with K/V heads repeated beforehand. Outputs land in a tensor shaped like
    `packed_q` ([rows, Hq, Dv]) by each sequence's `rows`."""
    import torch

    hq, hkv = seqs[0].q.shape[1], seqs[0].k.shape[1]
    dv = seqs[0].v.shape[-1]
    grouped = hq != hkv
    if causal and any(s.q.shape[0] != s.k.shape[0] for s in seqs):
        raise ValueError("causal SDPA here is for square sequences (queries = keys); top-left alignment would differ")
    repeated: list[Seq] | None = None

    def packed(parts: list) -> dict:
        out = torch.empty(packed_q.shape[0], hq, dv, dtype=out_dtype or packed_q.dtype, device=packed_q.device)
        for s, o in zip(seqs, parts):
            out[s.rows] = o
        return out

    for label, backend in BACKENDS:
        for gqa_mode in (("native", "repeated") if grouped else ("native",)):
            if gqa_mode == "repeated" and repeated is None:
                repeated = _repeat(seqs)
            use = repeated if gqa_mode == "repeated" else seqs
            gqa = grouped and gqa_mode == "native"
            how = f"{SDPA} ({label}{', K/V heads repeated beforehand' if gqa_mode == 'repeated' else ''}"
            if _uniform(use):
                b = len(use)
                q = _stack_view(use, "q")
                k, v = _stack_view(use, "k"), _stack_view(use, "v")

                def run(q=q, k=k, v=v, backend=backend, gqa=gqa):
                    return _call(backend, q, k, v, causal=causal, scale=scale, gqa=gqa)
                yield Option(f"{how}, one batch of {b})", run,
                             lambda o: packed(list(o.transpose(1, 2).unbind(0))))
                continue
            nested = None if causal else _nested(use)  # torch's nested SDPA refuses is_causal
            if nested is not None:
                def run_nested(nested=nested, backend=backend, gqa=gqa):
                    q, k, v = nested
                    return _call(backend, q, k, v, causal=causal, scale=scale, gqa=gqa)
                yield Option(f"{how}, {len(use)} sequences as one nested varlen batch)", run_nested,
                             lambda o: packed(list(o.transpose(1, 2).unbind())))
            calls = [(s.q.transpose(0, 1).unsqueeze(0), s.k.transpose(0, 1).unsqueeze(0),
                      s.v.transpose(0, 1).unsqueeze(0)) for s in use]

            def run_each(calls=calls, backend=backend, gqa=gqa):
                return [_call(backend, q, k, v, causal=causal, scale=scale, gqa=gqa) for q, k, v in calls]
            yield Option(f"{how}, one call per sequence of {len(use)})", run_each,
                         lambda outs: packed([o[0].transpose(0, 1) for o in outs]))


def _step(ts: list) -> int | None:
    """The constant element step between consecutive tensors of one shape and strides over one storage, or None."""
    first = ts[0]
    if any(t.shape != first.shape or t.stride() != first.stride() or t.dtype != first.dtype for t in ts):
        return None
    if len(ts) == 1:
        return first.numel()
    gaps = {b.data_ptr() - a.data_ptr() for a, b in zip(ts, ts[1:])}
    if len(gaps) != 1:
        return None
    gap = gaps.pop()
    return gap // first.element_size() if gap > 0 and gap % first.element_size() == 0 else None


def _uniform(seqs: list[Seq]) -> bool:
    """Whether the sequences are one batch: one length, and each of q, k, v a fixed step apart in memory."""
    return all(_step([getattr(s, name) for s in seqs]) is not None for name in ("q", "k", "v"))


def _stack_view(seqs: list[Seq], name: str):
    """[B, H, L, D] over equal sequences' [L, H, D] a fixed step apart (a view, no copy)."""
    ts = [getattr(s, name) for s in seqs]
    first = ts[0]
    return first.as_strided((len(ts), *first.shape), (_step(ts), *first.stride())).transpose(1, 2)


def _nested(seqs: list[Seq]):
    """(q, k, v) as jagged nested tensors [B, H, j, D] when each is one packed tensor in sequence order, else None."""
    import logging

    import torch

    # torch logs a warning per refused backend; the refusal is the next option here, and the row names what ran
    logging.getLogger("torch.nested._internal.sdpa").setLevel(logging.ERROR)
    out = []
    for name in ("q", "k", "v"):
        ts = [getattr(s, name) for s in seqs]
        base = ts[0]
        lengths = [t.shape[0] for t in ts]
        if not _adjacent_rows(ts):
            return None
        values = base.as_strided((sum(lengths), *base.shape[1:]), base.stride())
        offsets = torch.tensor([0, *_cumsum(lengths)], dtype=torch.int64, device=base.device)
        out.append(torch.nested.nested_tensor_from_jagged(values, offsets, min_seqlen=min(lengths),
                                                          max_seqlen=max(lengths)).transpose(1, 2))
    return tuple(out)


def _adjacent_rows(ts: list) -> bool:
    if any(not t.is_contiguous() for t in ts):
        return False
    return all(b.data_ptr() - a.data_ptr() == a.numel() * a.element_size() for a, b in zip(ts, ts[1:]))


def _cumsum(xs):
    total = 0
    for x in xs:
        total += x
        yield total


def _split(packed, lengths) -> list:
    out, start = [], 0
    for n in lengths:
        out.append(packed[start:start + n])
        start += n
    return out


# ---- the operators -----------------------------------------------------------------------------------------

def attention_forward(model, inputs: dict, device: str) -> Iterator[Option]:
    """Bidirectional varlen attention over packed q/k/v (views, no copy)."""
    q, k, v = inputs["q"], inputs["k"], inputs["v"]
    cq, ck = inputs["cu_seqlens_q"].tolist(), inputs["cu_seqlens_k"].tolist()
    seqs = [Seq(q[a:b], k[c:d], v[c:d], slice(a, b)) for a, b, c, d in zip(cq, cq[1:], ck, ck[1:]) if b > a]
    return sdpa_options(seqs, q, causal=False, scale=q.shape[-1] ** -0.5)


def unified_attention(model, inputs: dict, device: str) -> Iterator[Option]:
    """Causal attention of each sequence's queries over its keys in the paged cache, K/V gathered contiguous
    beforehand (packed in sequence order, so equal-length batches and nested batches are views)."""
    import torch

    q, kc, vc, table = inputs["q"], inputs["k_cache"], inputs["v_cache"], inputs["block_table"]
    _, bs, hkv, d = kc.shape
    cq, kv_lens = inputs["cu_seqlens_q"].tolist(), inputs["seqused_k"].tolist()
    slots = []
    for s, n in enumerate(kv_lens):
        pos = torch.arange(int(n), device=q.device)
        slots.append(table[s, pos // bs].long() * bs + pos % bs)
    every = torch.cat(slots)
    k_packed = kc.reshape(-1, hkv, d)[every].contiguous()
    v_packed = vc.reshape(-1, hkv, vc.shape[-1])[every].contiguous()
    ks, vs = _split(k_packed, kv_lens), _split(v_packed, kv_lens)
    seqs = [Seq(q[a:b], ks[s], vs[s], slice(a, b)) for s, (a, b) in enumerate(zip(cq, cq[1:])) if b > a]
    decode = all(s.q.shape[0] == 1 for s in seqs)
    return sdpa_options(seqs, q, causal=not decode, scale=d ** -0.5)


def paged_attention_decode(model, inputs: dict, device: str) -> Iterator[Option]:
    """One query per sequence over its keys, K/V gathered out of vLLM's paged layout beforehand."""
    import torch

    query, kc, vc, table = inputs["query"], inputs["k_cache"], inputs["v_cache"], inputs["block_tables"]
    blocks, hkv, d, bs = vc.shape
    k_rows = kc.permute(0, 3, 1, 2, 4).reshape(blocks * bs, hkv, d)
    v_rows = vc.permute(0, 3, 1, 2).reshape(blocks * bs, hkv, d)
    lens = inputs["seq_lens"].tolist()
    slots = [table[s, torch.arange(int(n), device=query.device) // bs].long() * bs
             + torch.arange(int(n), device=query.device) % bs for s, n in enumerate(lens)]
    k_packed = k_rows[torch.cat(slots)].contiguous()
    v_packed = v_rows[torch.cat(slots)].contiguous()
    ks, vs = _split(k_packed, lens), _split(v_packed, lens)
    seqs = [Seq(query[s:s + 1], ks[s], vs[s], slice(s, s + 1)) for s in range(len(lens)) if lens[s] > 0]
    return sdpa_options(seqs, query, causal=False, scale=d ** -0.5)


def mla_decode_attention(model, inputs: dict, device: str) -> Iterator[Option]:
    """MLA decode as one-KV-head attention: the h query heads of a sequence are h query rows against its latent
    rows (K = the whole row, V = its first r columns, a view)."""
    q, kv, lens = inputs["q"], inputs["kv_cache"], inputs["seq_lens"].tolist()
    r, rope = model.r, model.rope
    heads = q.shape[1]
    rows = _split(kv, lens)
    seqs = [Seq(q[b].unsqueeze(1), rows[b], rows[b][..., :r], slice(b * heads, (b + 1) * heads))
            for b in range(len(lens))]
    for option in sdpa_options(seqs, q.reshape(-1, 1, q.shape[-1]), causal=False, scale=(r + rope) ** -0.5):
        yield Option(option.path, option.run, lambda res, o=option: o.outputs(res).reshape(-1, heads, r))
