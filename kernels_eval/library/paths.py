"""Each operator's library path: the fastest library calls torch offers for it (cuBLAS GEMMs, fp8 scaled GEMMs,
grouped GEMMs, fused norms, cuDNN convolution, SDPA in kernels_eval/library/attention.py), as Options in order of
preference; or, where torch has no kernel for the operator's core, the reference's own loop-free torch ops
(labelled so); or no library path at all, with the reason (NO_LIBRARY).

A builder takes the reference Model (built from the problem's init kwargs, so defaults apply as for a candidate),
one input set and the device, and yields Options lazily: the baseline runs the first that runs and matches the
reference (kernels_eval/library/baseline.py). Work done before the timed call is only what docs/library-baseline.md
lists (a layout a library needs of init-time state, a paged cache gathered contiguous, caches cloned for an
in-place update).
"""

from __future__ import annotations

from typing import Callable, Iterator

from kernels_eval.library import attention
from kernels_eval.library.option import Option

REFERENCE_OPS = "torch ops: the reference's own formulation (no library kernel for this operator)"
# Operators with no library path: the reference is a Python loop over time steps or experts, which no library call
# replaces (a baseline would time the loop, not a library).
NO_LIBRARY = {
    "chunk_delta_rule_output": "no library kernel for chunked delta-rule attention in torch (flash-linear-attention "
                               "is not installed); the reference loops over chunks",
    "chunk_gated_delta_rule_state": "no library kernel for the gated delta rule's chunk states in torch; the "
                                    "reference loops over chunks",
    "gated_delta_rule_update": "no library kernel for the gated delta rule's recurrent update in torch; the "
                               "reference loops over tokens",
    "fp8_blockscale_fused_moe": "no grouped GEMM with 128x128 fp8 block scales in torch; the reference loops over "
                                "experts on dequantised weights",
}


def _same(x):
    return x


def _via(device: str, library: str) -> str:
    """' (cuBLAS)' and the like on a GPU, where that library is what torch calls; nothing on a CPU."""
    return f" ({library})" if device == "cuda" else ""


def _one(path: str, run: Callable[[], object], outputs=_same) -> Iterator[Option]:
    yield Option(path, run, outputs)


def reference_ops(model, inputs: dict, device: str) -> Iterator[Option]:
    """The reference's forward itself: for operators whose core no library kernel does (its torch ops run)."""
    yield Option(REFERENCE_OPS, lambda: model(**inputs), _same)


# ---- GEMMs --------------------------------------------------------------------------------------------------

def gemm(model, inputs: dict, device: str) -> Iterator[Option]:
    """torch.matmul (cuBLAS) for bf16/fp16; torch._scaled_mm for fp8 with per-tensor or per-row scales."""
    import torch

    a, b = inputs["a"], inputs["b"]
    if model.scaling == "none":
        yield from _one(f"torch.matmul{_via(device, 'cuBLAS')}", lambda: torch.matmul(a, b.T))
        return
    if model.scaling == "per_row":
        sa, sb = inputs["a_scale"].float().reshape(-1, 1), inputs["b_scale"].float().reshape(1, -1)
    else:
        sa, sb = inputs["a_scale"].float().reshape(()), inputs["b_scale"].float().reshape(())
    yield from _one(f"torch._scaled_mm ({model.scaling} scales)",
                    lambda: torch._scaled_mm(a, b.T, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16))


def block_scaled_mm(model, inputs: dict, device: str) -> Iterator[Option]:
    """fp8 GEMM with 1 x gk activation and gn x gk weight block scales through torch's scaled GEMM (cuBLAS block
    scaling on Hopper), fp32 out, else bf16 out widened; the activation scales are made outer-dim-major inside the
    timed call (they arrive with the activations), the weight scales' transpose is a view."""
    import torch
    import torch.nn.functional as F

    a, b, a_scales, b_scales = inputs["a"], inputs["b"], inputs["a_scales"], inputs["b_scales"]
    if (model.group_n, model.group_k) != (128, 128):
        raise ValueError(f"torch's block-scaled GEMM takes 1x128 activation and 128x128 weight blocks only, not "
                         f"{model.group_n}x{model.group_k}")
    recipes = getattr(F, "ScalingType", None)
    for out_dtype in (torch.float32, torch.bfloat16):
        widen = (lambda t: t.float()) if out_dtype != torch.float32 else _same
        name = str(out_dtype).split(".")[-1]
        if recipes is not None and hasattr(F, "scaled_mm"):
            def run_f(out_dtype=out_dtype):
                sa = a_scales.t().contiguous().t()
                return F.scaled_mm(a, b.T, scale_a=sa, scale_recipe_a=recipes.BlockWise1x128, scale_b=b_scales.T,
                                   scale_recipe_b=recipes.BlockWise128x128, output_dtype=out_dtype)
            yield Option(f"torch.nn.functional.scaled_mm (1x128 x 128x128 block scales, {name} out)", run_f, widen)

        def run_private(out_dtype=out_dtype):
            sa = a_scales.t().contiguous().t()
            return torch._scaled_mm(a, b.T, scale_a=sa, scale_b=b_scales.T, out_dtype=out_dtype)
        yield Option(f"torch._scaled_mm (1x128 x 128x128 block scales, {name} out)", run_private, widen)


