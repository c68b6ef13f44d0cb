"""Card-hour-weighted fleet GPU time per (operator, shape, phase), exactly as DESIGN.md "Weights" defines it."""

from __future__ import annotations

import math
import warnings

import numpy as np
import polars as pl

from catalogue.vocabulary import PHASES, ROW_PHASES
from ingest.discovery import is_profile
from weighting.fleet import Fleet, FleetError, FleetWarning
from weighting.schema import FLEET_WEIGHTS, validate

KEY = ["operator", "shape", "phase"]


def profiles(traces: pl.DataFrame, fleet: Fleet) -> pl.DataFrame:
    """One row per profile used: trace_id, deployment, total_ns (T_p); unclaimed and empty traces left out."""
    owner = fleet.assignment()
    frame = traces.select("trace_id", "path", pl.col("gpu_ns").cast(pl.Int64).alias("total_ns"))
    frame = frame.with_columns(pl.col("path").replace_strict(owner, default=None).alias("deployment"))
    profile = pl.Series([is_profile(p) for p in frame["path"].to_list()], dtype=pl.Boolean)
    unclaimed = frame.filter(pl.col("deployment").is_null() & profile)
    if unclaimed.height:
        warnings.warn(
            f"{fleet.source}: {unclaimed.height} ingested trace(s) claimed by no deployment are left out: "
            + ", ".join(sorted(unclaimed["path"].to_list())[:5]),
            FleetWarning,
            stacklevel=2,
        )
    frame = frame.filter(pl.col("deployment").is_not_null())
    # The same bytes under two names are one profile (trace_id is content-addressed).
    frame = frame.unique(["trace_id", "deployment"], keep="first").sort("trace_id")
    clash = frame.group_by("trace_id").agg(pl.col("deployment").unique().sort()).filter(pl.col("deployment").list.len() > 1)
    if clash.height:
        row = clash.row(0, named=True)
        raise FleetError(f"{fleet.source}: trace {row['trace_id']} (same bytes) is claimed by deployments {row['deployment']}")
    empty = frame.filter(pl.col("total_ns") <= 0)
    if empty.height:
        warnings.warn(
            f"{fleet.source}: {empty.height} trace(s) with no GPU time are left out: "
            + ", ".join(sorted(empty["path"].to_list())[:5]),
            FleetWarning,
            stacklevel=2,
        )
    frame = frame.filter(pl.col("total_ns") > 0)
    present = set(frame["deployment"].to_list())
    ingested = set(traces["path"].to_list())
    for d in fleet.deployments:
        absent = [p for p in d.paths if p not in ingested]
        if absent and len(absent) < len(d.paths):
            warnings.warn(
                f"{fleet.source}: deployment {d.id!r}: {len(absent)} of its {len(d.paths)} traces are not in the "
                f"ingested traces table (quarantined?): {', '.join(absent[:3])}",
                FleetWarning,
                stacklevel=2,
            )
        if d.id not in present:
            raise FleetError(
                f"{fleet.source}: deployment {d.id!r}: none of its {len(d.paths)} trace(s) (field 'traces') "
                "is in the ingested traces table with GPU time"
            )
    return frame.select("trace_id", "deployment", "total_ns").sort("deployment", "trace_id")


