"""Kernel → launch row → CPU op stack: who launched each GPU activity, as kernel_events rows."""

from __future__ import annotations

from itertools import repeat
from operator import and_, attrgetter, is_

import msgspec
import polars as pl

from ingest.columns import repeated
from ingest.kineto import KinetoTrace, TraceError
from ingest.kineto_json import IS_OP, NULL_JSON
from ingest.schema import KERNEL_EVENT_COLUMNS
from ingest.plain import plain

GRAPH_LAUNCH_NAMES = ("cudaGraphLaunch", "hipGraphLaunch", "cuGraphLaunch")
CHAIN_COLUMNS = ("op_chain", "op_chain_args", "op", "input_dims", "input_types", "concrete_inputs", "annotation")


def enclosures(starts: pl.Series, ends: pl.Series, points: pl.Series) -> pl.DataFrame:
    """Every (point, range) pair where the range [start, end) encloses the point (a time), as
    indices into `points` and into `starts`/`ends`: a range starting at the same instant as a
    point encloses it; one ending at or before it does not. Rows are grouped by point and, within
    a point, run outermost range first (by start, longest first, then input order).

    A range encloses a run of the points sorted by time, found by two binary searches, so the
    work is that of the output (Σ stack depth over points), with no Python loop over ranges.
    """
    by_time = points.arg_sort()
    sorted_points = points.gather(by_time)
    pairs = (
        pl.DataFrame(
            {
                "range": pl.int_range(len(starts), eager=True),
                "start": starts,
                "end": ends,
                "first": sorted_points.search_sorted(starts, side="left"),
                "stop": sorted_points.search_sorted(ends, side="left"),
            }
        )
        .filter(pl.col("stop") > pl.col("first"))  # most ranges enclose no point at all
        .sort("start", "end", descending=[False, True], maintain_order=True)  # outermost first
        .select("range", position=pl.int_ranges("first", "stop"))
        .explode("position")
        .sort("position", maintain_order=True)  # stable: each point's ranges stay outermost first
    )
    return pl.DataFrame({"point": by_time.gather(pairs["position"]), "range": pairs["range"]})


def enclosing_stacks(ranges: list, points: list[tuple[int, int]]) -> dict:
    """For each (ts_ns, key) point (keys distinct), the indices into `ranges` (objects with ts_ns,
    end_ns) enclosing it, outermost first."""
    found = enclosures(
        pl.Series([r.ts_ns for r in ranges], dtype=pl.Int64),
        pl.Series([r.end_ns for r in ranges], dtype=pl.Int64),
        pl.Series([ts for ts, _ in points], dtype=pl.Int64),
    )
    stacks: dict = {key: [] for _, key in points}
    for p, r in zip(found["point"].to_list(), found["range"].to_list()):
        stacks[points[p][1]].append(r)
    return {key: tuple(stack) for key, stack in stacks.items()}


def launch_enclosures(trace: KinetoTrace, rows: list[int]) -> pl.DataFrame:
    """The CPU ranges enclosing each launch row of `rows` on its thread: (point: index into
    `rows`, range: row of trace.ranges) pairs, as `enclosures` orders them."""
    launches, ranges = trace.launches, trace.ranges
    threads = set(map(launches.thread.__getitem__, rows))
    if len(threads) == 1 and len(ranges.thread_rows.get(next(iter(threads)), ())) == len(ranges.ts_ns):
        # Most traces: one thread launches everything and runs every range, so no row needs mapping
        # through its thread's rows (a small trace's five frame-library calls, a large one's gathers).
        # The plain version is launch_enclosures_by_thread (oracle: tests/ingest/test_fast_paths.py).
        found = enclosures(ranges.ts_ns, ranges.end_ns, launches.ts_ns.gather(rows))
        return found.select(pl.col("point").cast(pl.Int64), pl.col("range").cast(pl.Int64))
    return launch_enclosures_by_thread(trace, rows)