def fused_moe(model, inputs: dict, device: str) -> Iterator[Option]:
    """SwiGLU experts through torch's grouped GEMM (torch._grouped_mm): routed rows sorted by expert (torch.sort),
    both expert GEMMs grouped, the weighted rows summed back per token (index_add_); else one torch.matmul per
    expert."""
    import torch
    import torch.nn.functional as F

    h, w1, w2 = inputs["hidden_states"], inputs["w1"], inputs["w2"]
    weights, ids = inputs["topk_weights"], inputs["topk_ids"]
    inter, experts, k = model.inter, model.num_experts, ids.shape[1]

    def route():
        flat = ids.flatten()
        order = torch.sort(flat, stable=True).indices
        tokens = order // k
        counts = torch.bincount(flat, minlength=experts)
        return order, tokens, counts

    def combine(rows, order, tokens):
        out = torch.zeros(h.shape[0], h.shape[1], dtype=torch.float32, device=h.device)
        return out.index_add_(0, tokens, rows.float() * weights.flatten()[order, None])

    for out_dtype in ((torch.float32, h.dtype) if hasattr(torch, "_grouped_mm") else ()):
        def grouped(out_dtype=out_dtype):
            order, tokens, counts = route()
            offs = torch.cumsum(counts, 0, dtype=torch.int32)
            gate_up = torch._grouped_mm(h[tokens], w1.transpose(1, 2), offs=offs, out_dtype=out_dtype).float()
            act = (F.silu(gate_up[:, :inter]) * gate_up[:, inter:]).to(h.dtype)  # bf16 between the GEMMs, as vLLM
            return combine(torch._grouped_mm(act, w2.transpose(1, 2), offs=offs, out_dtype=out_dtype), order,
                           tokens)
        name = str(out_dtype).split(".")[-1]
        yield Option(f"torch._grouped_mm (grouped GEMM, {name} out) with torch.sort routing and index_add_", grouped,
                     _same)

    def per_expert():
        order, tokens, counts = route()
        rows = torch.empty(tokens.shape[0], h.shape[1], dtype=h.dtype, device=h.device)
        start = 0
        for e, n in enumerate(counts.tolist()):
            if n:
                sel = tokens[start:start + n]
                gate_up = (h[sel] @ w1[e].T).float()
                act = (F.silu(gate_up[:, :inter]) * gate_up[:, inter:]).to(h.dtype)
                rows[start:start + n] = act @ w2[e].T
                start += n
        return combine(rows, order, tokens)
    yield Option(f"torch.matmul{_via(device, 'cuBLAS')} per expert with torch.sort routing and index_add_", per_expert,
                 _same)


def linear_sigmoid_mul(model, inputs: dict, device: str) -> Iterator[Option]:
    """F.linear (cuBLAS, bias fused) then sigmoid and product."""
    import torch
    import torch.nn.functional as F

    h, w, bias, post = inputs["hidden_states"], inputs["weight"], inputs["bias"], inputs["post_mul_mat"]
    yield from _one(f"torch.nn.functional.linear{_via(device, 'cuBLAS')} + torch.sigmoid + mul",
                    lambda: torch.sigmoid(F.linear(h, w, bias)) * post)


# ---- norms --------------------------------------------------------------------------------------------------

def rms_norm(model, inputs: dict, device: str) -> Iterator[Option]:
    """torch.nn.functional.rms_norm (fused)."""
    import torch.nn.functional as F

    x, w = inputs["x"], inputs["weight"]
    yield from _one("torch.nn.functional.rms_norm", lambda: F.rms_norm(x, (x.shape[-1],), w, model.eps))


def fused_add_rms_norm(model, inputs: dict, device: str) -> Iterator[Option]:
    """The residual add, then F.rms_norm on it."""
    import torch.nn.functional as F

    x, res, w = inputs["x"], inputs["residual"], inputs["weight"]

    def run():
        summed = x + res
        return {"out": F.rms_norm(summed, (x.shape[-1],), w, model.eps), "residual": summed}
    yield from _one("add + torch.nn.functional.rms_norm", run)


