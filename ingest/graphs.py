"""CUDA/HIP-graph replays attributed through a graph-capture trace: align kernels per launch, inherit ops."""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import orjson
import polars as pl

from ingest.attribution import enclosing_stacks
from ingest.discovery import CAPTURE_DIR
from ingest.kineto import TraceError, to_ns
from ingest.phases import merged_step
from ingest.plain import plain
from ingest.schema import CAPTURE_COLUMNS
from ingest.tracefile import (decompress, file_exists, gc_paused, is_url, read_file, read_trace_file, sibling, trace_name,
                              within_folder)

# vLLM (TraceLens patch) and SGLang name the capture window capture_<bs>_<FULL|PIECEWISE|DECODE>;
# torch.compile's CUDA-graph trees (mode="reduce-overhead", TraceLens' xDiT captures) record each
# graph inside a `CUDAGraphNode.record (dynamo_timed)` range, with no batch size in the name.
CAPTURE_WINDOW = re.compile(r"^capture_(?P<bs>\d+)_(?P<mode>\w+)$|^CUDAGraphNode\.record\b")
_LAUNCH = re.compile(r"Launch(Kernel|CooperativeKernel)|ModuleLaunch|cuLaunch|^cudaLaunch|^hipLaunch")
_COPY = re.compile(r"Memcpy", re.IGNORECASE)
_SET = re.compile(r"Memset", re.IGNORECASE)
_SHAPE_ARGS = (("Input Dims", "dims"), ("Input type", "types"), ("Concrete Inputs", "concrete"))


@dataclass(slots=True)
class Range:
    """A CPU op or annotation on one thread, with its recorded shape args (for enclosing_stacks)."""

    name: str
    is_op: bool
    ts_ns: int
    end_ns: int
    args: dict | None


def capture_traces_for(trace_path: str | Path) -> list[str | Path]:
    """Capture traces paired with a replay trace (a path or an fsspec URL) by a sibling
    capture_traces/execution_details.json."""
    sidecar = sibling(trace_path, CAPTURE_DIR, "execution_details.json")
    if not file_exists(sidecar):
        return []
    try:
        entries = json.loads(read_file(sidecar))
    except ValueError as exc:
        raise TraceError(sidecar, f"invalid JSON ({exc})") from None
    if isinstance(entries, dict):
        entries = [entries]
    names = [e["file"] for e in entries if isinstance(e, dict) and isinstance(e.get("file"), str)]
    for name in names:
        if not within_folder(name):
            raise TraceError(sidecar, f"capture trace {name!r} is not a file of its folder (no '..', no absolute path)")
    files = [sibling(sidecar, name) for name in names]
    for file in files:
        if not is_url(file) and not Path(file).resolve().is_relative_to(Path(sidecar).resolve().parent):
            raise TraceError(sidecar, f"capture trace {Path(file).name!r} is a link out of its folder")
    return [f for f in files if file_exists(f)]


def _step_token(launch_name: str, kernel: str | None) -> str | None:
    if _COPY.search(launch_name) or (kernel or "").startswith("Memcpy"):
        return "memcpy"
    if _SET.search(launch_name) or (kernel or "").startswith("Memset"):
        return "memset"
    return kernel


def _load(path: str | Path) -> dict:
    try:
        doc = orjson.loads(decompress(path, read_trace_file(path)))
    except orjson.JSONDecodeError as exc:
        raise TraceError(path, f"invalid JSON ({exc})") from None
    if isinstance(doc, list):
        doc = {"traceEvents": doc}
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise TraceError(path, "not a profiler trace: no `traceEvents` list at the top level")
    return doc


def read_capture(path: str | Path) -> pl.DataFrame:
    """Every launch recorded inside a capture window of a capture trace, in order, with its op chain.

    Launches whose work executed during the window (warm-up before capture began, uncaptured
    streams) are left out: a captured launch only records a graph node, so on CUDA, where launch
    rows carry no kernel name, the rest are the graph's nodes in launch order.
    """
    path = trace_name(path)
    with gc_paused():  # a capture trace is hundreds of thousands of JSON objects, none in a cycle
        return _read_capture(path)