def launch_enclosures_by_thread(trace: KinetoTrace, rows: list[int]) -> pl.DataFrame:
    """launch_enclosures, each thread's launches searched among its own ranges."""
    launches, ranges = trace.launches, trace.ranges
    threads = list(map(launches.thread.__getitem__, rows))
    by_thread: dict[tuple, list[int]] = {thread: [] for thread in set(threads)}
    if len(by_thread) == 1:
        by_thread[threads[0]] = list(range(len(rows)))
    else:
        for i, thread in enumerate(threads):
            by_thread[thread].append(i)
    ts_ns = launches.ts_ns.gather(rows)
    parts = [pl.DataFrame({"point": [], "range": []}, schema={"point": pl.Int64, "range": pl.Int64})]
    for thread, idx in by_thread.items():
        sub = ranges.thread_rows.get(thread)
        if sub is not None:
            idx = pl.Series(idx, dtype=pl.Int64)
            found = enclosures(ranges.ts_ns.gather(sub), ranges.end_ns.gather(sub), ts_ns.gather(idx))
            parts.append(pl.DataFrame({"point": idx.gather(found["point"]), "range": sub.gather(found["range"])}))
    return pl.concat(parts)


class Chains:
    """The op stacks of a trace's launch rows, and their distinct contents as kernel_events values.

    Stacks hold different range instances (every step runs its ops again) but few distinct
    contents: an entry is (name, is_op, shape args), a chain a sequence of entries, and each
    distinct chain's values are built once, then gathered per activity.
    """

    def __init__(self, trace: KinetoTrace, rows: list[int]):
        found = launch_enclosures(trace, rows)
        used = found["range"].unique().sort()
        member = used.search_sorted(found["range"])  # each pair's range as an index into used
        used_rows = used.to_list()
        args = trace.op_args(used_rows)
        cats, name_texts = list(map(trace.ranges.cat.__getitem__, used_rows)), list(map(trace.ranges.name.__getitem__, used_rows))
        dims, types = list(map(attrgetter("dims"), args)), list(map(attrgetter("types"), args))
        # Hashable entry contents, built without a Python-level loop over the ranges: the range's category,
        # whether it has no shape args, and the JSON texts of its name and shape args (JSON text holds no NUL).
        # Names are decoded once per distinct entry, not once per range.
        keys = list(
            zip(
                cats,
                map(and_, map(is_, dims, repeat(NULL_JSON)), map(is_, types, repeat(NULL_JSON))),  # no shape
                map(b"\0".join, zip(name_texts, dims, types, map(attrgetter("concrete"), args))),
            )
        )
        entry_ids: dict[tuple, int] = {}
        entry_of = list(map(entry_ids.setdefault, keys, range(len(keys))))  # each range's first equal range
        first_ranges = list(entry_ids.values())
        number = dict(zip(first_ranges, range(len(first_ranges))))
        names = trace.range_names([used_rows[r] for r in first_ranges])
        self.entries = [(name, cat in IS_OP, no_shape, text.split(b"\0", 1)[1])
                        for name, (cat, no_shape, text) in zip(names, entry_ids)]
        stacks = (
            pl.DataFrame({"point": found["point"], "entry": pl.Series(list(map(number.__getitem__, entry_of))).gather(member)})
            .group_by("point", maintain_order=True)
            .agg("entry")
        )
        self.chain, self.chains = chain_ids(stacks, len(rows))
        self._pairs = pl.DataFrame({"point": found["point"], "member": member})
        self._args = args

    def external_ids(self, launches: set[int]) -> set[tuple[int, int | None]]:
        """(launch, External id) of every range enclosing the given launches (places in `rows`)."""
        if not launches:
            return set()
        pairs = self._pairs.filter(pl.col("point").is_in(list(launches)))
        external_id = list(map(attrgetter("external_id"), self._args))
        return set(zip(pairs["point"].to_list(), map(external_id.__getitem__, pairs["member"].to_list())))

    def frame(self) -> tuple[pl.DataFrame, list[bool]]:
        """The chains' column values (one row per chain) and whether each chain holds an op."""
        rendered: dict[tuple, tuple] = {}
        columns: dict[str, list] = {name: [] for name in CHAIN_COLUMNS}
        has_op = []
        for chain in self.chains:
            entries = [self.entries[e] for e in chain]
            texts = []
            for _, _, no_shape, shape in entries:
                hit = rendered.get((no_shape, shape))
                if hit is None:
                    hit = rendered[no_shape, shape] = _render(no_shape, *shape.split(b"\0"))
                texts.append(hit)
            ops = [k for k, entry in enumerate(entries) if entry[1]]
            annotations = [k for k, entry in enumerate(entries) if not entry[1]]
            op = ops[-1] if ops else None
            dims, types, concrete = texts[op][1] if op is not None else (None, None, None)
            columns["op_chain"].append([entry[0] for entry in entries])
            columns["op_chain_args"].append("[" + ",".join(text for text, _ in texts) + "]" if entries else None)
            columns["op"].append(entries[op][0] if op is not None else None)
            columns["input_dims"].append(dims)
            columns["input_types"].append(types)
            columns["concrete_inputs"].append(concrete)
            columns["annotation"].append(entries[annotations[-1]][0] if annotations else None)
            has_op.append(op is not None)
        return pl.DataFrame(columns, schema={name: KERNEL_EVENT_COLUMNS[name] for name in CHAIN_COLUMNS}), has_op