def layer_norm(model, inputs: dict, device: str) -> Iterator[Option]:
    """torch.nn.functional.layer_norm (fused)."""
    import torch.nn.functional as F

    x, w, b = inputs["x"], inputs["weight"], inputs["bias"]
    yield from _one("torch.nn.functional.layer_norm", lambda: F.layer_norm(x, (x.shape[-1],), w, b, model.eps))


def l2_norm(model, inputs: dict, device: str) -> Iterator[Option]:
    """x * rsqrt(sum x^2 + eps) = rms_norm(x, eps / H) / sqrt(H): one fused norm and a scale."""
    import torch.nn.functional as F

    x = inputs["x"]
    hidden = x.shape[-1]
    yield from _one("torch.nn.functional.rms_norm (eps / H) + scale by H^-1/2",
                    lambda: F.rms_norm(x, (hidden,), None, model.eps / hidden) * hidden ** -0.5)


def gated_rms_norm(model, inputs: dict, device: str) -> Iterator[Option]:
    """F.rms_norm and F.silu (or torch.sigmoid) in the operator's order."""
    import torch
    import torch.nn.functional as F

    x, w, z = inputs["x"], inputs["weight"], inputs["z"]
    act = F.silu if model.activation in ("silu", "swish") else torch.sigmoid
    shape = (x.shape[-1],)
    if model.norm_before_gate:
        yield from _one("torch.nn.functional.rms_norm * activation(z)",
                        lambda: F.rms_norm(x, shape, w, model.eps) * act(z))
    else:
        yield from _one("torch.nn.functional.rms_norm(x * activation(z))",
                        lambda: F.rms_norm(x * act(z), shape, w, model.eps))


def fused_qk_rmsnorm(model, inputs: dict, device: str) -> Iterator[Option]:
    """F.rms_norm on the q and k head views of the packed rows, then the three parts concatenated."""
    import torch
    import torch.nn.functional as F

    hs, qw, kw = inputs["hidden_states"], inputs["q_weight"], inputs["k_weight"]
    t, d = hs.shape[0], model.d
    qs, ks = model.head_num * d, model.kv_head_num * d

    def run():
        q = F.rms_norm(hs[:, :qs].reshape(t, model.head_num, d), (d,), qw, model.eps)
        k = F.rms_norm(hs[:, qs:qs + ks].reshape(t, model.kv_head_num, d), (d,), kw, model.eps)
        return torch.cat([q.reshape(t, qs), k.reshape(t, ks), hs[:, qs + ks:]], dim=-1)
    yield from _one("torch.nn.functional.rms_norm per head + torch.cat", run)


# ---- elementwise, reductions, selection, gathers --------------------------------------------------------------

def silu_and_mul(model, inputs: dict, device: str) -> Iterator[Option]:
    """F.silu on the gate half times the up half."""
    import torch.nn.functional as F

    x = inputs["x"]
    d = x.shape[-1] // 2
    yield from _one("torch.nn.functional.silu + mul", lambda: F.silu(x[..., :d]) * x[..., d:])


def moe_sum_reduce(model, inputs: dict, device: str) -> Iterator[Option]:
    """torch.sum over the top-k axis (fp32 accumulation), scaled where the factor is not 1."""
    import torch

    x, factor = inputs["expert_outputs"], model.routed_scaling_factor
    if factor == 1.0:
        yield from _one("torch.sum", lambda: torch.sum(x, dim=1))
    else:
        yield from _one("torch.sum + scale", lambda: torch.sum(x, dim=1) * factor)


def topk_filter(model, inputs: dict, device: str) -> Iterator[Option]:
    """torch.topk for each row's k-th value, then masked_fill."""
    import torch

    logits = inputs["logits"]
    k = min(model.top_k, logits.shape[-1])

    def run():
        kth = torch.topk(logits, k, dim=-1).values[..., -1:]
        return logits.masked_fill(logits < kth, float("-inf"))
    yield from _one("torch.topk + masked_fill", run)


def moe_topk_gating_softmax(model, inputs: dict, device: str) -> Iterator[Option]:
    """torch.softmax then torch.topk (grouped routing as the reference masks the groups first)."""
    import torch

    g = inputs["gating_output"]
    if model.groups > 0 and model.topk_group > 0:
        yield from reference_ops(model, inputs, device)
        return

    def run():
        w, i = torch.topk(torch.softmax(g.float(), dim=-1), model.top_k, dim=-1)
        return {"topk_weights": w, "topk_ids": i.to(torch.int32)}
    yield from _one("torch.softmax + torch.topk", run)