def _read_capture(path: str) -> pl.DataFrame:
    doc = _load(path)
    base = doc.get("baseTimeNanoseconds")
    base_ns = int(base) if isinstance(base, (int, float)) else 0
    ranges: dict[tuple, list[Range]] = {}
    launches: list[tuple] = []
    executed: dict[int, str] = {}
    for e in doc["traceEvents"]:
        if not isinstance(e, dict) or e.get("ph") != "X":
            continue
        cat, args = e.get("cat"), e.get("args") or {}
        if cat in ("cpu_op", "user_annotation"):
            start = base_ns + to_ns(e.get("ts", 0))
            shape = {k: args.get(n) for n, k in _SHAPE_ARGS} if "Input Dims" in args else None
            ranges.setdefault((e.get("pid"), e.get("tid")), []).append(
                Range(str(e.get("name", "")), cat == "cpu_op", start, start + to_ns(e.get("dur", 0)), shape)
            )
        elif cat in ("cuda_runtime", "cuda_driver"):
            name = str(e.get("name", ""))
            if "Graph" in name or not (_LAUNCH.search(name) or _COPY.search(name) or _SET.search(name)):
                continue
            launches.append((base_ns + to_ns(e.get("ts", 0)), (e.get("pid"), e.get("tid")), name, args.get("kernel"), args.get("correlation")))
        elif cat in ("kernel", "gpu_memcpy", "gpu_memset") and args.get("correlation") is not None:
            executed[args["correlation"]] = str(e.get("name", ""))
    rows: dict[str, list] = {k: [] for k in CAPTURE_COLUMNS}
    by_thread: dict[tuple, list[int]] = {}
    for i, launch in enumerate(launches):
        by_thread.setdefault(launch[1], []).append(i)
    for thread, idxs in by_thread.items():
        rs = ranges.get(thread, [])
        stacks = enclosing_stacks(rs, [(launches[i][0], i) for i in idxs])
        for i in sorted(idxs, key=lambda j: launches[j][0]):
            chain = [rs[j] for j in stacks.get(i, ())]
            windows = [k for k, r in enumerate(chain) if not r.is_op and CAPTURE_WINDOW.match(r.name)]
            if not windows:
                continue  # warm-up runs and allocator work outside capture are not graph nodes
            w = windows[-1]
            ts, _, name, kernel, corr = launches[i]
            if corr is not None and corr in executed and not kernel:
                # It ran during the window (before capture began, or on an uncaptured stream):
                # work that executes is not a graph node, which CUDA only records.
                continue
            kernel = kernel or executed.get(corr)
            inner = chain[w + 1 :]
            rows["window"].append(f"{chain[w].name}@{chain[w].ts_ns}")
            rows["seq"].append(0)
            rows["ts_ns"].append(ts)
            rows["kernel"].append(kernel)
            rows["step"].append(_step_token(name, kernel))
            rows["op_chain"].append([r.name for r in inner])
            rows["op_chain_args"].append(orjson.dumps([r.args for r in inner]).decode())
    frame = pl.DataFrame(rows, schema=CAPTURE_COLUMNS)
    if frame.height == 0:
        raise TraceError(path, "no kernel launches inside a capture_<bs>_<mode> or CUDAGraphNode.record range: not a graph-capture trace")
    # Launch rows were gathered per thread: order each window by launch time.
    return frame.sort("window", "ts_ns", maintain_order=True).with_columns(pl.int_range(pl.len()).over("window").alias("seq"))


def read_captures(paths) -> pl.DataFrame | None:
    """All capture launches of several capture traces, or None when there are none."""
    frames = [read_capture(p) for p in paths]
    return pl.concat(frames) if frames else None


def _replay_token(kernel: str, category: str) -> str:
    return category if category in ("memcpy", "memset") else kernel


def _kind(token: str | None) -> str:
    return token if token in ("memcpy", "memset") else "kernel"


def _align(replay: list[str], capture: list[str | None]) -> dict[int, int]:
    if all(c is None for c in capture if _kind(c) == "kernel"):
        # CUDA launch rows carry no kernel name: align by launch order, which is the graph's node
        # order for a single-stream capture; only when the node counts and the position of every
        # memcpy/memset agree, so that a lost or extra row cannot shift every kernel after it.
        same = len(replay) == len(capture) and all(_kind(r) == _kind(c) for r, c in zip(replay, capture))
        return {i: i for i in range(len(replay))} if same else {}
    matcher = difflib.SequenceMatcher(None, replay, capture, autojunk=False)
    pairs: dict[int, int] = {}
    for block in matcher.get_matching_blocks():
        for k in range(block.size):
            pairs[block.a + k] = block.b + k
    return pairs


