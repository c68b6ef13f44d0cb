"""Operator kwargs from an op's Input Dims / Input type / Concrete Inputs, and their canonical JSON key."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable

# Parameter names follow the catalogue's shapes.json init_kwargs/input_kwargs per operator;
# `dtype` (and `b_dtype`, `kv_dtype` where an op mixes dtypes) are added, as AGENTS.md says.
# Two steps: `shape_kwargs` here reads what one op recorded; ingest/problems.py turns that into a
# complete problem of the registry operator whose reference computes the same thing.
# Keys a shape keeps when the trace cannot complete it (so it stays visibly incomplete):
#   unified_attention: `num_tokens` (Σ query tokens) where per-sequence lengths are not recorded
#     or queries are shorter than keys (chunked prefill / mixed steps);
#   attention_forward (SDPA): `kv_lens` (keys longer than queries), `num_kv_heads` (GQA),
#     `is_causal`, `attn_mask`, `v_head_dim` — what kept it from a registry attention problem;
#   gemm (not a catalogue operator): m, n, k and `batch` for bmm;
#   fused_moe from one aten::_grouped_mm: m (routed rows = tokens × top_k), n, k;
#   fused_qkv_rope: `is_neox_style` false (the registry's reference is neox);
#   `shape` (+ `dtype`): the first input's dims, for ops without a dedicated extractor.

_DTYPES = {
    "c10::BFloat16": "bf16",
    "c10::Half": "fp16",
    "float": "fp32",
    "double": "fp64",
    "c10::Float8_e4m3fn": "fp8_e4m3fn",
    "c10::Float8_e4m3fnuz": "fp8_e4m3fnuz",
    "c10::Float8_e5m2": "fp8_e5m2",
    "c10::Float8_e5m2fnuz": "fp8_e5m2fnuz",
    "c10::Float4_e2m1fn_x2": "fp4_e2m1fn_x2",
    "c10::Float8_e8m0fnu": "fp8_e8m0fnu",
    "unsigned char": "uint8",
    "signed char": "int8",
    "int": "int32",
    "long int": "int64",
    "bool": "bool",
}


def canonical_json(kwargs: dict) -> str:
    """The shape key: JSON with sorted keys and no spaces (deterministic across runs and machines)."""
    return json.dumps(kwargs, sort_keys=True, separators=(",", ":"))


def dtype_name(torch_type: str | None) -> str | None:
    """Short dtype name (bf16, fp16, fp8_e4m3fn, ...) of a profiler `Input type` entry."""
    if not torch_type:
        return None
    return _DTYPES.get(torch_type, torch_type.replace("c10::", "").lower())


class Args:
    """An op's recorded inputs: tensors (position, dims, dtype) and concrete scalars, and the other
    ops of its chain (`context`: (name, Args) pairs, outermost first)."""

    def __init__(self, op: str, dims, types, concrete, context=()):
        self.op = op or ""
        self.context = context
        dims = dims if isinstance(dims, list) else []
        types = types if isinstance(types, list) else []
        concrete = concrete if isinstance(concrete, list) else []
        self.tensors: list[tuple[int, list[int], str | None]] = []
        for i, d in enumerate(dims):
            t = types[i] if i < len(types) else None
            if isinstance(d, list) and d and all(isinstance(x, int) for x in d) and t not in ("Scalar", "ScalarList"):
                self.tensors.append((i, d, dtype_name(t)))
        self.positional = [c if isinstance(c, str) else "" for c in concrete]
        self.concrete = [c for c in concrete if isinstance(c, str) and c != ""]

    def nd(self, min_rank: int) -> list[tuple[int, list[int], str | None]]:
        return [t for t in self.tensors if len(t[1]) >= min_rank]

    def floats(self) -> list[float]:
        out = []
        for c in self.concrete:
            if re.fullmatch(r"-?\d*\.\d*(e-?\d+)?|-?\d+e-?\d+", c):
                out.append(float(c))
        return out

    def ints(self) -> list[int]:
        return [int(c) for c in self.concrete if re.fullmatch(r"-?\d+", c)]

    def bools(self) -> list[bool]:
        return [c == "True" for c in self.concrete if c in ("True", "False")]

    def has_tensor(self, position: int) -> bool:
        return any(i == position for i, _, _ in self.tensors)

    def outer(self, name: re.Pattern) -> list["Args"]:
        """The chain's other ops whose name matches, innermost first."""
        return [a for n, a in reversed(self.context) if name.search(n)]


