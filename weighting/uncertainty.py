"""Bootstrap confidence intervals of the selected weights, resampling profiles within each deployment."""

from __future__ import annotations

import numpy as np
import polars as pl

from catalogue.vocabulary import PHASES, ROW_PHASES
from weighting.fleet import Fleet
from weighting.schema import WEIGHT_UNCERTAINTY, validate
from weighting.weights import phase_factor_array, profile_shares, profiles


def _deployment_matrices(shares: pl.DataFrame, profs: pl.DataFrame, problems: dict, dep_id: str):
    """Per profile of one deployment: shares over (problem, phase) columns and labelled time per phase."""
    ids = profs.filter(pl.col("deployment") == dep_id)["trace_id"].to_list()
    row_of = {t: i for i, t in enumerate(ids)}
    phase_of = {p: i for i, p in enumerate(ROW_PHASES)}
    matrix = np.zeros((len(ids), len(problems) * len(ROW_PHASES)))
    labelled = np.zeros((len(ids), len(PHASES)))
    part = shares.filter(pl.col("deployment") == dep_id)
    for tid, op, shape, phase, share in part.select("trace_id", "operator", "shape", "phase", "share").iter_rows():
        if phase in PHASES:
            labelled[row_of[tid], phase_of[phase]] += share
        k = problems.get((op, shape))
        if k is not None:
            matrix[row_of[tid], k * len(ROW_PHASES) + phase_of[phase]] += share
    return matrix, labelled


def _factors(labelled_mean: np.ndarray, mix: dict | None) -> np.ndarray:
    """Per replicate, multipliers for prefill/decode/mixed/unknown; unknown-phase time is never rescaled."""
    # A resample that drew no profile with some phase rescales the rest, as weights.phase_factor_array says.
    return np.hstack([phase_factor_array(labelled_mean, mix), np.ones((labelled_mean.shape[0], 1))])


def bootstrap_replicates(
    op_shape_time: pl.DataFrame, traces: pl.DataFrame, fleet: Fleet, selected: pl.DataFrame,
    *, n_boot: int = 1000, seed: int = 0,
) -> np.ndarray:
    """n_boot × problems matrix of selected weights, each row from one resample of profiles per deployment."""
    profs = profiles(traces, fleet)
    shares = profile_shares(op_shape_time, traces, fleet, profs)
    problems = {(o, s): i for i, (o, s) in enumerate(zip(selected["operator"], selected["shape"]))}
    rng = np.random.default_rng(seed)
    fleet_time = np.zeros((n_boot, len(problems)))
    for dep in sorted(fleet.deployments, key=lambda d: d.id):
        matrix, labelled = _deployment_matrices(shares, profs, problems, dep.id)
        n = matrix.shape[0]
        counts = rng.multinomial(n, np.full(n, 1.0 / n), size=n_boot).astype(float) / n
        mean = counts @ matrix
        factors = _factors(counts @ labelled, dep.phase_mix)
        by_phase = mean.reshape(n_boot, len(problems), len(ROW_PHASES)) * factors[:, None, :]
        fleet_time += dep.card_hours * by_phase.sum(axis=2)
    totals = fleet_time.sum(axis=1, keepdims=True)
    return np.divide(fleet_time, totals, out=np.zeros_like(fleet_time), where=totals > 0)


def support(op_shape_time: pl.DataFrame, traces: pl.DataFrame, fleet: Fleet) -> pl.DataFrame:
    """Distinct profiles and deployments with time in each (operator, shape), any phase."""
    shares = profile_shares(op_shape_time, traces, fleet).filter(pl.col("share") > 0)
    return shares.group_by("operator", "shape").agg(
        pl.col("trace_id").n_unique().cast(pl.Int64).alias("n_profiles"),
        pl.col("deployment").n_unique().cast(pl.Int64).alias("n_deployments"),
    )


