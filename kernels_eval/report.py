"""An offline HTML report of scores: the per-operator table and plots embedded as base64 PNGs (no network,
no files beside it)."""

from __future__ import annotations

import base64
import html
import io
from pathlib import Path

import polars as pl

from kernels_eval.library.display import library_html, versus_html
from kernels_eval.score_display import NOT_MEASURED, fmt, interval_text

STYLE = ("body{font-family:sans-serif;margin:2em;max-width:70em}table{border-collapse:collapse}"
         "td,th{border:1px solid #ccc;padding:.2em .5em;text-align:right}td:first-child,th:first-child"
         "{text-align:left}.note{color:#555}")


def _png(fig) -> str:
    """The figure as an <img> with its PNG inline."""
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return f'<img alt="plot" src="data:image/png;base64,{base64.b64encode(buf.getvalue()).decode()}">'


def contribution_plot(s: dict) -> str:
    """Bars of W_op·S_op per operator (of W_op, split into done and not done, when nothing was timed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ops = sorted(s["operators"].items(), key=lambda kv: kv[1]["W_op"])
    names = [op for op, _ in ops]
    fig, ax = plt.subplots(figsize=(8, 0.28 * len(ops) + 1.2))
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
    ax.tick_params(axis="y", labelsize=8)
    return _png(fig)


def roofline_plot(per_problem: pl.DataFrame, s: dict) -> str:
    """Roofline fraction T_roofline/T_measured of each timed problem, grouped by operator (a note when none)."""
    timed = per_problem.filter((pl.col("submission") == s["submission"]) & (pl.col("hardware") == s["hardware"])
                               & pl.col("roofline_fraction").is_not_null()).sort("operator", "roofline_fraction")
    if timed.height == 0:
        return '<p class="note">Roofline fraction per problem: no problem was timed (a CPU run does not time).</p>'
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 3.5))
    ops = timed["operator"].unique(maintain_order=True).to_list()
    colour = {op: plt.cm.tab20(i % 20) for i, op in enumerate(ops)}
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
    return _png(fig)


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


def _table(s: dict) -> str:
    head = "".join(f"<th>{h}</th>" for h in ("operator", "W_op", "S_op", "W_op·S_op", "done", "failed", "not run",
                                             "median roofline fraction"))
    rows = []
    for op, r in sorted(s["operators"].items(), key=lambda kv: (-kv[1]["W_op"], kv[0])):
        s_op = NOT_MEASURED if r["S_op"] is None else f"{r['S_op']:.4f}"
        cells = (html.escape(op), f"{r['W_op']:.4f}", s_op, fmt(r["contribution"]), r["done"], r["failed"],
                 r["problems"] - r["evaluated"], fmt(r["median_roofline_fraction"]))
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    return f"<table><tr>{head}</tr>{''.join(rows)}</table>"


def score_report(scores: list[dict], per_problem: pl.DataFrame, title: str, library: list[dict] = ()) -> str:
    """The HTML of a report on `scores` (scoring.score output) with their per-problem rows, each beside the library
    line where `library` (kernels_eval/library/line.py) has one for its hardware."""
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
             f"<style>{STYLE}</style></head><body><h1>{html.escape(title)}</h1>",
             "<p class='note'>S_i = min(1, T_roofline/T_measured) for a problem compiled, correct and native, "
             "else 0; S_op = median S_i of the operator's problems with weight in the version; S_agg = Σ W_op·S_op. "
             "Without timing (a CPU run) S is not measured, except 0 for an operator none of whose problems "
             "passed.</p>"]
    for s in scores:
        agg = NOT_MEASURED if s["S_agg"] is None else f"{s['S_agg']:.4f}"
        parts += [f"<h2>{html.escape(s['submission'])} on {html.escape(s['hardware'])} "
                  f"(weights {s['weights_version']})</h2>",
                  f"<p>S_agg <b>{agg}</b> (interval over repeats: {interval_text(s.get('S_agg_interval'))}); "
                  f"{s['evaluated']}/{s['problems']} problems evaluated; correct on "
                  f"{s['rates']['correct']['weighted']:.1%} and native on {s['rates']['native']['weighted']:.1%} "
                  f"of the weight.</p>", _table(s), contribution_plot(s), roofline_plot(per_problem, s)]
        if s.get("vs_library"):
            parts.append(versus_html(s["vs_library"], s["performance_measured"]))
    parts += [library_html(lib) for lib in library]
    return "\n".join(parts) + "\n</body></html>\n"


def write_score_report(path: str | Path, scores: list[dict], per_problem: pl.DataFrame, title: str,
                       library: list[dict] = ()) -> Path:
    """The report written to `path` (its directory made if missing)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(score_report(scores, per_problem, title, library), encoding="utf-8")
    return path
