"""A self-contained HTML drift report: inline SVG plots and tables, nothing fetched over the network."""

from __future__ import annotations

from html import escape
from pathlib import Path

from weighting.concentration import gini, lorenz_curve
from weighting.drift import DriftReport

OLD_COLOUR, NEW_COLOUR = "#7f8c8d", "#2e86de"
UP_COLOUR, DOWN_COLOUR = "#27ae60", "#c0392b"
PLOT_W = 500  # bars' area; the label column is as wide as the longest label (labels are never cut)
CHAR_W = 6.6  # px per character of 11 px system-ui text, rounded up

STYLE = """
body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:24px auto;max-width:1100px;color:#222}
h1{font-size:22px}h2{font-size:17px;margin-top:28px;border-bottom:1px solid #ddd;padding-bottom:4px}
table{border-collapse:collapse;font-size:13px;margin:8px 0}td,th{border:1px solid #ddd;padding:3px 8px;text-align:right}
td:first-child,th:first-child{text-align:left}svg text{font-size:11px;fill:#333}
svg{max-width:100%;height:auto}
.legend span{display:inline-block;width:12px;height:12px;margin:0 4px 0 12px;vertical-align:middle}
code{font-size:12px;word-break:break-all}
"""


def _label_width(labels) -> float:
    return 12 + CHAR_W * max([len(str(x)) for x in labels] + [8])


def _fmt(x) -> str:
    return "n/a" if x is None else f"{x:.4f}"


def _pct(x: float) -> str:
    return f"{100 * x:.2f}%"


def bars_before_after(rows: list[tuple[str, float, float]]) -> str:
    """Paired horizontal bars (old grey, new blue) per label."""
    top = max([max(a, b) for _, a, b in rows] + [1e-12])
    height = 22 * len(rows) + 10
    LABEL_W = _label_width(r[0] for r in rows)
    WIDTH = LABEL_W + PLOT_W
    scale = (PLOT_W - 70) / top
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH:.0f}" height="{height}" viewBox="0 0 {WIDTH:.0f} {height}" role="img">']
    for i, (label, a, b) in enumerate(rows):
        y = 5 + 22 * i
        parts.append(f'<text x="{LABEL_W - 6}" y="{y + 13}" text-anchor="end">{escape(label)}</text>')
        parts.append(f'<rect x="{LABEL_W}" y="{y + 1}" width="{a * scale:.2f}" height="9" fill="{OLD_COLOUR}"/>')
        parts.append(f'<rect x="{LABEL_W}" y="{y + 10}" width="{b * scale:.2f}" height="9" fill="{NEW_COLOUR}"/>')
        parts.append(f'<text x="{LABEL_W + max(a, b) * scale + 4:.2f}" y="{y + 14}">{_pct(b)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def bars_movers(rows: list[tuple[str, float]]) -> str:
    """Diverging bars of weight change per label, gains right in green, losses left in red."""
    top = max([abs(d) for _, d in rows] + [1e-12])
    height = 20 * len(rows) + 10
    LABEL_W = _label_width(r[0] for r in rows)
    WIDTH = LABEL_W + PLOT_W
    mid = LABEL_W + PLOT_W / 2
    scale = (PLOT_W / 2 - 60) / top
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH:.0f}" height="{height}" viewBox="0 0 {WIDTH:.0f} {height}" role="img">']
    parts.append(f'<line x1="{mid}" y1="0" x2="{mid}" y2="{height}" stroke="#999"/>')
    for i, (label, d) in enumerate(rows):
        y = 5 + 20 * i
        w = abs(d) * scale
        x = mid if d >= 0 else mid - w
        colour = UP_COLOUR if d >= 0 else DOWN_COLOUR
        parts.append(f'<text x="{LABEL_W - 6}" y="{y + 12}" text-anchor="end">{escape(label)}</text>')
        parts.append(f'<rect x="{x:.2f}" y="{y + 2}" width="{w:.2f}" height="13" fill="{colour}"/>')
        tx, anchor = (mid + w + 4, "start") if d >= 0 else (mid - w - 4, "end")
        parts.append(f'<text x="{tx:.2f}" y="{y + 12}" text-anchor="{anchor}">{d * 100:+.2f} pt</text>')
    parts.append("</svg>")
    return "".join(parts)


def lorenz_plot(curves: list[tuple[str, str, list[float]]]) -> str:
    """Lorenz curves (label, colour, weights) over the line of equality."""
    size, pad = 320, 40
    inner = size - 2 * pad
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{size + 200}" height="{size}" viewBox="0 0 {size + 200} {size}" role="img">']
    parts.append(f'<rect x="{pad}" y="{pad}" width="{inner}" height="{inner}" fill="none" stroke="#bbb"/>')
    parts.append(f'<line x1="{pad}" y1="{pad + inner}" x2="{pad + inner}" y2="{pad}" stroke="#bbb" stroke-dasharray="4 3"/>')
    parts.append(f'<text x="{pad + inner / 2}" y="{size - 8}" text-anchor="middle">share of problems (lightest first)</text>')
    parts.append(f'<text x="12" y="{pad + inner / 2}" transform="rotate(-90 12 {pad + inner / 2})" text-anchor="middle">share of weight</text>')
    for k, (label, colour, values) in enumerate(curves):
        x, y = lorenz_curve(values)
        points = " ".join(f"{pad + a * inner:.2f},{pad + inner - b * inner:.2f}" for a, b in zip(x, y))
        parts.append(f'<polyline points="{points}" fill="none" stroke="{colour}" stroke-width="2.5"/>')
        ly = pad + 16 + 18 * k
        parts.append(f'<rect x="{size - 10}" y="{ly - 9}" width="12" height="12" fill="{colour}"/>')
        parts.append(f'<text x="{size + 8}" y="{ly + 1}">{escape(label)} (Gini {gini(values):.3f})</text>')
    parts.append("</svg>")
    return "".join(parts)