def profile_shares(
    op_shape_time: pl.DataFrame, traces: pl.DataFrame, fleet: Fleet, profs: pl.DataFrame | None = None
) -> pl.DataFrame:
    """t_p(o,s,φ) / T_p per profile: deployment, trace_id, operator, shape, phase, share (sorted)."""
    profs = profiles(traces, fleet) if profs is None else profs
    bad = op_shape_time.filter(~pl.col("phase").is_in(ROW_PHASES))
    if bad.height:
        raise ValueError(f"op_shape_time: unknown phase {bad['phase'][0]!r} in field 'phase'")
    rows = (
        op_shape_time.select("trace_id", *KEY, pl.col("gpu_ns").cast(pl.Int64))
        .group_by("trace_id", *KEY)
        .agg(pl.col("gpu_ns").sum())
        .join(profs, on="trace_id", how="inner")
    )
    over = rows.group_by("trace_id").agg(pl.col("gpu_ns").sum(), pl.col("total_ns").first())
    over = over.filter(pl.col("gpu_ns") > pl.col("total_ns"))
    if over.height:
        r = over.row(0, named=True)
        raise ValueError(
            f"op_shape_time: trace {r['trace_id']} attributes {r['gpu_ns']} ns, more than its gpu_ns {r['total_ns']} in traces"
        )
    rows = rows.with_columns((pl.col("gpu_ns") / pl.col("total_ns")).alias("share"))
    return rows.select("deployment", "trace_id", *KEY, "share").sort("deployment", *KEY, "trace_id")


def phase_factor_array(labelled: np.ndarray, mix: dict[str, float] | None) -> np.ndarray:
    """Multipliers (rows × prefill/decode/mixed) putting mix[φ] of the labelled time in phase φ, total kept.

    `labelled` holds each row's time per phase. Only phases that are named in the mix AND have
    time take part: their time is pooled and shared out by the mix renormalised over them. When
    every named phase has time and no unnamed one does (the case DESIGN.md states), that is
    exactly share·mix[φ]·L/L_φ; otherwise a phase that cannot be rescaled stays as profiled.
    """
    out = np.ones_like(labelled, dtype=float)
    if mix is None:
        return out
    target = np.array([mix.get(p, 0.0) for p in PHASES])
    use = (labelled > 0) & np.array([p in mix for p in PHASES])
    pool = np.where(use, labelled, 0.0).sum(axis=1, keepdims=True)
    mass = np.where(use, target, 0.0).sum(axis=1, keepdims=True)
    ok = use & (mass > 0)
    safe = np.where(ok, labelled * mass, 1.0)
    return np.where(ok, target * pool / safe, out)


def phase_factors(labelled: dict[str, float], mix: dict[str, float] | None, where: str = "") -> dict[str, float]:
    """Multipliers per phase for one deployment (see phase_factor_array); a FleetWarning where the mix cannot hold."""
    if mix is not None:
        for p in PHASES:
            if labelled.get(p, 0.0) > 0 and p not in mix:
                warnings.warn(f"{where}.phase_mix has no entry for {p!r}: its {p}-phase time is left as profiled",
                              FleetWarning, stacklevel=3)
            if mix.get(p, 0.0) > 0 and labelled.get(p, 0.0) <= 0:
                warnings.warn(f"{where}.phase_mix.{p} = {mix[p]} but its profiles have no {p}-phase time; "
                              "the mix is applied over the phases that have time", FleetWarning, stacklevel=3)
    row = phase_factor_array(np.array([[labelled.get(p, 0.0) for p in PHASES]]), mix)[0]
    return dict(zip(PHASES, row.tolist()))


def group_starts(frame: pl.DataFrame, cols: list[str]) -> np.ndarray:
    """Row indices where a new group of `cols` begins in a frame sorted by `cols`."""
    if not frame.height:
        return np.array([], dtype=np.int64)
    new = pl.any_horizontal([(pl.col(c) != pl.col(c).shift(1)).fill_null(True) for c in cols])
    return np.flatnonzero(frame.select(new.alias("_new"))["_new"].to_numpy())


def _segment_sums(values: np.ndarray, starts: np.ndarray) -> np.ndarray:
    # reduceat over a fixed sort order gives bit-identical sums on every run.
    return np.add.reduceat(values, starts) if len(values) else values