def _rows(d: list[int]) -> int:
    return math.prod(d[:-1]) if len(d) > 1 else d[0]


def _generic(a: Args) -> dict:
    if not a.tensors:
        return {}
    _, d, t = a.tensors[0]
    return {"shape": d, "dtype": t}


_KN_OPS = re.compile(r"^aten::(mm|addmm|matmul|bmm|baddbmm|_scaled_mm|addmv|mv)$|cutlass_scaled_mm|scaled_mm$")


def _gemm(a: Args) -> dict:
    ts = a.nd(2)
    if re.search(r"addmm|baddbmm", a.op) and ts and a.tensors and a.tensors[0][0] == ts[0][0] and len(ts) > 2:
        ts = ts[1:]  # the bias/accumulator comes first
    styles = ("kn", "nk") if _KN_OPS.search(a.op) else ("nk", "kn")
    for style in styles:
        for (_, x, xt), (_, w, wt) in zip(ts, ts[1:]):
            if style == "kn" and x[-1] == w[-2]:
                k, n = w[-2], w[-1]
            elif style == "nk" and x[-1] == w[-1]:
                n, k = w[-2], w[-1]
            else:
                continue
            out = {"m": x[-2] if len(x) == 3 and len(w) == 3 else _rows(x), "n": n, "k": k, "dtype": xt}
            if len(x) == 3 and len(w) == 3:
                out["batch"] = x[0]
            if wt != xt:
                out["b_dtype"] = wt
            return out
    return _generic(a)


_FLOATS = ("bf16", "fp16", "fp32")


def _inductor_norm(a: Args) -> dict:
    # An Inductor kernel's arguments are its buffers: the norm weight [H], activations [..., H]
    # and, where the embedding lookup was fused in, the table [vocab, H]; the activations are
    # the ones with the fewest rows.
    weights = [d for _, d, t in a.tensors if len(d) == 1 and t in _FLOATS]
    if not weights:
        return {}
    hidden = weights[-1][0]
    rows = [(_rows(d), t) for _, d, t in a.tensors if len(d) >= 2 and d[-1] == hidden and t in _FLOATS]
    if not rows:
        return {}
    tokens, t = min(rows)
    return {"token_count": tokens, "hidden_size": hidden, "dtype": t}


def _norm(a: Args) -> dict:
    if a.op.startswith("triton_"):
        return _inductor_norm(a)
    if not a.tensors:
        return {}
    _, x, t = (a.nd(2) or a.tensors)[0]
    out = {"token_count": _rows(x), "hidden_size": x[-1], "dtype": t}
    eps = a.floats()
    if eps:
        out["eps"] = eps[0]
    return out


def _silu_and_mul(a: Args) -> dict:
    ts = a.nd(1)[:2]
    if not ts:
        return {}
    _, x, t = max(ts, key=lambda e: e[1][-1])  # the input is [T, 2I]; the output [T, I]
    return {"shape": x, "dtype": t}


def _rope(a: Args) -> dict:
    ts = a.tensors
    if len(ts) < 3 or a.op.startswith("triton_"):
        # An Inductor kernel's arguments are its fused buffers, not (positions, q, k, ...).
        return _generic(a)
    positions, q, k = ts[0][1], ts[1][1], ts[2][1]
    tokens = math.prod(positions)
    ints = a.ints()
    head = ints[0] if ints else q[-1]
    out = {
        "total_tokens": tokens,
        "head_dim": head,
        "num_heads": math.prod(q) // max(tokens * head, 1),
        "num_kv_heads": math.prod(k) // max(tokens * head, 1),
        "dtype": ts[1][2],
    }
    if len(ts) > 3:
        out["rope_dim"] = ts[3][1][-1]
    bools = a.bools()
    if bools and not bools[-1]:
        out["is_neox_style"] = False  # GPT-J interleaved pairs: not what the registry's reference rotates
    return out


