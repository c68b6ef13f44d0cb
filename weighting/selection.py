"""Hot-shape selection: the (operator, shape) problems kept for the benchmark, and their weights."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import polars as pl
import yaml

from catalogue.vocabulary import PHASES
from weighting.schema import HOT_PROBLEMS, validate
from weighting.weights import group_starts

POLICY_PATH = Path(__file__).with_name("policy.yaml")
SUM_TOLERANCE = 1e-12


@dataclass(frozen=True)
class Policy:
    """What selection keeps: per-operator coverage target and shape cap, minimum operator share."""

    coverage_target: float = 0.9
    shape_cap: int = 32
    min_operator_share: float = 0.001
    benchmarkable_only: bool = True


def load_policy(path: str | Path | None = None) -> Policy:
    """The selection policy in `path` (default: the package's policy.yaml), validated."""
    source = Path(path) if path is not None else POLICY_PATH
    doc = yaml.safe_load(source.read_text()) or {}
    if not isinstance(doc, dict):
        raise ValueError(f"{source}: must be a mapping of policy fields")
    unknown = sorted(set(doc) - set(Policy.__dataclass_fields__))
    if unknown:
        raise ValueError(f"{source}: unknown field(s) {unknown}")
    policy = Policy(**doc)
    checks = {
        "coverage_target": isinstance(policy.coverage_target, (int, float)) and 0 < policy.coverage_target <= 1,
        "shape_cap": isinstance(policy.shape_cap, int) and not isinstance(policy.shape_cap, bool) and policy.shape_cap >= 1,
        "min_operator_share": isinstance(policy.min_operator_share, (int, float)) and 0 <= policy.min_operator_share < 1,
        "benchmarkable_only": isinstance(policy.benchmarkable_only, bool),
    }
    for name, ok in checks.items():
        if not ok:
            raise ValueError(f"{source}: field {name!r} has an invalid value {getattr(policy, name)!r}")
    return policy


def _registry_benchmarkable(name: str) -> bool:
    from catalogue.registry import is_benchmarkable  # torch-free by contract

    return is_benchmarkable(name)


def problem_times(fleet_weights: pl.DataFrame) -> pl.DataFrame:
    """Fleet time per (operator, shape): all phases together and per phase, sorted by operator, shape."""
    rows = fleet_weights.sort("operator", "shape", "phase")
    starts = group_starts(rows, ["operator", "shape"])
    out = rows[starts.tolist()].select("operator", "shape")
    columns = {"fleet_card_hours": rows["fleet_card_hours"], "fleet_share": rows["fleet_share"]}
    for phase in PHASES:
        columns[f"card_hours_{phase}"] = rows["fleet_card_hours"] * (rows["phase"] == phase).cast(pl.Float64)
    for name, values in columns.items():
        summed = np.add.reduceat(values.to_numpy(), starts) if rows.height else np.array([], dtype=float)
        out = out.with_columns(pl.Series(name, summed, pl.Float64))
    return out


def _normalise(values: np.ndarray) -> np.ndarray:
    total = math.fsum(values.tolist())
    return values / total if total > 0 else np.zeros_like(values)


def _registry_shape_ok(operator: str, shape: str) -> bool:
    """Whether a mined shape has every kwarg the operator's work model and inputs need."""
    from catalogue.registry import split_kwargs, work  # torch-free by contract

    try:
        init_kwargs, input_kwargs = split_kwargs(operator, json.loads(shape))
        work(operator, init_kwargs, input_kwargs)
    except (KeyError, ValueError, TypeError):
        return False
    return True


def select_hot(
    fleet_weights: pl.DataFrame,
    policy: Policy | None = None,
    *,
    is_benchmarkable: Callable[[str], bool] | None = None,
    shape_ok: Callable[[str, str], bool] | None = None,
) -> tuple[pl.DataFrame, dict]:
    """The selected problems (HOT_PROBLEMS, weights summing to 1) and a coverage report.

    A shape whose kwargs do not make a complete problem for its operator (a trace that did not
    record every dimension) cannot be benchmarked: it is left out of the selection and its time
    is reported per operator as `incomplete_shape_share`.
    """
    policy = policy or load_policy()
    benchmarkable = is_benchmarkable or _registry_benchmarkable
    if shape_ok is None and is_benchmarkable is None and policy.benchmarkable_only:
        shape_ok = _registry_shape_ok
    problems = problem_times(fleet_weights).filter(pl.col("fleet_card_hours") > 0)
    starts = group_starts(problems, ["operator"])
    ops = problems[starts.tolist()].select("operator").with_columns(
        # Fixed-order sums: a borderline coverage or min-share cut must not flip between runs.
        pl.Series("op_card_hours", np.add.reduceat(problems["fleet_card_hours"].to_numpy(), starts)),
        pl.Series("op_share", np.add.reduceat(problems["fleet_share"].to_numpy(), starts)),
        pl.Series("shapes_total", np.diff(np.r_[starts, problems.height])),
    ).sort("op_card_hours", "operator", descending=[True, False])

    kept, operators = [], []
    for op in ops.iter_rows(named=True):
        status = "selected"
        if policy.benchmarkable_only and not benchmarkable(op["operator"]):
            status = "not_benchmarkable"
        elif op["op_share"] < policy.min_operator_share:
            status = "below_min_share"
        entry = {k: op[k] for k in ("operator", "op_share", "op_card_hours", "shapes_total")}
        entry.update(status=status, shapes_selected=0, coverage=0.0, capped=False)
        if status == "selected":
            shapes = problems.filter(pl.col("operator") == op["operator"]).sort(
                "fleet_card_hours", "shape", descending=[True, False]
            )
            if shape_ok is not None:
                complete = pl.Series([shape_ok(op["operator"], s) for s in shapes["shape"].to_list()], dtype=pl.Boolean)
                incomplete_ch = math.fsum(shapes.filter(~complete)["fleet_card_hours"].to_list())
                entry["incomplete_shape_share"] = incomplete_ch / op["op_card_hours"] if op["op_card_hours"] else 0.0
                shapes = shapes.filter(complete)
            times = shapes["fleet_card_hours"].to_numpy()
            before = np.concatenate([[0.0], np.cumsum(times)[:-1]])
            # Keep a shape while what is kept so far is short of the target: the last kept shape crosses it.
            take = (before < policy.coverage_target * op["op_card_hours"]) & (np.arange(len(times)) < policy.shape_cap)
            chosen = shapes.filter(pl.Series(take)).with_columns(
                pl.int_range(1, int(take.sum()) + 1, dtype=pl.Int64).alias("operator_rank")
            )
            if chosen.height == 0:
                entry.update(status="no_complete_shape")
                operators.append(entry)
                continue
            kept.append(chosen)
            entry.update(
                shapes_selected=chosen.height,
                coverage=math.fsum(chosen["fleet_card_hours"].to_list()) / op["op_card_hours"],
                capped=bool(policy.shape_cap < len(times) and before[policy.shape_cap] < policy.coverage_target * op["op_card_hours"]),
            )
        operators.append(entry)

    schema_cols = list(HOT_PROBLEMS)
    if not kept:
        raise ValueError("select_hot: no operator passes the selection policy; nothing to weight")
    selected = pl.concat(kept).sort("operator", "operator_rank")
    selected = selected.with_columns(pl.Series("weight", _normalise(selected["fleet_card_hours"].to_numpy())))
    for phase in PHASES:
        selected = selected.with_columns(
            pl.Series(f"weight_{phase}", _normalise(selected[f"card_hours_{phase}"].to_numpy()))
        )
    total = math.fsum(selected["weight"].to_list())
    if abs(total - 1.0) > SUM_TOLERANCE:
        raise AssertionError(f"select_hot: selected weights sum to {total!r}, not 1")
    selected = validate(selected, HOT_PROBLEMS, "hot_problems").select(schema_cols)

    report = {"policy": asdict(policy), **coverage_of(selected, operators), "weight_sum": total, "operators": operators}
    return selected, report


def coverage_of(problems: pl.DataFrame, operators: list[dict]) -> dict:
    """The one definition of coverage, of any set of problems with weight (`problems`: operator, fleet_card_hours,
    fleet_share per problem; `operators`: every operator of the fleet with its op_card_hours and selection status):

    coverage_of_fleet = Σ fleet_share (their fleet GPU time / all fleet GPU time, attributed or not);
    coverage_of_operator_time = Σ fleet_card_hours / the fleet card-hours attributed to any operator;
    coverage_of_benchmarkable = the same over operators the evaluator has a reference for;
    n_problems and n_operators: how many problems and operators that is.
    A build's are of its selection; a refresh's of the release's problems that have weight in the new version.
    """
    all_ch = math.fsum(o["op_card_hours"] for o in operators)
    ch = math.fsum(problems["fleet_card_hours"].to_list())
    bench_ch = math.fsum(o["op_card_hours"] for o in operators if o["status"] != "not_benchmarkable")
    return {
        "n_problems": problems.height,
        "n_operators": problems["operator"].n_unique(),
        "coverage_of_fleet": math.fsum(problems["fleet_share"].to_list()),
        "coverage_of_operator_time": ch / all_ch if all_ch else 0.0,
        "coverage_of_benchmarkable": ch / bench_ch if bench_ch else 0.0,
    }