def deployment_shares(shares: pl.DataFrame, profs: pl.DataFrame, fleet: Fleet) -> pl.DataFrame:
    """share_d(o,s,φ) after phase_mix: deployment, operator, shape, phase, share, n_profiles."""
    n_by_dep = dict(profs.group_by("deployment").len().iter_rows())
    grouped = shares.sort("deployment", *KEY, "trace_id")
    starts = group_starts(grouped, ["deployment", *KEY])
    sums = _segment_sums(grouped["share"].to_numpy(), starts)
    counts = np.diff(np.r_[starts, grouped.height])
    out = grouped[starts.tolist()].select("deployment", *KEY).with_columns(
        pl.Series("share", sums, pl.Float64), pl.Series("n_profiles", counts, pl.Int64)
    )
    out = out.with_columns(pl.col("share") / pl.col("deployment").replace_strict(n_by_dep, return_dtype=pl.Float64))
    parts = []
    for d in fleet.deployments:
        part = out.filter(pl.col("deployment") == d.id)
        labelled = {p: float(np.sum(part.filter(pl.col("phase") == p)["share"].to_numpy())) for p in PHASES}
        factor = phase_factors(labelled, d.phase_mix, f"{fleet.source}: deployment {d.id!r}")
        parts.append(part.with_columns(pl.col("share") * pl.col("phase").replace_strict(factor, default=1.0, return_dtype=pl.Float64)))
    return pl.concat(parts).sort("deployment", *KEY)


def fleet_weights(op_shape_time: pl.DataFrame, traces: pl.DataFrame, fleet: Fleet) -> pl.DataFrame:
    """Fleet GPU time per (operator, shape, phase): Σ_d card_hours_d · share_d, its fleet share, and support."""
    profs = profiles(traces, fleet)
    dep = deployment_shares(profile_shares(op_shape_time, traces, fleet, profs), profs, fleet)
    card_hours = {d.id: d.card_hours for d in fleet.deployments}
    fleet_total = math.fsum(card_hours.values())
    dep = dep.with_columns(
        (pl.col("share") * pl.col("deployment").replace_strict(card_hours, return_dtype=pl.Float64)).alias("part")
    ).sort(*KEY, "deployment")
    keys = dep
    starts = group_starts(keys, KEY)
    out = keys[starts.tolist()].select(*KEY).with_columns(
        pl.Series("fleet_card_hours", _segment_sums(keys["part"].to_numpy(), starts), pl.Float64),
        pl.Series("n_profiles", _segment_sums(keys["n_profiles"].to_numpy(), starts), pl.Int64),
        pl.Series("n_deployments", np.diff(np.r_[starts, keys.height]), pl.Int64),
    )
    out = out.with_columns((pl.col("fleet_card_hours") / fleet_total).alias("fleet_share"))
    return validate(out.sort(*KEY), FLEET_WEIGHTS, "fleet_weights")


def deployment_inputs(op_shape_time: pl.DataFrame, traces: pl.DataFrame, fleet: Fleet) -> tuple[dict, pl.DataFrame]:
    """What each deployment put into the weights: ({id: card_hours, accelerator, trace_ids}, and per deployment ×
    operator × shape its fleet card-hours Σ_φ card_hours_d · share_d) — the inputs a drift is explained by."""
    with warnings.catch_warnings():  # fleet_weights said them already over the same inputs
        warnings.simplefilter("ignore", FleetWarning)
        profs = profiles(traces, fleet)
        dep = deployment_shares(profile_shares(op_shape_time, traces, fleet, profs), profs, fleet)
    card_hours = {d.id: d.card_hours for d in fleet.deployments}
    parts = (dep.group_by("deployment", "operator", "shape").agg(pl.col("share").sum())
             .with_columns((pl.col("share") * pl.col("deployment").replace_strict(card_hours, return_dtype=pl.Float64))
                           .alias("card_hours")).drop("share").sort("deployment", "operator", "shape"))
    ids = dict(profs.group_by("deployment").agg(pl.col("trace_id").unique().sort()).iter_rows())
    deployments = {d.id: {"card_hours": d.card_hours, "accelerator": d.accelerator, "trace_ids": list(ids.get(d.id, []))}
                   for d in fleet.deployments}
    return deployments, parts
