"""Every operator, one folder each (catalogue/operators/<op>/: its work model and declared traits in __init__.py, its
taxonomy rules in taxonomy.yaml, its shape extraction in shapes.py), and the lists that name them."""

from __future__ import annotations

import importlib
from functools import lru_cache
from pathlib import Path
from types import ModuleType

# The 30 Atrex-Bench catalogue operators, then the two we add.
CATALOGUE_OPERATORS = (
    "attention_forward", "block_scaled_mm", "causal_conv1d", "chunk_delta_rule_output",
    "chunk_gated_delta_rule_state", "fp8_blockscale_fused_moe", "fp8_dynamic_per_token_quant",
    "fused_add_rms_norm", "fused_moe", "fused_qk_rmsnorm", "fused_qkv_rope", "fused_rmsnorm_quant",
    "gated_delta_rule_update", "gated_rms_norm", "l2_norm", "layer_norm", "linear_sigmoid_mul",
    "mla_decode_attention", "moe_align_block_size", "moe_count_and_sort", "moe_sum_reduce",
    "moe_topk_gating_softmax", "mrope", "paged_attention_decode", "per_token_group_quant_fp8",
    "reshape_and_cache", "rms_norm", "silu_and_mul", "topk_filter", "unified_attention",
)
EXTRA_OPERATORS = ("gemm", "embedding")
# Benchmarkable: a torch reference, inputs and a work model.
OPERATORS = CATALOGUE_OPERATORS + EXTRA_OPERATORS
# What fleets run beside LLM kernels (vision, diffusion, training): a work model, so a trace's calls are
# shaped problems with a roofline, but no torch reference yet, so not benchmarkable.
MODELLED_OPERATORS = ("convolution", "batch_norm", "group_norm")


def load_work(name: str) -> ModuleType:
    """The work module of operator `name` (benchmarkable or only modelled)."""
    if name not in OPERATORS and name not in MODELLED_OPERATORS:
        raise KeyError(f"unknown operator {name!r}; known: {', '.join(OPERATORS + MODELLED_OPERATORS)}")
    return importlib.import_module(f"catalogue.operators.{name}")


def folder(name: str) -> Path:
    """The folder of operator `name` (benchmarkable or only modelled)."""
    load_work(name)  # the one check of the name
    return Path(__file__).with_name(name)


@lru_cache(maxsize=None)
def load_shapes(name: str) -> ModuleType | None:
    """The shape extraction of operator `name` (its folder's shapes.py: `extract`, and where the trace can say
    more, `with_step` and `to_problem`), or None for a name with none (`other`, a collective)."""
    if name not in OPERATORS and name not in MODELLED_OPERATORS or not (folder(name) / "shapes.py").is_file():
        return None
    return importlib.import_module(f"catalogue.operators.{name}.shapes")
