"""Writing ingest results: one Parquet per trace, the traces table, op_shape_time, quarantine list."""

from __future__ import annotations

import json
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import polars as pl

from ingest.classify import op_shape_time
from ingest.pipeline import TraceResult, ingest_many, traces_frame_from
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


def _write_trace(result: TraceResult, events_dir: Path) -> tuple[dict, pl.DataFrame]:
    """Write one trace's kernel_events; its summary with per-operator/phase/attribution time."""
    events = result.events
    write_parquet_atomic(events, events_dir / f"{result.summary['trace_id']}.parquet")
    summary = dict(result.summary)
    for column, key in (("operator", "by_operator"), ("phase", "by_phase"), ("attribution", "by_attribution")):
        if column in events.columns:
            summary[key] = _breakdown(events, column)
    return summary, op_shape_time(events)


def _ingest_batch(task: tuple) -> tuple[list[dict], list[pl.DataFrame], list[dict]]:
    """Ingest and write a batch of traces (in a worker process when --jobs > 1)."""
    paths, events_dir, root, captures, taxonomy = task
    summaries: list[dict] = []
    parts: list[pl.DataFrame] = []

    def on_trace(result: TraceResult) -> None:
        summary, part = _write_trace(result, events_dir)
        summaries.append(summary)
        parts.append(part)

    result = ingest_many(paths, root=root, on_trace=on_trace, captures=captures, taxonomy=taxonomy)
    return summaries, parts, result.quarantined


def write_ingest(
    paths: list[Path],
    out: Path,
    root: Path | None = None,
    progress=None,
    captures=None,
    taxonomy=None,
    jobs: int = 1,
) -> dict:
    """Ingest `paths` into `out`, `jobs` traces at a time; the summary `hotshape ingest --json` prints.

    Each worker holds one trace's events at a time and writes them itself; only summaries and
    op_shape_time come back, so memory grows with `jobs`, not with the number of traces.
    """
    out.mkdir(parents=True, exist_ok=True)
    events_dir = out / "kernel_events"
    tasks = [([p], events_dir, root, captures, taxonomy) for p in paths]
    summaries: list[dict] = []
    parts: list[pl.DataFrame] = []
    quarantined: list[dict] = []
    if jobs > 1 and len(paths) > 1:
        with ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
            batches = pool.map(_ingest_batch, tasks)
            for batch in progress(batches, total=len(tasks)) if progress else batches:
                _collect(batch, summaries, parts, quarantined)
    else:
        for task in progress(tasks) if progress else tasks:
            _collect(_ingest_batch(task), summaries, parts, quarantined)
    write_parquet_atomic(traces_frame_from(summaries), out / "traces.parquet")
    op_shape = pl.concat(parts) if parts else pl.from_arrow(OP_SHAPE_TIME.empty_table())
    write_parquet_atomic(op_shape, out / "op_shape_time.parquet")
    (out / "quarantined.json").write_text(json.dumps(quarantined, indent=2) + "\n")
    return {"traces": summaries, "quarantined": quarantined}


def _collect(batch, summaries, parts, quarantined) -> None:
    done, new_parts, bad = batch
    summaries.extend(done)
    parts.extend(new_parts)
    quarantined.extend(bad)
