"""Scoreboard of the Triton reference submission from its H200 evaluator runs (issue 9).

Reads result Parquet files written by `eval_gpu.py --phases triton` and, for a run cut short, the verdicts
it streamed to `triton_reference_progress.jsonl`; problems of the release without a verdict count as not
evaluated (S_i = 0). Writes one CSV row per catalogue problem and prints, per operator, what ran and how
close it came to the roofline, then S_agg under the imported catalogue's weights (`hotshape score`'s
computation) and under another release's operator weights (the example pipeline's). Where several files hold
a verdict for one problem, the first file named wins (name the newest run first: --progress before --results
files, which are read first only when no progress file names the problem); the CSV's `source` column and the
table's `runs` column say which file each verdict came from. With --weights-progress (the verdicts of an
evaluation on the --weights-release's own problems), that release is also scored on its own problems. Under
S_agg, its ceilings: with every call at least the shortest one measured, against the datasheet roofline and
against this machine's measured ceilings, and the latter with the operator that leaves the most held at its
S_op (with the S_op it would need for the target).

Last, the issue's targets, each met or missed and by how much: S_agg >= 0.50, adoption 100%, no operator at 0,
every memory-bound operator at >= 85% of the measured copy ceiling at its largest problem, GEMM and attention at
>= 70% of the library rate (from --libraries: benchmarks/kernels_vs_libraries.py's JSON, or its printed log
when the run was cut before the JSON), and with --why (YAML: `why:` mapping operator to reason) the reason
next to every operator that misses, and next to each operator's share of what S_agg misses. Where the
library's JSON names catalogue problems, the library's own roofline fraction there is printed beside ours.

    python benchmarks/triton_scoreboard.py --release out/atrex-release \
        --progress benchmarks/results/triton_reference/run4_attention_moe_progress.jsonl ... \
        --results benchmarks/results/triton_reference/run1_first_half.parquet \
        --weights-release out/pipeline/releases/hotshape \
        --csv benchmarks/results/triton_reference/scoreboard_H200.csv
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from pathlib import Path

import polars as pl
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from kernels_eval.harness.runner import Problem, result_row  # noqa: E402
from kernels_eval.harness.verdict import FIELDS as VERDICT_FIELDS  # noqa: E402
from kernels_eval.results_schema import RESULTS, read_results  # noqa: E402
from kernels_eval.scoring import problem_bounds, problem_scores, score  # noqa: E402
from release.bundle import read_release  # noqa: E402


def rows_from_progress(path: Path, release, hardware: str, timing: str = "span") -> list[dict]:
    """Result rows rebuilt from streamed verdicts (the columns a cut run could not write). timing="event":
    each verdict's CUDA-event median (`t_event_s`, kept beside the kernel span) stands as its time, where it
    has one (verdicts of runs before kernel-span timing were timed by events already)."""
    manifest = {r["problem_id"]: r for r in release.manifest.iter_rows(named=True)}
    sealed = release.sealed("roofline")
    roof = {} if sealed is None else dict(sealed.filter(pl.col("hardware") == hardware)
                                          .select("problem_id", "t_roofline_s").iter_rows())
    base = {"submission": "triton_reference", "release": release.name, "run_id": path.name, "run": 0,
            "hardware": hardware, "device": "cuda", "evaluated_at": None}
    rows = []
    for line in path.read_text().splitlines():
        v = json.loads(line)
        if timing == "event" and v.get("t_event_s") is not None:
            v = {**v, "t_measured_s": v["t_event_s"], "t_p10_s": None, "t_p90_s": None}
        p = Problem(manifest[v["problem_id"]])
        verdict = {k: x for k, x in v.items() if k in VERDICT_FIELDS}  # a record also names its problem (and run)
        rows.append(result_row(base, p, verdict, None, roof.get(p.problem_id), "cuda"))
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--release", required=True)
    ap.add_argument("--results", nargs="*", default=[])
    ap.add_argument("--progress", nargs="*", default=[])
    ap.add_argument("--weights-release", default=None)
    ap.add_argument("--weights-progress", nargs="*", default=[],
                    help="verdicts streamed by an evaluation of --weights-release's own problems")
    ap.add_argument("--hardware", default="H200")
    ap.add_argument("--timing", choices=("span", "event"), default="span",
                    help="span: the recorded time (the kernel span); event: the CUDA-event figure beside it")
    ap.add_argument("--csv", type=Path, required=True)
    ap.add_argument("--libraries", nargs="*", default=[], type=Path,
                    help="kernels_vs_libraries.py results (JSON, or its log for a run cut before the JSON)")
    ap.add_argument("--why", type=Path, help="YAML: why: {operator: reason}, printed next to each miss")
    args = ap.parse_args()
    release = read_release(args.release)
    results = collect(release, args.progress, args.results, args.hardware, args.timing)
    per_problem = problem_scores(results)
    table = (release.manifest.join(results.select("problem_id", "stage", "t_measured_s", "t_roofline_s",
                                                  "t_reference_s", "speedup", "native_fraction", "error",
                                                  "source"),
                                   on="problem_id", how="left")
             .join(per_problem.select("problem_id", "s_i"), on="problem_id", how="left")
             .with_columns(pl.col("stage").fill_null("not run"), pl.col("s_i").fill_null(0.0))
             .sort("operator", "problem_id"))
    args.csv.parent.mkdir(parents=True, exist_ok=True)
    table.with_columns((pl.col("t_measured_s") * 1e6).alias("t_measured_us"),
                       (pl.col("t_roofline_s") * 1e6).alias("t_roofline_us"),
                       (pl.col("t_reference_s") * 1e6).alias("t_reference_us"),
                       pl.col("s_i").alias("roofline_fraction")).select(
        "operator", "problem_id", "input_kwargs", "stage", "t_measured_us", "t_roofline_us", "roofline_fraction",
        "t_reference_us", "speedup", "native_fraction", "error", "source").write_csv(args.csv)

    (s,) = [x for x in score(results, release) if x["hardware"] == args.hardware]
    # "largest": the operator's largest problem that ran to the end, against the datasheet roofline (S) and
    # against the roofline of the ceilings measured on this machine (copy bandwidth, GEMM rates)
    measured = (release.sealed("roofline").filter(pl.col("hardware") == args.hardware)
                .select("problem_id", "t_roofline_measured_s"))
    table = table.join(measured, on="problem_id", how="left")
    print(f"{'operator':<30}{'problems':>9}{'done':>6}{'S_op':>7}{'W_op':>8}{'largest S':>10}{'of measured':>12}"
          f"{'med speedup':>12}  {'failures':<24}runs")
    largest = {r["operator"]: r for r in largest_problems(table).iter_rows(named=True)}
    for op, group in table.group_by("operator", maintain_order=True):
        done = group.filter(pl.col("stage") == "done")
        fails = sorted({st for st in group["stage"] if st != "done"})
        speedups = [x for x in done["speedup"] if x is not None]
        runs = ",".join(sorted({_short(x) for x in group["source"] if x is not None}))
        big = largest.get(op[0], {})
        big_s, big_m = big.get("s_i") or 0.0, big.get("of_measured") or 0.0
        print(f"{op[0]:<30}{group.height:>9}{done.height:>6}{s['S_op'].get(op[0], 0.0):>7.3f}"
              f"{s['W_op'].get(op[0], 0.0):>8.3f}{big_s:>10.3f}{big_m:>12.3f}"
              f"{statistics.median(speedups) if speedups else float('nan'):>12.2f}  {','.join(fails):<24}{runs}")
    print(f"S_agg (catalogue weights) {s['S_agg']:.4f}; per-problem weighted {s['S_problem_weighted']:.4f}; "
          f"evaluated {s['evaluated']}/{s['problems']}; phases "
          + " ".join(f"{k} {v:.4f}" for k, v in s["S_agg_phase"].items() if v is not None))
    # What a kernel could reach at best when every call costs at least FLOOR_S on the GPU (the shortest
    # call timed on the H200, an empty-ish 4 µs, sets that floor): many catalogue shapes have sub-µs rooflines.
    floor = results.filter(pl.col("t_measured_s").is_not_null())["t_measured_s"].min() or 0.0
    ceil_rows = (release.manifest.join(release.weights(None), on="problem_id")
                 .join(release.sealed("roofline").filter(pl.col("hardware") == args.hardware)
                       .select("problem_id", "t_roofline_s", "t_roofline_measured_s"), on="problem_id"))
    for line in ceiling_lines(ceil_rows, s, floor):
        print(line)
    if args.weights_release:
        other = read_release(args.weights_release)
        w = (other.manifest.join(other.weights(None), on="problem_id")
             .group_by("operator").agg(pl.col("weight").sum()).sort("weight", descending=True))
        measured = {op for op in s["S_op"] if table.filter((pl.col("operator") == op) & (pl.col("stage") == "done")).height}
        total = float(w["weight"].sum())
        agg = sum(r["weight"] * s["S_op"].get(r["operator"], 0.0) for r in w.iter_rows(named=True)) / total
        covered = sum(r["weight"] for r in w.iter_rows(named=True) if r["operator"] in measured) / total
        print(f"S_agg under {other.name}'s operator weights: {agg:.4f} (operators measured here hold "
              f"{covered:.1%} of that weight; the rest count 0: "
              + ", ".join(f"{r['operator']} {r['weight'] / total:.1%}" for r in w.iter_rows(named=True)
                          if r["operator"] not in measured) + ")")
        if args.weights_progress:
            own = collect(other, args.weights_progress, [], args.hardware)
            (o,) = [x for x in score(own, other) if x["hardware"] == args.hardware]
            print(f"S_agg of {other.name} on its own problems: {o['S_agg']:.4f} (evaluated {o['evaluated']}/"
                  f"{o['problems']}); S_op " + ", ".join(f"{k} {v:.3f}" for k, v in sorted(o["S_op"].items())))
    why = (yaml.safe_load(args.why.read_text()) or {}).get("why", {}) if args.why else {}
    for line in target_lines(table, s, release, args.hardware, [library_rows(p) for p in args.libraries], why):
        print(line)
    return 0


def ceiling_lines(rows: pl.DataFrame, s: dict, floor: float) -> list[str]:
    """What S_agg could reach at best: every call at least `floor` seconds against the datasheet roofline, then
    against the ceilings measured on this machine (copy bandwidth, GEMM rates: t_roofline_measured_s), then the
    same with the operator that leaves the most (W_op x (1 - S_op)) kept at its S_op, and the S_op it would need
    for the target with every other operator at its ceiling. `rows`: problem_id, operator, weight, t_roofline_s,
    t_roofline_measured_s; each operator's ceiling is the median over its problems, as S_op is."""
    def per_op(bound: pl.Expr) -> dict[str, tuple[float, float]]:
        ops = (rows.with_columns(pl.min_horizontal(pl.lit(1.0), pl.col("t_roofline_s") / bound).alias("s_max"))
               .group_by("operator").agg(pl.col("s_max").median(), pl.col("weight").sum()))
        return {r["operator"]: (r["s_max"], r["weight"]) for r in ops.iter_rows(named=True)}

    def agg(ops: dict[str, tuple[float, float]]) -> float:
        return sum(c * w for c, w in ops.values()) / sum(w for _, w in ops.values())

    datasheet = per_op(pl.lit(floor))
    measured = per_op(pl.max_horizontal(pl.lit(floor), pl.col("t_roofline_measured_s").fill_null(0.0)))
    out = [f"S_agg ceiling with a {floor * 1e6:.1f} µs floor per call (the shortest call measured): "
           f"{agg(datasheet):.4f}",
           f"S_agg ceiling on this machine's measured ceilings (copy bandwidth, GEMM rates) and that floor: "
           f"{agg(measured):.4f}"]
    gaps = [(s["W_op"][op] * (1 - s["S_op"].get(op, 0.0)), op) for op in s["W_op"] if op in measured]
    if gaps:
        _, op = max(gaps)
        total = sum(w for _, w in measured.values())
        rest = sum(c * w for o, (c, w) in measured.items() if o != op)
        weight = measured[op][1]
        kept = (rest + s["S_op"].get(op, 0.0) * weight) / total
        need = (S_AGG_TARGET * total - rest) / weight
        out.append(f"  with {op} at its S_op {s['S_op'].get(op, 0.0):.3f} and every other operator at its measured "
                   f"ceiling: {kept:.4f}; S_agg {S_AGG_TARGET:.2f} needs {op}'s S_op at {need:.3f} or more")
    return out