def _step_size(chain) -> int | None:
    """The batch a replay's step annotation names (tokens, else requests), to pick its capture size."""
    step = merged_step(chain)
    if step is None:
        return None
    if step.tokens:
        return step.tokens
    reqs = (step.context_reqs or 0) + (step.generation_reqs or 0)
    return reqs or None


def _window_size(window: str) -> int | None:
    m = CAPTURE_WINDOW.match(window.split("@")[0])
    return int(m["bs"]) if m and m["bs"] else None


def _best_window(tokens: tuple, size: int | None, windows: dict) -> tuple[str | None, dict]:
    """The capture window a replay aligns with best, and the pairs; (None, {}) if none or ambiguous.

    Windows of several captured sizes can align equally well (the same kernels at another
    batch). Frameworks replay the smallest captured size that holds the step, so the step's
    size picks among them; without one, an order-only (CUDA) alignment is ambiguous and left out.
    """
    scored = [(w, _align(list(tokens), steps)) for w, (steps, _, _) in windows.items()]
    top = max((len(pairs) for _, pairs in scored), default=0)
    tied = [(w, pairs) for w, pairs in scored if top and len(pairs) == top]
    if not tied:
        return None, {}
    if len(tied) == 1:
        return tied[0]
    fitting = sorted((_window_size(w), w, pairs) for w, pairs in tied if size is not None and (_window_size(w) or 0) >= size)
    if fitting:
        return fitting[0][1], fitting[0][2]
    by_order = all(_kind(c) != "kernel" or c is None for c in windows[tied[0][0]][0])
    return (None, {}) if by_order else tied[0]


def attribute_graphs(events: pl.DataFrame, capture: pl.DataFrame | None) -> pl.DataFrame:
    """Graph-replay rows given the op chain and shapes of their aligned capture launch.

    Per graph launch, its kernels (in replay order) are aligned with the launches of the
    best-matching capture window: by kernel name where launch rows name their kernel (ROCm), by
    launch order where they do not (CUDA; node counts and memcpy/memset positions must agree).
    Matched rows get the capture-time op chain appended to their own (which holds the step
    annotation), and `op` / `input_*` of the capture op. The added column `graph_capture` is
    True where a capture launch was aligned.

    Tuned for speed: `align_replays` is the plain version (oracle: tests/ingest/test_fast_paths.py).
    """
    if plain():
        return align_replays(events, capture)
    if capture is None or not capture.height or not events["graph_launch"].fill_null(False).any():
        # With no replay to align every column stays as read; rebuilding the nested op_chain column from
        # Python lists was most of classification's time on large eager traces.
        return events.with_columns(pl.lit(False, dtype=pl.Boolean).alias("graph_capture"))
    windows = _windows(capture)
    matches = _matches(events, windows)
    # The op_chain column joined in the frame library (each matched row's capture chain gathered from the
    # capture frame): building a nested column from Python lists costs ~20 ms per profile of graph replays.
    rows: list[int | None] = [None] * events.height
    for i, window, b in matches:
        rows[i] = windows.rows[window][b]
    captured = windows.chains.gather(pl.Series(rows, dtype=pl.UInt32))
    own = pl.col("op_chain").fill_null(pl.lit([], dtype=pl.List(pl.String)))
    matched = pl.Series("graph_capture", [r is not None for r in rows], dtype=pl.Boolean)
    chain_args, op, inputs = _inherited(events, windows, matches)
    return events.with_columns(
        pl.when(matched).then(pl.concat_list(own, captured)).otherwise(pl.col("op_chain")).alias("op_chain"),
        pl.Series("op_chain_args", chain_args, dtype=pl.String),
        pl.Series("op", op, dtype=pl.String),
        *(pl.Series(c, v, dtype=pl.String) for c, v in inputs.items()),
        matched,
    )


@dataclass
class _Windows:
    """A capture frame's launches per window, in order: step tokens, op chains and their args, and each
    launch's row in `chains` (the capture's op_chain column in seq order); `aligned` keeps each replayed
    kernel sequence's best window, for every profile that replays it."""

    steps: dict[str, tuple[list, list, list]]
    rows: dict[str, list[int]]
    chains: pl.Series
    aligned: dict[tuple, tuple] = field(default_factory=dict)


_WINDOWS: dict[int, tuple[pl.DataFrame, _Windows]] = {}  # id(capture frame) -> (the frame, its windows)
_WINDOWS_KEPT = 16  # a worker's profiles share a few capture frames (the store reads each once)


