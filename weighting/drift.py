"""Drift between two weight sets: per-problem and per-operator deltas, divergences, rank correlation."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import polars as pl

from weighting.schema import DRIFT_OPERATORS, DRIFT_PROBLEMS, PHASE_WEIGHTS, validate


def as_weight_set(frame: pl.DataFrame, name: str = "weights") -> pl.DataFrame:
    """problem_id, operator, weight (+ phase weights) of a weights table or a selection (operator, shape)."""
    if "problem_id" not in frame.columns:
        if not {"operator", "shape"} <= set(frame.columns):
            raise ValueError(f"{name}: needs column 'problem_id' (or 'operator' and 'shape')")
        # A selection has no keyed id yet: the canonical problem itself is the key.
        frame = frame.with_columns((pl.col("operator") + pl.lit(" ") + pl.col("shape")).alias("problem_id"))
    missing = [c for c in ("operator", "weight") if c not in frame.columns]
    if missing:
        raise ValueError(f"{name}: missing columns {missing}")
    if frame["problem_id"].is_duplicated().any():
        raise ValueError(f"{name}: problem_id {frame.filter(pl.col('problem_id').is_duplicated())['problem_id'][0]!r} appears twice")
    if frame["weight"].is_null().any() or (frame["weight"] < 0).any():
        raise ValueError(f"{name}: column 'weight' has null or negative values")
    phases = [c for c in PHASE_WEIGHTS if c in frame.columns]
    return frame.select("problem_id", pl.col("operator").cast(pl.String), pl.col("weight").cast(pl.Float64), *phases)


def _normalised(values: np.ndarray) -> np.ndarray:
    total = math.fsum(values.tolist())
    return values / total if total > 0 else values


def js_divergence(p, q) -> float:
    """Jensen–Shannon divergence in bits (0 = same distribution, 1 = disjoint) of two weight vectors."""
    p, q = _normalised(np.asarray(p, float)), _normalised(np.asarray(q, float))
    m = (p + q) / 2

    def kl(a):
        nz = a > 0
        return float(np.sum(a[nz] * np.log2(a[nz] / m[nz])))

    return max(0.0, 0.5 * kl(p) + 0.5 * kl(q))


def total_variation(p, q) -> float:
    """Total variation distance: the weight that has to move to turn one set into the other."""
    p, q = _normalised(np.asarray(p, float)), _normalised(np.asarray(q, float))
    return 0.5 * float(np.sum(np.abs(p - q)))


def _ranks(values: np.ndarray) -> np.ndarray:
    """1-based ranks with ties given their average rank."""
    order = np.argsort(values, kind="stable")
    ranks = np.empty(len(values))
    sorted_vals = values[order]
    i = 0
    while i < len(values):
        j = i
        while j + 1 < len(values) and sorted_vals[j + 1] == sorted_vals[i]:
            j += 1
        ranks[order[i : j + 1]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def spearman(a, b) -> float | None:
    """Spearman rank correlation (ties averaged); None when fewer than 2 items or a constant side."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    if len(a) < 2:
        return None
    ra, rb = _ranks(a), _ranks(b)
    ra, rb = ra - ra.mean(), rb - rb.mean()
    denom = math.sqrt(float(np.sum(ra * ra)) * float(np.sum(rb * rb)))
    return float(np.sum(ra * rb) / denom) if denom > 0 else None


@dataclass
class DriftReport:
    """How a weight set moved from `old` to `new` (weights normalised to sum to 1 on each side)."""

    problems: pl.DataFrame
    operators: pl.DataFrame
    js_divergence: float
    total_variation: float
    operator_js_divergence: float
    operator_total_variation: float
    spearman: float | None  # over problems present in both
    operator_spearman: float | None
    sum_old: float  # raw sums, before normalising (Atrex-Bench's published weights sum to 1.0948)
    sum_new: float
    phase_total_variation: dict = field(default_factory=dict)

    @property
    def newly_hot(self) -> list[str]:
        """Problems with weight only in the new set."""
        return self.problems.filter(pl.col("status") == "newly_hot")["problem_id"].to_list()

    @property
    def newly_cold(self) -> list[str]:
        """Problems with weight only in the old set."""
        return self.problems.filter(pl.col("status") == "newly_cold")["problem_id"].to_list()

    def to_dict(self, top: int = 20) -> dict:
        """A JSON-ready summary with the `top` biggest movers."""
        movers = self.problems.head(top).to_dicts()
        return {
            "n_old": int((self.problems["weight_old"] > 0).sum()),
            "n_new": int((self.problems["weight_new"] > 0).sum()),
            "n_kept": int((self.problems["status"] == "kept").sum()),
            "sum_old": self.sum_old,
            "sum_new": self.sum_new,
            "js_divergence": self.js_divergence,
            "total_variation": self.total_variation,
            "operator_js_divergence": self.operator_js_divergence,
            "operator_total_variation": self.operator_total_variation,
            "spearman": self.spearman,
            "operator_spearman": self.operator_spearman,
            "phase_total_variation": self.phase_total_variation,
            "newly_hot": self.newly_hot,
            "newly_cold": self.newly_cold,
            "top_problem_movers": movers,
            "operators": self.operators.to_dicts(),
        }