def _cache(a: Args) -> dict:
    ts = a.tensors
    if not ts:
        return {}
    _, key, t = ts[0]
    out = {"shape": key, "dtype": t}
    caches = [e for e in ts[2:] if len(e[1]) >= 2]
    if caches:
        cache = caches[0]
        if len(cache[1]) == 4 and len(key) == 3:
            out["block_size"] = cache[1][1]  # vLLM flash layout [blocks, block_size, heads, dim]
        if len(cache[1]) == len(key) == 2 and cache[1][1] == key[1]:
            # SGLang store_cache: rows [T, Hkv·D] into a token-granular pool [slots, Hkv·D] (one
            # token per block); the heads split is on the enclosing set_kv_buffer's [T, Hkv, D].
            out["block_size"] = 1
            split = [d for o in a.outer(re.compile("set_kv_buffer")) for _, d, _ in o.nd(3)
                     if len(d) == 3 and d[0] == key[0] and d[1] * d[2] == key[1]]
            if split:
                out["shape"] = split[0]
        if cache[2] != t:
            out["kv_dtype"] = cache[2]
    return out


def _attention(a: Args) -> dict:
    ts = a.nd(3)
    if not ts:
        return _generic(a)
    _, q, t = ts[0]
    out = {"num_tokens": q[0], "num_query_heads": q[1], "head_size": q[2], "dtype": t}
    if len(ts) > 1:
        kv = ts[1][1]
        out["num_kv_heads"] = kv[-2]
        if ts[1][2] != t:
            out["kv_dtype"] = ts[1][2]
    cu = [e for e in a.tensors if len(e[1]) == 1 and e[2] == "int32"]
    if cu:
        out["num_seqs"] = cu[0][1][0] - 1  # cu_seqlens_q has one entry per sequence plus one
    return out


def _paged_decode(a: Args) -> dict:
    threes, fours = a.nd(3), [e for e in a.tensors if len(e[1]) == 4]
    if not threes:
        return _generic(a)
    q = threes[1][1] if len(threes) > 1 and threes[0][1] == threes[1][1] else threes[0][1]
    out = {"num_seqs": q[0], "num_query_heads": q[1], "head_size": q[2], "dtype": threes[0][2]}
    if fours:
        out["num_kv_heads"], out["block_size"] = fours[0][1][2], fours[0][1][1]
    return out


# Concrete-input positions of (is_causal, attn_mask) in each aten SDPA entry point's schema.
_SDPA_FLAGS = {
    "aten::scaled_dot_product_attention": (5, 3),
    "aten::_scaled_dot_product_cudnn_attention": (6, 3),
    "aten::_scaled_dot_product_efficient_attention": (6, 3),
    "aten::_scaled_dot_product_flash_attention": (4, None),
    "aten::_flash_attention_forward": (8, None),
}


def _sdpa(a: Args) -> dict:
    ts = a.nd(3)
    if not ts:
        return _generic(a)
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
    out = _attention(a)
    return {"num_heads": out["num_query_heads"], "head_dim": out["head_size"], "num_tokens": out["num_tokens"], "dtype": t}


def _grouped_mm(a: Args) -> dict:
    # aten::_grouped_mm(x[rows, K], w[experts, K, N], offs[experts]): rows = tokens × top_k, which
    # one call cannot split; K and N are hidden and 2×intermediate (gate/up) or the reverse (down).
    ts = a.nd(2)
    if len(ts) < 2 or len(ts[0][1]) != 2 or len(ts[1][1]) != 3 or ts[0][1][1] != ts[1][1][1]:
        return _generic(a)
    (_, x, t), (_, w, wt) = ts[0], ts[1]
    out = {"num_experts": w[0], "m": x[0], "n": w[2], "k": w[1], "dtype": t}
    if wt != t:
        out["b_dtype"] = wt
    return out


def _moe(a: Args) -> dict:
    ts = a.nd(2)
    if a.op == "aten::_grouped_mm":
        return _grouped_mm(a)
    if not ts or a.op.startswith("triton_"):
        return _generic(a)  # an Inductor kernel fused into the MoE region: its own tensor, not the MoE's
    _, x, t = ts[0]
    out = {"token_count": x[0], "hidden_size": x[-1], "dtype": t}
    if len(ts) > 1 and ts[1][1][0] == x[0]:
        out["num_experts"] = ts[1][1][-1]  # router logits [T, E]
    return out


_TOPK = re.compile(r"^(TopK|aten::topk)$")


def _topk_softmax(a: Args) -> dict:
    if "moe_forward" in a.op:
        out = _moe(a)
        out = {k: v for k, v in out.items() if k in ("token_count", "num_experts")}
        for topk in a.outer(_TOPK):  # triton_kernels' routing op inside vLLM's moe_forward: topk(logits, k, ...)
            if topk.ints():
                out["top_k"] = topk.ints()[0]
                break
        return out
    ts = a.nd(2)
    if not ts:
        return _generic(a)
    logits = ts[-1][1]
    out = {"token_count": logits[0], "num_experts": logits[-1]}
    if len(ts) > 1:
        out["top_k"] = ts[0][1][-1]
    return out


