"""Writing ingest results: one Parquet per trace, the traces table, op_shape_time, quarantine list."""

from __future__ import annotations

import json
import os
from pathlib import Path

import polars as pl

from ingest.classify import op_shape_time
from ingest.pipeline import TraceResult, ingest_many, traces_frame
from ingest.schema import OP_SHAPE_TIME


def write_parquet_atomic(frame: pl.DataFrame, path: Path) -> None:
    """Write `frame` to `path` through a temporary file, so readers never see half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    frame.write_parquet(tmp, compression="zstd", statistics=False)
    os.replace(tmp, path)


def _breakdown(events: pl.DataFrame, column: str) -> dict[str, int]:
    if column not in events.columns:
        return {}
    rows = events.group_by(column).agg(pl.col("dur_ns").sum()).sort(column).rows()
    return {str(key): int(ns) for key, ns in rows}


def write_ingest(
    paths: list[Path], out: Path, root: Path | None = None, progress=None, captures=None, taxonomy=None
) -> dict:
    """Ingest `paths` into `out`; the summary that `hotshape ingest --json` prints."""
    out.mkdir(parents=True, exist_ok=True)
    events_dir = out / "kernel_events"
    op_shape_parts: list[pl.DataFrame] = []
    summaries: list[dict] = []

    def on_trace(result: TraceResult) -> None:
        events = result.events
        write_parquet_atomic(events, events_dir / f"{result.summary['trace_id']}.parquet")
        summary = dict(result.summary)
        for column, key in (("operator", "by_operator"), ("phase", "by_phase"), ("attribution", "by_attribution")):
            if column in events.columns:
                summary[key] = _breakdown(events, column)
        summaries.append(summary)
        op_shape_parts.append(op_shape_time(events))

    result = ingest_many(paths, root=root, on_trace=on_trace, progress=progress, captures=captures, taxonomy=taxonomy)
    write_parquet_atomic(traces_frame(result.traces), out / "traces.parquet")
    op_shape = pl.concat(op_shape_parts) if op_shape_parts else pl.from_arrow(OP_SHAPE_TIME.empty_table())
    write_parquet_atomic(op_shape, out / "op_shape_time.parquet")
    (out / "quarantined.json").write_text(json.dumps(result.quarantined, indent=2) + "\n")
    return {"traces": summaries, "quarantined": result.quarantined}
