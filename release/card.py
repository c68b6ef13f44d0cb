"""The release card: README.md with counts, coverage, top operators, phase split, and PNG plots."""

from __future__ import annotations

import io
import math

import polars as pl

from release.schema import PHASES

PLOT_OPERATORS = "plots/operator_weights.png"
PLOT_PHASES = "plots/phase_split.png"
TOP = 15


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
    """Share of fleet time by phase when the build measured it, else the weight of problems with time in each phase."""
    if info.get("phase_split"):
        return {k: float(v) for k, v in info["phase_split"].items()}
    return {p: math.fsum(weights.filter(pl.col(f"weight_{p}") > 0)["weight"].to_list()) for p in PHASES}


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
    ax.barh(top["operator"].to_list()[::-1], top["W_op"].to_list()[::-1], color="#4477aa")
    ax.set_xlabel("weight W_op (sum of problem weights)")
    ax.set_title(f"Top {top.height} operators by weight")
    fig.tight_layout()
    out = {PLOT_OPERATORS: _png(fig)}
    fig = Figure(figsize=(5, 3))
    ax = fig.add_subplot()
    ax.bar(list(split), list(split.values()), color=["#228833", "#ee6677", "#ccbb44", "#bbbbbb"][: len(split)])
    ax.set_ylabel("share")
    ax.set_title("Phase split")
    fig.tight_layout()
    out[PLOT_PHASES] = _png(fig)
    return out


def _fmt(x) -> str:
    return "n/a" if x is None else f"{x:.4f}" if isinstance(x, float) else str(x)


def render(info: dict, manifest: pl.DataFrame, weights_by_version: dict[int, pl.DataFrame]) -> str:
    """README.md text of a release from its public tables and release.json fields."""
    latest = max(weights_by_version)
    weights = weights_by_version[latest]
    ops = operator_table(manifest, weights)
    split = phase_split(weights, info)
    cov = info.get("coverage") or {}
    lines = [
        f"# {info.get('name', 'release')} — release card",
        "",
        f"Release {info.get('version')}, created {info.get('created') or 'n/a'}; "
        f"weights versions {', '.join(f'v{v}' for v in sorted(weights_by_version))} (latest v{latest}).",
        "",
        "## Counts",
        "",
        f"- problems: {manifest.height}",
        f"- operators: {ops.height}",
        *[f"- problems with {p} time: {int((weights[f'weight_{p}'] > 0).sum())}" for p in PHASES],
        "",
        "## Coverage",
        "",
    ]
    if cov:
        lines += [f"- {k.replace('_', ' ')}: {_fmt(v)}" for k, v in sorted(cov.items()) if not isinstance(v, (dict, list))]
    else:
        lines.append("- not measured (the problems were not selected from traces by this project)")
    lines += ["", f"## Top operators (weights v{latest})", "",
              "| operator | problems | W_op | " + " | ".join(f"{p} weight" for p in PHASES) + " |",
              "|---|---:|---:|" + "---:|" * len(PHASES)]
    for r in ops.head(TOP).iter_rows(named=True):
        lines.append(f"| {r['operator']} | {r['problems']} | {r['W_op']:.4f} | "
                     + " | ".join(f"{r[p]:.4f}" for p in PHASES) + " |")
    basis = info.get("phase_split_basis") or (
        "share of fleet GPU time" if info.get("phase_split") else "weight of problems with time in the phase")
    lines += ["", f"## Phase split ({basis})", ""]
    lines += [f"- {p}: {v:.4f}" for p, v in split.items()]
    lines += ["", f"![weight per operator]({PLOT_OPERATORS})", "", f"![phase split]({PLOT_PHASES})", "",
              "## Weights versions", "", "| version | created | coverage |", "|---|---|---:|"]
    for v in info.get("weights", []):
        lines.append(f"| v{v['version']} | {v.get('created') or 'n/a'} | {_fmt(v.get('coverage'))} |")
    lines += ["", "Problem ids are keyed hashes; provenance and roofline targets are sealed and not part of "
              "the public files.", ""]
    return "\n".join(lines)


def card_files(info: dict, manifest: pl.DataFrame, weights_by_version: dict[int, pl.DataFrame]) -> dict[str, bytes]:
    """README.md and the plots, as release-relative path → bytes."""
    latest = weights_by_version[max(weights_by_version)]
    files = {"README.md": render(info, manifest, weights_by_version).encode()}
    files.update(plots(operator_table(manifest, latest), phase_split(latest, info)))
    return files