def _moe_align(a: Args) -> dict:
    if "moe_forward" in a.op:
        out = _moe(a)
        out = {k: v for k, v in out.items() if k in ("token_count", "num_experts")}
        for sort in a.outer(re.compile(r"^SortTokens$")):  # SortTokens(topk_weights [T, k], topk_ids [T, k], E)
            ids = sort.nd(2)
            if ids and ids[0][1][0] == out.get("token_count"):
                out["top_k"] = ids[0][1][1]
                break
        return out
    ts = a.nd(2)
    if not ts:
        return _generic(a)
    ids = ts[0][1]
    out = {"token_count": ids[0], "top_k": ids[-1]}
    ints = a.ints()
    if len(ints) >= 2:
        out["num_experts"], out["block_size"] = ints[0], ints[1]
    return out


def _moe_sum(a: Args) -> dict:
    ts = a.nd(3)
    if not ts:
        return _generic(a)
    x = ts[0][1]
    return {"token_count": x[0], "top_k": x[1], "hidden_size": x[2], "dtype": ts[0][2]}


def _quant(a: Args) -> dict:
    wide = [e for e in a.tensors if e[2] in ("bf16", "fp16", "fp32") and len(e[1]) >= 2]
    if not wide:
        return _generic(a)
    _, x, t = wide[0]
    out = {"token_count": _rows(x), "hidden_size": x[-1], "dtype": t}
    ints = [i for i in a.ints() if i in (32, 64, 128, 256)]
    if "group" in a.op and ints:
        out["group_size"] = ints[0]
    return out


def _topk_filter(a: Args) -> dict:
    ts = a.nd(2)
    if not ts:
        return _generic(a)
    x = ts[0][1]
    return {"seq_len": _rows(x), "hidden_size": x[-1]}


def _embedding(a: Args) -> dict:
    if len(a.tensors) < 2:
        return _generic(a)
    weight, idx = a.tensors[0][1], a.tensors[1][1]
    return {"token_count": math.prod(idx), "hidden_size": weight[-1], "vocab_size": weight[0], "dtype": a.tensors[0][2]}


def _layer_norm(a: Args) -> dict:
    if not a.tensors:
        return {}
    return {"shape": a.tensors[0][1], "dtype": a.tensors[0][2]}


# Positions of (stride, padding, dilation, groups, transposed) in each convolution op's schema.
_CONV_ARGS = {
    "aten::convolution": (3, 4, 5, 8, 6),
    "aten::_convolution": (3, 4, 5, 8, 6),
    "aten::conv1d": (3, 4, 5, 6, None),
    "aten::conv2d": (3, 4, 5, 6, None),
    "aten::conv3d": (3, 4, 5, 6, None),
    "aten::cudnn_convolution": (3, 2, 4, 5, None),
    "aten::miopen_convolution": (4, 3, 5, 6, None),
    "aten::miopen_depthwise_convolution": (4, 3, 5, 6, None),
}


def _int_list(text: str) -> list[int] | None:
    try:
        value = json.loads(text)
    except ValueError:
        return None
    if isinstance(value, int):
        value = [value]
    return value if isinstance(value, list) and all(isinstance(v, int) for v in value) else None


