"""Serving phase (prefill / decode / mixed / unknown) of each activity, and the rule that decided it."""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass
from functools import lru_cache

import polars as pl

from catalogue.registry import operators_with, phase_of_shape
from ingest.step_kernels import cut_steps, step_phases

# vLLM V1 gpu_worker: execute_context_<reqs>(<tokens>)_generation_<reqs>(<tokens>); the
# TraceLens-patched variant puts the step's token count first and per-class sums in the
# parentheses: execute_<T>_context_<Rc>(sq<Σq>sk<Σk>sqsq..sqsk..)_generation_<Rg>(sq..sk..).
_VLLM = re.compile(r"^execute_(?:(?P<tokens>\d+)_)?context_(?P<ctx>\d+)\((?P<ctx_args>[^)]*)\)_generation_(?P<gen>\d+)\((?P<gen_args>[^)]*)\)")
_SUMS = re.compile(r"^sq(?P<sq>\d+)sk(?P<sk>\d+)(?:sqsq(?P<qq>\d+))?(?:sqsk(?P<qk>\d+))?")
# SGLang scheduler: step[EXTEND bs=15 toks=15360], step[DECODE bs=32], step[MIXED bs=..]
_SGLANG = re.compile(r"^step\[(?P<mode>EXTEND|PREFILL|DECODE|MIXED|IDLE)\b(?P<rest>[^\]]*)\]")
# ATOM-style ranges (and `hotshape capture --annotate`): the phase word, then its fields in
# brackets: prefill[bs=8 toks=4096], decode[bs=8], mixed[bs=.. toks=..]. The whole name must match.
_BRACKET = re.compile(r"^(?P<mode>prefill|decode|mixed|extend)\[(?P<rest>[^\]]*)\]$", re.IGNORECASE)
# Plain ranges a user or another framework put around a phase (record_function / NVTX): the
# whole name must be the phase word, optionally with a step word and a number, so that kernels
# and ops such as `decode_attention_fwd` or `context_attention_fwd` never read as a phase.
_PLAIN = re.compile(r"^(?P<mode>prefill|decode|mixed|extend)(?:[_\s:-](?:step|phase|stage|forward|batch|iter))?(?:[_\s:#-]*\d+)?$", re.IGNORECASE)
_PLAIN_PHASE = {"prefill": "prefill", "extend": "prefill", "decode": "decode", "mixed": "mixed"}
_SGLANG_PHASE = {"EXTEND": "prefill", "PREFILL": "prefill", "DECODE": "decode", "MIXED": "mixed"}


@dataclass(frozen=True)
class Step:
    """What a step annotation says: its phase, and the request/token counts it carries."""

    phase: str
    rule: str  # annotation:vllm | annotation:sglang | annotation:bracket | annotation:range
    context_reqs: int | None = None
    generation_reqs: int | None = None
    tokens: int | None = None
    context_q: int | None = None  # Σ query tokens of prefill requests
    context_kv: int | None = None  # Σ kv tokens of prefill requests
    generation_q: int | None = None
    generation_kv: int | None = None
    context_qq: int | None = None  # Σ q² of prefill requests (TraceLens sums): equal lengths ⇔ n·Σq² = (Σq)²
    context_qk: int | None = None  # Σ q·k of prefill requests


def _phase_of_counts(ctx: int, gen: int) -> str:
    if ctx and gen:
        return "mixed"
    if ctx:
        return "prefill"
    if gen:
        return "decode"
    return "unknown"


def _sums(text: str) -> tuple[int | None, int | None, int | None, int | None]:
    m = _SUMS.match(text)
    if not m:
        return None, None, None, None
    return int(m["sq"]), int(m["sk"]), int(m["qq"]) if m["qq"] else None, int(m["qk"]) if m["qk"] else None


