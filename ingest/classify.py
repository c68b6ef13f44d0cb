"""kernel_events → (operator, shape, phase): the one entry point that taxonomy, shapes, phases and graphs serve."""

from __future__ import annotations

from pathlib import Path

import orjson
import polars as pl

from catalogue.registry import operators_with
from ingest.columns import repeated
from ingest.graphs import attribute_graphs
from ingest.neighbours import join_convolution_neighbours, rope_before_cache_write
from ingest.phases import assign_phases, merged_step
from ingest.plain import plain
from ingest.problems import fill_block_size, grouped_mm_call, moe_from_grouped_mm, router_topk, to_problem
from ingest.shapes import add_step_context, canonical_json, shape_kwargs
from ingest.schema import CLASSIFIED_EVENT_COLUMNS, OP_SHAPE_TIME_COLUMNS, conform
from ingest.taxonomy import Taxonomy, load_taxonomy

CLASSIFIED_COLUMNS = ("operator", "shape", "phase", "phase_rule")
# What the operators declare (catalogue.vocabulary.OPERATOR_TRAITS), read here instead of their names.
_MOE_FROM_GROUPED_MM = operators_with("moe_from_grouped_mm")
EMPTY_SHAPE = "{}"


def _taxonomy(taxonomy) -> Taxonomy:
    if isinstance(taxonomy, Taxonomy):
        return taxonomy
    return load_taxonomy(taxonomy if isinstance(taxonomy, (str, Path)) else None)


def _innermost_args(args: list) -> tuple[int | None, dict | None]:
    for depth in range(len(args) - 1, -1, -1):
        if args[depth]:
            return depth, args[depth]
    return None, None


def _hf_moe_problems(events: pl.DataFrame, operators: list[str], kwargs_list: list[dict], chains: list, args_of) -> None:
    """Rewrite, in place, the rows of each HF MoE block's two aten::_grouped_mm calls to the block's one
    fused_moe problem: the calls are paired in launch order per device, and the router's aten::topk
    launched before them gives tokens and top_k (one call alone shows only tokens × top_k rows).

    The plain version of _hf_moe_problems_by_key: every row read on its own."""
    if _MOE_FROM_GROUPED_MM.isdisjoint(operators):
        return
    devices, ts = events["device"].to_list(), events["ts_ns"].to_list()
    order = sorted(range(events.height), key=lambda i: (devices[i] or 0, ts[i]))
    calls: list[tuple[tuple, list[int], tuple | None]] = []  # (dims, rows, router before it)
    router, previous = None, None
    for i in order:
        chain = chains[i] or []
        if "aten::topk" in chain:
            router = router_topk(args_of(i, chain.index("aten::topk")))
        call = grouped_mm_call(kwargs_list[i]) if operators[i] in _MOE_FROM_GROUPED_MM and chain and chain[-1] == "aten::_grouped_mm" else None
        if call is not None and previous is not None and previous == (call, kwargs_list[i]):
            calls[-1][1].append(i)  # another kernel of the same call
        elif call is not None:
            calls.append((call, [i], router))
        previous = (call, kwargs_list[i]) if call is not None else None
    _pair_calls(calls, kwargs_list)


def _pair_calls(calls: list[tuple[tuple, list[int], tuple | None]], kwargs_list: list[dict]) -> None:
    j = 0
    while j + 1 < len(calls):
        (up, up_rows, up_router), (down, down_rows, _) = calls[j], calls[j + 1]
        problem = moe_from_grouped_mm(up, down, up_router)
        if problem is None:
            j += 1
            continue
        for i in up_rows + down_rows:
            kwargs_list[i] = problem
        j += 2


_NO_ROUTER = object()  # a combination whose chain holds no aten::topk


def _hf_moe_problems_by_key(events: pl.DataFrame, key_of: list[int], operators: list[str], kwargs_list: list[dict],
                            chains: list, args_of, row_kwargs: list[dict]) -> None:
    """_hf_moe_problems with each combination's router and call read once (`operators`, `kwargs_list`,
    `chains` and `args_of(k, depth)` per combination, `key_of` each row's); the rows' kwargs are
    rewritten in `row_kwargs`. Tuned for speed (oracle: tests/ingest/test_fast_paths.py)."""
    if _MOE_FROM_GROUPED_MM.isdisjoint(operators):
        return
    calls_of: list[tuple | None] = []
    routers: list = []
    for k, chain in enumerate(chains):
        chain = chain or []
        routers.append(router_topk(args_of(k, chain.index("aten::topk"))) if "aten::topk" in chain else _NO_ROUTER)
        call = grouped_mm_call(kwargs_list[k]) if operators[k] in _MOE_FROM_GROUPED_MM and chain and chain[-1] == "aten::_grouped_mm" else None
        calls_of.append(None if call is None else (call, kwargs_list[k]))
    if all(c is None for c in calls_of):
        return
    # the rows in launch order per device, as _hf_moe_problems sorts them (stable; a missing device is device 0)
    order = events.select(pl.arg_sort_by(pl.col("device").fill_null(0), "ts_ns", maintain_order=True)).to_series().to_list()
    calls: list[tuple[tuple, list[int], tuple | None]] = []
    router, previous = None, None
    for i in order:
        k = key_of[i]
        if routers[k] is not _NO_ROUTER:
            router = routers[k]
        this = calls_of[k]
        if this is not None and previous is not None and previous == this:
            calls[-1][1].append(i)
        elif this is not None:
            calls.append((this[0], [i], router))
        previous = this
    _pair_calls(calls, row_kwargs)


