"""Two evaluations of one submission on one release, side by side: how far each problem's time, each S_op and S_agg
moved between them, judged against issue 39's bar (S_agg within 1%, every S_op within 3%, at least 95% of the
problems within 3%, none beyond 10%). Each run is a results file made on its own fresh GPU machine, cold:

    # on machine 1, then on machine 2 (fresh), each from the repo root with the release carried over:
    hotshape eval examples/submissions/triton_reference --release out/atrex-release --device cuda --lanes 6 \\
        --autotune protocol --autotune-store $OUT/autotune --no-triton-cache --repeat 2 --out $OUT/run1.parquet
    # here, with both results files fetched:
    PYTHONPATH=$PWD python benchmarks/reproducibility.py --release out/atrex-release run1.parquet run2.parquet

Signatures are not checked (each machine signs with its own host key): this compares timings, it does not score
for a leaderboard. `--json FILE` also writes every figure.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

BAR = {"S_agg": 0.01, "S_op": 0.03, "problem": 0.03, "problem_share": 0.95, "problem_max": 0.10}
BANDS = (0.01, 0.03, 0.10)


def deviation(a: float | None, b: float | None) -> float | None:
    """|b / a - 1|, or None when either is missing or a is zero."""
    if a is None or b is None or a == 0:
        return None
    return abs(b / a - 1)


def compare(first, second, release) -> dict:
    """The per-problem, per-operator and aggregate movements between two results frames (polars, RESULTS)."""
    from kernels_eval.scoring import score

    (sa,), (sb,) = score(first, release, intervals=False), score(second, release, intervals=False)
    times = [{p: t for p, t in f.select("problem_id", "t_measured_s").iter_rows()} for f in (first, second)]
    ops = {p: op for p, op in first.select("problem_id", "operator").iter_rows()}
    problems = sorted((deviation(times[0][p], times[1][p]), p) for p in times[0].keys() & times[1].keys()
                      if deviation(times[0][p], times[1][p]) is not None)
    moves = [d for d, _ in problems]
    per_op = {op: deviation(sa["S_op"].get(op), sb["S_op"].get(op)) for op in sa["S_op"]}
    by_op: dict[str, list[float]] = {}
    for d, p in problems:
        by_op.setdefault(ops[p], []).append(d)
    out = {
        "S_agg": [sa["S_agg"], sb["S_agg"]], "S_agg_deviation": deviation(sa["S_agg"], sb["S_agg"]),
        "S_op": {op: [sa["S_op"][op], sb["S_op"].get(op), per_op[op]] for op in sorted(sa["S_op"])},
        "problems": len(problems), "median_deviation": statistics.median(moves) if moves else None,
        "within": {f"{band:.0%}": sum(d <= band for d in moves) for band in BANDS},
        "largest": [[p, ops[p], d, times[0][p], times[1][p]] for d, p in problems[::-1][:10]],
        "by_operator": {op: {"problems": len(ds), "median": statistics.median(ds), "largest": max(ds)}
                        for op, ds in sorted(by_op.items())},
    }
    ops_measured = [d for d in per_op.values() if d is not None]
    out["bar"] = {
        "S_agg within 1%": out["S_agg_deviation"] is not None and out["S_agg_deviation"] <= BAR["S_agg"],
        "every S_op within 3%": bool(ops_measured) and max(ops_measured) <= BAR["S_op"],
        "95% of problems within 3%": bool(moves) and sum(d <= BAR["problem"] for d in moves) >= BAR["problem_share"]
        * len(moves),
        "no problem beyond 10%": bool(moves) and max(moves) <= BAR["problem_max"],
    }
    return out


def lines(found: dict) -> list[str]:
    """The comparison as a terminal report."""
    a, b = found["S_agg"]
    fmt = lambda x: "n/a" if x is None else f"{x:.4f}"  # noqa: E731
    pct = lambda x: "n/a" if x is None else f"{x:.2%}"  # noqa: E731
    n = found["problems"]
    out = [f"S_agg {fmt(a)} vs {fmt(b)}: {pct(found['S_agg_deviation'])} apart",
           f"{n} problems timed in both: median deviation {pct(found['median_deviation'])}; "
           + ", ".join(f"{k}/{n} within {band}" for band, k in found["within"].items()),
           "", "| operator | S_op first | S_op second | S_op deviation | problems | median | largest |",
           "|---|---:|---:|---:|---:|---:|---:|"]
    for op, (x, y, d) in found["S_op"].items():
        p = found["by_operator"].get(op, {})
        out.append(f"| {op} | {fmt(x)} | {fmt(y)} | {pct(d)} | {p.get('problems', 0)} | {pct(p.get('median'))} "
                   f"| {pct(p.get('largest'))} |")
    out += ["", "largest per-problem moves:"]
    out += [f"  {p} {op}: {pct(d)} ({ta * 1e6:.1f} vs {tb * 1e6:.1f} µs)" for p, op, d, ta, tb in found["largest"]]
    out += ["", "issue 39's bar:"] + [f"  {'met' if ok else 'MISSED'}: {name}" for name, ok in found["bar"].items()]
    return out


def run_frame(paths: str, read):
    """One run's rows from its results files (comma-separated: a run evaluated in parts, one file each), read with
    `read(path) -> polars frame`; a problem in two parts is refused, naming it."""
    import polars as pl

    frame = pl.concat([read(Path(path)) for path in paths.split(",") if path], how="diagonal_relaxed")
    twice = frame.filter(pl.col("problem_id").is_duplicated())["problem_id"].unique().sort().to_list()
    if twice:
        raise SystemExit(f"reproducibility: {paths}: problem {twice[0]} is in more than one part of the run")
    return frame


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("first", help="the first run's results file (comma-separated files: a run in parts)")
    parser.add_argument("second", help="the second run's, likewise")
    parser.add_argument("--release", required=True)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    import polars as pl

    from kernels_eval.results_schema import read_results
    from release.bundle import read_release

    release = read_release(args.release)
    frames = [run_frame(paths, lambda path: pl.from_arrow(read_results(path))) for paths in (args.first, args.second)]
    found = compare(*frames, release)
    print("\n".join(lines(found)))
    if args.json:
        args.json.write_text(json.dumps(found, indent=1))
    return 0 if all(found["bar"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
