"""Scores from stored results: S_i, S_op, S_agg and their variants, stage rates, and the memory/compute split.

S_i = min(1, T_roofline,i / T_measured,i) if compiled, correct and native, else 0 (the median over runs).
With repeated timings (`eval --repeat N`, or several runs) S_agg and S_op carry an interval (score_interval.py).
S_op = median of S_i over the operator's problems with weight in the scored version (a problem whose weight
dropped to 0 does not move it); S_agg = Σ_op W_op · S_op with W_op = Σ_i∈op w_i. Per phase φ, S_agg_φ is the
score of a benchmark made only of that phase's fleet time: S_agg_φ = Σ_op W_op,φ · S_op,φ / Σ_op W_op,φ, with
W_op,φ = Σ_i∈op w_φ,i and S_op,φ the median of S_i over the operator's problems with w_φ,i > 0.
A release problem with no result scores 0 and counts as not compiled. T_roofline,i is the release's sealed
roofline of the problem on the row's hardware, never the results' own column. When no row was timed (a CPU
run) S is not measured: S_agg, S_op and their variants are None, not 0. Needs no GPU: re-scoring under another
weights version reads only the results file and the release.
"""

from __future__ import annotations

import json
import statistics
from functools import partial

import polars as pl

from catalogue.hardware import load_hardware
from catalogue.roofline import problem_roofline
from catalogue.vocabulary import PHASES
from kernels_eval.score_interval import with_intervals

DEFAULT_BOUND_HARDWARE = "H200"


def problem_scores(results: pl.DataFrame) -> pl.DataFrame:
    """One row per (submission, hardware, problem): S_i (median over runs) and the stage flags (all runs)."""
    ok = pl.col("compiled") & pl.col("correct") & pl.col("native")
    timed = pl.col("t_measured_s").is_not_null() & (pl.col("t_measured_s") > 0) & pl.col("t_roofline_s").is_not_null()
    s = pl.when(ok & timed).then(pl.min_horizontal(pl.lit(1.0), pl.col("t_roofline_s") / pl.col("t_measured_s")))
    per_run = results.with_columns(s.otherwise(0.0).alias("s_i"),
                                   pl.when(timed).then(pl.col("t_roofline_s") / pl.col("t_measured_s"))
                                   .alias("roofline_fraction"))
    return per_run.group_by(["submission", "hardware", "problem_id"]).agg(
        pl.col("operator").first(), pl.col("s_i").median(), pl.col("compiled").all(), pl.col("correct").all(),
        pl.col("native").all(), pl.col("performance_measured").any(), pl.col("run").n_unique().alias("runs"),
        pl.col("roofline_fraction").median(),  # uncapped, of every timed run; S_i caps it and needs all stages
    )


def with_release_roofline(results: pl.DataFrame, release) -> pl.DataFrame:
    """The results with t_roofline_s replaced by the release's sealed roofline (problem_id × hardware); the
    roofline model where the release has none for a row's hardware (null where neither has it)."""
    sealed = release.sealed("roofline")
    roof = (pl.DataFrame(schema={"problem_id": pl.String, "hardware": pl.String, "t_roofline_s": pl.Float64})
            if sealed is None else sealed.select("problem_id", "hardware", pl.col("t_roofline_s").cast(pl.Float64)))
    out = results.drop("t_roofline_s").join(roof, on=["problem_id", "hardware"], how="left")
    sealed_hardware = roof["hardware"].unique().implode()
    missing = out.filter(pl.col("t_roofline_s").is_null() & ~pl.col("hardware").is_in(sealed_hardware))
    if missing.height == 0:
        return out.select(results.columns)

    known = load_hardware()
    manifest = {r["problem_id"]: r for r in release.manifest.iter_rows(named=True)}
    model = []
    for pid, hw in missing.select("problem_id", "hardware").unique().iter_rows():
        m = manifest.get(pid)
        try:
            t = (problem_roofline(m["operator"], json.loads(m["init_kwargs"]), json.loads(m["input_kwargs"]),
                                  hw)["t_roofline_s"] if m is not None and hw in known else None)
        except (KeyError, ValueError):
            t = None
        model.append({"problem_id": pid, "hardware": hw, "t_model_s": t})
    model = pl.DataFrame(model, schema={"problem_id": pl.String, "hardware": pl.String, "t_model_s": pl.Float64})
    return (out.join(model, on=["problem_id", "hardware"], how="left")
            .with_columns(pl.coalesce("t_roofline_s", "t_model_s").alias("t_roofline_s")).select(results.columns))