def _agree_by_kernel(kernels: list[str], rules: list[str], ops: list, operators: list[str], kwargs_list: list[dict]) -> None:
    """Rows without an op that a kernel-name rule decided take, in place, the operator that the op rules
    gave the same kernel elsewhere in the trace, unshaped (nothing shows their problem): one kernel, one
    operator, whichever path found it. A kernel the op rules split between operators keeps its name rule's;
    so does a row under an op without a rule (plumbing such as aten::fill_ that many operators launch)."""
    by_op: dict[str, set[str]] = {}
    for kernel, rule, operator in zip(kernels, rules, operators):
        if rule.startswith("op_rules"):
            by_op.setdefault(kernel, set()).add(operator)
    for i, rule in enumerate(rules):
        if rule.startswith("kernel_rules") and ops[i] is None:
            seen = by_op.get(kernels[i])
            if seen is not None and len(seen) == 1 and operators[i] not in seen:
                operators[i], kwargs_list[i] = next(iter(seen)), {}


# A copy, fill or collective decided by its category or its kernel's role carries no op's shape: the op that
# launched it (aten::mm's workspace memset, aten::linear's cast) is not its work.
_NO_SHAPE_RULES = ("roles.", "categories.")


def _problem(tax: Taxonomy, kernel: str, category: str, chain: list, args: list, annotation: str | None) -> tuple:
    """One combination's operator, kwargs and deciding rule, and the backward op that decided it (else None)."""
    match = tax.classify(kernel, category, chain)
    depth, op_args = match.depth, None
    if depth is not None and depth < len(args):
        op_args = args[depth]
    elif depth is None and match.operator not in ("other",) and not match.rule.startswith(_NO_SHAPE_RULES):
        depth, op_args = _innermost_args(args)
    op_name = chain[depth] if depth is not None and depth < len(chain) else None
    kwargs = shape_kwargs(match.operator, op_name, op_args, list(zip(chain, args)))
    step = merged_step(chain, annotation)
    kwargs = add_step_context(match.operator, kwargs, step)
    operator, kwargs = to_problem(match.operator, kwargs, step)
    return operator, kwargs, match.rule, op_name if match.rule == "backward" else None


_PROBLEMS: dict[int, tuple[Taxonomy, dict]] = {}  # id(taxonomy) -> (the taxonomy, its combinations' _problem)
_PROBLEMS_KEPT = 200_000  # combinations kept per taxonomy (a fleet's profiles repeat a few thousand)


def _problem_memo(tax: Taxonomy) -> dict:
    """`_problem` of every combination classified under `tax` in this process, for the next trace: the
    profiles of a deployment repeat the same combinations. Its values are never changed in place (rows
    that differ get new dicts). Oracle: tests/ingest/test_fast_paths.py, against a memo of one trace."""
    kept = _PROBLEMS.get(id(tax))
    if kept is None or kept[0] is not tax:
        kept = _PROBLEMS[id(tax)] = (tax, {})
    if len(kept[1]) > _PROBLEMS_KEPT:
        kept[1].clear()
    return kept[1]


# The columns that decide a row's operator, shape and step: a trace repeats a few hundred
# combinations over its many thousand activities, and each is classified once.
KEY_COLUMNS = ("kernel", "category", "op_chain", "op_chain_args", "annotation", "op")


def distinct_rows(events: pl.DataFrame, columns) -> tuple[pl.DataFrame, list[int]]:
    """The distinct combinations of `columns` in first-seen order, and each row's index among them."""
    groups = events.select(columns).with_row_index("row").group_by(columns, maintain_order=True).agg("row")
    key_of = groups.select(pl.int_range(pl.len()).alias("key"), "row").explode("row").sort("row")["key"]
    return groups.drop("row"), key_of.to_list()


def every_row(events: pl.DataFrame, columns) -> tuple[pl.DataFrame, list[int]]:
    """The plain version of distinct_rows: every row its own combination."""
    return events.select(columns), list(range(events.height))