def chain_ids(stacks: pl.DataFrame, n: int) -> tuple[list[int], list[tuple]]:
    """Each of `n` launches' chain (an index into the distinct chains) and the distinct chains, the empty one
    first, then in the order of the launches that first hold them; `stacks` holds (point, entry: its stack)
    for the launches with a non-empty stack. The distinct stacks are found by the frame library, not by
    hashing a tuple per launch. Tuned for speed; the plain version is chain_ids_plain (oracle:
    tests/ingest/test_fast_paths.py)."""
    if plain():
        return chain_ids_plain(stacks, n)
    by_chain = stacks.sort("point").group_by("entry", maintain_order=True).agg("point")
    members = by_chain.select(chain=pl.int_range(1, pl.len() + 1, dtype=pl.Int64), point="point").explode("point")
    chain = pl.zeros(n, dtype=pl.Int64, eager=True).scatter(members["point"], members["chain"])
    return chain.to_list(), [(), *map(tuple, by_chain["entry"].to_list())]


def chain_ids_plain(stacks: pl.DataFrame, n: int) -> tuple[list[int], list[tuple]]:
    """chain_ids one launch at a time."""
    stack_of = dict(zip(stacks["point"].to_list(), map(tuple, stacks["entry"].to_list())))
    ids: dict[tuple, int] = {(): 0}  # chain 0: the empty stack
    chain = [ids.setdefault(stack_of.get(i, ()), len(ids)) for i in range(n)]
    return chain, list(ids)


def _render(no_shape: bool, dims: bytes, types: bytes, concrete: bytes) -> tuple[str, tuple]:
    """An op's entry in op_chain_args and its (dims, types, concrete) columns, compact JSON."""
    if no_shape:
        return "null", (None, None, None)
    # Kineto pretty-prints args over many lines; rows carry the compact form. One compaction pass
    # over the whole entry; the separators cannot occur inside its parts (dims are numbers, and a
    # quote inside a JSON string is escaped).
    text = msgspec.json.format(b'{"dims":%b,"types":%b,"concrete":%b}' % (dims, types, concrete), indent=-1).decode()
    t = text.index(',"types":')
    c = text.index(',"concrete":', t)
    return text, (text[8:t], text[t + 9 : c], text[c + 12 : -1])