def _windows(capture: pl.DataFrame) -> _Windows:
    """The capture frame's windows, worked out once per frame (the frame is kept with them, so its id
    cannot be taken by another while cached)."""
    cached = _WINDOWS.get(id(capture))
    if cached is not None and cached[0] is capture:
        return cached[1]
    ordered = capture.sort("seq").with_row_index("row")
    steps, rows = {}, {}
    for (w,), frame in ordered.group_by("window", maintain_order=True):
        steps[w] = (frame["step"].to_list(), frame["op_chain"].to_list(), frame["op_chain_args"].to_list())
        rows[w] = frame["row"].to_list()
    windows = _Windows(steps, rows, ordered["op_chain"])
    if len(_WINDOWS) >= _WINDOWS_KEPT:
        _WINDOWS.pop(next(iter(_WINDOWS)))
    _WINDOWS[id(capture)] = (capture, windows)
    return windows


def _matches(events: pl.DataFrame, windows: _Windows) -> list[tuple[int, str, int]]:
    """(row, window, launch in the window) of every replay row aligned with a capture launch."""
    n = events.height
    chains = events["op_chain"].to_list()
    graph = events["graph_launch"].fill_null(False).to_list()
    kernels, cats = events["kernel"].to_list(), events["category"].to_list()
    corr, index = events["correlation"].to_list(), events["graph_kernel_index"].to_list()
    launches: dict = {}
    for i in range(n):
        if graph[i]:
            launches.setdefault(corr[i], []).append(i)
    memo = windows.aligned  # steps and profiles replay the same graphs: align each kernel sequence once
    out = []
    for members in launches.values():
        members.sort(key=lambda i: (index[i] is None, index[i]))
        tokens = tuple(_replay_token(kernels[i], cats[i]) for i in members)
        size = _step_size(chains[members[0]])
        if (tokens, size) not in memo:
            memo[(tokens, size)] = _best_window(tokens, size, windows.steps)
        best, best_pairs = memo[(tokens, size)]
        if best is not None:
            out += [(members[a], best, b) for a, b in best_pairs.items()]
    return out


def _inherited(events: pl.DataFrame, windows: _Windows, matches: list[tuple[int, str, int]]) -> tuple[list, list, dict]:
    """op_chain_args, op and the input_* columns of every row, matched rows given their capture launch's."""
    chains = events["op_chain"].to_list()
    chain_args = events["op_chain_args"].to_list()
    op = events["op"].to_list()
    inputs = {c: events[c].to_list() for c in ("input_dims", "input_types", "concrete_inputs")}
    for i, best, b in matches:
        _, w_chains, w_args = windows.steps[best]
        outer_args = orjson.loads(chain_args[i]) if chain_args[i] else [None] * len(chains[i] or [])
        inner_args = orjson.loads(w_args[b])
        chain_args[i] = orjson.dumps(outer_args + inner_args).decode()
        if w_chains[b]:
            op[i] = w_chains[b][-1]
            last = inner_args[-1] or {}
            for column, key in (("input_dims", "dims"), ("input_types", "types"), ("concrete_inputs", "concrete")):
                inputs[column][i] = None if last.get(key) is None else orjson.dumps(last[key]).decode()
    return chain_args, op, inputs


def align_replays(events: pl.DataFrame, capture: pl.DataFrame | None) -> pl.DataFrame:
    """`attribute_graphs`, every column rebuilt row by row (the plain version)."""
    n = events.height
    matches = []
    if capture is not None and capture.height and any(events["graph_launch"].fill_null(False).to_list()):
        windows = _windows(capture)
        matches = _matches(events, windows)
    chains = events["op_chain"].to_list()
    matched = [False] * n
    if matches:
        chain_args, op, inputs = _inherited(events, windows, matches)
        for i, best, b in matches:
            chains[i] = list(chains[i] or []) + list(windows.steps[best][1][b])
            matched[i] = True
    else:
        chain_args, op = events["op_chain_args"].to_list(), events["op"].to_list()
        inputs = {c: events[c].to_list() for c in ("input_dims", "input_types", "concrete_inputs")}
    return events.with_columns(
        pl.Series("op_chain", chains, dtype=pl.List(pl.String)),
        pl.Series("op_chain_args", chain_args, dtype=pl.String),
        pl.Series("op", op, dtype=pl.String),
        *(pl.Series(c, v, dtype=pl.String) for c, v in inputs.items()),
        pl.Series("graph_capture", matched, dtype=pl.Boolean),
    )