def classify_events(
    events: pl.DataFrame,
    capture_events: pl.DataFrame | None = None,
    taxonomy: Taxonomy | str | Path | None = None,
) -> pl.DataFrame:
    """Events with operator, shape (canonical JSON), phase and phase_rule added.

    Graph-replay rows are first aligned with `capture_events` (ingest.graphs.read_capture); their
    attribution becomes `graph_capture` where a capture launch was aligned, else `name_rule`.

    Each distinct KEY_COLUMNS combination is classified once; rows take their combination's
    values (oracle: tests/ingest/test_fast_paths.py, against one classification per row).
    """
    tax = _taxonomy(taxonomy)
    events = attribute_graphs(events, capture_events)
    keys, key_of = (every_row if plain() else distinct_rows)(events, KEY_COLUMNS)
    kernels, cats, chains, chain_args, annotations, ops = (keys[c].to_list() for c in KEY_COLUMNS)
    parsed: dict[str | None, list] = {None: []}
    memo = _problem_memo(tax)
    operators: list[str] = []
    kwargs_list: list[dict] = []
    rules: list[str] = []
    for k in range(keys.height):
        chain = chains[k] if chains[k] is not None else []
        key = (kernels[k], cats[k], tuple(chain), chain_args[k], annotations[k])
        hit = memo.get(key)
        if hit is None:
            if chain_args[k] not in parsed:
                parsed[chain_args[k]] = orjson.loads(chain_args[k])
            hit = memo[key] = _problem(tax, kernels[k], cats[k], chain, parsed[chain_args[k]] or [], annotations[k])
        operator, kwargs, rule, backward_op = hit
        operators.append(operator)
        kwargs_list.append(kwargs)
        rules.append(rule)
        if backward_op is not None:
            ops[k] = backward_op  # backward work is `other`, named by the backward op that decided it
    _agree_by_kernel(kernels, rules, ops, operators, kwargs_list)

    def per_row(values: list) -> list:
        return list(map(values.__getitem__, key_of))

    def args_at(k: int, depth: int) -> dict | None:
        if chain_args[k] not in parsed:
            parsed[chain_args[k]] = orjson.loads(chain_args[k])
        args = parsed[chain_args[k]] or []
        return args[depth] if depth < len(args) else None

    row_kwargs = per_row(kwargs_list)
    _hf_moe_problems_by_key(events, key_of, operators, kwargs_list, chains, args_at, row_kwargs)
    operators, kwargs_list, ops = per_row(operators), row_kwargs, per_row(ops)
    row_rules = per_row(rules)
    join_convolution_neighbours(events, operators, kwargs_list, ops, row_rules)
    rope_before_cache_write(events, operators, kwargs_list, row_rules)
    row_chains, row_annotations = per_row(chains), per_row(annotations)
    kwargs_list = fill_block_size(operators, kwargs_list)
    phase, phase_rule = assign_phases(events, kwargs_list, operators, row_chains, row_annotations)
    graph = events["graph_launch"].fill_null(False)
    attribution = (
        pl.when(graph & pl.col("graph_capture"))
        .then(pl.lit("graph_capture"))
        .when(graph)
        .then(pl.lit("name_rule"))
        .otherwise(pl.col("attribution"))
    )
    out = events.with_columns(
        repeated("operator", operators),
        repeated("shape", _shape_texts(kwargs_list)),
        repeated("phase", phase),
        repeated("phase_rule", phase_rule),
        repeated("op", ops),
        attribution.alias("attribution"),
    ).drop("graph_capture")
    return conform(out, CLASSIFIED_EVENT_COLUMNS, "classified kernel_events")


def _shape_texts(kwargs_list: list[dict]) -> list[str]:
    """Canonical JSON of each row's kwargs, rendered once per kwargs object (rows of one memo hit share it).

    Tuned for speed; the plain version is `[canonical_json(k) if k else EMPTY_SHAPE for k in kwargs_list]`
    (oracle: tests/ingest/test_fast_paths.py)."""
    texts: dict[int, str] = {}
    out = []
    for k in kwargs_list:
        text = texts.get(id(k))
        if text is None:
            text = texts[id(k)] = canonical_json(k) if k else EMPTY_SHAPE
        out.append(text)
    return out


def op_shape_time(events: pl.DataFrame) -> pl.DataFrame:
    """GPU time and call count per trace × operator × shape × phase (the op_shape_time table)."""
    return conform(op_shape_time_rows(events), OP_SHAPE_TIME_COLUMNS, "op_shape_time")


def op_shape_time_rows(events: pl.DataFrame | pl.LazyFrame) -> pl.DataFrame | pl.LazyFrame:
    """op_shape_time's rows before their columns are conformed; lazy for a lazy frame (the store collects
    it with a trace's other aggregations at once)."""
    keys, descending = op_shape_time_keys()
    return (
        events.group_by("trace_id", "operator", "shape", "phase")
        .agg(pl.col("dur_ns").sum().cast(pl.Int64).alias("gpu_ns"), pl.len().cast(pl.Int64).alias("calls"))
        .sort(*keys, descending=descending)
    )


def op_shape_time_keys() -> tuple[tuple[str, ...], list[bool]]:
    """The order of op_shape_time's rows: its sort columns and which of them descend."""
    return ("trace_id", "gpu_ns", "operator", "shape", "phase"), [False, True, False, False, False]