def attribute(trace: KinetoTrace) -> pl.DataFrame:
    """The trace's GPU activities as kernel_events rows, each linked to its launch row and op stack."""
    acts, launches = trace.activities, trace.launches
    launch_row = list(map(launches.row_of.get, acts.correlation))  # None: no launch row in the window
    rows = sorted(set(launch_row) - {None})
    at = list(map(dict(zip(rows, range(len(rows)))).get, launch_row))  # the launch's place in rows
    chains = Chains(trace, rows)
    chain_frame, chain_has_op = chains.frame()
    chain = [0 if i is None else chains.chain[i] for i in at]

    launch = [None if r is None else launches.name[r] for r in launch_row]
    graph_launches = {name for name in set(launch) - {None} if name.startswith(GRAPH_LAUNCH_NAMES)}
    graph = [g or name in graph_launches for g, name in zip(acts.graph_node, launch)]
    attribution = [
        "unattributed" if i is None else "graph_replay" if g else "direct" if chain_has_op[c] else "launch_only"
        for i, g, c in zip(at, graph, chain)
    ]
    # Since PyTorch 2.1 a kernel's `External id` is its enclosing op's; before, the launch row's.
    # Both are usually the launch row's too: the op stacks' ids are read only for launches where not.
    launch_ids = launches.external_id
    checked = [x is not None and not g and i is not None for x, g, i in zip(acts.external_id, graph, at)]
    unsure = {i for c, x, i, r in zip(checked, acts.external_id, at, launch_row) if c and x != launch_ids[r]}
    enclosing_ids = chains.external_ids(unsure)
    agrees = [
        (x == launch_ids[r] or (i, x) in enclosing_ids) if c else None
        for c, x, i, r in zip(checked, acts.external_id, at, launch_row)
    ]
    columns = {
            "kernel": repeated("kernel", acts.name),
            "category": acts.category,
            "ts_ns": acts.ts_ns,
            "dur_ns": acts.dur_ns,
            "device": acts.device,
            "stream": acts.stream,
            "correlation": acts.correlation,
            "launch": repeated("launch", launch),
            "graph_launch": graph,
            "graph_kernel_index": _graph_kernel_index(acts, graph) if any(graph) else [None] * len(graph),
            "external_id_agrees": agrees,
            "attribution": attribution,
            **_grid_parts(acts.grid),
    }
    schema = {name: dtype for name, dtype in KERNEL_EVENT_COLUMNS.items()
              if name not in CHAIN_COLUMNS and name not in ("trace_id", "grid")}
    schema.update(dict.fromkeys(GRID_PARTS, pl.Int64))
    try:
        frame = pl.DataFrame(columns, schema=schema)
    except TypeError:  # polars' word for an integer beyond the column's type (a stream id past int64)
        raise TraceError(trace.path, _out_of_range(columns, schema)) from None
    frame = frame.with_columns(
        pl.when(pl.col(GRID_PARTS[0]).is_null()).then(None).otherwise(pl.concat_list(GRID_PARTS)).alias("grid")
    ).drop(GRID_PARTS)
    return pl.concat([frame, chain_frame[chain]], how="horizontal").select(
        pl.lit(trace.trace_id, pl.String).alias("trace_id"), *(name for name in KERNEL_EVENT_COLUMNS if name != "trace_id")
    )


GRID_PARTS = ("grid_x", "grid_y", "grid_z")


def _grid_parts(grids: list) -> dict[str, list]:
    """The launch grids as three int columns, joined into the `grid` list column by polars: a List column built
    from a Python list per row took ~100 MiB more at peak per million events (tests/ingest/test_kineto_events.py)."""
    return {part: [None if g is None else g[k] for g in grids] for k, part in enumerate(GRID_PARTS)}


def _fits(value: int, dtype) -> bool:
    try:
        pl.Series([value], dtype=dtype)
    except (TypeError, OverflowError):
        return False
    return True


def _out_of_range(columns: dict, schema: dict) -> str:
    """Which GPU-activity field holds an integer its column cannot, for the quarantine message."""
    for name, values in columns.items():
        try:
            pl.Series(name, values, dtype=schema[name])
        except TypeError:
            bad = next((v for v in values if isinstance(v, int) and not _fits(v, schema[name])), None)
            return f"a GPU activity's `{name}` ({bad}) is beyond the range of {schema[name]}"
    return "a GPU activity field is beyond the range of its column"


def _graph_kernel_index(acts, graph: list[bool]) -> list[int | None]:
    """Order within a graph launch: activities sharing one graph launch's correlation, by start time."""
    correlations = {c for c, g in zip(acts.correlation, graph) if g} - {None}
    members: dict[int, list[int]] = {}
    for i, c in enumerate(acts.correlation):
        if c in correlations:
            members.setdefault(c, []).append(i)
    ts_ns = acts.ts_ns.to_list()
    index: list[int | None] = [None] * len(graph)
    for rows in members.values():
        for k, i in enumerate(sorted(rows, key=ts_ns.__getitem__)):
            if graph[i]:
                index[i] = k
    return index
