"""One trace file → kernel_events and its summary; many → written tables with bad files quarantined."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from catalogue.vocabulary import ATTRIBUTED
from ingest.tracefile import (TraceError, decompress, gc_paused, is_plain_local, is_rocprof_json, is_url,  # noqa: F401
                              read_file, read_trace_file, text_head, trace_id_of)
from ingest.attribution import attribute
from ingest.classify import classify_events
from ingest.graphs import capture_traces_for, read_captures
from ingest.kineto import read_kineto
from ingest.schema import TRACE_COLUMNS


@dataclass
class TraceResult:
    """kernel_events of one trace and the totals that prove nothing was dropped."""

    events: pl.DataFrame
    summary: dict


@dataclass
class IngestResult:
    """Every trace that was read, and every one that was quarantined with its reason."""

    traces: list[TraceResult]
    quarantined: list[dict]


def read_events(path: str | Path) -> pl.DataFrame:
    """kernel_events rows (before classification) of one trace file in any supported format."""
    with gc_paused():
        return _read_events(path)


def _read_events(path: str | Path) -> pl.DataFrame:
    name = str(path)
    if name.endswith((".sqlite", ".csv")) and is_url(name):
        # SQLite and the CSV reader open a local file: the worker reads a copy
        import tempfile

        with tempfile.TemporaryDirectory(prefix="hotshape-trace-") as tmp:
            local = Path(tmp) / name.rsplit("/", 1)[-1]
            local.write_bytes(read_file(name))
            return _read_events(local)
    if name.endswith(".sqlite"):
        from ingest.nsys import read_nsys  # it loads pyarrow (~0.3 s), which a Kineto trace never needs

        return read_nsys(path, trace_id_of(Path(path).read_bytes()))
    if name.endswith(".csv"):
        from ingest.rocprof import read_rocprof  # it loads pyarrow, which a Kineto trace never needs

        return read_rocprof(path, trace_id_of(Path(path).read_bytes()))
    if is_plain_local(path):
        with open(path, "rb") as f:
            head = f.read(256)
        if not is_rocprof_json(head):  # a plain Kineto file: read_kineto streams it from the disk
            return attribute(read_kineto(path))
    raw = read_trace_file(path)
    trace_id = trace_id_of(raw)
    if is_rocprof_json(text_head(path, raw)):
        from ingest.rocprof_json import read_rocprof_json  # it loads pyarrow, which a Kineto trace never needs

        return read_rocprof_json(path, decompress(path, raw), trace_id)
    return attribute(read_kineto(path, raw, trace_id))


def summarize(events: pl.DataFrame, path: str) -> dict:
    """Per-trace totals: all GPU time, attributed and unattributed time, counts."""
    # One pass over the three columns it reads; a filter of the whole frame would copy every column.
    gpu_ns, attributed_ns, kernels = events.select(
        pl.col("dur_ns").sum(),
        pl.col("dur_ns").filter(pl.col("attribution").is_in(ATTRIBUTED)).sum().alias("attributed_ns"),
        (pl.col("category") == "kernel").sum().alias("kernels"),
    ).row(0)
    return {
        "trace_id": events["trace_id"][0],
        "path": path,
        "gpu_ns": int(gpu_ns),
        "attributed_ns": int(attributed_ns),
        "unattributed_ns": int(gpu_ns) - int(attributed_ns),
        "kernels": int(kernels),
        "events": events.height,
    }


def ingest_trace(
    path: str | Path,
    display_path: str | None = None,
    captures: list[Path] | None = None,
    taxonomy=None,
    capture_events: pl.DataFrame | None = None,
) -> TraceResult:
    """One trace file read, attributed and classified; raises TraceError for a bad file.

    Graph replays are explained by `captures` (graph-capture traces), by default the ones a
    `capture_traces/execution_details.json` beside the trace names, or by `capture_events`
    already read from them (the trace store parses each capture trace once). The summary also
    holds file_gpu_ns / file_events: what the reader found in the file, before classification.
    """
    events = read_events(path)
    in_file = {"file_gpu_ns": int(events["dur_ns"].sum()), "file_events": events.height}
    with gc_paused():
        if capture_events is None:
            capture_events = _capture_events(path, captures)
        events = classify_events(events, capture_events, taxonomy)
    return TraceResult(events=events, summary=summarize(events, display_path or str(path)) | in_file)


class CaptureWarning(UserWarning):
    """A graph-capture sidecar or capture trace that cannot explain a profile's graph replays."""


def _capture_events(path: str | Path, captures: list[Path] | None):
    """Capture launches for a profile's graph replays; a sidecar or capture trace that cannot be read or
    aligned degrades the replays to kernel-name rules with a warning naming it, never fails the profile."""
    import warnings

    try:
        return read_captures(captures if captures is not None else capture_traces_for(path))
    except TraceError as exc:
        warnings.warn(f"{exc.path}: {exc.problem}; graph replays of {path} fall back to kernel-name rules",
                      CaptureWarning, stacklevel=3)
        return None


def ingest_many(
    paths: Iterable[str | Path],
    root: str | Path | None = None,
    on_trace: Callable[[TraceResult], None] | None = None,
    progress: Callable[[Iterable], Iterable] | None = None,
    captures: list[Path] | None = None,
    taxonomy=None,
) -> IngestResult:
    """Each trace ingested in turn; a bad one is quarantined with its reason and the rest go on.

    `on_trace` receives each result as soon as it is ready, so callers can write it out and
    drop it: memory holds one trace's events at a time, not the fleet's.
    """
    paths = [Path(p) for p in paths]
    results: list[TraceResult] = []
    quarantined: list[dict] = []
    iterator = progress(paths) if progress else paths
    for path in iterator:
        shown = _display_path(path, root)
        try:
            result = ingest_trace(path, shown, captures, taxonomy)
        except TraceError as exc:
            quarantined.append({"path": shown, "reason": exc.problem})
            continue
        except Exception as exc:  # noqa: BLE001 — a reader's bug on one file must not abort the batch
            quarantined.append({"path": shown, "reason": failure_reason(exc)})
            continue
        if on_trace is not None:
            on_trace(result)
            result = TraceResult(events=result.events.clear(), summary=result.summary)
        results.append(result)
    return IngestResult(traces=results, quarantined=quarantined)


def failure_reason(exc: BaseException) -> str:
    """A quarantine reason for an unexpected error while ingesting one file: its type and message, one line."""
    text = " ".join(str(exc).split())
    return f"unexpected {type(exc).__name__} while ingesting: {text[:500]}" if text else f"unexpected {type(exc).__name__}"


def _display_path(path: str | Path, root: str | Path | None) -> str:
    if is_url(path) or is_url(root):
        prefix = f"{str(root).rstrip('/')}/"
        return str(path)[len(prefix):] if root is not None and str(path).startswith(prefix) else str(path)
    if root is not None:
        try:
            return Path(path).resolve().relative_to(Path(root).resolve()).as_posix()
        except ValueError:
            pass
    return str(path)


def traces_frame(results: list[TraceResult]) -> pl.DataFrame:
    """One row per ingested trace with its totals (the `traces` table)."""
    return traces_frame_from([r.summary for r in results])


def traces_frame_from(summaries: list[dict]) -> pl.DataFrame:
    """The `traces` table from per-trace summaries (extra summary keys are left out)."""
    # Built in polars, not from an Arrow table: only the Parquet footers' column descriptions need pyarrow.
    return pl.DataFrame({name: [s[name] for s in summaries] for name in TRACE_COLUMNS}, schema=TRACE_COLUMNS)
