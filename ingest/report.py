"""The human table `hotshape ingest --report` prints: top operators and shapes, phase split, what stayed unnamed."""

from __future__ import annotations

from pathlib import Path

import polars as pl

_COLUMNS = ("trace_id", "dur_ns", "operator", "shape", "phase", "attribution", "graph_launch", "op")


def _pct(part: int, whole: int) -> str:
    return f"{100.0 * part / whole:5.1f}%" if whole else "   - %"


def _ms(ns: int) -> str:
    return f"{ns / 1e6:10.3f}"


def report_numbers(events: pl.DataFrame) -> dict:
    """The figures the report shows, as numbers (ns): totals, per operator / phase / attribution, graph split."""
    gpu_ns = int(events["dur_ns"].sum())
    graph = events.filter(pl.col("graph_launch").fill_null(False))

    def by(frame: pl.DataFrame, column: str) -> dict[str, int]:
        rows = frame.group_by(column).agg(pl.col("dur_ns").sum()).sort("dur_ns", descending=True).rows()
        return {str(k): int(v) for k, v in rows}

    other = events.filter(pl.col("operator") == "other")
    if "op" in other.columns:
        other = other.with_columns(pl.col("op").fill_null("(no op)"))
    else:
        other = other.with_columns(pl.lit("(no op)").alias("op"))
    return {
        "gpu_ns": gpu_ns,
        # What stayed `other`, by the innermost op that launched it (capture-time op for graph rows).
        "other_by_op": by(other, "op"),
        "named_ns": int(events.filter(pl.col("operator") != "other")["dur_ns"].sum()),
        "by_operator": by(events, "operator"),
        "by_phase": by(events, "phase"),
        "by_attribution": by(events, "attribution"),
        "graph_ns": int(graph["dur_ns"].sum()),
        "graph_capture_ns": int(graph.filter(pl.col("attribution") == "graph_capture")["dur_ns"].sum()),
        "graph_unnamed_ns": int(graph.filter(pl.col("operator") == "other")["dur_ns"].sum()),
    }


def format_report(events: pl.DataFrame, top: int = 10) -> str:
    """A plain-text report over classified kernel_events (one trace or many)."""
    n = report_numbers(events)
    total = n["gpu_ns"]
    lines = [
        f"traces: {events['trace_id'].n_unique()}   GPU time: {total / 1e6:.3f} ms   "
        f"named operator: {_pct(n['named_ns'], total).strip()}",
        "",
        f"{'operator':<30}{'ms':>10}{'share':>8}",
    ]
    for op, ns in list(n["by_operator"].items())[:top]:
        lines.append(f"{op:<30}{_ms(ns)}{_pct(ns, total):>8}")
    lines += ["", f"{'operator':<26}{'ms':>10}{'share':>8}  {'phase':<8} shape"]
    shapes = (
        events.group_by("operator", "shape", "phase")
        .agg(pl.col("dur_ns").sum())
        .sort(["dur_ns", "operator", "shape"], descending=[True, False, False])
        .head(top)
    )
    for op, shape, phase, ns in shapes.select("operator", "shape", "phase", "dur_ns").rows():
        lines.append(f"{op:<26}{_ms(ns)}{_pct(ns, total):>8}  {phase:<8} {shape}")
    lines += ["", "phase:       " + "   ".join(f"{k} {_pct(v, total).strip()}" for k, v in n["by_phase"].items())]
    lines.append("attribution: " + "   ".join(f"{k} {_pct(v, total).strip()}" for k, v in n["by_attribution"].items()))
    if n["graph_ns"]:
        g = n["graph_ns"]
        lines.append(
            f"graph replays: {g / 1e6:.3f} ms = {_pct(g, total).strip()} of GPU time; "
            f"via capture trace {_pct(n['graph_capture_ns'], g).strip()}, "
            f"by kernel name {_pct(g - n['graph_capture_ns'], g).strip()}, "
            f"unnamed {_pct(n['graph_unnamed_ns'], g).strip()}"
        )
    if n["other_by_op"]:
        lines.append(
            "other, by op: "
            + "   ".join(f"{op} {_pct(ns, total).strip()}" for op, ns in list(n["other_by_op"].items())[:top])
        )
    unattributed = n["by_attribution"].get("unattributed", 0)
    lines.append(f"unattributed (no launch row in the window): {_pct(unattributed, total).strip()}")
    return "\n".join(lines)


def report_dir(out: str | Path, top: int = 10) -> str:
    """The report over every kernel_events Parquet file that `hotshape ingest --out DIR` wrote."""
    files = sorted((Path(out) / "kernel_events").glob("*.parquet"))
    if not files:
        raise FileNotFoundError(f"{out}: no kernel_events/*.parquet (run `hotshape ingest --out {out}` first)")
    events = pl.concat([pl.read_parquet(f, columns=list(_COLUMNS)) for f in files])
    return format_report(events, top)
