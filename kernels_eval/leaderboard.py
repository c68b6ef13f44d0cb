"""Several submissions ranked on one release: S_agg, per phase, correctness and adoption rates, and S_op per
operator, from results rows that pass the same verification as `hotshape score`."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from kernels_eval.library.display import library_cell, library_summary
from kernels_eval.report import TEMPLATES
from kernels_eval.results_verify import ROW_KEY, check_results
from kernels_eval.score_display import NOT_MEASURED, fmt, interval_text
from kernels_eval.score_interval import not_separated
from kernels_eval.scoring import score
from weighting.pages import chart, figure, render


def verified_rows(paths: list[str | Path], release, exclude_unverified: bool = False) -> tuple[pl.DataFrame, list[str]]:
    """The rows of every results file that may be scored against `release` (each row once), and one note per
    file that had rows left out; a ResultsRejected as `score` gives it."""
    frames, notes = [], []
    for path in paths:
        checked = check_results(path, release, exclude_unverified=exclude_unverified)
        left_out = checked.unverified + checked.other_release + checked.broken_seal + checked.below_roofline
        if left_out:
            notes.append(f"{path}: {left_out} of {checked.total} rows excluded (signature, run seal, release or "
                         "roofline not verified)")
        if checked.rows.height:
            frames.append(checked.rows)
    if not frames:
        return pl.DataFrame(), notes
    # the same file named twice, or one run merged into two files, must not count its rows twice
    return pl.concat(frames, how="vertical_relaxed").unique(subset=list(ROW_KEY), keep="first",
                                                             maintain_order=True), notes


def _rank_key(s: dict) -> tuple:
    # measured S_agg first (highest first); unmeasured (CPU) runs by the weight they got correct and native
    return (s["S_agg"] is None, -(s["S_agg"] or 0.0), -s["rates"]["native"]["weighted"],
            -s["rates"]["correct"]["weighted"], s["submission"], s["hardware"])


UNSEPARATED = "≈"  # a rank whose S_agg bounds overlap another entry's (score_interval.not_separated)


def leaderboard(rows: pl.DataFrame, release, weights_version=None) -> list[dict]:
    """One entry per (submission, hardware), best first, each with its rank, its score (scoring.score, with its
    S_agg interval) and `not_separated_from`: the ranks whose S_agg bounds overlap its own."""
    if rows.height == 0:
        return []
    ranked = sorted(score(rows, release, weights_version), key=_rank_key)
    overlaps = not_separated(ranked)
    return [{"rank": i + 1, **s, "not_separated_from": [j + 1 for j in overlaps[i]]} for i, s in enumerate(ranked)]


def rank_text(entry: dict) -> str:
    """The rank, marked when the measured spread does not separate it from another entry."""
    return f"{entry['rank']}{UNSEPARATED if entry.get('not_separated_from') else ''}"


def separation_note(entries: list[dict]) -> list[str]:
    """One line per group of ranks the intervals do not separate, or none."""
    marked = [e for e in entries if e.get("not_separated_from")]
    if not marked:
        return []
    pairs = sorted({tuple(sorted((e["rank"], r))) for e in marked for r in e["not_separated_from"]})
    return [f"{UNSEPARATED}: S_agg intervals overlap, the spread measured does not separate ranks "
            + ", ".join(f"{a} and {b}" for a, b in pairs) + " (docs/reproducibility.md)"]


def leaderboard_lines(entries: list[dict], library: list[dict] = ()) -> list[str]:
    """The ranking as a terminal table, then the S_op matrix (operators by weight, one column per entry); the library
    line (kernels_eval/library/line.py) under the ranking and as the matrix's last column, never ranked."""
    if not entries:
        return ["no verified rows to rank"] + [library_summary(lib) for lib in library]
    phases = list(entries[0]["S_agg_phase"])
    name = max(len(f"{e['submission']}@{e['hardware']}") for e in entries)
    lines = [f"{'#':>3}  {'submission@hardware':<{name}}  {'S_agg':>12}  {'interval':>20}  "
             + "  ".join(f"{'S_' + p:>9}" for p in phases)
             + f"  {'correct (w)':>11}  {'native (w)':>10}  {'evaluated':>9}"]
    for e in entries:
        agg = NOT_MEASURED if e["S_agg"] is None else f"{e['S_agg']:.4f}"
        lines.append(f"{rank_text(e):>3}  {e['submission'] + '@' + e['hardware']:<{name}}  {agg:>12}  "
                     f"{interval_text(e.get('S_agg_interval'), e['S_agg'] is not None):>20}  "
                     + "  ".join(f"{fmt(e['S_agg_phase'][p]):>9}" for p in phases)
                     + f"  {e['rates']['correct']['weighted']:>11.1%}  {e['rates']['native']['weighted']:>10.1%}"
                     f"  {e['evaluated']:>4}/{e['problems']:<4}")
    lines += separation_note(entries)
    for lib in library:
        lines.append(f"  -  {library_summary(lib)}")
        for e in entries:
            vs = e.get("vs_library")
            if vs and e["hardware"] == lib["hardware"]:
                toward = "n/a" if vs["toward_roofline"] is None else f"{vs['toward_roofline']:+.3f}"
                lines.append(f"     #{e['rank']} {e['submission']}: toward the roofline from the library {toward}")
    lines += ["", "S_op per operator (heaviest first; columns in rank order" + (", then the library)" if library
                                                                                else "):")]
    weights = entries[0]["W_op"]
    ops = sorted(weights, key=lambda op: (-weights[op], op))
    width = max(len(op) for op in ops)
    lines.append(f"  {'operator':<{width}}  {'W_op':>7}  " + "  ".join(f"{'#' + str(e['rank']):>12}" for e in entries)
                 + "".join(f"  {'lib@' + lib['hardware']:>12}" for lib in library))
    for op in ops:
        cells = [NOT_MEASURED if e["S_op"].get(op) is None else f"{e['S_op'][op]:.4f}" for e in entries]
        cells += [library_cell(lib, op) for lib in library]
        lines.append(f"  {op:<{width}}  {weights[op]:>7.4f}  " + "  ".join(f"{c:>12}" for c in cells))
    return lines


