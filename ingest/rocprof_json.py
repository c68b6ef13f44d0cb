"""rocprofv3 JSON output (`--output-format json`, what TraceLens reads) into kernel_events rows: kernel
dispatches and memory copies from `buffer_records`, launches from its HIP API records where traced."""

from __future__ import annotations

from pathlib import Path

import orjson
import polars as pl
import pyarrow as pa

from ingest.schema import KERNEL_EVENTS, validate
from ingest.tracefile import ROCPROF_JSON_KEY as TOOL_KEY, TraceError


def _handle(value) -> int | None:
    return value.get("handle") if isinstance(value, dict) else value


def _operations(doc: dict, kind: str) -> list[str]:
    for entry in (doc.get("strings") or {}).get("buffer_records") or []:
        if isinstance(entry, dict) and entry.get("kind") == kind:
            return list(entry.get("operations") or [])
    return []


def _kernel_names(doc: dict) -> dict[int, str]:
    names = {}
    for sym in doc.get("kernel_symbols") or []:
        if isinstance(sym, dict) and "kernel_id" in sym:
            # The demangled name is what the Kineto and CSV readers see; `.kd` marks a code-object descriptor.
            name = sym.get("demangled_kernel_name") or sym.get("formatted_kernel_name") or sym.get("kernel_name") or ""
            names[sym["kernel_id"]] = name.removesuffix(".kd")
    return names


def read_rocprof_json(path: str | Path, raw: bytes, trace_id: str) -> pl.DataFrame:
    """kernel_events rows of a rocprofv3 JSON document (already decompressed into `raw`)."""
    path = Path(path)
    try:
        top = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise TraceError(path, f"invalid JSON ({exc})") from None
    tools = top.get(TOOL_KEY) if isinstance(top, dict) else None
    if not isinstance(tools, list) or not tools:
        raise TraceError(path, f"not a rocprofv3 JSON document: no `{TOOL_KEY}` list")
    cols: dict[str, list] = {name: [] for name in KERNEL_EVENTS.names}
    for doc in tools:  # one entry per profiled process
        _read_process(path, doc, trace_id, cols)
    if not cols["kernel"]:
        raise TraceError(path, "no GPU activity (no kernel_dispatch or memory_copy records)")
    table = validate(pa.table(cols, schema=KERNEL_EVENTS), KERNEL_EVENTS, f"kernel_events of {path}")
    return pl.from_arrow(table).sort("ts_ns")


def _read_process(path: Path, doc: dict, trace_id: str, cols: dict[str, list]) -> None:
    if not isinstance(doc, dict):
        raise TraceError(path, f"`{TOOL_KEY}` entries must be objects")
    records = doc.get("buffer_records") or {}
    # Agents are addressed by handle; the GPU index is the logical node of its type (CPUs come first).
    device = {_handle(a.get("id")): a.get("logical_node_type_id", a.get("gpu_index")) for a in doc.get("agents") or []}
    names = _kernel_names(doc)
    hip_ops = _operations(doc, "HIP_RUNTIME_API")
    launches: dict[int, str] = {}
    for rec in records.get("hip_api") or []:
        corr = (rec.get("correlation_id") or {}).get("internal")
        op = rec.get("operation")
        if corr is not None and isinstance(op, int) and op < len(hip_ops):
            launches[corr] = hip_ops[op]
    copies = _operations(doc, "MEMORY_COPY")
    rows = []
    for rec in records.get("kernel_dispatch") or []:
        info = rec.get("dispatch_info") or {}
        name = names.get(info.get("kernel_id"), f"kernel_id {info.get('kernel_id')}")
        rows.append((name, "kernel", rec, device.get(_handle(info.get("agent_id"))), _handle(rec.get("stream_id")) or _handle(info.get("queue_id"))))
    for rec in records.get("memory_copy") or []:
        op = rec.get("operation")
        direction = copies[op] if isinstance(op, int) and op < len(copies) else str(op)
        direction = direction.removeprefix("MEMORY_COPY_")
        # A copy runs on the GPU end: the destination, unless it copies to the host.
        agent = rec.get("src_agent_id") if direction.endswith("TO_HOST") else rec.get("dst_agent_id")
        rows.append((f"Memcpy {direction}", "memcpy", rec, device.get(_handle(agent)), _handle(rec.get("stream_id"))))
    for name, category, rec, dev, stream in rows:
        start, end = rec.get("start_timestamp"), rec.get("end_timestamp")
        if not isinstance(start, int) or not isinstance(end, int):
            raise TraceError(path, f"{name!r} has no integer start/end timestamps")
        if end < start:
            raise TraceError(path, f"{name!r} ends before it starts ({start} > {end})")
        corr = (rec.get("correlation_id") or {}).get("internal")
        launch = launches.get(corr)
        values = {
            "trace_id": trace_id,
            "kernel": name,
            "category": category,
            "ts_ns": start,  # rocprofv3 timestamps are ns
            "dur_ns": end - start,
            "device": dev if isinstance(dev, int) else 0,
            "stream": stream if isinstance(stream, int) else 0,
            "correlation": corr,
            "launch": launch,
            "op_chain": [],
            "graph_launch": False,
            # No op context without roctx markers: a found HIP API row is all we know.
            "attribution": "launch_only" if launch else "unattributed",
        }
        for column in KERNEL_EVENTS.names:
            cols[column].append(values.get(column))
