"""rocprofv3 CSV output (kernel_trace.csv + memory_copy_trace.csv + hip API trace) read into kernel_events rows."""

from __future__ import annotations

import csv
import re
from pathlib import Path

import polars as pl
import pyarrow as pa

from ingest.kineto import TraceError
from ingest.schema import KERNEL_EVENTS, validate

KERNEL_SUFFIX = "kernel_trace.csv"
_COPY_SUFFIX = "memory_copy_trace.csv"
# rocprofv3 names the HIP trace hip_api_trace.csv; older docs samples use hip_runtime_trace.csv.
_API_SUFFIXES = ("hip_api_trace.csv", "hip_runtime_trace.csv")
_KERNEL_NEEDS = ("Kernel_Name", "Correlation_Id", "Start_Timestamp", "End_Timestamp", "Agent_Id")
_COPY_NEEDS = ("Direction", "Correlation_Id", "Start_Timestamp", "End_Timestamp")


def _rows(path: Path, needs: tuple[str, ...]) -> list[dict]:
    try:
        with path.open(newline="") as f:
            reader = csv.DictReader(f)
            missing = [c for c in needs if c not in (reader.fieldnames or [])]
            if missing:
                raise TraceError(path, f"not a rocprofv3 CSV: missing columns {missing}")
            return list(reader)
    except OSError as exc:
        raise TraceError(path, f"cannot read ({exc.strerror})") from None


def _int(path: Path, row: dict, column: str) -> int:
    value = row.get(column)
    # Agent ids are written as "Agent 2" by some rocprofv3 versions and as 2 by others.
    m = re.search(r"-?\d+", value or "")
    if not m:
        raise TraceError(path, f"column {column} has no integer in {value!r}")
    return int(m.group())


def _siblings(path: Path) -> tuple[Path, str]:
    path = Path(path)
    if path.is_dir():
        found = sorted(path.glob(f"*{KERNEL_SUFFIX}"))
        if not found:
            raise TraceError(path, f"no *{KERNEL_SUFFIX} in this folder")
        path = found[0]
    if not path.name.endswith(KERNEL_SUFFIX):
        raise TraceError(path, f"expected a rocprofv3 {KERNEL_SUFFIX}")
    if not path.exists():
        raise TraceError(path, "no such file")
    return path, path.name[: -len(KERNEL_SUFFIX)]


def read_rocprof(path: str | Path, trace_id: str) -> pl.DataFrame:
    """kernel_events rows of a rocprofv3 kernel trace (and its memory-copy and HIP API traces beside it)."""
    kernel_path, prefix = _siblings(Path(path))
    folder = kernel_path.parent
    launches: dict[int, str] = {}
    for suffix in _API_SUFFIXES:
        api = folder / f"{prefix}{suffix}"
        if api.exists():
            for row in _rows(api, ("Function", "Correlation_Id")):
                launches[_int(api, row, "Correlation_Id")] = row["Function"]
    activities = []
    for row in _rows(kernel_path, _KERNEL_NEEDS):
        stream = row.get("Stream_Id") or row.get("Queue_Id") or "0"
        activities.append(
            (row["Kernel_Name"], "kernel", kernel_path, row, _int(kernel_path, row, "Agent_Id"), int(re.search(r"\d+", stream).group()))
        )
    copy_path = folder / f"{prefix}{_COPY_SUFFIX}"
    if copy_path.exists():
        for row in _rows(copy_path, _COPY_NEEDS):
            direction = row["Direction"].removeprefix("MEMORY_COPY_")
            # A copy runs on the GPU end: the destination, unless it copies to the host.
            agent = "Source_Agent_Id" if direction.endswith("TO_HOST") else "Destination_Agent_Id"
            device = _int(copy_path, row, agent) if row.get(agent) else 0
            stream = _int(copy_path, row, "Stream_Id") if row.get("Stream_Id") else 0
            activities.append((f"Memcpy {direction}", "memcpy", copy_path, row, device, stream))
    if not activities:
        raise TraceError(kernel_path, "no GPU activity rows")
    cols: dict[str, list] = {name: [] for name in KERNEL_EVENTS.names}
    for name, cat, src, row, device, stream in activities:
        start, end = _int(src, row, "Start_Timestamp"), _int(src, row, "End_Timestamp")
        if end < start:
            raise TraceError(src, f"{name!r} ends before it starts ({start} > {end})")
        corr = _int(src, row, "Correlation_Id")
        launch = launches.get(corr)
        values = {
            "trace_id": trace_id,
            "kernel": name,
            "category": cat,
            "ts_ns": start,  # rocprofv3 timestamps are already ns
            "dur_ns": end - start,
            "device": device,
            "stream": stream,
            "correlation": corr,
            "launch": launch,
            "op_chain": [],
            "graph_launch": False,
            # No op context without roctx markers: a found API row is all we know.
            "attribution": "launch_only" if launch else "unattributed",
        }
        for column in KERNEL_EVENTS.names:
            cols[column].append(values.get(column))
    table = validate(pa.table(cols, schema=KERNEL_EVENTS), KERNEL_EVENTS, f"kernel_events of {kernel_path}")
    return pl.from_arrow(table).sort("ts_ns")