def largest_problems(table: pl.DataFrame) -> pl.DataFrame:
    """Per operator, its largest problem (by roofline time) that ran to the end, with `of_measured`: its roofline
    on the ceilings measured on this machine (copy bandwidth, GEMM rates) over its measured time."""
    return (table.filter(pl.col("stage") == "done").sort("t_roofline_s", descending=True, nulls_last=True)
            .group_by("operator", maintain_order=True).first()
            .with_columns((pl.col("t_roofline_measured_s") / pl.col("t_measured_s")).alias("of_measured")))


S_AGG_TARGET = 0.50
MEMORY_TARGET = 0.85  # of the measured copy ceiling, at the operator's largest problem
LIBRARY_TARGET = 0.70  # of the library's rate, at large prefill shapes


def target_lines(table: pl.DataFrame, s: dict, release, hardware: str, libraries: list[list[dict]],
                 why: dict[str, str]) -> list[str]:
    """The issue's targets, each met or missed and by how much, with the reason of each operator that misses."""
    def reason(op: str) -> str:
        return f": {why[op]}" if op in why else ""

    out = ["", "Targets"]
    gap = S_AGG_TARGET - s["S_agg"]
    out.append(f"  S_agg >= {S_AGG_TARGET:.2f}: {s['S_agg']:.4f} - "
               + (f"missed by {gap:.4f}; what each operator leaves (W_op x (1 - S_op)), largest first:"
                  if gap > 0 else "met"))
    if gap > 0:
        lost = sorted(((s["W_op"][op] * (1 - s["S_op"].get(op, 0.0)), op) for op in s["W_op"]), reverse=True)
        out += [f"    {op:<30} {loss:.4f} (S_op {s['S_op'].get(op, 0.0):.3f}, W_op {s['W_op'][op]:.3f}){reason(op)}"
                for loss, op in lost if loss >= 0.005]
    done = table.filter(pl.col("stage") == "done")
    native = done.filter(pl.col("native_fraction") >= 0.95).height
    out.append(f"  adoption 100%: {native}/{table.height} problems native and correct - "
               + ("met" if native == table.height else f"missed by {table.height - native} problems"))
    zero = [op for op, v in s["S_op"].items() if v <= 0.0]
    low = min(s["S_op"].items(), key=lambda kv: kv[1])
    out.append(f"  no operator at 0: lowest S_op {low[0]} {low[1]:.4f} - "
               + ("met" if not zero else "missed: " + ", ".join(f"{op}{reason(op)}" for op in zero)))
    bounds = problem_bounds(release.manifest, hardware)
    largest = (largest_problems(table)
               .filter(pl.col("problem_id").replace_strict(bounds, default="unknown") == "memory")
               .sort("of_measured", descending=True))
    met = largest.filter(pl.col("of_measured") >= MEMORY_TARGET)
    out.append(f"  operators whose largest problem is memory-bound (by the roofline model) at >= {MEMORY_TARGET:.0%} "
               f"of the measured copy ceiling there: {met.height} of {largest.height} met ("
               + ", ".join(f"{r['operator']} {r['of_measured']:.2f}" for r in met.iter_rows(named=True)) + ")")
    out += [f"    missed: {r['operator']} {r['of_measured']:.3f} (short by {MEMORY_TARGET - r['of_measured']:.3f})"
            f"{reason(r['operator'])}" for r in largest.filter(pl.col("of_measured") < MEMORY_TARGET).iter_rows(named=True)]
    rows = [r for rows in libraries for r in rows]
    if rows:
        ops = sorted({r["op"] for r in rows})
        status = []
        for op in ops:
            ratios = [r["ratio"] for r in rows if r["op"] == op and r["ratio"] is not None]
            ok = ratios and min(ratios) >= LIBRARY_TARGET
            status.append(f"{op} {min(ratios):.2f}-{max(ratios):.2f} over {len(ratios)} shapes"
                          + ("" if ok else f" (missed{reason(op)})") if ratios else f"{op} not measured")
        met_all = all(r["ratio"] is not None and r["ratio"] >= LIBRARY_TARGET for r in rows)
        out.append(f"  GEMM and attention at >= {LIBRARY_TARGET:.0%} of the library rate (library time / ours): "
                   + ("met" if met_all else "missed") + "; " + "; ".join(status))
        out += library_fraction_lines(table, rows, s)
    else:
        out.append("  GEMM and attention against the libraries: not measured (no --libraries)")
    return out


