"""The release card: README.md with counts, coverage, top operators, phase split, and PNG plots.

Regenerated whole on every build and refresh, from the newest weights version; colours are keyed by
name (a phase or an operator keeps its colour across versions and releases).
"""

from __future__ import annotations

import hashlib
import io
import math

import polars as pl

from catalogue.vocabulary import PHASES

# A coverage report's key for an operator no problem can stand for (communication, memcpy, memset, other, ...):
# NOT_BENCHMARKED + operator -> its share of all fleet GPU time (flow/build.py writes it, the card shows it).
NOT_BENCHMARKED = "not_benchmarked_"

PLOT_OPERATORS = "plots/operator_weights.png"
PLOT_PHASES = "plots/phase_split.png"
TOP = 15
# Paul Tol's colour-blind-safe palettes: phases fixed, operators by a hash of their name (never by rank).
PHASE_COLOURS = {"prefill": "#228833", "decode": "#ee6677", "mixed": "#ccbb44", "unknown": "#bbbbbb"}
OPERATOR_PALETTE = ("#4477aa", "#66ccee", "#228833", "#ccbb44", "#ee6677", "#aa3377",
                    "#332288", "#88ccee", "#44aa99", "#117733", "#999933", "#882255")


def operator_colour(operator: str) -> str:
    """The operator's colour: the same in every version and release."""
    return OPERATOR_PALETTE[int(hashlib.sha256(operator.encode()).hexdigest()[:8], 16) % len(OPERATOR_PALETTE)]


def newest(info: dict) -> dict:
    """release.json's entry of the newest weights version ({} for a release without one)."""
    versions = info.get("weights") or []
    return max(versions, key=lambda v: v["version"]) if versions else {}


def operator_table(manifest: pl.DataFrame, weights: pl.DataFrame) -> pl.DataFrame:
    """Per operator: problems, W_op = Σ w_i, and its per-phase weight sums, heaviest first."""
    joined = manifest.select("problem_id", "operator").join(weights, on="problem_id", how="left").fill_null(0.0)
    return (
        joined.group_by("operator")
        .agg(pl.len().alias("problems"), pl.col("weight").sum().alias("W_op"),
             *[pl.col(f"weight_{p}").sum().alias(p) for p in PHASES])
        .sort(["W_op", "operator"], descending=[True, False])
    )


def phase_split(weights: pl.DataFrame, info: dict) -> dict[str, float]:
    """Share of fleet time by phase as the newest weights version measured it (the build's for releases older than
    per-version records), else the weight of problems with time in each phase; always in PHASE_COLOURS' order."""
    measured = newest(info).get("phase_split") or info.get("phase_split")
    if measured:
        return {k: float(measured[k]) for k in PHASE_COLOURS if k in measured}
    return {p: math.fsum(weights.filter(pl.col(f"weight_{p}") > 0)["weight"].to_list()) for p in PHASES}


def coverage(info: dict) -> dict:
    """The newest weights version's coverage report (the build's for releases older than per-version records)."""
    entry = newest(info)
    return entry.get("coverage_report") or (info.get("coverage") if entry.get("version", 1) == 1 else None) or {}


def _png(fig) -> bytes:
    buf = io.BytesIO()
    # No Software/date chunks: the same data gives the same bytes.
    fig.savefig(buf, format="png", dpi=80, metadata={"Software": None}, bbox_inches=None)
    return buf.getvalue()