def _fields_step(phase: str, rule: str, text: str) -> Step:
    """A Step from `bs=.. toks=..` fields: bs counts the step's requests, toks its tokens."""
    fields = dict(kv.split("=", 1) for kv in text.replace(",", " ").split() if "=" in kv)
    bs = int(fields["bs"]) if fields.get("bs", "").isdigit() else None
    toks = int(fields["toks"]) if fields.get("toks", "").isdigit() else None
    ctx = bs if phase == "prefill" else None
    gen = bs if phase == "decode" else None
    return Step(phase, rule, ctx, gen, toks)


@lru_cache(maxsize=65536)
def parse_step(name: str | None) -> Step | None:
    """The Step a vLLM, SGLang or plain prefill/decode annotation describes; None for other names."""
    if not name:
        return None
    m = _VLLM.match(name)
    if m:
        ctx, gen = int(m["ctx"]), int(m["gen"])
        cq, ck, cqq, cqk = _sums(m["ctx_args"])
        gq, gk, _, _ = _sums(m["gen_args"])
        if cq is None and m["ctx_args"]:
            # Upstream form: the parentheses hold the prefill token count (then "_<Σq·k>" on
            # some versions); the generation side holds its token count.
            parts = m["ctx_args"].split("_")
            cq = int(parts[0]) if parts[0].isdigit() else None
            cqk = int(parts[1]) if len(parts) == 2 and parts[1].isdigit() else None
        if gq is None and m["gen_args"].isdigit():
            gq = int(m["gen_args"])
        tokens = int(m["tokens"]) if m["tokens"] else None
        return Step(_phase_of_counts(ctx, gen), "annotation:vllm", ctx, gen, tokens, cq, ck, gq, gk, cqq, cqk)
    m = _SGLANG.match(name)
    if m:
        return _fields_step(_SGLANG_PHASE.get(m["mode"], "unknown"), "annotation:sglang", m["rest"])
    m = _BRACKET.match(name)
    if m:
        return _fields_step(_PLAIN_PHASE[m["mode"].lower()], "annotation:bracket", m["rest"])
    m = _PLAIN.match(name)
    if m:
        return Step(_PLAIN_PHASE[m["mode"].lower()], "annotation:range")
    return None


def step_of_chain(op_chain) -> tuple[int | None, Step | None]:
    """The innermost step annotation in an op chain (outermost first) and its position."""
    if op_chain is None:
        return None, None
    for depth in range(len(op_chain) - 1, -1, -1):
        step = parse_step(op_chain[depth])
        if step is not None and step.phase != "unknown":
            return depth, step
    return None, None


def merged_step(op_chain, annotation: str | None = None) -> Step | None:
    """The innermost step of a chain, its missing counts filled from the other step annotations.

    SGLang traces patched by TraceLens nest vLLM-style sums (sq/sk) outside `step[DECODE bs=..]`.
    """
    names = list(op_chain or []) + ([annotation] if annotation else [])
    steps = [s for s in (parse_step(n) for n in reversed(names)) if s is not None and s.phase != "unknown"]
    if not steps:
        return None
    first = steps[0]
    filled = {
        f: next((getattr(s, f) for s in steps if getattr(s, f) is not None), None)
        for f in ("context_reqs", "generation_reqs", "tokens", "context_q", "context_kv", "generation_q", "generation_kv",
                  "context_qq", "context_qk")
    }
    return Step(first.phase, first.rule, **filled)


# Shape rule: what an attention call's shape says about the step it runs in (each attention operator's work model
# holds its own rule: catalogue/operators/<op>/__init__.py phase_of_shape).
_ATTENTION = operators_with("attention")


def phase_from_shape(operator: str, shape: dict) -> str | None:
    """The phase an attention call's shape implies (decode ⇔ one query token per sequence), or None."""
    return phase_of_shape(operator, shape)