def library_fraction_lines(table: pl.DataFrame, rows: list[dict], s: dict) -> list[str]:
    """Where the library ran catalogue problems (its JSON names them): the library's own roofline fraction there
    (roofline / library time) beside ours on the same problems: how far from the roofline the best available
    implementation is, where ours is at or above the library's level."""
    roof = dict(zip(table["problem_id"], table["t_roofline_s"]))
    out = []
    for op in sorted({r["op"] for r in rows}):
        got = [(roof[r["problem_id"]] / r["library_s"], roof[r["problem_id"]] / r["ours_s"]) for r in rows
               if r["op"] == op and r.get("library_s") and r.get("ours_s") and roof.get(r.get("problem_id"))]
        if not got:
            continue
        lib, ours = [g[0] for g in got], [g[1] for g in got]
        out.append(f"    {op}: the library's own roofline fraction on {len(got)} catalogue problems: median "
                   f"{statistics.median(lib):.3f}, max {max(lib):.3f} (ours on the same: median "
                   f"{statistics.median(ours):.3f}, max {max(ours):.3f}; S_op over all {op} problems "
                   f"{s['S_op'].get(op, 0.0):.3f})")
    return out


# A result line of kernels_vs_libraries.py's log: op, shape, ours ms, TF/s, library ms, TF/s, ratio, met, max diff
LIBRARY_LINE = re.compile(r"^\s*(\w+)\s+(.+?)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(yes|no)\s+\S+\s*$")