def _table(header: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


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
    """The drift report as one HTML page with every plot inline.

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

    legend = (f'<div class="legend"><span style="background:{OLD_COLOUR}"></span>{escape(old_label)}'
              f'<span style="background:{NEW_COLOUR}"></span>{escape(new_label)}</div>')
    ops = report.operators.sort(["weight_new", "operator"], descending=[True, False]).head(top)
    movers = report.problems.head(top)
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
    metrics = [[cell if i == 1 else escape(cell) for i, cell in enumerate(m)] for m in metrics]

    def listing(ids: list[str], column: str) -> str:
        if not ids:
            return "<p>none</p>"
        rows = problems.filter(problems["problem_id"].is_in(ids)).head(50)
        return _table(["problem", "operator", "weight"], [
            [f"<code>{escape(name(p, o))}</code>", escape(o), _pct(w)]
            for p, o, w in rows.select("problem_id", "operator", column).iter_rows()
        ])

    html = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8"><title>hotshape weight drift</title>',
        f"<style>{STYLE}</style></head><body>",
        f"<h1>Weight drift: {escape(old_label)} → {escape(new_label)}</h1>",
        _table(["metric", "value", "what it means"], metrics),
        "<h2>Operator weights before and after</h2>", legend,
        bars_before_after([(o, a, b) for o, a, b in ops.select("operator", "weight_old", "weight_new").iter_rows()]),
        "<h2>Top movers (problems)</h2>",
        bars_movers([(name(p, o), d) for p, o, d in movers.select("problem_id", "operator", "delta").iter_rows()]),
        *_causes_section(movers, causes, name),
        *_beyond_section(movers, beyond, name),
        "<h2>Lorenz curves of problem weights</h2>",
        lorenz_plot([
            (old_label, OLD_COLOUR, problems.filter(problems["weight_old"] > 0)["weight_old"].to_list()),
            (new_label, NEW_COLOUR, problems.filter(problems["weight_new"] > 0)["weight_new"].to_list()),
        ]),
        f"<h2>Newly hot ({len(report.newly_hot)})</h2>", listing(report.newly_hot, "weight_new"),
        f"<h2>Newly cold ({len(report.newly_cold)})</h2>", listing(report.newly_cold, "weight_old"),
        "<h2>Operators</h2>",
        _table(["operator", escape(old_label), escape(new_label), "Δ", *(["beyond interval"] if beyond else [])], [
            [escape(o), _pct(a), _pct(b), f"{d * 100:+.2f} pt",
             *((["yes" if o in beyond.get("operators", []) else ""]) if beyond else [])]
            for o, a, b, d in report.operators.select("operator", "weight_old", "weight_new", "delta").iter_rows()
        ]),
        "</body></html>",
    ]
    return "\n".join(html) + "\n"


def _causes_section(movers, causes: dict[str, str], name) -> list[str]:
    """Why each large mover moved (sealed deployment names: a maintainer's report, never published)."""
    rows = [[f"<code>{escape(name(p, o))}</code>", f"{d * 100:+.2f} pt", escape(causes[p])]
            for p, o, d in movers.select("problem_id", "operator", "delta").iter_rows() if p in causes]
    if not rows:
        return []
    return ["<h2>Causes of the large movements</h2>",
            "<p>The deployment whose share of the problem's fleet time moved most, and what changed in its "
            "inputs (sealed names: keep this report with the sealed part of the release).</p>",
            _table(["problem", "Δ", "cause"], rows)]


def _beyond_section(movers, beyond: dict | None, name) -> list[str]:
    """Which top movers moved more than the new version's bootstrap intervals explain."""
    if not beyond:
        return []
    marked = set(beyond.get("problems", []))
    rows = [[f"<code>{escape(name(p, o))}</code>", f"{d * 100:+.2f} pt", "yes" if p in marked else ""]
            for p, o, d in movers.select("problem_id", "operator", "delta").iter_rows()]
    return [f"<h2>Beyond the bootstrap intervals ({len(marked)} problems, {len(beyond.get('operators', []))} "
            "operators)</h2>", f"<p>{escape(beyond.get('rule', ''))}</p>",
            _table(["problem", "Δ", "beyond interval"], rows)]


def write_html(report: DriftReport, path: str | Path, old_label: str = "old", new_label: str = "new",
               labels: dict[str, str] | None = None, causes: dict[str, str] | None = None,
               beyond: dict | None = None) -> Path:
    """Write the drift report page to `path` (labels, causes and beyond as render_html takes them)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_html(report, old_label, new_label, labels=labels, causes=causes, beyond=beyond),
                    encoding="utf-8")
    return path