def _shape_groups(events: pl.DataFrame, operators: list[str], undecided: list[int], step_of: list[int]) -> dict:
    """Rows the shape rule decides together: one group per step as far as the trace shows steps.

    A graph launch replaying attention is a whole step (a FULL graph), so it is its own group
    and also separates the eager work before it from the work after it; the rest is grouped by
    its innermost non-step annotation and its step (ingest.step_kernels.cut_steps), within those separations.
    """
    n = events.height
    graph = events["graph_launch"].fill_null(False).to_list()
    correlation = events["correlation"].to_list()
    ts = events["ts_ns"].to_list()
    annotations = events["annotation"].to_list() if "annotation" in events.columns else [None] * n
    first: dict = {}
    for i in range(n):
        if graph[i] and operators[i] in _ATTENTION:
            first[correlation[i]] = None
    for i in range(n):
        if graph[i] and correlation[i] in first and (first[correlation[i]] is None or ts[i] < first[correlation[i]]):
            first[correlation[i]] = ts[i]
    starts = sorted(first.values())
    groups: dict = {}
    for i in undecided:
        if graph[i] and correlation[i] in first:
            key = ("graph", correlation[i])
        else:
            key = ("eager", annotations[i], bisect.bisect_right(starts, ts[i]), step_of[i])
        groups.setdefault(key, []).append(i)
    return groups, set(first)


def _timeline_steps(events: pl.DataFrame, members: list[int], operators: list[str], shapes: list[dict]) -> dict[int, str]:
    """Phases of rows whose steps are not marked: per device in time order, the attention calls form runs
    of one phase; rows between two runs of one phase take it, and between runs of different phases the
    step boundary is the longest GPU idle gap there (the host samples between forward passes). Rows
    before the first run or after the last take that run's phase."""
    ts, dur, device = events["ts_ns"].to_list(), events["dur_ns"].to_list(), events["device"].to_list()
    out: dict[int, str] = {}
    by_device: dict = {}
    for i in members:
        by_device.setdefault(device[i], []).append(i)
    for rows in by_device.values():
        rows.sort(key=lambda i: (ts[i], i))
        marks = [(k, p) for k, i in enumerate(rows) if operators[i] in _ATTENTION
                 for p in [phase_from_shape(operators[i], shapes[i])] if p is not None]
        if not marks:
            continue
        labels: list[str | None] = [None] * len(rows)
        first, last = marks[0], marks[-1]
        for k in range(first[0] + 1):
            labels[k] = first[1]
        for k in range(last[0], len(rows)):
            labels[k] = last[1]
        for (a, pa), (b, pb) in zip(marks, marks[1:]):
            if pa == pb:
                for k in range(a, b + 1):
                    labels[k] = pa
                continue
            # The boundary: the longest idle time between one row's end and the next row's start.
            end, cut, widest = ts[rows[a]] + dur[rows[a]], a + 1, None
            for k in range(a + 1, b + 1):
                gap = ts[rows[k]] - end
                if widest is None or gap > widest:
                    widest, cut = gap, k
                end = max(end, ts[rows[k]] + dur[rows[k]])
            for k in range(a, cut):
                labels[k] = pa
            for k in range(cut, b + 1):
                labels[k] = pb
        out.update({i: p for i, p in zip(rows, labels) if p is not None})
    return out


# Work that is no serving step, whatever its attention looks like: a training step (autograd's backward
# nodes, *_backward ops, a schedule's backward chunks as ingest/taxonomy.yaml's `backward` reads them, an optimizer step) and a diffusion pipeline (xDiT's execute_diffusion_* range, a
# denoising loop, a UNet or VAE; its CLIP text encoder's causal attention is no prefill, and its
# torch.compile CUDA/HIP graphs replaying attention are no decode). GroupNorm, which no LLM runs, marks
# the VAE of a diffusion model whose ranges say nothing.
_NOT_SERVING_NAME = re.compile(r"Backward\d*$|_backward$|^autograd::engine::|^Optimizer\.(step|zero_grad)\b"
                               r"|^[^()]+\((B|W|BW)\)$|^(?i:backward|bwd)(?![a-z])"  # a pipeline schedule's backward chunks
                               r"|(?i:diffusion|denois|(?<![a-z])unet|(?<![a-z])vae(?![a-z])|autoencoder)")
