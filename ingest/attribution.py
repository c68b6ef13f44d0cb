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

    def entry(self, i: int) -> tuple:
        hit = self.entries.get(i)
        if hit is None:
            args = self.ranges[i].args()
            if args.dims is NULL_JSON and args.types is NULL_JSON:
                hit = ("null", args)
            else:
                # One compaction pass over the whole entry; the separators cannot occur inside its
                # parts (dims are numbers, and a quote inside a JSON string is escaped).
                text = _compact(b'{"dims":%b,"types":%b,"concrete":%b}' % (args.dims, args.types, args.concrete))
                t = text.index(',"types":')
                c = text.index(',"concrete":', t)
                hit = (text, args, (text[8:t], text[t + 9 : c], text[c + 12 : -1]))
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
    members_of: dict[int, list[int]] = defaultdict(list)
    for i, a in enumerate(trace.activities):
        if a.correlation is not None:
            members_of[a.correlation].append(i)
    graph_index: dict[int, int] = {}  # activity index -> position in its graph launch
    ordered: set[int] = set()  # correlations whose graph kernels are numbered

    trace_id, launches = trace.trace_id, trace.launches
    empty = ([], None, None, None, None, None, None, set())
    rows = []
    for i, a in enumerate(trace.activities):
        row = launches.get(a.correlation) if a.correlation is not None else None
        names, args_json, op, dims, types, concrete, annotation, chain_ext_ids = (
            chain_of.get(a.correlation, empty) if row is not None else empty
        )
        graph = a.graph_node or (row is not None and row.name.startswith(GRAPH_LAUNCH_NAMES))
        if graph and a.correlation not in ordered:
            ordered.add(a.correlation)
            members = sorted(members_of[a.correlation], key=lambda j: trace.activities[j].ts_ns)
            graph_index.update((j, k) for k, j in enumerate(members))
        if row is None:
            attribution = "unattributed"
        elif graph:
            attribution = "graph_replay"
        elif op is not None:
            attribution = "direct"
        else:
            attribution = "launch_only"
        rows.append(
            (
                trace_id,
                a.name,
                a.category,
                a.ts_ns,
                a.dur_ns,
                a.device,
                a.stream,
                a.correlation,
                row.name if row is not None else None,
                op,
                names,
                args_json,
                dims,
                types,
                concrete,
                annotation,
                graph,
                graph_index.get(i) if graph else None,
                # Since PyTorch 2.1 a kernel's `External id` is its enclosing op's; before, the launch row's.
                None
                if a.external_id is None or graph or row is None
                else a.external_id in chain_ext_ids or a.external_id == row.external_id,
                attribution,
            )
        )
    cols = dict(zip(KERNEL_EVENTS.names, map(list, zip(*rows)))) if rows else {n: [] for n in KERNEL_EVENTS.names}
    table = validate(pa.table(cols, schema=KERNEL_EVENTS), KERNEL_EVENTS, f"kernel_events of {trace.path}")
    return pl.from_arrow(table)
