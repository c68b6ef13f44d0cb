"""A self-contained HTML drift report: inline SVG plots and tables, nothing fetched over the network."""

from __future__ import annotations

from html import escape
from pathlib import Path

from weighting.concentration import gini, lorenz_curve
from weighting.drift import DriftReport

OLD_COLOUR, NEW_COLOUR = "#7f8c8d", "#2e86de"
UP_COLOUR, DOWN_COLOUR = "#27ae60", "#c0392b"
WIDTH = 760
LABEL_W = 260

STYLE = """
body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:24px auto;max-width:820px;color:#222}
h1{font-size:22px}h2{font-size:17px;margin-top:28px;border-bottom:1px solid #ddd;padding-bottom:4px}
table{border-collapse:collapse;font-size:13px;margin:8px 0}td,th{border:1px solid #ddd;padding:3px 8px;text-align:right}
td:first-child,th:first-child{text-align:left}svg text{font-size:11px;fill:#333}
.legend span{display:inline-block;width:12px;height:12px;margin:0 4px 0 12px;vertical-align:middle}
code{font-size:12px;word-break:break-all}
"""


def _short(text: str, n: int = 38) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def _fmt(x) -> str:
    return "n/a" if x is None else f"{x:.4f}"


def _pct(x: float) -> str:
    return f"{100 * x:.2f}%"


