"""The library line beside a score: the baseline rows (results column `baseline` set) scored on their own, and each
submission's problems and operators set between the library and the roofline.

S_lib,i = min(1, T_roofline,i / T_library,i) where the library path ran, matched the reference and was timed (never
native: a baseline does not need to be); no value where the operator has no library path or it failed.
S_op,lib = median S_lib,i over the operator's weighted problems that have one; the library's S_agg is
Σ W_op · S_op,lib / Σ W_op over the operators that have an S_op,lib (its coverage: that Σ W_op), weighted like the
catalogue. Toward the roofline from the library: f = (S_sub − S_lib) / (1 − S_lib): 0 at the library, 1 at the
roofline, negative when the submission is slower than the library; none where the library is at the roofline
already or either side has no S. docs/library-baseline.md.
"""

from __future__ import annotations

import statistics

import polars as pl

from kernels_eval.scoring import with_release_roofline


def split_baseline(rows: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(submission rows, baseline rows) of verified results rows."""
    if rows.height == 0 or "baseline" not in rows.columns:
        return rows, rows.clear() if rows.height else rows
    marked = pl.col("baseline").is_not_null()
    return rows.filter(~marked), rows.filter(marked)


def toward_roofline(s_sub: float | None, s_lib: float | None) -> float | None:
    """(S_sub − S_lib) / (1 − S_lib); None where either is missing or the library is at the roofline."""
    if s_sub is None or s_lib is None or s_lib >= 1.0:
        return None
    return (s_sub - s_lib) / (1.0 - s_lib)


def _median(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


def _per_problem(rows: pl.DataFrame, release, *, library: bool) -> pl.DataFrame:
    """One row per (submission, hardware, problem): t (median over runs of the timed rows), S_i (median over
    runs; null where it did not pass or was not timed), and for the library the path that ran. A submission's S_i
    needs compiled, correct and native; the library's only compiled and correct."""
    roof = with_release_roofline(rows, release)
    passed = pl.col("compiled") & pl.col("correct") & (pl.lit(True) if library else pl.col("native"))
    timed = pl.col("t_measured_s").is_not_null() & (pl.col("t_measured_s") > 0) & pl.col("t_roofline_s").is_not_null()
    s = pl.min_horizontal(pl.lit(1.0), pl.col("t_roofline_s") / pl.col("t_measured_s"))
    s_i = pl.when(passed & timed).then(s).otherwise(None)
    aggs = [pl.col("operator").first(), pl.col("s_i").median(), pl.col("t_roofline_s").first(),
            pl.col("t_measured_s").filter(timed).median().alias("t_s"), (passed).all().alias("passed"),
            pl.col("performance_measured").any()]
    if library:
        aggs.append(pl.col("baseline").first().alias("path"))
        aggs.append(pl.col("error").first())
    return roof.with_columns(s_i.alias("s_i")).group_by(["submission", "hardware", "problem_id"]).agg(aggs)


def library_scores(rows: pl.DataFrame, release, weights_version=None) -> dict[str, dict]:
    """{hardware: the library line} from baseline rows: S_agg over the operators with a library S_op, its
    coverage, S_op and the path per operator, and per problem S_lib,i and T_library."""
    if rows.height == 0:
        return {}
    weights = release.weights(weights_version)
    per = _per_problem(rows, release, library=True)
    manifest = release.manifest.select("problem_id", "operator").join(
        weights.select("problem_id", "weight"), on="problem_id", how="inner")
    out = {}
    for (hardware,), group in per.group_by(["hardware"]):
        table = manifest.join(group.drop("operator"), on="problem_id", how="left")
        problems = {r["problem_id"]: r for r in table.to_dicts()}
        ops: dict[str, list[dict]] = {}
        for r in problems.values():
            ops.setdefault(r["operator"], []).append(r)
        s_op, paths, w_op, reasons = {}, {}, {}, {}
        for op, rs in sorted(ops.items()):
            w_op[op] = sum(r["weight"] for r in rs)
            s_op[op] = _median([r["s_i"] for r in rs if r["weight"] > 0 and r["s_i"] is not None])
            names = [r["path"] for r in rs if r["path"] and r["passed"]]
            paths[op] = max(set(names), key=names.count) if names else None
            failed = [r["error"] for r in rs if r["path"] is not None and not r["passed"] and r["error"]]
            reasons[op] = failed[0] if failed else (None if names else "not run")
        measured = bool(group["performance_measured"].any())
        # timed: the operators with an S_op; untimed (CPU): those whose library path ran and matched the reference
        covered = {op: w for op, w in w_op.items() if (s_op[op] is not None if measured else paths[op] is not None)}
        total = sum(covered.values())
        out[hardware] = {
            "hardware": hardware, "measured": measured,
            "S_agg": sum(w * s_op[op] for op, w in covered.items()) / total if total > 0 and measured else None,
            "coverage_weight": total, "S_op": s_op, "W_op": w_op, "path": paths, "why_none": reasons,
            "problems": {pid: {"s_i": r["s_i"], "t_s": r["t_s"], "t_roofline_s": r["t_roofline_s"],
                               "path": r["path"], "passed": r["passed"]} for pid, r in problems.items()},
        }
    return out


def versus_library(score: dict, rows: pl.DataFrame, release, library: dict | None, weights_version=None) -> dict | None:
    """A submission's score (scoring.score output) set beside the library line of its hardware: per operator and per
    problem, roofline, library and submission side by side with f toward the roofline; None without a library line."""
    if not library:
        return None
    weights = release.weights(weights_version)
    mine = rows.filter((pl.col("submission") == score["submission"]) & (pl.col("hardware") == score["hardware"]))
    per = {r["problem_id"]: r for r in _per_problem(mine, release, library=False).to_dicts()} if mine.height else {}
    problems = []
    for w in release.manifest.select("problem_id", "operator").join(weights.select("problem_id", "weight"),
                                                                     on="problem_id", how="inner").to_dicts():
        sub, lib = per.get(w["problem_id"], {}), library["problems"].get(w["problem_id"], {})
        # timed runs: a problem failed or not evaluated is 0, as S_agg counts it; untimed (CPU): not measured
        s_sub = (sub.get("s_i") or 0.0) if score["performance_measured"] else None
        problems.append({"problem_id": w["problem_id"], "operator": w["operator"], "weight": w["weight"],
                         "t_roofline_s": lib.get("t_roofline_s") or sub.get("t_roofline_s"),
                         "t_library_s": lib.get("t_s"), "t_submission_s": sub.get("t_s"),
                         "S_library": lib.get("s_i"), "S_submission": s_sub,
                         "toward_roofline": toward_roofline(s_sub, lib.get("s_i"))})
    problems.sort(key=lambda p: (-p["weight"], p["problem_id"]))
    operators = {}
    for op, s_lib in library["S_op"].items():
        s_sub = score["S_op"].get(op)
        operators[op] = {"W_op": library["W_op"][op], "S_op_library": s_lib, "S_op_submission": s_sub,
                         "toward_roofline": toward_roofline(s_sub, s_lib), "path": library["path"].get(op),
                         "why_none": library["why_none"].get(op)}
    covered = [op for op, r in operators.items() if r["S_op_library"] is not None or (r["path"] and not
                                                                                        library["measured"])]
    total = sum(operators[op]["W_op"] for op in covered)
    sub_covered = (sum(operators[op]["W_op"] * (operators[op]["S_op_submission"] or 0.0) for op in covered) / total
                   if total > 0 and score["S_agg"] is not None else None)
    return {"S_agg_library": library["S_agg"], "coverage_weight": library["coverage_weight"],
            "S_agg_submission_covered": sub_covered,
            "toward_roofline": toward_roofline(sub_covered, library["S_agg"]),
            "operators": operators, "problems": problems}