_NOT_SERVING_OPERATORS = operators_with("not_serving")


@lru_cache(maxsize=65536)
def _not_serving_name(name: str | None) -> bool:
    return bool(name) and _NOT_SERVING_NAME.search(name) is not None


def serving_workload(chains: list, annotations: list, operators: list[str]) -> bool:
    """Whether a trace can hold serving steps at all: False for a training or a diffusion trace (no row of
    it gets a phase from its attention shapes, its step ranges or its graphs; step annotations still count)."""
    if _NOT_SERVING_OPERATORS.intersection(operators):
        return False
    seen: set[int] = set()
    for chain in chains:
        if chain is None or id(chain) in seen:
            continue
        seen.add(id(chain))
        if any(map(_not_serving_name, chain)):
            return False
    return not any(map(_not_serving_name, set(annotations)))


def _boundary(chain, annotation) -> str | None:
    """The per-step range a row runs under: the outermost range of its stack (ProfilerStep#N, a
    repeated `execute_model`, a top-level `nn.Module: X` forward), never an operator (`aten::…`)."""
    top = chain[0] if chain else annotation
    return top if top and "::" not in top else None


def _fill_within_steps(events: pl.DataFrame, chains: list, annotations: list, phase: list[str], rule: list[str]) -> None:
    """Rows of a step with no attention of their own (sampling after the forward, the next token's
    copy) take the phase of the step they run in: the last row the shape rule decided before them on
    their device under the same per-step range (the first after them for rows before any)."""
    ts, device = events["ts_ns"].to_list(), events["device"].to_list()
    graph = events["graph_launch"].fill_null(False).to_list()
    lanes: dict = {}
    for i in range(len(phase)):
        if graph[i] or rule[i] not in ("none", "shape:attention"):
            continue
        top = _boundary(chains[i], annotations[i])
        if top is not None:
            lanes.setdefault((device[i], top), []).append(i)
    for rows in lanes.values():
        rows.sort(key=lambda i: (ts[i], i))
        decided = [phase[i] for i in rows if rule[i] == "shape:attention"]
        if not decided:
            continue
        current = decided[0]
        for i in rows:
            if rule[i] == "shape:attention":
                current = phase[i]
            else:
                phase[i], rule[i] = current, "shape:step"


def _fill_by_step(step_of: list[int], phase: list[str], rule: list[str]) -> None:
    """Rows still undecided take the one phase the decided rows of their step (cut at sampling) agree on."""
    agreed: dict[int, set] = {}
    for i, r in enumerate(rule):
        if r != "none" and phase[i] != "unknown":
            agreed.setdefault(step_of[i], set()).add(phase[i])
    for i, r in enumerate(rule):
        if r == "none":
            got = agreed.get(step_of[i])
            if got is not None and len(got) == 1:
                phase[i], rule[i] = next(iter(got)), "shape:step"