def leaderboard_plot(entries: list[dict]):
    """S_agg of each entry in rank order as labelled bars (its interval as an error bar where it has one; of the
    correct-and-native weight where nothing was timed), a Figure; None without entries."""
    if not entries:
        return None
    names = [f"#{e['rank']} {e['submission']}@{e['hardware']}" for e in entries][::-1]
    timed = all(e["S_agg"] is not None for e in entries)
    values = [(e["S_agg"] if timed else e["rates"]["native"]["weighted"]) or 0.0 for e in entries][::-1]
    fig = figure(8, 0.4 * len(entries) + 1.4)
    ax = fig.add_subplot()
    bars = ax.barh(names, values, color="#3b7dd8")
    for e, bar in zip(entries[::-1], bars):
        iv = e.get("S_agg_interval")
        if timed and iv:
            ax.plot([iv["lo"], iv["hi"]], [bar.get_y() + bar.get_height() / 2] * 2, color="#222", lw=1.5)
    ax.bar_label(bars, labels=[f"{v:.4f}" if timed else f"{v:.1%}" for v in values], padding=3, fontsize=8)
    ax.set_xlabel("S_agg" if timed else f"share of the weight correct and native (S_agg {NOT_MEASURED}: nothing was timed)")
    ax.set_ylabel("entry")
    if not timed:
        from matplotlib.ticker import PercentFormatter

        ax.xaxis.set_major_formatter(PercentFormatter(1.0))
    ax.set_xlim(0, max(values + [1e-9]) * 1.25)
    ax.set_title("Leaderboard")
    return fig


def leaderboard_html(entries: list[dict], title: str, library: list[dict] = ()) -> str:
    """The ranking with its plot and the S_op matrix as one offline HTML page (the library line under the ranking and
    as the matrix's last column, never ranked)."""
    phases = list(entries[0]["S_agg_phase"]) if entries else []
    ranking = [[rank_text(e), e["submission"], e["hardware"], NOT_MEASURED if e["S_agg"] is None else f"{e['S_agg']:.4f}",
                interval_text(e.get("S_agg_interval"), e["S_agg"] is not None), *(fmt(e["S_agg_phase"][p]) for p in phases),
                f"{e['rates']['correct']['weighted']:.1%}", f"{e['rates']['native']['weighted']:.1%}",
                f"{e['evaluated']}/{e['problems']}"] for e in entries]
    ranking += [["-", f"library: {library_summary(lib)}", lib["hardware"], fmt(lib["S_agg"])] for lib in library]
    weights = entries[0]["W_op"] if entries else {}
    matrix = [[op, f"{weights[op]:.4f}", *(NOT_MEASURED if e["S_op"].get(op) is None else f"{e['S_op'][op]:.4f}"
                                           for e in entries), *(library_cell(lib, op) for lib in library)]
              for op in sorted(weights, key=lambda op: (-weights[op], op))]
    plot = leaderboard_plot(entries)
    return render("leaderboard.html", TEMPLATES, title=title, ranking=ranking, matrix=matrix,
                  ranking_header=["#", "submission", "hardware", "S_agg", "interval", *(f"S_agg[{p}]" for p in phases),
                                  "correct (weighted)", "native (weighted)", "evaluated"],
                  matrix_header=["operator", "W_op", *(f"#{e['rank']} {e['submission']}" for e in entries),
                                 *(f"library@{lib['hardware']}" for lib in library)],
                  plot=chart(plot) if plot is not None else None, notes=separation_note(entries))
