"""attention_forward's kwargs from an SDPA-family op's args, and the registry problem an SDPA call is."""

from __future__ import annotations

import re

from catalogue.op_args import Args, generic
from catalogue.operators.unified_attention.shapes import extract as varlen_attention

# A contiguous (HF) KV cache has no block size; its problems take the one every catalogue paged
# attention problem uses.
CONTIGUOUS_BLOCK_SIZE = 16


# Concrete-input positions of (is_causal, attn_mask) in each aten SDPA entry point's schema.
_SDPA_FLAGS = {
    "aten::scaled_dot_product_attention": (5, 3),
    "aten::_scaled_dot_product_cudnn_attention": (6, 3),
    "aten::_scaled_dot_product_efficient_attention": (6, 3),
    "aten::_scaled_dot_product_flash_attention": (4, None),
    "aten::_flash_attention_forward": (8, None),
}


def extract(a: Args) -> dict:
    ts = a.nd(3)
    if not ts:
        return generic(a)
    _, q, t = ts[0]
    if len(q) == 4:
        # aten SDPA (and its cudnn/math variants) take [batch, heads, seq, dim]; the flash and
        # efficient kernels under it take [batch, seq, heads, dim].
        bshd = re.search(r"_flash_attention_forward|_efficient_attention_forward", a.op) is not None
        seq, heads = (1, 2) if bshd else (2, 1)
        out = {"num_heads": q[heads], "head_dim": q[3], "seq_lens": [q[seq]] * q[0], "dtype": t}
        k = ts[1][1] if len(ts) > 1 and len(ts[1][1]) == 4 else None
        if k is not None:
            if k[seq] != q[seq]:
                out["kv_lens"] = [k[seq]] * k[0]  # decode / chunked prefill: the cache the queries read
            if k[heads] != q[heads]:
                out["num_kv_heads"] = k[heads]
        if len(ts) > 2 and len(ts[2][1]) == 4 and ts[2][1][3] != q[3]:
            out["v_head_dim"] = ts[2][1][3]  # DeepSeek MLA run as MHA: qk 192, v 128
        causal, mask = _SDPA_FLAGS.get(a.op, (None, None))
        if causal is not None and causal < len(a.positional) and a.positional[causal] in ("True", "False"):
            out["is_causal"] = a.positional[causal] == "True"
        if mask is not None and a.has_tensor(mask):
            out["attn_mask"] = True
        return out
    out = varlen_attention(a)
    return {"num_heads": out["num_query_heads"], "head_dim": out["head_size"], "num_tokens": out["num_tokens"], "dtype": t}


def to_problem(kw: dict, step=None) -> tuple[str, dict]:
    """The registry operator and kwargs an SDPA call is: a causal prefill is unified_attention, a one-query call
    without a mask paged_attention_decode, a bidirectional equal-heads one attention_forward itself."""
    # SDPA's is_causal is top-left aligned, so a causal call is a plain causal prefill only where
    # q_len == kv_len; a one-query call is decode only without it (HF passes is_causal=False there,
    # and a [B, 1, 1, kv] mask can only hide keys: padding or unused static-cache slots).
    q_lens, kv_lens = kw.get("seq_lens"), kw.get("kv_lens", kw.get("seq_lens"))
    if not isinstance(q_lens, list) or not q_lens or "v_head_dim" in kw or "is_causal" not in kw:
        return "attention_forward", kw
    heads, kv_heads = kw["num_heads"], kw.get("num_kv_heads", kw["num_heads"])
    common = {"num_query_heads": heads, "num_kv_heads": kv_heads, "head_size": kw["head_dim"], "dtype": kw["dtype"]}
    if set(q_lens) == {1} and len(set(kv_lens)) == 1 and not kw["is_causal"]:
        return "paged_attention_decode", {"num_seqs": len(q_lens), "ctx_len": kv_lens[0],
                                          "block_size": CONTIGUOUS_BLOCK_SIZE, **common}
    if q_lens == kv_lens and not kw.get("attn_mask"):
        if kw["is_causal"]:
            return "unified_attention", {"num_seqs": len(q_lens), "seq_lens": q_lens,
                                         "block_size": CONTIGUOUS_BLOCK_SIZE, **common}
        if heads == kv_heads:  # bidirectional, equal heads: the vision-encoder operator
            return "attention_forward", {k: kw[k] for k in ("num_heads", "head_dim", "seq_lens", "dtype")}
    return "attention_forward", kw