def assign_phases(
    events: pl.DataFrame, shapes: list[dict], operators: list[str], chains: list | None = None, annotations: list | None = None
) -> tuple[list[str], list[str]]:
    """Per-row (phase, phase_rule): step annotation, else attention shape, else graph heuristic.

    `chains` and `annotations` are the rows' op_chain and annotation values where the caller has them;
    rows sharing one chain object (ingest.classify's per-combination values) look their step up once.
    """
    n = events.height
    if chains is None:
        chains = events["op_chain"].to_list()
    if annotations is None:
        annotations = events["annotation"].to_list() if "annotation" in events.columns else [None] * n
    seen = list(zip(map(id, chains), annotations))
    first_row = dict(zip(reversed(seen), range(n - 1, -1, -1)))  # each (chain object, annotation): its first row
    decided: dict[tuple, tuple[str, str]] = {}
    for key, i in first_row.items():
        _, step = step_of_chain(chains[i])
        if step is None:
            step = parse_step(annotations[i])
        decided[key] = (step.phase, step.rule) if step is not None and step.phase != "unknown" else ("unknown", "none")
    by_row = list(map(decided.__getitem__, seen))
    phase = [p for p, _ in by_row]
    rule = [r for _, r in by_row]

    # Shape rule: the rows of one step take the phase their attention calls agree on (for graph
    # replays aligned with a capture trace, the capture-time shapes); a step whose attention
    # calls disagree stays unknown.
    undecided = [i for i in range(n) if rule[i] == "none"]
    if not undecided:  # every row's step is marked: the rules below change only rows left undecided
        return phase, rule
    if not serving_workload(chains, annotations, operators):
        return phase, rule
    kernels, dur = events["kernel"].to_list(), events["dur_ns"].to_list()
    step_of = cut_steps(events["device"].to_list(), events["ts_ns"].to_list(), operators)
    grid_x = events["grid"].list.first().to_list() if "grid" in events.columns else None
    by_kernels = step_phases(step_of, kernels, dur, operators, grid_x=grid_x)
    groups, full = _shape_groups(events, operators, undecided, step_of)
    for members in groups.values():
        seen = {phase_from_shape(operators[i], shapes[i]) for i in members if operators[i] in _ATTENTION}
        seen.discard(None)
        steps = {step_of[i] for i in members}
        evidence = {by_kernels[s] for s in steps if s in by_kernels}
        if len(evidence) == 1 and (not seen or next(iter(evidence))[1].startswith("kernels:prefill")):
            # A prefill kernel in the step outweighs a decode kernel's claim (vLLM launches it every step).
            decided, why = evidence.pop()
            for i in members:
                phase[i], rule[i] = decided, why
        elif len(seen) == 1:
            decided = seen.pop()
            for i in members:
                phase[i], rule[i] = decided, "shape:attention"
        elif len(seen) > 1:
            # Several steps the trace does not mark apart (a generation loop without annotations, or
            # under one repeated range such as execute_model): split them on the timeline.
            for i, decided in _timeline_steps(events, members, operators, shapes).items():
                phase[i], rule[i] = decided, "shape:attention"
    _fill_by_step(step_of, phase, rule)
    # Rows no step decided take what their group says with the steps' cuts ignored: a model that samples
    # inside its forward (an argmax router) is not cut into many steps with no attention of their own.
    if any(rule[i] == "none" for i in undecided):
        for members in _shape_groups(events, operators, undecided, [0] * n)[0].values():
            seen = {phase_from_shape(operators[i], shapes[i]) for i in members if operators[i] in _ATTENTION}
            seen.discard(None)
            if len(seen) == 1:
                decided = seen.pop()
                found = {i: decided for i in members}
            else:
                found = _timeline_steps(events, members, operators, shapes) if len(seen) > 1 else {}
            for i, decided in found.items():
                if rule[i] == "none":
                    phase[i], rule[i] = decided, "shape:attention"

    _fill_within_steps(events, chains, annotations, phase, rule)
    _fill_by_step(step_of, phase, rule)

    # Graph heuristic: a graph launch that replays attention kernels is a FULL graph, and
    # vLLM (FULL_DECODE_ONLY / FULL_AND_PIECEWISE), SGLang and static-cache HF loops capture
    # FULL graphs for decode only.
    if full:  # else no row is a graph launch that replays attention
        graph = events["graph_launch"].fill_null(False).to_list()
        correlation = events["correlation"].to_list()
        for i in range(n):
            if rule[i] == "none" and graph[i] and correlation[i] in full:
                phase[i], rule[i] = "decode", "graph:full_graph_decode"
    return phase, rule
