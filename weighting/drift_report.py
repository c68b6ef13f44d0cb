"""A self-contained HTML drift report: matplotlib charts embedded as SVG data and tables, from the jinja2 template
weighting/templates/drift.html; nothing fetched over the network."""

from __future__ import annotations

from pathlib import Path

from weighting.concentration import gini, lorenz_curve
from weighting.drift import DriftReport
from weighting.pages import chart, figure, render, wrap_label

OLD_COLOUR, NEW_COLOUR = "#7f8c8d", "#2e86de"
UP_COLOUR, DOWN_COLOUR = "#27ae60", "#c0392b"
ROW_IN = 0.2  # inches of chart height per line of a label


def _fmt(x) -> str:
    return "n/a" if x is None else f"{x:.4f}"


def _pct(x: float) -> str:
    return f"{100 * x:.2f}%"


def _rows(labels: list[str], lines_per_row: int) -> tuple[list[float], int]:
    """The y centre of each row (first on top) in lines, each row as tall as its wrapped label or `lines_per_row`
    lines, and the lines of them all."""
    units = [max(lines_per_row, label.count("\n") + 1) for label in labels]
    total, centres, top = sum(units), [], 0
    for u in units:
        centres.append(total - top - u / 2)
        top += u
    return centres, total


def bars_before_after(rows: list[tuple[str, float, float]], old_label: str = "old", new_label: str = "new"):
    """Paired horizontal bars of each label's weight (old grey, new blue, heaviest on top) as a matplotlib Figure."""
    labels = [wrap_label(label) for label, _, _ in rows]
    y, lines = _rows(labels, 2)
    fig = figure(9, ROW_IN * lines + 1.0)
    ax = fig.add_subplot()
    old = [100 * a for _, a, _ in rows]
    new = [100 * b for _, _, b in rows]
    ax.barh([c + 0.45 for c in y], old, height=0.85, color=OLD_COLOUR, label=old_label)
    bars = ax.barh([c - 0.45 for c in y], new, height=0.85, color=NEW_COLOUR, label=new_label)
    ax.bar_label(bars, labels=[f"{v:.2f}%" for v in new], padding=3, fontsize=8)
    ax.set_yticks(y, labels, fontsize=8)
    ax.set_ylim(0, max(lines, 1))
    ax.set_xlim(0, max(old + new + [1e-9]) * 1.18)
    ax.set_xlabel("weight W_op (% of the benchmark)")
    ax.set_ylabel("operator")
    ax.set_title(f"Operator weights, {old_label} → {new_label}")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8)
    return fig


def bars_movers(rows: list[tuple[str, float]]):
    """Diverging bars of each label's weight change (gains right in green, losses left in red, largest on top)."""
    labels = [wrap_label(label) for label, _ in rows]
    y, lines = _rows(labels, 1)
    fig = figure(9, ROW_IN * lines + 1.0)
    ax = fig.add_subplot()
    deltas = [100 * d for _, d in rows]
    bars = ax.barh(y, deltas, height=0.75, color=[UP_COLOUR if d >= 0 else DOWN_COLOUR for d in deltas])
    ax.bar_label(bars, labels=[f"{d:+.2f} pt" for d in deltas], padding=3, fontsize=8)
    ax.axvline(0, color="#999", lw=0.8)
    ax.set_yticks(y, labels, fontsize=8)
    ax.set_ylim(0, max(lines, 1))
    top = max([abs(d) for d in deltas] + [1e-9]) * 1.3
    ax.set_xlim(-top, top)
    ax.set_xlabel("weight change (percentage points)")
    ax.set_ylabel("problem")
    ax.set_title("Top movers: problems whose weight changed most")
    return fig


def lorenz_plot(curves: list[tuple[str, str, list[float]]]):
    """Lorenz curves (label, colour, weights) over the line of equality, each labelled with its Gini."""
    fig = figure(5.5, 4.2)
    ax = fig.add_subplot()
    ax.plot([0, 1], [0, 1], color="#bbb", ls="--", lw=1, label="equal weights")
    for label, colour, values in curves:
        x, y = lorenz_curve(values)
        ax.plot(x, y, color=colour, lw=2.2, label=f"{label} (Gini {round(gini(values), 3) + 0.0:.3f})")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_aspect("equal")
    ax.set_xlabel("share of problems (lightest first)")
    ax.set_ylabel("share of weight")
    ax.set_title("Lorenz curves of problem weights")
    ax.legend(loc="upper left", fontsize=8)
    return fig


MEANING = {
    "js": "How different the two distributions are, in bits: 0 same, 1 disjoint. Above 0.05 is a large change.",
    "tv": "The share of the benchmark's weight that moved to other problems (operators): 0.10 means 10% of "
          "the score now rests elsewhere. Above 0.10 is large.",
    "spearman": "Rank agreement over what both versions weight: 1 same order, 0 unrelated. Below 0.8 the "
                "ranking of hot problems changed a lot.",
    "sum": "Weight sums before normalising: 1 for hotshape's releases (Atrex-Bench publishes 1.0948).",
    "counts": "Problems weighted in both, only in the new (newly hot), only in the old (newly cold).",
    "phase": "Weight that moved within one phase's weights (weight_<phase>). Above 0.10 is large.",
}


