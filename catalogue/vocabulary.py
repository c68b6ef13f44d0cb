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

# What an operator's work model declares it is (catalogue/work/<op>.py TRAITS), so that code reads the trait and
# never the operator's name: attention, its calls' shapes tell the serving phase of the step they run in (the
# work model's `phase_of_shape`); not_serving, no LLM serving step runs it (GroupNorm: a diffusion model's VAE),
# so a trace that holds it has no serving phases.
OPERATOR_TRAITS = ("attention", "not_serving")