def _by_abs_delta(frame: pl.DataFrame, key: str) -> pl.DataFrame:
    return frame.with_columns(pl.col("delta").abs().alias("_abs")).sort(["_abs", key], descending=[True, False]).drop("_abs")


def compare(old: pl.DataFrame, new: pl.DataFrame) -> DriftReport:
    """The drift from weight set `old` to `new` (frames as `as_weight_set` accepts)."""
    old, new = as_weight_set(old, "old"), as_weight_set(new, "new")
    sum_old, sum_new = math.fsum(old["weight"].to_list()), math.fsum(new["weight"].to_list())
    joined = old.join(new, on="problem_id", how="full", coalesce=True, suffix="_new")
    clash = joined.filter(pl.col("operator").is_not_null() & pl.col("operator_new").is_not_null() & (pl.col("operator") != pl.col("operator_new")))
    if clash.height:
        raise ValueError(f"problem {clash['problem_id'][0]!r} has operator {clash['operator'][0]!r} in old, {clash['operator_new'][0]!r} in new")
    w_old = _normalised(joined["weight"].fill_null(0.0).to_numpy())
    w_new = _normalised(joined["weight_new"].fill_null(0.0).to_numpy())
    problems = joined.select(
        "problem_id", pl.coalesce("operator_new", "operator").alias("operator")
    ).with_columns(pl.Series("weight_old", w_old), pl.Series("weight_new", w_new))
    problems = problems.with_columns(
        (pl.col("weight_new") - pl.col("weight_old")).alias("delta"),
        pl.when(pl.col("weight_old") <= 0).then(pl.lit("newly_hot"))
        .when(pl.col("weight_new") <= 0).then(pl.lit("newly_cold"))
        .otherwise(pl.lit("kept")).alias("status"),
    ).filter((pl.col("weight_old") > 0) | (pl.col("weight_new") > 0))
    problems = validate(_by_abs_delta(problems, "problem_id"), DRIFT_PROBLEMS, "drift_problems")

    sums: dict[str, tuple[list, list]] = {}
    for op, a, b in problems.sort("problem_id").select("operator", "weight_old", "weight_new").iter_rows():
        sums.setdefault(op, ([], []))[0].append(a)
        sums[op][1].append(b)
    ops = pl.DataFrame(
        {"operator": list(sums), "weight_old": [math.fsum(a) for a, _ in sums.values()],
         "weight_new": [math.fsum(b) for _, b in sums.values()]},
        schema={"operator": pl.String, "weight_old": pl.Float64, "weight_new": pl.Float64},
    )
    ops = ops.with_columns((pl.col("weight_new") - pl.col("weight_old")).alias("delta"))
    ops = validate(_by_abs_delta(ops, "operator"), DRIFT_OPERATORS, "drift_operators")
    kept = problems.filter(pl.col("status") == "kept")
    ops_both = ops.filter((pl.col("weight_old") > 0) & (pl.col("weight_new") > 0))

    phase_tv = {}
    for col in PHASE_WEIGHTS:
        if col in old.columns and col in new.columns:
            both = old.select("problem_id", col).join(new.select("problem_id", col), on="problem_id", how="full", coalesce=True, suffix="_new")
            a, b = both[col].fill_null(0.0).to_numpy(), both[f"{col}_new"].fill_null(0.0).to_numpy()
            if a.sum() > 0 and b.sum() > 0:
                phase_tv[col] = total_variation(a, b)

    return DriftReport(
        problems=problems,
        operators=ops,
        js_divergence=js_divergence(w_old, w_new),
        total_variation=total_variation(w_old, w_new),
        operator_js_divergence=js_divergence(ops["weight_old"].to_numpy(), ops["weight_new"].to_numpy()),
        operator_total_variation=total_variation(ops["weight_old"].to_numpy(), ops["weight_new"].to_numpy()),
        spearman=spearman(kept["weight_old"].to_numpy(), kept["weight_new"].to_numpy()),
        operator_spearman=spearman(ops_both["weight_old"].to_numpy(), ops_both["weight_new"].to_numpy()),
        sum_old=sum_old,
        sum_new=sum_new,
        phase_total_variation=phase_tv,
    )


