"""Operator kwargs from an op's Input Dims / Input type / Concrete Inputs (each operator's own extraction,
catalogue/operators/<op>/shapes.py `extract`), and their canonical JSON key."""

from __future__ import annotations

import json

from catalogue.op_args import generic, op_args_view
from catalogue.operators import load_shapes

# Parameter names follow the catalogue's shapes.json init_kwargs/input_kwargs per operator;
# `dtype` (and `b_dtype`, `kv_dtype` where an op mixes dtypes) are added, as AGENTS.md says.
# Two steps: `shape_kwargs` here reads what one op recorded (the operator's `extract`); ingest/problems.py turns
# that into a complete problem of the registry operator whose reference computes the same thing (its `to_problem`).
# Keys a shape keeps when the trace cannot complete it (so it stays visibly incomplete):
#   unified_attention: `num_tokens` (Σ query tokens) where per-sequence lengths are not recorded
#     or queries are shorter than keys (chunked prefill / mixed steps);
#   attention_forward (SDPA): `kv_lens` (keys longer than queries), `num_kv_heads` (GQA),
#     `is_causal`, `attn_mask`, `v_head_dim` — what kept it from a registry attention problem;
#   gemm (not a catalogue operator): m, n, k and `batch` for bmm;
#   fused_moe from one aten::_grouped_mm: m (routed rows = tokens × top_k), n, k;
#   fused_qkv_rope: `is_neox_style` false (the registry's reference is neox);
#   `shape` (+ `dtype`): the first input's dims, for ops without a dedicated extractor.


def canonical_json(kwargs: dict) -> str:
    """The shape key: JSON with sorted keys and no spaces (deterministic across runs and machines)."""
    return json.dumps(kwargs, sort_keys=True, separators=(",", ":"))


def shape_kwargs(operator: str, op: str | None, op_args: dict | None, chain=None) -> dict:
    """The operator's kwargs from its deciding op's recorded args ({dims, types, concrete}); {} if none.

    `chain`: the other (op name, args) pairs of the row's op chain, outermost first, for the few
    operators whose framework op records a dimension on an op nested in or around it.
    """
    if not op_args:
        return {}
    context = tuple((n, op_args_view(n, x)) for n, x in (chain or ()) if x and n != op)
    a = op_args_view(op, op_args, context)
    rules = load_shapes(operator)
    kwargs = (rules.extract if rules is not None and hasattr(rules, "extract") else generic)(a)
    return {k: v for k, v in kwargs.items() if v is not None}


def add_step_context(operator: str, kwargs: dict, step) -> dict:
    """Kwargs completed from the step annotation (sequence count, mean kv length) by the operator's `with_step`."""
    rules = load_shapes(operator)
    if step is None or rules is None or not hasattr(rules, "with_step"):
        return kwargs
    return rules.with_step(kwargs, step)
