"""Kernel → launch row → CPU op stack: who launched each GPU activity, as kernel_events rows."""

from __future__ import annotations

from collections import defaultdict

import msgspec
import polars as pl
import pyarrow as pa

from ingest.kineto import NULL_JSON, CpuRange, KinetoTrace
from ingest.schema import KERNEL_EVENTS, validate

GRAPH_LAUNCH_NAMES = ("cudaGraphLaunch", "hipGraphLaunch", "cuGraphLaunch")


def enclosing_stacks(ranges: list[CpuRange], points: list[tuple[int, int]]) -> dict[int, tuple[int, ...]]:
    """For each (ts_ns, key) point, the indices into `ranges` of the ranges enclosing it, outermost first.

    One sweep over the thread's ranges and points sorted by start: a range starting at the same
    instant as a point encloses it; a range ending at or before a point does not.
    """
    order = sorted(range(len(ranges)), key=lambda i: (ranges[i].ts_ns, -ranges[i].end_ns))
    points = sorted(points)
    stack: list[int] = []
    result: dict[int, tuple[int, ...]] = {}
    r = 0
    n = len(order)
    for ts, key in points:
        while r < n and ranges[order[r]].ts_ns <= ts:
            idx = order[r]
            start = ranges[idx].ts_ns
            while stack and ranges[stack[-1]].end_ns <= start:
                stack.pop()
            stack.append(idx)
            r += 1
        while stack and ranges[stack[-1]].end_ns <= ts:
            stack.pop()
        # Ranges that overlap without nesting (clock skew between writers) can leave entries
        # below the top that ended already; keep only those that really enclose the point.
        result[key] = tuple(i for i in stack if ranges[i].end_ns > ts)
    return result


class _ChainCache:
    """Row values of op stacks; each range's JSON is rendered once, however many stacks hold it."""

    def __init__(self, ranges: list[CpuRange]):
        self.ranges = ranges
        self.entries: dict[int, str] = {}

    def entry(self, i: int) -> tuple[str, object]:
        hit = self.entries.get(i)
        if hit is None:
            args = self.ranges[i].args()
            if args.dims is NULL_JSON and args.types is NULL_JSON:
                hit = ("null", args)
            else:
                parts = (_compact(args.dims), _compact(args.types), _compact(args.concrete))
                hit = ('{"dims":%s,"types":%s,"concrete":%s}' % parts, args, parts)
            self.entries[i] = hit
        return hit

    def get(self, chain: tuple[int, ...]) -> tuple:
        rs = [self.ranges[i] for i in chain]
        entries = [self.entry(i) for i in chain]
        op = annotation = None
        for i in range(len(rs) - 1, -1, -1):
            if rs[i].is_op:
                op = i if op is None else op
            elif annotation is None:
                annotation = i
        dims = types = concrete = None
        if op is not None and len(entries[op]) == 3:
            dims, types, concrete = entries[op][2]
        return (
            [r.name for r in rs],
            "[" + ",".join(e[0] for e in entries) + "]" if rs else None,
            rs[op].name if op is not None else None,
            dims,
            types,
            concrete,
            rs[annotation].name if annotation is not None else None,
            {e[1].external_id for e in entries},
        )


def _compact(raw: bytes) -> str:
    # Kineto pretty-prints args over many lines; rows carry the compact form.
    return msgspec.json.format(raw, indent=-1).decode()


def attribute(trace: KinetoTrace) -> pl.DataFrame:
    """The trace's GPU activities as kernel_events rows, each linked to its launch row and op stack."""
    # Launch points per thread: only launch rows that some GPU activity refers to.
    wanted = {a.correlation for a in trace.activities if a.correlation is not None}
    points_by_thread: dict[tuple, list[tuple[int, int]]] = defaultdict(list)
    for correlation in wanted:
        row = trace.launches.get(correlation)
        if row is not None:
            points_by_thread[row.thread].append((row.ts_ns, correlation))
    chain_of: dict[int, tuple] = {}
    for thread, points in points_by_thread.items():
        ranges = trace.ranges.get(thread, [])
        cache = _ChainCache(ranges)
        for correlation, chain in enclosing_stacks(ranges, points).items():
            chain_of[correlation] = cache.get(chain)

    # Order within a graph launch: kernels sharing one graph launch's correlation, by start time.
    graph_index: dict[int, int] = {}
    by_correlation: dict[int, list[int]] = defaultdict(list)
    for i, a in enumerate(trace.activities):
        if a.correlation is not None:
            by_correlation[a.correlation].append(i)

    cols: dict[str, list] = {name: [] for name in KERNEL_EVENTS.names}
    empty = ([], None, None, None, None, None, None, set())
    for i, a in enumerate(trace.activities):
        row = trace.launches.get(a.correlation) if a.correlation is not None else None
        chain = chain_of.get(a.correlation, empty) if row is not None else empty
        names, args_json, op, dims, types, concrete, annotation, chain_ext_ids = chain
        graph = a.graph_node or (row is not None and row.name.startswith(GRAPH_LAUNCH_NAMES))
        if graph:
            if a.correlation not in graph_index:
                members = sorted(by_correlation[a.correlation], key=lambda j: trace.activities[j].ts_ns)
                for k, j in enumerate(members):
                    graph_index[j] = k
                graph_index[a.correlation] = -1
        if row is None:
            attribution = "unattributed"
        elif graph:
            attribution = "graph_replay"
        elif op is not None:
            attribution = "direct"
        else:
            attribution = "launch_only"
        cols["trace_id"].append(trace.trace_id)
        cols["kernel"].append(a.name)
        cols["category"].append(a.category)
        cols["ts_ns"].append(a.ts_ns)
        cols["dur_ns"].append(a.dur_ns)
        cols["device"].append(a.device)
        cols["stream"].append(a.stream)
        cols["correlation"].append(a.correlation)
        cols["launch"].append(row.name if row is not None else None)
        cols["op"].append(op)
        cols["op_chain"].append(names)
        cols["op_chain_args"].append(args_json)
        cols["input_dims"].append(dims)
        cols["input_types"].append(types)
        cols["concrete_inputs"].append(concrete)
        cols["annotation"].append(annotation)
        cols["graph_launch"].append(graph)
        cols["graph_kernel_index"].append(graph_index.get(i) if graph else None)
        # Since PyTorch 2.1 a kernel's `External id` is its enclosing op's; before, the launch row's.
        cols["external_id_agrees"].append(
            None
            if a.external_id is None or graph or row is None
            else a.external_id in chain_ext_ids or a.external_id == row.external_id
        )
        cols["attribution"].append(attribution)
    table = validate(pa.table(cols, schema=KERNEL_EVENTS), KERNEL_EVENTS, f"kernel_events of {trace.path}")
    return pl.from_arrow(table)