def beyond_intervals(drift: dict, report: DriftReport, problems: pl.DataFrame, operators: pl.DataFrame) -> dict:
    """`drift` (report.to_dict()) with the movements that exceed the new version's bootstrap intervals marked.

    A problem (operator) moved beyond its interval when its old weight lies outside the percentile
    interval of its new weight (`problems`: problem_id, weight_lo, weight_hi; `operators`: operator,
    weight_lo, weight_hi): resampling the new version's profiles would rarely give the old weight, so
    the movement is more than profile-sampling noise.
    """
    def beyond(frame: pl.DataFrame, ivals: pl.DataFrame, key: str) -> list[str]:
        joined = frame.join(ivals.select(key, "weight_lo", "weight_hi"), on=key, how="left").with_columns(
            pl.col("weight_lo", "weight_hi").fill_null(0.0))
        out = joined.filter((pl.col("weight_old") < pl.col("weight_lo")) | (pl.col("weight_old") > pl.col("weight_hi")))
        return out.sort(key)[key].to_list()

    moved = set(beyond(report.problems, problems, "problem_id"))
    moved_ops = set(beyond(report.operators, operators, "operator"))
    out = dict(drift)
    out["top_problem_movers"] = [m | {"beyond_interval": m["problem_id"] in moved} for m in drift["top_problem_movers"]]
    out["operators"] = [o | {"beyond_interval": o["operator"] in moved_ops} for o in drift["operators"]]
    out["beyond_interval"] = {"problems": sorted(moved), "operators": sorted(moved_ops),
                              "rule": "old weight outside the new weight's bootstrap interval (public/intervals/)"}
    return out


def shape_labels(manifest: pl.DataFrame) -> dict[str, str]:
    """problem_id → `operator k=v, …` from a manifest's init/input kwargs and dtypes (what a reader recognises)."""
    import json

    out = {}
    for pid, op, *parts in manifest.select("problem_id", "operator", "init_kwargs", "input_kwargs", "dtypes").iter_rows():
        kwargs = {}
        for text in parts:
            # dtypes' per-argument maps (input_dtypes, output_dtypes) would only repeat `dtype` at length
            kwargs.update({k: v for k, v in (json.loads(text) if text else {}).items() if not isinstance(v, dict)})
        out[pid] = f"{op} " + ", ".join(f"{k}={_value_text(v)}" for k, v in sorted(kwargs.items()))
    return out


def _value_text(value) -> str:
    """A kwarg as a label shows it: a long list (seq_lens of 3,095 sequences) by what it holds, not in full."""
    if not isinstance(value, list) or len(value) <= 6:
        return str(value)
    if all(v == value[0] for v in value):
        return f"[{value[0]}]×{len(value)}"
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value):
        return f"[{len(value)} values {min(value)}–{max(value)}, sum {sum(value)}]"
    return f"[{len(value)} values]"


# A problem whose weight moved by at least this much (absolute, of the benchmark) gets its cause named.
LARGE_MOVE = 0.01


def causes(report: DriftReport, old_inputs: dict | None, new_inputs: dict | None, large: float = LARGE_MOVE) -> dict[str, str]:
    """problem_id → the fleet change behind its movement, for every movement of at least `large`.

    w_i = P_i / Z: the problem's fleet card-hours over all the version's problems'. Each deployment's change is
    applied alone to the old P_i and Z (its card-hours and traces move both: a deployment that grows lowers the
    weight of problems it lacks); the one that moves w_i most is the cause, named with what changed in its
    inputs. Deployment ids are sealed: this reads sealed/inputs, and its output is for the maintainer's report.
    """
    if not old_inputs or not new_inputs:
        return {}
    old_p, new_p = old_inputs["problems"], new_inputs["problems"]
    deployments = sorted(set(old_inputs["deployments"]) | set(new_inputs["deployments"]))

    def total(problems: dict, dep: str) -> float:
        return math.fsum(per.get(dep, 0.0) for per in problems.values())

    z_old = {d: total(old_p, d) for d in deployments}
    z_new = {d: total(new_p, d) for d in deployments}
    z = math.fsum(z_old.values())
    out = {}
    for pid, delta in report.problems.select("problem_id", "delta").iter_rows():
        if abs(delta) < large or z <= 0:
            continue
        a, b = old_p.get(pid, {}), new_p.get(pid, {})
        p_old = math.fsum(a.values())
        effects = []
        for d in deployments:
            p = p_old - a.get(d, 0.0) + b.get(d, 0.0)
            zz = z - z_old[d] + z_new[d]
            effects.append(((p / zz if zz > 0 else 0.0) - p_old / z, d))
        move, dep = min(effects, key=lambda x: (-abs(x[0]), x[1]))
        out[pid] = f"deployment {dep} (alone {move * 100:+.2f} pt): " + _what_changed(
            old_inputs["deployments"].get(dep), new_inputs["deployments"].get(dep))
    return out


def _what_changed(old: dict | None, new: dict | None) -> str:
    if old is None:
        return "new in the fleet"
    if new is None:
        return "no longer in the fleet"
    said = []
    if not math.isclose(old["card_hours"], new["card_hours"], rel_tol=1e-9):
        said.append(f"card-hours {old['card_hours']:g} → {new['card_hours']:g}")
    added, removed = set(new["trace_ids"]) - set(old["trace_ids"]), set(old["trace_ids"]) - set(new["trace_ids"])
    if added or removed:
        said.append(f"traces +{len(added)} −{len(removed)} (now {len(new['trace_ids'])})")
    return "; ".join(said) or "same card-hours and traces (other deployments' changes renormalised it)"