def embedding(model, inputs: dict, device: str) -> Iterator[Option]:
    """torch.nn.functional.embedding."""
    import torch.nn.functional as F

    ids, w = inputs["input_ids"], inputs["weight"]
    yield from _one("torch.nn.functional.embedding", lambda: F.embedding(ids, w))


def causal_conv1d(model, inputs: dict, device: str) -> Iterator[Option]:
    """Depthwise torch.nn.functional.conv1d (cuDNN) over [carried state | x], bias fused, then F.silu."""
    import torch
    import torch.nn.functional as F

    x, w, bias, state = inputs["x"], inputs["weight"], inputs["bias"], inputs["initial_state"]
    dim, width = w.shape
    taps = w.reshape(dim, 1, width)

    def run():
        seq = torch.cat([state[0, :, -(width - 1):], x], dim=-1) if width > 1 else x
        out = F.conv1d(seq.unsqueeze(0), taps, bias, groups=dim)[0]
        return F.silu(out) if model.activation is not None else out
    yield from _one(f"torch.cat + depthwise torch.nn.functional.conv1d{_via(device, 'cuDNN')} + silu", run)


def reshape_and_cache(model, inputs: dict, device: str) -> Iterator[Option]:
    """index_copy_ of the new rows into the caches, in place (the caches are cloned beforehand, untimed, so the
    input set stays as drawn); padded tokens (slot -1) are left out by a boolean mask."""
    key, value, slots = inputs["key"], inputs["value"], inputs["slot_mapping"]
    kc, vc = inputs["key_cache"].clone(), inputs["value_cache"].clone()
    heads, dim = key.shape[1:]

    def run():
        keep = slots >= 0
        where = slots[keep]
        kc.view(-1, heads, dim).index_copy_(0, where, key[keep].to(kc.dtype))
        vc.view(-1, heads, dim).index_copy_(0, where, value[keep].to(vc.dtype))
        return {"key_cache": kc, "value_cache": vc}
    yield from _one("torch index_copy_ into the cache (in place)", run)


def moe_count_and_sort(model, inputs: dict, device: str) -> Iterator[Option]:
    """torch.bincount, torch.cumsum and a stable torch.sort."""
    import torch

    ids = inputs["topk_ids"]
    experts = model.num_experts

    def run():
        flat = ids.flatten()
        counts = torch.bincount(flat, minlength=experts)[:experts].to(torch.int32)
        cumsum = torch.zeros(experts + 1, dtype=torch.int32, device=ids.device)
        cumsum[1:] = torch.cumsum(counts, 0)
        order = torch.sort(flat, stable=True).indices.to(torch.int32)
        return {"sorted_token_ids": order, "expert_token_counts": counts, "cumsum": cumsum}
    yield from _one("torch.bincount + torch.cumsum + torch.sort", run)


# operator -> builder; every catalogue operator is here or in NO_LIBRARY (tests/kernels_eval/test_library_baseline.py)
PATHS = {
    "attention_forward": attention.attention_forward,
    "unified_attention": attention.unified_attention,
    "paged_attention_decode": attention.paged_attention_decode,
    "mla_decode_attention": attention.mla_decode_attention,
    "gemm": gemm,
    "block_scaled_mm": block_scaled_mm,
    "fused_moe": fused_moe,
    "linear_sigmoid_mul": linear_sigmoid_mul,
    "rms_norm": rms_norm,
    "fused_add_rms_norm": fused_add_rms_norm,
    "layer_norm": layer_norm,
    "l2_norm": l2_norm,
    "gated_rms_norm": gated_rms_norm,
    "fused_qk_rmsnorm": fused_qk_rmsnorm,
    "silu_and_mul": silu_and_mul,
    "moe_sum_reduce": moe_sum_reduce,
    "topk_filter": topk_filter,
    "moe_topk_gating_softmax": moe_topk_gating_softmax,
    "embedding": embedding,
    "causal_conv1d": causal_conv1d,
    "reshape_and_cache": reshape_and_cache,
    "moe_count_and_sort": moe_count_and_sort,
    # no library kernel for the core: the reference's own torch ops (loop-free)
    "moe_align_block_size": reference_ops,
    "fp8_dynamic_per_token_quant": reference_ops,
    "per_token_group_quant_fp8": reference_ops,
    "fused_rmsnorm_quant": reference_ops,
    "mrope": reference_ops,
    "fused_qkv_rope": reference_ops,
}


def library_options(operator: str, model, inputs: dict, device: str) -> Iterator[Option]:
    """The operator's library Options in order of preference (nothing for an operator in NO_LIBRARY)."""
    builder = PATHS.get(operator)
    return iter(()) if builder is None else builder(model, inputs, device)