def render_html(report: DriftReport, old_label: str = "old", new_label: str = "new", top: int = 15,
                labels: dict[str, str] | None = None, causes: dict[str, str] | None = None,
                beyond: dict | None = None) -> str:
    """The drift report as one HTML page with every chart inline.

    `labels` (problem_id → shape text, drift.shape_labels) name problems by their shapes instead of ids;
    `causes` (problem_id → text, drift.causes) say which deployment's change moved each large mover;
    `beyond` (drift.beyond_intervals' "beyond_interval": problems, operators, rule) marks the movements
    that exceed the new version's bootstrap intervals.
    """
    labels, causes = labels or {}, causes or {}

    def name(pid: str, op: str) -> str:
        if pid in labels:
            return labels[pid]
        return pid if pid.startswith(f"{op} ") else f"{op}: {pid}"

    ops = report.operators.sort(["weight_new", "operator"], descending=[True, False]).head(top)
    movers = report.problems.head(top).select("problem_id", "operator", "delta").rows()
    problems = report.problems
    metrics = [
        ["Jensen–Shannon divergence (bits), problems", _fmt(report.js_divergence), MEANING["js"]],
        ["Total variation, problems", _fmt(report.total_variation), MEANING["tv"]],
        ["Jensen–Shannon divergence (bits), operators", _fmt(report.operator_js_divergence), MEANING["js"]],
        ["Total variation, operators", _fmt(report.operator_total_variation), MEANING["tv"]],
        ["Spearman rank correlation, problems in both", _fmt(report.spearman), MEANING["spearman"]],
        ["Spearman rank correlation, operators in both", _fmt(report.operator_spearman), MEANING["spearman"]],
        [f"Weight sum as published ({old_label} / {new_label})",
         f"{report.sum_old:.6f} / {report.sum_new:.6f}", MEANING["sum"]],
        ["Problems kept / newly hot / newly cold",
         f"{(problems['status'] == 'kept').sum()} / {len(report.newly_hot)} / {len(report.newly_cold)}", MEANING["counts"]],
    ]
    metrics += [[f"Total variation, {k}", _fmt(v), MEANING["phase"]] for k, v in report.phase_total_variation.items()]

    def listing(ids: list[str], column: str) -> list[list[str]]:
        rows = problems.filter(problems["problem_id"].is_in(ids)).head(50)
        return [[name(p, o), o, _pct(w)] for p, o, w in rows.select("problem_id", "operator", column).iter_rows()]

    marked = set((beyond or {}).get("problems", []))
    marked_ops = set((beyond or {}).get("operators", []))
    return render(
        "drift.html", title=f"Weight drift: {old_label} → {new_label}", old_label=old_label, new_label=new_label,
        metrics=metrics,
        before_after=chart(bars_before_after(ops.select("operator", "weight_old", "weight_new").rows(),
                                             old_label, new_label)),
        movers=chart(bars_movers([(name(p, o), d) for p, o, d in movers])),
        causes=[[name(p, o), f"{d * 100:+.2f} pt", causes[p]] for p, o, d in movers if p in causes],
        beyond=beyond, beyond_operators=len(marked_ops),
        beyond_rows=[[name(p, o), f"{d * 100:+.2f} pt", "yes" if p in marked else ""] for p, o, d in movers],
        lorenz=chart(lorenz_plot([
            (old_label, OLD_COLOUR, problems.filter(problems["weight_old"] > 0)["weight_old"].to_list()),
            (new_label, NEW_COLOUR, problems.filter(problems["weight_new"] > 0)["weight_new"].to_list()),
        ])),
        newly_hot=listing(report.newly_hot, "weight_new"), n_newly_hot=len(report.newly_hot),
        newly_cold=listing(report.newly_cold, "weight_old"), n_newly_cold=len(report.newly_cold),
        operators=[[o, _pct(a), _pct(b), f"{d * 100:+.2f} pt", *((["yes" if o in marked_ops else ""]) if beyond else [])]
                   for o, a, b, d in report.operators.select("operator", "weight_old", "weight_new", "delta").iter_rows()],
    )


def write_html(report: DriftReport, path: str | Path, old_label: str = "old", new_label: str = "new",
               labels: dict[str, str] | None = None, causes: dict[str, str] | None = None,
               beyond: dict | None = None) -> Path:
    """Write the drift report page to `path` (labels, causes and beyond as render_html takes them)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_html(report, old_label, new_label, labels=labels, causes=causes, beyond=beyond),
                    encoding="utf-8")
    return path