def library_rows(path: Path) -> list[dict]:
    """(op, shape, ratio) rows of a kernels_vs_libraries.py result: its JSON, or the lines of its log (the table
    printed last repeats the progress lines: each (op, shape) is kept once)."""
    if path.suffix == ".json":
        return [{"op": r["op"], "shape": r["shape"], "ratio": r.get("ratio"), "problem_id": r.get("problem_id"),
                 "library_s": r.get("library_s"), "ours_s": r.get("ours_s")}
                for r in json.loads(path.read_text())["results"]]
    rows = {}
    for line in path.read_text().splitlines():
        m = LIBRARY_LINE.match(line)
        if m:
            rows[(m[1], m[2])] = {"op": m[1], "shape": m[2], "ratio": float(m[7])}
    if not rows:
        raise ValueError(f"{path}: no result lines of kernels_vs_libraries.py")
    return list(rows.values())


def collect(release, progress: list[str], results: list[str], hardware: str, timing: str = "span") -> pl.DataFrame:
    """One result row per problem: from the first progress file that has it (its last verdict there), else the
    first results file; `source` names the file."""
    frames, seen = [], set()
    schema = pl.from_arrow(RESULTS.empty_table()).schema
    for path in map(Path, progress):
        latest = {r["problem_id"]: r for r in rows_from_progress(path, release, hardware, timing)}  # a re-run: the last
        rows = [r for pid, r in latest.items() if pid not in seen]
        # A consolidated file (catalogue_H200_progress.jsonl) names each verdict's run in its `source` key.
        named = {v["problem_id"]: v.get("source", path.name) for v in map(json.loads, path.read_text().splitlines())}
        if rows:
            frames.append(pl.DataFrame(rows, schema=schema, strict=False).with_columns(
                source=pl.Series([named[r["problem_id"]] for r in rows], dtype=pl.String)))
            seen |= {r["problem_id"] for r in rows}
    for path in map(Path, results):
        frame = pl.from_arrow(read_results(path)).filter(~pl.col("problem_id").is_in(list(seen)))
        frames.append(frame.unique("problem_id", keep="last").with_columns(source=pl.lit(path.name)))
        seen |= set(frame["problem_id"])
    return pl.concat(frames, how="diagonal_relaxed")


def _short(source: str) -> str:
    """run3_new_ops_progress.jsonl -> run3"""
    return source.split("_")[0].split(".")[0]


if __name__ == "__main__":
    sys.exit(main())