def problem_bounds(manifest: pl.DataFrame, hardware: str) -> dict[str, str]:
    """problem_id -> "memory" or "compute": which side of its roofline bounds it on `hardware` ("unknown" when
    the operator has no work model)."""
    hw = hardware if hardware in load_hardware() else DEFAULT_BOUND_HARDWARE
    out = {}
    for r in manifest.iter_rows(named=True):
        try:
            out[r["problem_id"]] = problem_roofline(r["operator"], json.loads(r["init_kwargs"]),
                                                    json.loads(r["input_kwargs"]), hw)["bound"]
        except (KeyError, ValueError):
            out[r["problem_id"]] = "unknown"
    return out


def _median(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


def operator_scores(rows: list[dict], weight: str = "weight") -> dict[str, float | None]:
    """{operator: median S_i over its problems with `weight` > 0} (None: none has weight in that column)."""
    ops: dict[str, list[float]] = {}
    for r in rows:
        ops.setdefault(r["operator"], [])
        if r[weight] > 0:
            ops[r["operator"]].append(r["s_i"])
    return {op: _median(xs) for op, xs in sorted(ops.items())}


def aggregate(rows: list[dict], weight: str = "weight") -> float | None:
    """Σ_op W_op · S_op / Σ_op W_op under one weight column (weight, or weight_<phase>), S_op over that column's
    weighted problems; None where no problem has weight in the column."""
    s_op = operator_scores(rows, weight)
    w_op: dict[str, float] = {}
    for r in rows:
        w_op[r["operator"]] = w_op.get(r["operator"], 0.0) + r[weight]
    total = sum(w_op.values())
    if total <= 0:
        return None
    return sum(w * s_op[op] for op, w in w_op.items() if w > 0) / total


def _operator_row(rows: list[dict], s_op: float | None, total_weight: float) -> dict:
    """One operator's line of the score table: W_op, S_op, contribution W_op·S_op / ΣW, problems done and
    failed, the median roofline fraction of its timed problems."""
    w_op = sum(r["weight"] for r in rows)
    fractions = [r["roofline_fraction"] for r in rows if r.get("roofline_fraction") is not None]
    done = sum(bool(r["compiled"] and r["correct"] and r["native"]) for r in rows if r["evaluated"])
    evaluated = sum(bool(r["evaluated"]) for r in rows)
    return {"W_op": w_op, "S_op": s_op,
            "contribution": None if s_op is None or total_weight <= 0 else w_op * s_op / total_weight,
            "problems": len(rows), "evaluated": evaluated, "done": done, "failed": evaluated - done,
            "median_roofline_fraction": statistics.median(fractions) if fractions else None}


def score_one(per_problem: pl.DataFrame, manifest: pl.DataFrame, weights: pl.DataFrame, hardware: str) -> dict:
    """The score of one submission on one hardware from its per-problem rows (problem_scores output)."""
    table = (manifest.select("problem_id", "operator")
             .join(weights, on="problem_id", how="inner")
             .join(per_problem.drop("operator"), on="problem_id", how="left"))
    table = table.with_columns(pl.col("problem_id").is_in(per_problem["problem_id"].implode()).alias("evaluated"),
                               pl.col("s_i").fill_null(0.0), pl.col("compiled").fill_null(False),
                               pl.col("correct").fill_null(False), pl.col("native").fill_null(False))
    rows = table.to_dicts()
    ops: dict[str, list[dict]] = {}
    for r in rows:
        ops.setdefault(r["operator"], []).append(r)
    s_op = operator_scores(rows)
    agg = partial(aggregate, rows)

    def per_problem_weighted(col: str) -> float | None:
        total = sum(r[col] for r in rows)
        return sum(r[col] * r["s_i"] for r in rows) / total if total > 0 else None

    def rate(flag: str) -> dict:
        n = len(rows)
        return {"unweighted": sum(bool(r[flag]) for r in rows) / n if n else None,
                "weighted": sum(r["weight"] for r in rows if r[flag])}

    bounds = problem_bounds(manifest.filter(pl.col("problem_id").is_in(table["problem_id"].implode())), hardware)
    by_bound = {}
    for kind in ("memory", "compute"):
        sel = [r for r in rows if bounds.get(r["problem_id"]) == kind]
        w = sum(r["weight"] for r in sel)
        by_bound[kind] = {"problems": len(sel), "weight": w,
                          "s_weighted": sum(r["weight"] * r["s_i"] for r in sel) / w if w > 0 else None,
                          "native_rate": sum(bool(r["native"]) for r in sel) / len(sel) if sel else None}
    measured = any(bool(r.get("performance_measured")) for r in rows)
    total_weight = sum(r["weight"] for r in rows)
    if not measured:
        # Nothing timed (CPU): S_i is unknown for a problem that passed every stage, and 0 would read as a measured
        # failure. An operator none of whose weighted problems passed (no file for it, say) is 0 all the same:
        # S_i is 0 without any timing there.
        passed = {op: any(r["compiled"] and r["correct"] and r["native"] for r in rs if r["weight"] > 0)
                  for op, rs in ops.items()}
        s_op = {op: None if passed[op] or v is None else 0.0 for op, v in s_op.items()}
        agg = per_problem_weighted = lambda col: None  # noqa: E731
    per_op = {op: _operator_row(rs, s_op[op], total_weight) for op, rs in sorted(ops.items())}
    if not measured:
        for b in by_bound.values():
            b["s_weighted"] = None
    return {
        "hardware": hardware,
        "problems": len(rows),
        "evaluated": sum(r["evaluated"] for r in rows),
        "coverage_weight": sum(r["weight"] for r in rows if r["evaluated"]),
        "performance_measured": measured,
        "S_agg": agg("weight"),
        "S_problem_weighted": per_problem_weighted("weight"),
        "S_agg_phase": {p: agg(f"weight_{p}") for p in PHASES},
        "S_op_phase": {p: ({op: v for op, v in operator_scores(rows, f"weight_{p}").items() if v is not None}
                           if measured else {}) for p in PHASES},
        "S_problem_weighted_phase": {p: per_problem_weighted(f"weight_{p}") for p in PHASES},
        "S_op": s_op,
        "W_op": {op: sum(r["weight"] for r in rs) for op, rs in sorted(ops.items())},
        "operators": per_op,
        "rates": {"compile": rate("compiled"), "correct": rate("correct"), "native": rate("native")},
        "bound": by_bound,
    }


def score(results: pl.DataFrame, release, weights_version: int | str | None = None,
          intervals: bool = True) -> list[dict]:
    """One score per (submission, hardware) in the results, under the release's weights (default: latest); with
    `intervals`, each with S_agg_interval and S_op_interval from its repeated timings (score_interval.py)."""
    weights = release.weights(weights_version)
    version = weights_version if weights_version is not None else release.versions[-1]
    per_problem = problem_scores(with_release_roofline(results, release))
    unsandboxed = dict(((sub, hw), n) for sub, hw, n in results.group_by(["submission", "hardware"]).agg(
        (~pl.col("sandboxed").fill_null(False)).sum()).iter_rows()) if "sandboxed" in results.columns else {}
    out = []
    for (submission, hardware), group in sorted(per_problem.group_by(["submission", "hardware"]),
                                                key=lambda kv: kv[0]):
        out.append({"submission": submission, "weights_version": f"v{str(version).lstrip('v')}",
                    **score_one(group, release.manifest, weights, hardware),
                    "unsandboxed_rows": int(unsandboxed.get((submission, hardware), 0))})
    if intervals:
        out = with_intervals(out, results, release, weights_version,
                             lambda rows, rel, ver: score(rows, rel, ver, intervals=False))
    return out