def weight_intervals(
    op_shape_time: pl.DataFrame, traces: pl.DataFrame, fleet: Fleet, selected: pl.DataFrame,
    *, n_boot: int = 1000, seed: int = 0, level: float = 0.95,
) -> pl.DataFrame:
    """Each selected problem's weight with its percentile bootstrap interval, standard error and support."""
    reps = bootstrap_replicates(op_shape_time, traces, fleet, selected, n_boot=n_boot, seed=seed)
    alpha = (1.0 - level) / 2
    out = selected.select("operator", "shape", "weight").with_columns(
        pl.Series("weight_lo", np.quantile(reps, alpha, axis=0)),
        pl.Series("weight_hi", np.quantile(reps, 1 - alpha, axis=0)),
        pl.Series("weight_se", reps.std(axis=0, ddof=1) if n_boot > 1 else np.zeros(reps.shape[1])),
    )
    out = out.join(support(op_shape_time, traces, fleet), on=["operator", "shape"], how="left", maintain_order="left")
    return validate(out, WEIGHT_UNCERTAINTY, "weight_uncertainty")


def operator_intervals(
    op_shape_time: pl.DataFrame, traces: pl.DataFrame, fleet: Fleet, selected: pl.DataFrame,
    *, n_boot: int = 1000, seed: int = 0, level: float = 0.95,
) -> pl.DataFrame:
    """Each operator's total weight W_op with its percentile bootstrap interval."""
    reps = bootstrap_replicates(op_shape_time, traces, fleet, selected, n_boot=n_boot, seed=seed)
    ops = sorted(set(selected["operator"]))
    col = {o: [i for i, x in enumerate(selected["operator"]) if x == o] for o in ops}
    sums = np.stack([reps[:, col[o]].sum(axis=1) for o in ops], axis=1)
    alpha = (1.0 - level) / 2
    weight = selected.group_by("operator").agg(pl.col("weight").sum()).sort("operator")["weight"]
    return pl.DataFrame({
        "operator": ops, "weight": weight,
        "weight_lo": np.quantile(sums, alpha, axis=0), "weight_hi": np.quantile(sums, 1 - alpha, axis=0),
    })


# Every weights version's intervals (flow.build): fixed so that the same traces give the same bytes.
N_BOOT, SEED, LEVEL = 1000, 0, 0.95


def version_intervals(
    op_shape_time: pl.DataFrame, traces: pl.DataFrame, fleet: Fleet, selected: pl.DataFrame,
    *, n_boot: int = N_BOOT, seed: int = SEED, level: float = LEVEL,
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Percentile bootstrap intervals of one weights version from one set of replicates: per problem
    (operator, shape, weight_lo, weight_hi, weight_se, n_profiles, n_deployments) and per operator
    (operator, weight_lo, weight_hi, weight_se of W_op)."""
    reps = bootstrap_replicates(op_shape_time, traces, fleet, selected, n_boot=n_boot, seed=seed)
    alpha = (1.0 - level) / 2

    def spread(values: np.ndarray) -> dict:
        se = values.std(axis=0, ddof=1) if n_boot > 1 else np.zeros(values.shape[1])
        return {"weight_lo": np.quantile(values, alpha, axis=0), "weight_hi": np.quantile(values, 1 - alpha, axis=0),
                "weight_se": se}

    problems = selected.select("operator", "shape").with_columns(
        *(pl.Series(k, v, dtype=pl.Float64) for k, v in spread(reps).items()))
    problems = problems.join(support(op_shape_time, traces, fleet), on=["operator", "shape"], how="left",
                             maintain_order="left").with_columns(pl.col("n_profiles", "n_deployments").fill_null(0))
    ops = sorted(set(selected["operator"].to_list()))
    columns = {o: [i for i, x in enumerate(selected["operator"].to_list()) if x == o] for o in ops}
    sums = np.stack([reps[:, columns[o]].sum(axis=1) for o in ops], axis=1) if ops else np.zeros((n_boot, 0))
    operators = pl.DataFrame({"operator": ops, **{k: pl.Series(v, dtype=pl.Float64) for k, v in spread(sums).items()}},
                             schema={"operator": pl.String, "weight_lo": pl.Float64, "weight_hi": pl.Float64,
                                     "weight_se": pl.Float64})
    return problems, operators
