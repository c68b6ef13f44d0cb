"""S_agg and S_op with an interval from run-to-run spread (docs/reproducibility.md "The interval").

A problem's timings are the per-timing medians of every full timing it had: `t_repeats_s` of each of its rows
(`hotshape eval --repeat N`), else the row's `t_measured_s`, in run order, then repeat order; a run that failed
the problem is a timing that scores it 0. Repeat k scores every problem with its k-th timing, on the stages of
the row it came from (a problem with fewer than k+1 timings keeps its headline: the median over its runs), by
the same `scoring.score`;
the interval is [min, max] of the K per-repeat S_agg (and of each S_op), K being the most timings any problem
of the (submission, hardware) had. With K = 1 there is no interval (None).

Why min/max and not a bootstrap: with the few repeats a GPU budget allows (2-5), a percentile interval of a
resample is the min/max anyway, and min/max states exactly what was seen: each end is a score the submission
really got on one of its timings.
"""

from __future__ import annotations

import polars as pl

KEY = ["submission", "hardware", "problem_id"]


def timings(results: pl.DataFrame) -> dict[tuple, list[tuple[dict, float | None]]]:
    """(submission, hardware, problem_id) -> its timings in (run, repeat) order, each with the row it came from: a
    row's `t_repeats_s` give one timing each, else the row gives its `t_measured_s` (None for a problem that
    failed before it was timed: that run scores it 0)."""
    out: dict[tuple, list[tuple[dict, float | None]]] = {}
    for r in results.sort([*KEY, "run"]).iter_rows(named=True):
        entries = out.setdefault(tuple(r[c] for c in KEY), [])
        repeats = [t for t in (r.get("t_repeats_s") or []) if t is not None]
        entries.extend([(r, t) for t in repeats] if repeats else [(r, r["t_measured_s"])])
    return out


def repeat_results(results: pl.DataFrame, k: int, times: dict[tuple, list]) -> pl.DataFrame:
    """The rows that score repeat k: for a problem with a k-th timing, the row it came from timed by it alone;
    for a problem with fewer, all its rows (its headline, the median over runs)."""
    rows = []
    for entries in times.values():
        if len(entries) > k:
            row, t = entries[k]
            rows.append({**row, "t_measured_s": t})
        else:
            rows.extend(dict(row) for row in {id(r): r for r, _ in entries}.values())
    return pl.DataFrame(rows, schema=results.schema)


def with_intervals(scores: list[dict], results: pl.DataFrame, release, weights_version, score) -> list[dict]:
    """`scores` (scoring.score over `results`) each given `S_agg_interval` ({lo, hi, repeats, per_repeat} or None)
    and `S_op_interval` ({op: [lo, hi]} or None), from the per-repeat scores of its (submission, hardware);
    `score(rows, release, version)` scores one repeat's rows (scoring passes its own, without intervals)."""
    if results.height == 0:
        return [{**s, "S_agg_interval": None, "S_op_interval": None} for s in scores]
    times = timings(results)
    counts: dict[tuple, int] = {}
    for (submission, hardware, _), ts in times.items():
        counts[(submission, hardware)] = max(counts.get((submission, hardware), 0), len(ts))
    multi = {key: n for key, n in counts.items() if n > 1}
    per_repeat: dict[tuple, list[dict]] = {}
    for k in range(max(multi.values(), default=0)):
        for s in score(repeat_results(results, k, times), release, weights_version):
            key = (s["submission"], s["hardware"])
            if k < multi.get(key, 0):
                per_repeat.setdefault(key, []).append(s)
    out = []
    for s in scores:
        repeats = per_repeat.get((s["submission"], s["hardware"]), [])
        aggs = [r["S_agg"] for r in repeats]
        if len(repeats) < 2 or any(a is None for a in aggs):
            out.append({**s, "S_agg_interval": None, "S_op_interval": None})
            continue
        ops = {op: [r["S_op"][op] for r in repeats] for op in s["S_op"]}
        out.append({**s, "S_agg_interval": {"lo": min(aggs), "hi": max(aggs), "repeats": len(repeats),
                                            "per_repeat": aggs},
                    # an operator with no weighted problem in the version has no S_op, so no interval
                    "S_op_interval": {op: None if None in v else [min(v), max(v)] for op, v in ops.items()}})
    return out


def bounds(entry: dict) -> tuple[float, float] | None:
    """(lo, hi) of an entry's S_agg: its interval, or its S_agg alone without one; None when not measured."""
    if entry.get("S_agg") is None:
        return None
    interval = entry.get("S_agg_interval")
    if interval is None:
        return entry["S_agg"], entry["S_agg"]
    return min(interval["lo"], entry["S_agg"]), max(interval["hi"], entry["S_agg"])


def not_separated(entries: list[dict]) -> list[list[int]]:
    """For each entry (in order), the indices of the other entries its S_agg bounds overlap (closed intervals):
    rankings between them are not separated by the measured spread."""
    b = [bounds(e) for e in entries]
    return [[j for j, other in enumerate(b) if j != i and mine is not None and other is not None
             and mine[0] <= other[1] and other[0] <= mine[1]] for i, mine in enumerate(b)]
