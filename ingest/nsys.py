"""Nsight Systems SQLite exports (`nsys export --type sqlite`) read into kernel_events rows."""

from __future__ import annotations

import re
import sqlite3
from collections import defaultdict
from pathlib import Path

import orjson
import polars as pl
import pyarrow as pa

from ingest.attribution import enclosing_stacks
from ingest.graphs import Range
from ingest.kineto import TraceError
from ingest.schema import KERNEL_EVENTS, validate

_PID = 0x1000000  # globalPid/globalTid = ... | pid << 24 | tid (nsys export docs)
# PyTorch emit_nvtx ranges: "aten::add[, seq = 12], op_id = 314359[, sizes = [[2, 3], []]][, input_op_ids = ...]"
# (`seq` is the autograd sequence number, written for ops recorded with grad mode on).
_NVTX = re.compile(
    r"^(?P<name>.*?)(?:, seq = -?\d+)?(?:, op_id = \d+)?(?:, sizes = (?P<sizes>\[.*?\]\]))?(?:, input_op_ids = .*)?$"
)
_GRAPH_LAUNCH = re.compile(r"^cu(da)?GraphLaunch")
_VERSION = re.compile(r"_v\d+$")


def _tables(conn: sqlite3.Connection) -> set[str]:
    return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}


def _pid(global_id: int | None) -> int | None:
    return None if global_id is None else (global_id // _PID) % _PID


def _nvtx_range(text: str, start: int, end: int) -> Range:
    m = _NVTX.match(text)
    name = m["name"] if m else text
    args = None
    if m and m["sizes"]:
        try:
            args = {"dims": orjson.loads(m["sizes"]), "types": None, "concrete": None}
        except orjson.JSONDecodeError:
            args = None
    # emit_nvtx names ops "ns::op"; anything else (FSDP scopes, user ranges) is an annotation.
    return Range(name, "::" in name and not name.startswith("FSDP::"), start, end, args)


def read_nsys(path: str | Path, trace_id: str) -> pl.DataFrame:
    """kernel_events rows of an nsys SQLite export: kernels, memcpys, memsets linked to NVTX op ranges."""
    path = Path(path)
    if not path.exists():
        raise TraceError(path, "no such file")
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        tables = _tables(conn)
    except sqlite3.DatabaseError as exc:
        raise TraceError(path, f"not an SQLite database ({exc})") from None
    try:
        if "CUPTI_ACTIVITY_KIND_KERNEL" not in tables or "StringIds" not in tables:
            raise TraceError(path, "no CUPTI_ACTIVITY_KIND_KERNEL/StringIds tables: not an nsys export with CUDA tracing")
        return _read(conn, tables, trace_id, str(path))
    finally:
        conn.close()


def _read(conn: sqlite3.Connection, tables: set[str], trace_id: str, path: str) -> pl.DataFrame:
    strings = dict(conn.execute("SELECT id, value FROM StringIds"))
    # Export timestamps count from the session start; anchor them to the epoch like Kineto's.
    base = 0
    if "TARGET_INFO_SESSION_START_TIME" in tables:
        row = conn.execute("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME").fetchone()
        base = int(row[0]) if row and row[0] is not None else 0
    activities: list[tuple] = []  # (name, category, start, end, device, stream, corr, pid, graph)
    for r in conn.execute(
        "SELECT demangledName, start, end, deviceId, streamId, correlationId, globalPid, graphId FROM CUPTI_ACTIVITY_KIND_KERNEL"
    ):
        activities.append((strings.get(r[0], ""), "kernel", r[1], r[2], r[3], r[4], r[5], _pid(r[6]), bool(r[7])))
    if "CUPTI_ACTIVITY_KIND_MEMCPY" in tables:
        kinds = {}
        if "ENUM_CUDA_MEMCPY_OPER" in tables:
            kinds = dict(conn.execute("SELECT id, label FROM ENUM_CUDA_MEMCPY_OPER"))
        for r in conn.execute("SELECT copyKind, start, end, deviceId, streamId, correlationId, globalPid FROM CUPTI_ACTIVITY_KIND_MEMCPY"):
            activities.append((f"Memcpy {kinds.get(r[0], r[0])}", "memcpy", r[1], r[2], r[3], r[4], r[5], _pid(r[6]), False))
    if "CUPTI_ACTIVITY_KIND_MEMSET" in tables:
        for r in conn.execute("SELECT start, end, deviceId, streamId, correlationId, globalPid FROM CUPTI_ACTIVITY_KIND_MEMSET"):
            activities.append(("Memset", "memset", r[0], r[1], r[2], r[3], r[4], _pid(r[5]), False))
    if not activities:
        raise TraceError(path, "no GPU activity (no kernel, memcpy or memset rows)")

    # Correlation ids restart per process: key launches by (pid, correlation).
    launches: dict[tuple, tuple] = {}
    if "CUPTI_ACTIVITY_KIND_RUNTIME" in tables:
        for r in conn.execute("SELECT start, globalTid, correlationId, nameId FROM CUPTI_ACTIVITY_KIND_RUNTIME"):
            launches[(_pid(r[1]), r[2])] = (r[0], r[1], _VERSION.sub("", strings.get(r[3], "")))
    ranges: dict[int, list[Range]] = defaultdict(list)
    if "NVTX_EVENTS" in tables:
        for text, text_id, start, end, tid in conn.execute(
            "SELECT text, textId, start, end, globalTid FROM NVTX_EVENTS WHERE end IS NOT NULL AND eventType IN (59, 60)"
        ):
            label = text if text is not None else strings.get(text_id)
            if label:
                ranges[tid].append(_nvtx_range(label, start, end))

    points: dict[int, list] = defaultdict(list)
    for key, (start, tid, _) in launches.items():
        points[tid].append((start, key))
    chain_of: dict[tuple, list[Range]] = {}
    for tid, pts in points.items():
        rs = ranges.get(tid, [])
        for key, idx in enclosing_stacks(rs, pts).items():
            chain_of[key] = [rs[i] for i in idx]

    graph_order: dict[tuple, list[int]] = defaultdict(list)
    cols: dict[str, list] = {name: [] for name in KERNEL_EVENTS.names}
    for i, (name, cat, start, end, device, stream, corr, pid, graph_node) in enumerate(activities):
        launch = launches.get((pid, corr))
        chain = chain_of.get((pid, corr), []) if launch else []
        ops = [r for r in chain if r.is_op]
        annotations = [r for r in chain if not r.is_op]
        op = ops[-1] if ops else None
        graph = graph_node or bool(launch and _GRAPH_LAUNCH.match(launch[2]))
        if graph:
            graph_order[(pid, corr)].append(i)
        attribution = "unattributed" if launch is None else "graph_replay" if graph else "direct" if op else "launch_only"
        op_args = (op.args or {}) if op else {}
        cols["trace_id"].append(trace_id)
        cols["kernel"].append(name)
        cols["category"].append(cat)
        cols["ts_ns"].append(base + start)
        cols["dur_ns"].append(end - start)
        cols["device"].append(device)
        cols["stream"].append(stream)
        cols["correlation"].append(corr)
        cols["launch"].append(launch[2] if launch else None)
        cols["op"].append(op.name if op else None)
        cols["op_chain"].append([r.name for r in chain])
        cols["op_chain_args"].append(orjson.dumps([r.args for r in chain]).decode() if chain else None)
        cols["input_dims"].append(orjson.dumps(op_args["dims"]).decode() if op_args.get("dims") is not None else None)
        cols["input_types"].append(None)
        cols["concrete_inputs"].append(None)
        cols["annotation"].append(annotations[-1].name if annotations else None)
        cols["graph_launch"].append(graph)
        cols["graph_kernel_index"].append(None)
        cols["external_id_agrees"].append(None)
        cols["grid"].append(None)
        cols["attribution"].append(attribution)
    for members in graph_order.values():
        for k, i in enumerate(sorted(members, key=lambda j: activities[j][2])):
            cols["graph_kernel_index"][i] = k
    table = validate(pa.table(cols, schema=KERNEL_EVENTS), KERNEL_EVENTS, f"kernel_events of {path}")
    return pl.from_arrow(table)