def _conv_from(a: Args) -> dict | None:
    positions = _CONV_ARGS.get(a.op)
    ts = [t for t in a.tensors if t[0] < 2]
    if positions is None or len(ts) < 2 or ts[0][0] != 0 or ts[1][0] != 1:
        return None
    (_, x, t), (_, w, _) = ts[0], ts[1]
    if len(x) not in (3, 4) or len(w) != len(x):
        return None  # 3-D convolutions are not the modelled operator: left to the generic shape
    if len(x) == 3:  # conv1d as a 2-D convolution of height 1
        x, w = [x[0], x[1], 1, x[2]], [w[0], w[1], 1, w[2]]
    out = {"N": x[0], "C": x[1], "H": x[2], "W": x[3], "K": w[0], "R": w[2], "S": w[3], "dtype": t,
           "groups": x[1] // w[1] if w[1] and x[1] % w[1] == 0 else None}
    stride, padding, dilation, groups, transposed = positions
    pos = a.positional
    if transposed is not None and transposed < len(pos) and pos[transposed] == "True":
        out["transposed"] = True  # a transposed convolution is not the forward problem the work model counts
    for key, at, fill in (("stride", stride, 1), ("padding", padding, 0), ("dilation", dilation, 1)):
        value = _int_list(pos[at]) if at < len(pos) and pos[at] else None
        if value is not None and len(value) == 1:
            value = [fill, value[0]] if len(ts[0][1]) == 3 else value * 2
        if value is not None and len(value) == 2:
            out[key] = value
    if groups < len(pos) and re.fullmatch(r"\d+", pos[groups] or ""):
        out["groups"] = int(pos[groups])
    return out


def _convolution(a: Args) -> dict:
    # aten::convolution keeps one argument order across backends; cudnn/miopen reorder padding and stride.
    candidates = [a] + [o for _, o in reversed(a.context)]
    ranked = sorted(candidates, key=lambda o: (o.op not in ("aten::convolution", "aten::_convolution"),
                                                o.op not in _CONV_ARGS))
    for o in ranked:
        out = _conv_from(o)
        if out is not None:
            return out
    return _generic(a)


def _batch_norm(a: Args) -> dict:
    if not a.tensors:
        return {}
    _, x, t = a.tensors[0]
    return {"shape": x, "dtype": t}


def _group_norm(a: Args) -> dict:
    if not a.tensors:
        return {}
    _, x, t = a.tensors[0]
    out = {"shape": x, "dtype": t}
    if a.op == "aten::native_group_norm":  # (input, weight, bias, N, C, HxW, group, eps)
        groups = a.positional[6] if len(a.positional) > 6 else ""
    else:  # aten::group_norm(input, num_groups, ...), aiter's group norm likewise
        groups = a.positional[1] if len(a.positional) > 1 else ""
    if re.fullmatch(r"\d+", groups):
        out["num_groups"] = int(groups)
    return out


EXTRACTORS: dict[str, Callable[[Args], dict]] = {
    "convolution": _convolution,
    "batch_norm": _batch_norm,
    "group_norm": _group_norm,
    "gemm": _gemm,
    "block_scaled_mm": _gemm,
    "rms_norm": _norm,
    "fused_add_rms_norm": _norm,
    "fused_rmsnorm_quant": _norm,
    "silu_and_mul": _silu_and_mul,
    "fused_qkv_rope": _rope,
    "reshape_and_cache": _cache,
    "unified_attention": _attention,
    "paged_attention_decode": _paged_decode,
    "attention_forward": _sdpa,
    "fused_moe": _moe,
    "fp8_blockscale_fused_moe": _moe,
    "moe_topk_gating_softmax": _topk_softmax,
    "moe_align_block_size": _moe_align,
    "moe_count_and_sort": _moe_align,
    "moe_sum_reduce": _moe_sum,
    "fp8_dynamic_per_token_quant": _quant,
    "per_token_group_quant_fp8": _quant,
    "topk_filter": _topk_filter,
    "embedding": _embedding,
    "layer_norm": _layer_norm,
}


def op_args_view(name: str | None, op_args: dict, context=()) -> Args:
    return Args(name or "", op_args.get("dims"), op_args.get("types"), op_args.get("concrete"), context)


def shape_kwargs(operator: str, op: str | None, op_args: dict | None, chain=None) -> dict:
    """The operator's kwargs from its deciding op's recorded args ({dims, types, concrete}); {} if none.

    `chain`: the other (op name, args) pairs of the row's op chain, outermost first, for the few
    operators whose framework op records a dimension on an op nested in or around it.
    """
    if not op_args:
        return {}
    context = tuple((n, op_args_view(n, x)) for n, x in (chain or ()) if x and n != op)
    a = op_args_view(op, op_args, context)
    kwargs = EXTRACTORS.get(operator, _generic)(a)
    return {k: v for k, v in kwargs.items() if v is not None}


def add_step_context(operator: str, kwargs: dict, step) -> dict:
    """Attention kwargs completed from the step annotation: sequence count and mean kv length."""
    if step is None or operator not in ("unified_attention", "paged_attention_decode"):
        return kwargs
    out = dict(kwargs)
    reqs = (step.context_reqs or 0) + (step.generation_reqs or 0)
    if operator == "unified_attention" and "num_seqs" not in out and reqs:
        out["num_seqs"] = reqs
    if operator == "paged_attention_decode" and step.generation_kv and step.generation_reqs:
        out["ctx_len"] = round(step.generation_kv / step.generation_reqs)
    return out