def plots(ops: pl.DataFrame, split: dict[str, float]) -> dict[str, bytes]:
    """The card's two plots: weight per operator, and the phase split, as PNG bytes."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    top = ops.head(TOP)
    fig = Figure(figsize=(8, 0.35 * max(top.height, 3) + 1.2))
    ax = fig.add_subplot()
    names = top["operator"].to_list()[::-1]
    ax.barh(names, top["W_op"].to_list()[::-1], color=[operator_colour(n) for n in names])
    ax.set_xlabel("weight W_op (sum of problem weights)")
    ax.set_title(f"Top {top.height} operators by weight")
    fig.tight_layout()
    out = {PLOT_OPERATORS: _png(fig)}
    fig = Figure(figsize=(5, 3))
    ax = fig.add_subplot()
    ax.bar(list(split), list(split.values()), color=[PHASE_COLOURS[k] for k in split])
    ax.set_ylabel("share")
    ax.set_title("Phase split")
    fig.tight_layout()
    out[PLOT_PHASES] = _png(fig)
    return out


def _fmt(x) -> str:
    return "n/a" if x is None else f"{x:.4f}" if isinstance(x, float) else str(x)


# Every figure of the Coverage section is of the problems with weight in the version shown
# (weighting.selection.coverage_of): a refresh's too, never of a fresh selection from its traces.
COVERAGE_MEANING = {
    "coverage_of_fleet": "GPU time of the problems with weight / all fleet GPU time (card-hour weighted, attributed or not)",
    "coverage_of_operator_time": "GPU time of the problems with weight / GPU time attributed to any operator",
    "coverage_of_benchmarkable": "GPU time of the problems with weight / time of operators the evaluator has a reference for",
    "n_problems": "problems with weight in this version", "n_operators": "operators with weight in this version",
    "weight_sum": "sum of the weights (1 by construction)",
    "selection_n_problems": "problems a fresh selection from this version's traces would hold (the hot shapes the "
                            "release lacks are its candidates)",
    "selection_coverage_of_fleet": "coverage of fleet of that fresh selection",
    "hot_weight_covered": "share of that fresh selection's weight held by the release's problems",
}

DEFINITIONS = [
    "- `w_i` (weight): problem i's share of the selected fleet GPU time, card-hour weighted; Σ w_i = 1.",
    "- `weight_<phase>`: the same restricted to one serving phase (prefill, decode, mixed); each sums to 1, or is 0.",
    "- `W_op` = Σ_{i∈op} w_i: the operator's weight.",
    "- `S_i` = min(1, T_roofline,i / T_measured,i) when compiled, correct and native, else 0.",
    "- `S_op` = median of S_i over the operator's problems with weight in the version scored; `S_agg` = "
    "Σ_op W_op · S_op (and Σ_i w_i S_i beside it).",
    "- `S_agg` of a phase: the score of a benchmark made only of that phase's fleet time, "
    "Σ_op W_op,phase · S_op,phase / Σ_op W_op,phase with W_op,phase = Σ_{i∈op} weight_<phase>_i and S_op,phase the "
    "median of S_i over the operator's problems with weight_<phase> > 0.",
    "- coverage of fleet: GPU time of the problems with weight in the version / all fleet GPU time (what the "
    "benchmark stands for).",
    "- coverage of operator time: the same over GPU time attributed to an operator (what the problems keep of what "
    "the traces let us see).",
]


def render(info: dict, manifest: pl.DataFrame, weights_by_version: dict[int, pl.DataFrame]) -> str:
    """README.md text of a release from its public tables and release.json fields, all of the newest weights version."""
    latest = max(weights_by_version)
    weights = weights_by_version[latest]
    ops = operator_table(manifest, weights)
    split = phase_split(weights, info)
    cov = coverage(info)
    name = info.get("name", "release")
    lines = [
        f"# {name} — release card",
        "",
        f"Release {info.get('version')}, created {info.get('created') or 'n/a'}; "
        f"weights versions {', '.join(f'v{v}' for v in sorted(weights_by_version))}. "
        f"Every figure below is of the newest, v{latest} (created {newest(info).get('created') or 'n/a'}).",
        "",
        f"## Counts (weights v{latest})",
        "",
        f"- problems: {manifest.height} ({int((weights['weight'] > 0).sum())} with weight in v{latest})",
        f"- operators: {ops.height}",
        *[f"- problems with {p} time: {int((weights[f'weight_{p}'] > 0).sum())}" for p in PHASES],
        "",
        f"## Coverage (weights v{latest})",
        "",
    ]
    shown = {k: v for k, v in sorted(cov.items()) if not isinstance(v, (dict, list)) and not k.startswith(NOT_BENCHMARKED)}
    if shown:
        lines += [f"- {k.replace('_', ' ')}: {_fmt(v)}" + (f" — {COVERAGE_MEANING[k]}" if k in COVERAGE_MEANING else "")
                  for k, v in shown.items()]
    elif newest(info).get("coverage") is not None:
        lines.append(f"- coverage of fleet: {_fmt(newest(info)['coverage'])} — {COVERAGE_MEANING['coverage_of_fleet']}")
    else:
        lines.append("- not measured (the problems were not selected from traces by this project)")
    unbenchmarked = sorted(((k[len(NOT_BENCHMARKED):], v) for k, v in cov.items() if k.startswith(NOT_BENCHMARKED)),
                           key=lambda kv: (-kv[1], kv[0]))
    if unbenchmarked:
        lines += ["", f"## GPU time no problem stands for (weights v{latest})", "",
                  "Share of all fleet GPU time in operators the evaluator cannot benchmark (collectives, copies, "
                  "fills, backward work and unnamed kernels are `communication`, `memcpy`, `memset`, `other`):", "",
                  "| operator | share of fleet GPU time |", "|---|---:|"]
        lines += [f"| {op} | {share:.4f} |" for op, share in unbenchmarked]
    lines += ["", f"## Top operators (weights v{latest})", "",
              "| operator | problems | W_op | " + " | ".join(f"{p} weight" for p in PHASES) + " |",
              "|---|---:|---:|" + "---:|" * len(PHASES)]
    for r in ops.head(TOP).iter_rows(named=True):
        lines.append(f"| {r['operator']} | {r['problems']} | {r['W_op']:.4f} | "
                     + " | ".join(f"{r[p]:.4f}" for p in PHASES) + " |")
    measured = newest(info).get("phase_split") or info.get("phase_split")
    basis = info.get("phase_split_basis") or (
        "share of fleet GPU time" if measured else "weight of problems with time in the phase")
    lines += ["", f"## Phase split (weights v{latest}; {basis})", ""]
    lines += [f"- {p}: {v:.4f}" for p, v in split.items()]
    lines += ["", f"![weight per operator]({PLOT_OPERATORS})", "", f"![phase split]({PLOT_PHASES})", "",
              "Colours are fixed per phase and per operator name, so two versions' plots compare at a glance.", "",
              "## Metric definitions", "", *DEFINITIONS, "",
              "## Weights versions", "", "| version | created | coverage of fleet | drift against the one before |",
              "|---|---|---:|---|"]
    for v in info.get("weights", []):
        drift = f"[{v['drift']}]({v['drift']})" if v.get("drift") else "—"
        lines.append(f"| v{v['version']} | {v.get('created') or 'n/a'} | {_fmt(v.get('coverage'))} | {drift} |")
    if latest > 1:
        lines += ["", f"Drift v{latest - 1} → v{latest} as a report with plots and the cause of each large movement "
                  f"(needs the sealed part): `hotshape drift {name}/public/weights/v{latest - 1}.parquet {name} "
                  f"--html drift.html`."]
    lines += ["", "## How to evaluate against this release", "",
              "1. Check it: `hotshape verify RELEASE --public-key MAINTAINER.pub` (digest, every file, signature; "
              "or `sha256sum -c SHA256SUMS` for the files alone). A release without `release.sig` is unsigned: "
              "`verify` then says UNSIGNED and exits 2, and `hotshape verify RELEASE --allow-unsigned` accepts it "
              "once its digest and files check.",
              "2. Write one `<operator>.py` per operator in a submission directory, each defining "
              "`class Model(nn.Module)` (init_kwargs to `__init__`, inputs by name to `forward`).",
              "3. `hotshape eval SUBMISSION --release RELEASE --device cuda --out results.parquet` "
              "(on CPU only compile and correctness are judged: nothing is timed, S_agg is not measured).",
              f"4. `hotshape score results.parquet --release RELEASE --weights v{latest}`.",
              "",
              "Problem ids are keyed hashes; provenance and roofline targets are sealed and not part of "
              "the public files.", ""]
    return "\n".join(lines)


def card_files(info: dict, manifest: pl.DataFrame, weights_by_version: dict[int, pl.DataFrame]) -> dict[str, bytes]:
    """README.md and the plots, as release-relative path → bytes."""
    latest = weights_by_version[max(weights_by_version)]
    files = {"README.md": render(info, manifest, weights_by_version).encode()}
    files.update(plots(operator_table(manifest, latest), phase_split(latest, info)))
    return files