def bars_before_after(rows: list[tuple[str, float, float]]) -> str:
    """Paired horizontal bars (old grey, new blue) per label."""
    top = max([max(a, b) for _, a, b in rows] + [1e-12])
    height = 22 * len(rows) + 10
    scale = (WIDTH - LABEL_W - 70) / top
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" role="img">']
    for i, (label, a, b) in enumerate(rows):
        y = 5 + 22 * i
        parts.append(f'<text x="{LABEL_W - 6}" y="{y + 13}" text-anchor="end"><title>{escape(label)}</title>{escape(_short(label))}</text>')
        parts.append(f'<rect x="{LABEL_W}" y="{y + 1}" width="{a * scale:.2f}" height="9" fill="{OLD_COLOUR}"/>')
        parts.append(f'<rect x="{LABEL_W}" y="{y + 10}" width="{b * scale:.2f}" height="9" fill="{NEW_COLOUR}"/>')
        parts.append(f'<text x="{LABEL_W + max(a, b) * scale + 4:.2f}" y="{y + 14}">{_pct(b)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def bars_movers(rows: list[tuple[str, float]]) -> str:
    """Diverging bars of weight change per label, gains right in green, losses left in red."""
    top = max([abs(d) for _, d in rows] + [1e-12])
    height = 20 * len(rows) + 10
    mid = LABEL_W + (WIDTH - LABEL_W) / 2
    scale = ((WIDTH - LABEL_W) / 2 - 50) / top
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" role="img">']
    parts.append(f'<line x1="{mid}" y1="0" x2="{mid}" y2="{height}" stroke="#999"/>')
    for i, (label, d) in enumerate(rows):
        y = 5 + 20 * i
        w = abs(d) * scale
        x = mid if d >= 0 else mid - w
        colour = UP_COLOUR if d >= 0 else DOWN_COLOUR
        parts.append(f'<text x="{LABEL_W - 6}" y="{y + 12}" text-anchor="end"><title>{escape(label)}</title>{escape(_short(label))}</text>')
        parts.append(f'<rect x="{x:.2f}" y="{y + 2}" width="{w:.2f}" height="13" fill="{colour}"/>')
        tx, anchor = (mid + w + 4, "start") if d >= 0 else (mid - w - 4, "end")
        parts.append(f'<text x="{tx:.2f}" y="{y + 12}" text-anchor="{anchor}">{d * 100:+.2f} pt</text>')
    parts.append("</svg>")
    return "".join(parts)


def lorenz_plot(curves: list[tuple[str, str, list[float]]]) -> str:
    """Lorenz curves (label, colour, weights) over the line of equality."""
    size, pad = 320, 40
    inner = size - 2 * pad
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{size + 200}" height="{size}" role="img">']
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


def render_html(report: DriftReport, old_label: str = "old", new_label: str = "new", top: int = 15) -> str:
    """The drift report as one HTML page with every plot inline."""
    legend = (f'<div class="legend"><span style="background:{OLD_COLOUR}"></span>{escape(old_label)}'
              f'<span style="background:{NEW_COLOUR}"></span>{escape(new_label)}</div>')
    ops = report.operators.sort(["weight_new", "operator"], descending=[True, False]).head(top)
    movers = report.problems.head(top)
    problems = report.problems
    metrics = [
        ["Jensen–Shannon divergence (bits), problems", _fmt(report.js_divergence)],
        ["Total variation, problems", _fmt(report.total_variation)],
        ["Jensen–Shannon divergence (bits), operators", _fmt(report.operator_js_divergence)],
        ["Total variation, operators", _fmt(report.operator_total_variation)],
        ["Spearman rank correlation, problems in both", _fmt(report.spearman)],
        ["Spearman rank correlation, operators in both", _fmt(report.operator_spearman)],
        [f"Weight sum as published ({escape(old_label)} / {escape(new_label)})", f"{report.sum_old:.6f} / {report.sum_new:.6f}"],
        ["Problems kept / newly hot / newly cold",
         f"{(problems['status'] == 'kept').sum()} / {len(report.newly_hot)} / {len(report.newly_cold)}"],
    ]
    metrics += [[f"Total variation, {k}", _fmt(v)] for k, v in report.phase_total_variation.items()]

    def listing(ids: list[str], column: str) -> str:
        if not ids:
            return "<p>none</p>"
        rows = problems.filter(problems["problem_id"].is_in(ids)).head(50)
        return _table(["problem", "operator", "weight"], [
            [f"<code>{escape(_short(p, 90))}</code>", escape(o), _pct(w)]
            for p, o, w in rows.select("problem_id", "operator", column).iter_rows()
        ])

    html = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8"><title>hotshape weight drift</title>',
        f"<style>{STYLE}</style></head><body>",
        f"<h1>Weight drift: {escape(old_label)} → {escape(new_label)}</h1>",
        _table(["metric", "value"], metrics),
        "<h2>Operator weights before and after</h2>", legend,
        bars_before_after([(o, a, b) for o, a, b in ops.select("operator", "weight_old", "weight_new").iter_rows()]),
        "<h2>Top movers (problems)</h2>",
        bars_movers([(p if p.startswith(f"{o} ") else f"{o}: {p}", d)
                     for p, o, d in movers.select("problem_id", "operator", "delta").iter_rows()]),
        "<h2>Lorenz curves of problem weights</h2>",
        lorenz_plot([
            (old_label, OLD_COLOUR, problems.filter(problems["weight_old"] > 0)["weight_old"].to_list()),
            (new_label, NEW_COLOUR, problems.filter(problems["weight_new"] > 0)["weight_new"].to_list()),
        ]),
        f"<h2>Newly hot ({len(report.newly_hot)})</h2>", listing(report.newly_hot, "weight_new"),
        f"<h2>Newly cold ({len(report.newly_cold)})</h2>", listing(report.newly_cold, "weight_old"),
        "<h2>Operators</h2>",
        _table(["operator", escape(old_label), escape(new_label), "Δ"], [
            [escape(o), _pct(a), _pct(b), f"{d * 100:+.2f} pt"]
            for o, a, b, d in report.operators.select("operator", "weight_old", "weight_new", "delta").iter_rows()
        ]),
        "</body></html>",
    ]
    return "\n".join(html) + "\n"


def write_html(report: DriftReport, path: str | Path, old_label: str = "old", new_label: str = "new") -> Path:
    """Write the drift report page to `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_html(report, old_label, new_label), encoding="utf-8")
    return path
