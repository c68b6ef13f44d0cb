"""kernel_events → (operator, shape, phase): the one entry point that taxonomy, shapes, phases and graphs serve."""

from __future__ import annotations

from pathlib import Path

import orjson
import polars as pl

from ingest.graphs import attribute_graphs
from ingest.phases import assign_phases, merged_step
from ingest.shapes import add_step_context, canonical_json, shape_kwargs
from ingest.schema import CLASSIFIED_EVENTS, OP_SHAPE_TIME, validate
from ingest.taxonomy import Taxonomy, load_taxonomy

CLASSIFIED_COLUMNS = ("operator", "shape", "phase", "phase_rule")
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


def classify_events(
    events: pl.DataFrame,
    capture_events: pl.DataFrame | None = None,
    taxonomy: Taxonomy | str | Path | None = None,
) -> pl.DataFrame:
    """Events with operator, shape (canonical JSON), phase and phase_rule added.

    Graph-replay rows are first aligned with `capture_events` (ingest.graphs.read_capture); their
    attribution becomes `graph_capture` where a capture launch was aligned, else `name_rule`.
    """
    tax = _taxonomy(taxonomy)
    events = attribute_graphs(events, capture_events)
    kernels, cats = events["kernel"].to_list(), events["category"].to_list()
    chains, chain_args = events["op_chain"].to_list(), events["op_chain_args"].to_list()
    annotations = events["annotation"].to_list()
    parsed: dict[str | None, list] = {None: []}
    operators: list[str] = []
    kwargs_list: list[dict] = []
    memo: dict = {}
    for i in range(events.height):
        chain = chains[i] if chains[i] is not None else []
        key = (kernels[i], cats[i], tuple(chain), chain_args[i], annotations[i])
        hit = memo.get(key)
        if hit is None:
            match = tax.classify(kernels[i], cats[i], chain)
            if chain_args[i] not in parsed:
                parsed[chain_args[i]] = orjson.loads(chain_args[i])
            args = parsed[chain_args[i]] or []
            depth, op_args = match.depth, None
            if depth is not None and depth < len(args):
                op_args = args[depth]
            elif depth is None and match.operator not in ("other",):
                depth, op_args = _innermost_args(args)
            op_name = chain[depth] if depth is not None and depth < len(chain) else None
            kwargs = shape_kwargs(match.operator, op_name, op_args)
            step = merged_step(chain, annotations[i])
            kwargs = add_step_context(match.operator, kwargs, step)
            hit = memo[key] = (match.operator, kwargs)
        operators.append(hit[0])
        kwargs_list.append(hit[1])
    phase, phase_rule = assign_phases(events, kwargs_list, operators)
    graph = events["graph_launch"].fill_null(False)
    attribution = (
        pl.when(graph & pl.col("graph_capture"))
        .then(pl.lit("graph_capture"))
        .when(graph)
        .then(pl.lit("name_rule"))
        .otherwise(pl.col("attribution"))
    )
    out = events.with_columns(
        pl.Series("operator", operators, dtype=pl.String),
        pl.Series("shape", [canonical_json(k) if k else EMPTY_SHAPE for k in kwargs_list], dtype=pl.String),
        pl.Series("phase", phase, dtype=pl.String),
        pl.Series("phase_rule", phase_rule, dtype=pl.String),
        attribution.alias("attribution"),
    ).drop("graph_capture")
    return pl.from_arrow(validate(out.to_arrow(), CLASSIFIED_EVENTS, "classified kernel_events"))


def op_shape_time(events: pl.DataFrame) -> pl.DataFrame:
    """GPU time and call count per trace × operator × shape × phase (the op_shape_time table)."""
    frame = (
        events.group_by("trace_id", "operator", "shape", "phase")
        .agg(pl.col("dur_ns").sum().cast(pl.Int64).alias("gpu_ns"), pl.len().cast(pl.Int64).alias("calls"))
        .sort("trace_id", "gpu_ns", "operator", "shape", "phase", descending=[False, True, False, False, False])
    )
    return pl.from_arrow(validate(frame.to_arrow(), OP_SHAPE_TIME, "op_shape_time"))
