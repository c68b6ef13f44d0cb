"""`hotshape ingest` output: the trace store at --out, and its views (traces, op_shape_time, quarantine list)."""

from __future__ import annotations

import os
from pathlib import Path

import polars as pl
from ingest.arrow_schema import described_schema
from ingest.pipeline import _display_path
from ingest.store import TraceStore


def write_parquet_atomic(frame: pl.DataFrame, path: Path, columns: dict[str, tuple[str, str]]) -> None:
    """Write `frame` to `path` through a temporary file, so readers never see half a file; each column described
    from `columns` (a schema module's COLUMNS) in the field metadata."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    frame.write_parquet(tmp, compression="zstd", statistics=False, arrow_schema=described_schema(frame, columns))
    os.replace(tmp, path)


def write_ingest(
    paths: list[Path],
    out: str | Path,
    root: Path | None = None,
    progress=None,
    captures=None,
    taxonomy=None,
    jobs: int | None = None,
    cluster: str | None = None,
) -> dict:
    """Ingest `paths` into the trace store at `out` (see ingest.store), then rewrite its views;
    the summary `hotshape ingest --json` prints (every trace of the store, one entry per trace).

    Traces already in the store are not parsed again; workers write the store themselves.
    """
    store = TraceStore(out)
    names = [_display_path(p, root) for p in paths]
    report = store.ingest(paths, names, jobs=jobs, captures=captures, taxonomy=taxonomy, progress=progress,
                          cluster=cluster)
    return store.write_views(report.unreadable) | {"parsed": len(report.parsed), "reused": len(report.reused)}
