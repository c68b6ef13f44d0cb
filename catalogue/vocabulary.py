"""Words shared across packages: phases, attribution methods, evaluation stages (each defined here once)."""

from __future__ import annotations

# The phases a fleet's time and a problem's weight are split by (fleet.yaml phase_mix, release weight_<phase>).
PHASES = ("prefill", "decode", "mixed")
# The phase of a trace row that no rule could place; it has no weight column of its own.
UNKNOWN_PHASE = "unknown"
# What ingest's classification writes in a kernel row's `phase`.
ROW_PHASES = PHASES + (UNKNOWN_PHASE,)

# How the Kineto reader tied a GPU activity to a CPU op:
# direct: launch row found and enclosed by a CPU op.
# graph_replay: replayed from a graph launch (the launch's own op stack is kept, not the kernel's).
# launch_only: launch row found, but no CPU op encloses it on the launching thread.
# unattributed: no launch row with this correlation in the window.
ATTRIBUTIONS = ("direct", "graph_replay", "launch_only", "unattributed")
# Classification rewrites `graph_replay`: graph_capture (aligned with a capture-trace launch, whose op and
# shapes the row inherits) or name_rule (operator from the kernel name only).
CLASSIFIED_ATTRIBUTIONS = ("direct", "graph_capture", "name_rule", "launch_only", "unattributed")
# Rows whose launching op (and so its shapes) is known: directly, or through a graph-capture trace.
ATTRIBUTED = ("direct", "graph_capture")

# Where an evaluated problem stopped; DONE means every stage passed.
STAGES = ("compile", "correctness", "adoption", "performance", "done")
DONE = "done"

# How a timed call's GPU time is measured (results column timing_rule; docs/reproducibility.md "Measurement rule"):
# kernel_span, from its first record's start to its last record's end (the worker's timing loop); device_busy, the
# time at least one of its records runs (the union of their intervals; the trusted replay's, host gaps excluded).
TIMING_RULES = ("kernel_span", "device_busy")

# What an operator declares it is (TRAITS in catalogue/operators/<op>/__init__.py), so that code reads the trait and
# never the operator's name:
#   attention: its calls' shapes tell the serving phase of the step they run in (the folder's `phase_of_shape`);
#   not_serving: no LLM serving step runs it (GroupNorm: a diffusion model's VAE), so a trace that holds it has no
#     serving phases;
#   paged_kv: it reads a paged KV cache, whose block size a call that does not show it takes from the trace's
#     cache writes; kv_cache_write: it writes that cache (its calls show the block size);
#   moe_from_grouped_mm: an MoE block's two aten::_grouped_mm calls and its router's aten::topk are one problem of it;
#   dense_gemm: a GEMM that a kernel-name rule names, which between two convolution kernels is that convolution's;
#   hosts_gemm_kernels: its backends run GEMM kernels between its own (a convolution's), which belong to it;
#   sampling: a step's token sampling (a step's kernels after it belong to the next step);
#   qkv_rotary: the rotation of q and k between a layer's QKV projection and its KV-cache write (one operator).
OPERATOR_TRAITS = ("attention", "not_serving", "paged_kv", "kv_cache_write", "moe_from_grouped_mm", "dense_gemm",
                   "hosts_gemm_kernels", "sampling", "qkv_rotary")
