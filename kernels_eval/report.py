"""An offline HTML report of scores: the per-operator table and charts embedded as SVG data (no network, no files
beside it), from the jinja2 template kernels_eval/templates/score.html."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from kernels_eval.library.display import library_section, versus_section
from kernels_eval.score_display import NOT_MEASURED, fmt, interval_text
from weighting.pages import chart, figure, render

TEMPLATES = Path(__file__).parent / "templates"
ROW_IN = 0.28  # inches of chart height per operator or entry


def contribution_plot(s: dict):
    """Bars of W_op·S_op per operator (of W_op, split into done and not done, when nothing was timed), a Figure."""
    ops = sorted(s["operators"].items(), key=lambda kv: kv[1]["W_op"])
    names = [op for op, _ in ops]
    fig = figure(8, ROW_IN * len(ops) + 1.2)
    ax = fig.add_subplot()
    if s["S_agg"] is not None:
        ax.barh(names, [r["contribution"] or 0.0 for _, r in ops], color="#3b7dd8")
        ax.set_xlabel("contribution W_op·S_op to S_agg")
        ax.set_title(f"{s['submission']} on {s['hardware']}: S_agg {s['S_agg']:.4f}")
    else:  # S is not measured without timing: show where the weight is and how much of it passed
        done = [r["W_op"] * r["done"] / r["problems"] if r["problems"] else 0.0 for _, r in ops]
        ax.barh(names, done, color="#4caf50", label="weight of problems done")
        ax.barh(names, [r["W_op"] - d for (_, r), d in zip(ops, done)], left=done, color="#e57373",
                label="weight of problems failed or not run")
        ax.set_xlabel("W_op (S_op not measured: no problem was timed)")
        ax.set_title(f"{s['submission']} on {s['hardware']}: S_agg {NOT_MEASURED}")
        ax.legend(loc="lower right", fontsize=8)
    ax.set_ylabel("operator")
    ax.tick_params(axis="y", labelsize=8)
    return fig


def roofline_plot(per_problem: pl.DataFrame, s: dict):
    """Roofline fraction T_roofline/T_measured of each timed problem, grouped by operator, a Figure; None when no
    problem was timed."""
    timed = per_problem.filter((pl.col("submission") == s["submission"]) & (pl.col("hardware") == s["hardware"])
                               & pl.col("roofline_fraction").is_not_null()).sort("operator", "roofline_fraction")
    if timed.height == 0:
        return None
    from matplotlib import colormaps

    fig = figure(9, 3.5)
    ax = fig.add_subplot()
    ops = timed["operator"].unique(maintain_order=True).to_list()
    colour = {op: colormaps["tab20"](i % 20) for i, op in enumerate(ops)}
    ax.scatter(range(timed.height), timed["roofline_fraction"], c=[colour[o] for o in timed["operator"]], s=12)
    ax.axhline(1.0, color="#888", lw=0.8, ls="--")
    ax.set_yscale("log")
    ax.set_ylabel("T_roofline / T_measured")
    groups = operator_groups(timed["operator"].to_list())
    ax.set_xticks([centre for _, centre, _ in groups], [op for op, _, _ in groups], rotation=35, ha="right", fontsize=8)
    for _, _, end in groups[:-1]:
        ax.axvline(end + 0.5, color="#ddd", lw=0.8)
    ax.set_xlabel("problems, grouped by operator")
    ax.set_title("roofline fraction per problem (1 = at the roofline)")
    return fig


def operator_groups(operators: list[str]) -> list[tuple[str, float, int]]:
    """(operator, centre index, last index) of each run of one operator in `operators`: where the scatter's x axis
    names each operator's problems."""
    out: list[tuple[str, float, int]] = []
    start = 0
    for i, op in enumerate(operators):
        if i + 1 == len(operators) or operators[i + 1] != op:
            out.append((op, (start + i) / 2, i))
            start = i + 1
    return out


def operator_rows(s: dict) -> list[list]:
    """The per-operator table's cells, heaviest operator first."""
    return [[op, f"{r['W_op']:.4f}", NOT_MEASURED if r["S_op"] is None else f"{r['S_op']:.4f}", fmt(r["contribution"]),
             r["done"], r["failed"], r["problems"] - r["evaluated"], fmt(r["median_roofline_fraction"])]
            for op, r in sorted(s["operators"].items(), key=lambda kv: (-kv[1]["W_op"], kv[0]))]


def score_report(scores: list[dict], per_problem: pl.DataFrame, title: str, library: list[dict] = ()) -> str:
    """The HTML of a report on `scores` (scoring.score output) with their per-problem rows, each beside the library
    line where `library` (kernels_eval/library/line.py) has one for its hardware."""
    sections = []
    for s in scores:
        roofline = roofline_plot(per_problem, s)
        sections.append({
            "score": s, "S_agg": NOT_MEASURED if s["S_agg"] is None else f"{s['S_agg']:.4f}",
            "interval": interval_text(s.get("S_agg_interval"), s["S_agg"] is not None),
            "correct": f"{s['rates']['correct']['weighted']:.1%}", "native": f"{s['rates']['native']['weighted']:.1%}",
            "rows": operator_rows(s), "contribution": chart(contribution_plot(s)),
            "roofline": chart(roofline) if roofline is not None else None,
            "versus": versus_section(s["vs_library"], s["performance_measured"]) if s.get("vs_library") else None,
        })
    return render("score.html", TEMPLATES, title=title, sections=sections,
                  libraries=[library_section(lib) for lib in library])


def write_score_report(path: str | Path, scores: list[dict], per_problem: pl.DataFrame, title: str,
                       library: list[dict] = ()) -> Path:
    """The report written to `path` (its directory made if missing)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(score_report(scores, per_problem, title, library), encoding="utf-8")
    return path
