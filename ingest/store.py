"""The trace store: every trace parsed once, kept by content address, read back lazily.

The one module that knows the layout. Under the store root (a local directory or an fsspec URL):

```
kernel_events/<trace_id>.parquet   classified kernel_events (ingest.schema.CLASSIFIED_EVENTS)
op_shape_time/<trace_id>.parquet   op_shape_time rows of the trace
provenance/<trace_id>.parquet      per (operator, shape, op, kernel): gpu_ns (raw names, for sealed provenance)
summaries/<trace_id>.json          TraceSummary; written last: a trace is in the store iff this exists
quarantine/<trace_id>.json         why the trace could not be read
captures/<sha16>.parquet           parsed graph-capture trace (ingest.graphs.read_capture), by its bytes' hash
paths/<sha16 of name, trace_id>.json  one file name seen with the trace_id of its bytes at the time
traces.parquet, op_shape_time.parquet, quarantined.json   views over the whole store (`hotshape ingest`)
```

trace_id is ingest.tracefile.trace_id_of (sha256 of the file's bytes), so the same bytes under two
names are one trace with two `paths/` entries. Every file is written under a temporary name and
renamed; a trace's summary is renamed last, so a killed ingest leaves at most complete files of a
trace without a summary, which the store does not count as present and the next ingest rewrites.
"""

from __future__ import annotations

import gc
import hashlib
import io
import json
import os
import uuid
from collections.abc import Callable, Iterable
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import msgspec
import polars as pl

from catalogue.vocabulary import ATTRIBUTED
from ingest.cluster import ingest_on_cluster
from ingest.schema import OP_SHAPE_TIME_COLUMNS, conform, parquet
from ingest.plain import plain
from ingest.tracefile import TraceError, file_size, file_trace_id, is_url, sibling, trace_name
from ingest.classify import op_shape_time_keys, op_shape_time_rows
from ingest.graphs import capture_traces_for, read_capture
from ingest.pipeline import failure_reason, ingest_trace, traces_frame_from
from ingest.taxonomy import load_taxonomy

TABLES = ("kernel_events", "op_shape_time", "provenance")
# A worker process pays ~0.5 s of imports; below this much input one process finishes first.
PARALLEL_MIN_BYTES = 20_000_000
# Traces are handed to workers in batches of about this many bytes of trace file (4 MB of gzipped Kineto
# JSON: ~45 MB of JSON, ~15 profiles of the example traces' size, ~1 s of one core). A Dask task costs its
# worker ~8 ms beside the parse (measured on 400 fleet profiles), an eighth of an ordinary profile's ~60 ms;
# at ~1 s per batch it is under 1%, and the last batches, which run while the other workers have nothing
# left, keep the tail at ~1 s. A trace larger than this is a batch of its own.
BATCH_BYTES = 4_000_000
BATCH_TRACES = 64  # and at most this many traces, however small (a worker's death reruns what a batch left)


class TraceSummary(msgspec.Struct, frozen=True, kw_only=True):
    """Totals of one stored trace: all GPU time, what was attributed, and what the reader found in the file."""

    trace_id: str
    gpu_ns: int  # Σ dur_ns of the written kernel_events (T_p)
    attributed_ns: int
    unattributed_ns: int
    kernels: int
    events: int
    file_gpu_ns: int  # Σ dur_ns of the GPU activities the reader found in the file, before classification
    file_events: int
    by_operator: dict[str, int] = {}
    by_phase: dict[str, int] = {}
    by_attribution: dict[str, int] = {}


@dataclass
class IngestReport:
    """What one ingest into the store did: the counters say what was parsed and what was reused."""

    ids: dict[str, str] = field(default_factory=dict)  # name → trace_id, for every readable file named
    parsed: list[str] = field(default_factory=list)  # trace_ids parsed by this run
    reused: list[str] = field(default_factory=list)  # trace_ids already in the store
    captures_parsed: list[str] = field(default_factory=list)  # capture hashes parsed by this run
    captures_reused: list[str] = field(default_factory=list)
    unreadable: list[dict] = field(default_factory=list)  # {path, reason} of files with no bytes to address
    capture_ids: dict[str, str] = field(default_factory=dict)  # capture trace file → its content hash


def _hash(path: str | Path) -> str | TraceError:
    try:
        return file_trace_id(path)
    except OSError as exc:
        return TraceError(path, f"cannot read ({exc.strerror or exc})")


BREAKDOWNS = ("operator", "phase", "attribution")  # TraceSummary's by_<column>
PROVENANCE_ORDER = ("operator", "shape", "op", "kernel")  # provenance's group and its rows' order


def _breakdown(events: pl.DataFrame, column: str) -> dict[str, int]:
    if column not in events.columns:
        return {}
    return _as_breakdown(_breakdown_rows(events, column))


def _breakdown_rows(events: pl.DataFrame | pl.LazyFrame, column: str) -> pl.DataFrame | pl.LazyFrame:
    return events.group_by(column).agg(pl.col("dur_ns").sum()).sort(column)


def _as_breakdown(frame: pl.DataFrame) -> dict[str, int]:
    return {str(key): int(ns) for key, ns in frame.rows()}


def aggregates(events: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame, dict[str, dict[str, int]]]:
    """A classified trace's op_shape_time and provenance rows and its breakdowns (by_<column> of BREAKDOWNS),
    as op_shape_time, provenance_rows and _breakdown give them, computed in one pass of the frame library
    (its queries side by side on every core) instead of one by one. Oracle: tests/ingest/test_fast_paths.py."""
    lazy = events.lazy()
    columns = [c for c in BREAKDOWNS if c in events.columns]
    ost, provenance, *parts = pl.collect_all(
        [op_shape_time_rows(lazy), provenance_rows(lazy), *(_breakdown_rows(lazy, c) for c in columns)])
    breakdowns = {c: {} for c in BREAKDOWNS} | {c: _as_breakdown(f) for c, f in zip(columns, parts)}
    return conform(ost, OP_SHAPE_TIME_COLUMNS, "op_shape_time"), provenance, breakdowns


_PART = "_part"  # which frame of a batch a row came from (aggregates_many)


def aggregates_many(frames: list[pl.DataFrame]) -> list[tuple[pl.DataFrame, pl.DataFrame, dict[str, dict[str, int]]]]:
    """`aggregates` of each classified trace of a batch, computed in one pass of the frame library over all of
    them: a trace's five small queries cost the library ~1 ms each however few rows it has, a fixed cost per
    trace that a batch pays once. Tuned for speed (oracle: tests/ingest/test_fast_paths.py, against
    `aggregates` of each frame on its own); an empty frame, or a batch whose frames' columns differ, is
    aggregated one frame at a time."""
    filled = [i for i, f in enumerate(frames) if f.height]
    if plain() or len(filled) < 2 or any(frames[i].schema != frames[filled[0]].schema for i in filled):
        return [aggregates(f) for f in frames]
    lazy = pl.concat([frames[i].lazy().with_columns(pl.lit(i, pl.UInt32).alias(_PART)) for i in filled], rechunk=False)
    columns = [c for c in BREAKDOWNS if c in frames[filled[0]].columns]
    keys, descending = op_shape_time_keys()
    ost, provenance, *parts = pl.collect_all([
        lazy.group_by(_PART, "trace_id", "operator", "shape", "phase")
        .agg(pl.col("dur_ns").sum().cast(pl.Int64).alias("gpu_ns"), pl.len().cast(pl.Int64).alias("calls"))
        .sort(_PART, *keys, descending=[False, *descending]),
        lazy.group_by(_PART, "trace_id", *PROVENANCE_ORDER)
        .agg(pl.col("dur_ns").sum().cast(pl.Int64).alias("gpu_ns"))
        .sort(_PART, *PROVENANCE_ORDER, nulls_last=True),
        *(lazy.group_by(_PART, c).agg(pl.col("dur_ns").sum()).sort(_PART, c) for c in columns)])

    def split(frame: pl.DataFrame) -> dict[int, pl.DataFrame]:
        return {key: part for (key,), part in frame.partition_by(_PART, as_dict=True, include_key=False,
                                                                 maintain_order=True).items()}

    ost_of, provenance_of = split(ost), split(provenance)
    parts_of = [split(part) for part in parts]
    empty_ost, empty_provenance = ost.drop(_PART).clear(), provenance.drop(_PART).clear()
    out = []
    for i, frame in enumerate(frames):
        if not frame.height:
            out.append(aggregates(frame))
            continue
        by = {c: {} for c in BREAKDOWNS} | {c: _as_breakdown(p[i]) if i in p else {} for c, p in zip(columns, parts_of)}
        out.append((conform(ost_of.get(i, empty_ost), OP_SHAPE_TIME_COLUMNS, "op_shape_time"),
                    provenance_of.get(i, empty_provenance), by))
    return out


def provenance_rows(events: pl.DataFrame | pl.LazyFrame) -> pl.DataFrame | pl.LazyFrame:
    """GPU time per trace × operator × shape × raw op × raw kernel (what sealed provenance needs)."""
    return (events.group_by("trace_id", *PROVENANCE_ORDER)
            .agg(pl.col("dur_ns").sum().cast(pl.Int64).alias("gpu_ns"))
            .sort(*PROVENANCE_ORDER, nulls_last=True))


class LocalFiles:
    """The filesystem calls the store makes, as fsspec's LocalFileSystem answers them, for a store
    named by a plain directory path: importing fsspec costs a one-trace `hotshape ingest` ~30 ms."""

    protocol = ("file", "local")

    def makedirs(self, path: str, exist_ok: bool = False) -> None:
        os.makedirs(path, exist_ok=exist_ok)

    def pipe_file(self, path: str, data: bytes) -> None:
        with open(path, "wb") as f:
            f.write(data)

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def cat_file(self, path: str) -> bytes:
        with open(path, "rb") as f:
            return f.read()

    def ls(self, path: str, detail: bool = False) -> list[str]:
        return [f"{path}/{name}" for name in os.listdir(path)]

    def mv(self, path1: str, path2: str) -> None:
        os.replace(path1, path2)


class TraceStore:
    """A trace store at a local directory or fsspec URL (see the module docstring for its layout)."""

    def __init__(self, url: str | Path):
        self.url = str(url)
        if is_url(self.url):
            import fsspec

            self.fs, self.root = fsspec.core.url_to_fs(self.url)
        else:
            self.fs, self.root = LocalFiles(), os.path.abspath(os.path.expanduser(self.url))
        self.local = "file" in (self.fs.protocol if isinstance(self.fs.protocol, tuple) else (self.fs.protocol,))
        self._captures: dict[tuple, pl.DataFrame | None] = {}
        self._folders: set[str] = set()  # folders made by this store object: each is made once

    # ---- layout ---------------------------------------------------------------------------------
    def file(self, table: str, trace_id: str) -> str:
        """Where `table` (kernel_events, op_shape_time, provenance) of one trace lives."""
        return f"{self.root}/{table}/{trace_id}.parquet"

    def _summary_file(self, trace_id: str) -> str:
        return f"{self.root}/summaries/{trace_id}.json"

    def _quarantine_file(self, trace_id: str) -> str:
        return f"{self.root}/quarantine/{trace_id}.json"

    def _capture_file(self, digest: str) -> str:
        return f"{self.root}/captures/{digest}.parquet"

    def _write(self, path: str, data: bytes) -> None:
        """`data` at `path` through a temporary name beside it, so nobody sees half a file."""
        folder, name = path.rsplit("/", 1)
        # pid alone can repeat across hosts of one cluster writing the same trace (a retried task)
        tmp = f"{folder}/.{name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp"
        if folder not in self._folders:
            self.fs.makedirs(folder, exist_ok=True)
            self._folders.add(folder)
        self.fs.pipe_file(tmp, data)
        if self.local:
            os.replace(tmp, path)
        else:
            self.fs.mv(tmp, path)

    # ---- what is stored -------------------------------------------------------------------------
    def has(self, trace_id: str) -> bool:
        """Whether the trace is in the store, read or quarantined."""
        return self.fs.exists(self._summary_file(trace_id)) or self.fs.exists(self._quarantine_file(trace_id))

    def summary(self, trace_id: str) -> TraceSummary | None:
        """The stored summary of a trace, or None when it is not (or only quarantined) in the store."""
        try:
            return msgspec.json.decode(self.fs.cat_file(self._summary_file(trace_id)), type=TraceSummary)
        except FileNotFoundError:
            return None

    def quarantine_reason(self, trace_id: str) -> str | None:
        """Why a quarantined trace could not be read, or None."""
        try:
            return json.loads(self.fs.cat_file(self._quarantine_file(trace_id)))["reason"]
        except FileNotFoundError:
            return None

    def _listed(self, folder: str, suffix: str) -> list[str]:
        try:
            names = self.fs.ls(f"{self.root}/{folder}", detail=False)
        except FileNotFoundError:
            return []
        return sorted(n.rsplit("/", 1)[-1][: -len(suffix)] for n in names
                      if n.endswith(suffix) and not n.rsplit("/", 1)[-1].startswith("."))

    def trace_ids(self) -> list[str]:
        """Every trace read into the store (quarantined ones left out), sorted."""
        return self._listed("summaries", ".json")

    def paths(self) -> pl.DataFrame:
        """The path index: every file name seen, with the trace_id of its bytes (path, trace_id), sorted."""
        rows = [json.loads(self.fs.cat_file(f"{self.root}/paths/{k}.json")) for k in self._listed("paths", ".json")]
        return pl.DataFrame(rows, schema={"path": pl.String, "trace_id": pl.String}).sort("path", "trace_id")

    def scan(self, table: str, trace_ids: Iterable[str]) -> pl.LazyFrame:
        """`table` of the traces named, in that order, as a lazy frame (nothing is read until collected)."""
        files = [self.file(table, t) for t in dict.fromkeys(trace_ids)]
        if not files:
            from ingest.schema import OP_SHAPE_TIME  # an Arrow schema: importing it loads pyarrow

            empty = pl.from_arrow(OP_SHAPE_TIME.empty_table()) if table == "op_shape_time" else pl.DataFrame()
            return empty.lazy()
        if self.local:
            return pl.scan_parquet(files)
        return pl.concat([pl.read_parquet(io.BytesIO(self.fs.cat_file(f))) for f in files], how="vertical_relaxed").lazy()

    def conservation(self, trace_id: str) -> dict:
        """Time conservation of a stored trace, from its written kernel_events against what the reader found
        in the file when it was parsed (no second parse): passed, and the ns and rows on each side."""
        return self.conservation_many([trace_id])[trace_id]

    def conservation_many(self, trace_ids: Iterable[str]) -> dict[str, dict]:
        """`conservation` of each stored trace named, their kernel_events read in one scan."""
        ids = list(dict.fromkeys(trace_ids))
        written = {row["trace_id"]: row for row in self.scan("kernel_events", ids).group_by("trace_id").agg(
            pl.col("dur_ns").filter(pl.col("attribution").is_in(ATTRIBUTED)).sum().alias("attributed_ns"),
            pl.col("dur_ns").sum().alias("all_ns"), pl.len().alias("rows")).collect().iter_rows(named=True)}
        out = {}
        for trace_id in ids:
            summary, row = self.summary(trace_id), written.get(trace_id, {"attributed_ns": 0, "all_ns": 0, "rows": 0})
            attributed_ns = int(row["attributed_ns"] or 0)
            unattributed_ns = int(row["all_ns"] or 0) - attributed_ns
            file_ns = summary.file_gpu_ns
            out[trace_id] = {
                "passed": attributed_ns + unattributed_ns == file_ns and row["rows"] == summary.file_events,
                "file_gpu_ns": file_ns, "attributed_ns": attributed_ns, "unattributed_ns": unattributed_ns,
                "missing_ns": file_ns - attributed_ns - unattributed_ns,
                "rows_written": int(row["rows"]), "rows_in_file": summary.file_events}
        return out

    # ---- writing --------------------------------------------------------------------------------
    def put(self, result) -> TraceSummary:
        """Store one ingested trace (an ingest.pipeline.TraceResult): its tables first, its summary last."""
        return self.put_many([result])[0]

    def put_many(self, results: list) -> list[TraceSummary]:
        """Store ingested traces (ingest.pipeline.TraceResult), each as `put` stores it, their aggregates
        computed for all of them at once (aggregates_many)."""
        return [self._put(result, aggregated)
                for result, aggregated in zip(results, aggregates_many([r.events for r in results]))]

    def _put(self, result, aggregated: tuple) -> TraceSummary:
        events, s = result.events, result.summary
        ost, provenance, by = aggregated
        summary = TraceSummary(
            trace_id=s["trace_id"], gpu_ns=s["gpu_ns"], attributed_ns=s["attributed_ns"],
            unattributed_ns=s["unattributed_ns"], kernels=s["kernels"], events=s["events"],
            file_gpu_ns=s.get("file_gpu_ns", s["gpu_ns"]), file_events=s.get("file_events", s["events"]),
            by_operator=by["operator"], by_phase=by["phase"], by_attribution=by["attribution"])
        tid = summary.trace_id
        self._write(self.file("kernel_events", tid), parquet(events, "CLASSIFIED_EVENTS"))
        self._write(self.file("op_shape_time", tid), parquet(ost, "OP_SHAPE_TIME"))
        self._write(self.file("provenance", tid), parquet(provenance, "PROVENANCE"))
        self._write(self._summary_file(tid), msgspec.json.encode(summary))
        return summary

    def quarantine(self, trace_id: str, reason: str) -> None:
        """Record that a trace cannot be read, and why; it is not parsed again."""
        self._write(self._quarantine_file(trace_id), json.dumps({"trace_id": trace_id, "reason": reason}).encode())

    def record_name(self, name: str, trace_id: str) -> None:
        """Add `name` → `trace_id` to the path index (idempotent)."""
        key = hashlib.sha256(f"{name}\n{trace_id}".encode()).hexdigest()[:16]
        path = f"{self.root}/paths/{key}.json"
        if not self.fs.exists(path):
            self._write(path, json.dumps({"path": name, "trace_id": trace_id}).encode())

    # ---- graph-capture traces -------------------------------------------------------------------
    def captures_for(self, digests: tuple[str, ...]) -> pl.DataFrame | None:
        """The parsed capture traces with these hashes, concatenated in order (None when there are none)."""
        if digests not in self._captures:
            frames = [pl.read_parquet(io.BytesIO(self.fs.cat_file(self._capture_file(d)))) for d in digests]
            self._captures[digests] = pl.concat(frames) if frames else None
        return self._captures[digests]

    def _capture_ids(self, files: list[str | Path], report: IngestReport) -> tuple[str, ...]:
        """The content hashes of capture trace files."""
        digests = []
        for f in files:
            # Every profile of a deployment names the same capture traces: each file is hashed once per run.
            digest = report.capture_ids.get(str(f))
            if digest is None:
                digest = report.capture_ids[str(f)] = file_trace_id(f)
            digests.append(digest)
        return tuple(digests)

    def _capture_stored(self, digest: str, report: IngestReport) -> bool:
        """Whether the parsed capture trace `digest` is in the store (parsed by this run, or before)."""
        if digest in report.captures_parsed or digest in report.captures_reused:
            return True
        if self.fs.exists(self._capture_file(digest)):
            report.captures_reused.append(digest)
            return True
        return False

    def _ensure_captures(self, files: list[str | Path], report: IngestReport) -> tuple[str, ...]:
        """Hashes of `files`, each parsed into the store unless it is there already; raises TraceError."""
        digests = self._capture_ids(files, report)
        for f, digest in zip(files, digests):
            if not self._capture_stored(digest, report):
                self._write(self._capture_file(digest), parquet(read_capture(f), "CAPTURES"))
                report.captures_parsed.append(digest)
        return digests

    # ---- ingesting ------------------------------------------------------------------------------
    def ingest(self, paths: list[str | Path], names: list[str] | None = None, *, jobs: int | None = None,
               captures: list[Path] | None = None, taxonomy=None,
               progress: Callable[..., Iterable] | None = None, cluster: str | None = None,
               meanwhile: Callable[[], object] | None = None) -> IngestReport:
        """Put every trace of `paths` the store lacks into it, `jobs` at a time; what was parsed and reused.

        `names` (default: the paths as given) are the names recorded in the path index. Workers
        write the store themselves and return only their trace_id, so memory grows with `jobs`,
        not with the number of traces. Graph-capture traces (`captures`, else the ones a
        capture_traces/execution_details.json beside each trace names) are parsed once per store.
        With `cluster` (a Dask scheduler address) the parses run on its workers instead
        (ingest.cluster): the same tasks, so the store gets the same bytes. `meanwhile` is called once
        in this process while the local pool's workers parse (the caller's next imports, say: this
        process is idle then); it must not need the store.
        """
        paths = [trace_name(p) for p in paths]  # paths, or fsspec URLs the workers read too
        names = [str(p) for p in paths] if names is None else list(names)
        report = IngestReport()
        # The local pool's workers start (spawn, imports: ~0.5 s of a core each) as soon as it is sure that
        # they will be needed, while this process goes on hashing and indexing the rest (~1 s per 1,000 traces).
        # A pool started ahead for this process (start_pool_ahead) is taken instead when its size fits.
        pool = _pool_for(jobs or os.cpu_count() or 1) if not cluster and self.local and jobs != 1 else None
        with ExitStack() as stack:
            hashes: Iterable = map(_hash, paths)
            if len(paths) > 1:
                from concurrent.futures import ThreadPoolExecutor

                hashing = stack.enter_context(ThreadPoolExecutor(max_workers=max(1, min(4, os.cpu_count() or 1))))
                hashes = hashing.map(_hash, paths)  # sha256 releases the GIL: the threads hash ahead of the loop
            if pool is not None:
                stack.callback(pool.shutdown)
            ready: dict[str, tuple] = {}  # trace_id -> task
            waiting: dict[str, tuple] = {}  # trace_id -> (task, capture files): captures the store lacks
            sizes: dict[str, int] = {}  # trace_id -> bytes of trace file, of every trace to parse
            sidecars: dict[str, list | TraceError] = {}  # a folder's capture traces (capture_traces_for)
            to_parse = 0  # bytes of trace file in `sizes`
            for path, name, tid in zip(paths, names, hashes):
                if isinstance(tid, TraceError):
                    report.unreadable.append({"path": name, "reason": tid.problem})
                    continue
                report.ids[name] = tid
                self.record_name(name, tid)
                if tid in ready or tid in waiting or tid in report.reused:
                    continue
                if self.has(tid):
                    report.reused.append(tid)
                    continue
                try:
                    files = captures if captures is not None else _sidecar_captures(path, sidecars)
                    digests = self._capture_ids(files, report)
                except TraceError as exc:
                    self.quarantine(tid, exc.problem)
                    report.parsed.append(tid)
                    continue
                task = (self.url, str(path), name, digests, taxonomy)
                if all(self._capture_stored(d, report) for d in digests):
                    ready[tid] = task
                else:
                    waiting[tid] = (task, files)
                sizes[tid] = file_size(path)
                to_parse += sizes[tid]
                if (pool is not None and pool.executor is None and len(sizes) > 1
                        and (jobs or self.default_jobs(to_parse)) > 1):
                    pool.start()
            return self._ingest_tasks(report, ready, waiting, sizes, jobs, pool, progress, cluster, meanwhile)

    def _ingest_tasks(self, report: IngestReport, ready: dict[str, tuple], waiting: dict[str, tuple],
                      sizes: dict[str, int], jobs: int | None, pool: _Pool | None, progress, cluster,
                      meanwhile) -> IngestReport:
        """`ingest`'s second half: the traces it found the store lacking parsed into it (`ready`: trace_id →
        task; `waiting`: trace_id → (task, capture files the store lacks)), on the cluster, the local pool
        or in this process."""

        def parse_captures() -> tuple[list[tuple[str, tuple]], list[str]]:
            """The capture traces `waiting` needs parsed into the store: its (trace_id, task) pairs, and the
            trace_ids quarantined because a capture trace of theirs cannot be read."""
            pairs, bad = [], []
            for tid, (task, files) in waiting.items():
                try:
                    self._ensure_captures(files, report)
                    pairs.append((tid, task))
                except TraceError as exc:
                    self.quarantine(tid, exc.problem)
                    bad.append(tid)
            return pairs, bad

        def longest_first(pairs):
            return sorted(pairs, key=lambda item: -sizes[item[0]])

        jobs = self.default_jobs(sum(sizes.values())) if jobs is None else jobs
        if cluster and sizes:
            def more():
                pairs, bad = parse_captures()
                return batches(longest_first(pairs), sizes), bad

            # the workers parse the traces that need no new capture trace while this process parses those
            report.parsed += ingest_on_cluster(cluster, batches(longest_first(ready.items()), sizes), self,
                                               _ingest_batch, progress=progress, more=more if waiting else None,
                                               priority=lambda batch: sizes[batch[0][0]])
            return report
        if jobs > 1 and len(ready) + len(waiting) > 1 and self.local:
            def rest() -> tuple[list, list[str]]:
                pairs, bad = parse_captures()
                return longest_first(pairs), bad

            work = _in_pool(longest_first(ready.items()), rest, sizes, pool.start(), meanwhile)
            done = (tid for ids in work for tid in ids)
            report.parsed += list(progress(done, total=len(sizes)) if progress else done)
            return report
        pairs, bad = parse_captures()
        report.parsed += bad
        ordered = longest_first([*ready.items(), *pairs])
        done = (tid for batch in batches(ordered, sizes) for tid in _ingest_batch(batch, self))
        report.parsed += list(progress(done, total=len(ordered)) if progress else done)
        return report

    @staticmethod
    def default_jobs(size: int) -> int:
        """Worker processes for `size` bytes of traces: every core once that repays their start."""
        return (os.cpu_count() or 1) if size >= PARALLEL_MIN_BYTES else 1

    # ---- views ----------------------------------------------------------------------------------
    def quarantined(self) -> list[dict]:
        """{path, reason} of every quarantined trace, under each name it was seen by, sorted by path."""
        bad = set(self._listed("quarantine", ".json"))
        return [{"path": p, "reason": self.quarantine_reason(t)} for p, t in self.paths().iter_rows() if t in bad]

    def write_views(self, extra_quarantined: list[dict] = ()) -> dict:
        """traces.parquet (one row per trace, under its first name), op_shape_time.parquet, quarantined.json."""
        first = self.paths().unique("trace_id", keep="first", maintain_order=True)
        stored = set(self.trace_ids())
        traces = []
        for name, tid in first.iter_rows():
            if tid in stored:
                s = msgspec.structs.asdict(self.summary(tid))
                traces.append({"trace_id": tid, "path": name, **{k: v for k, v in s.items() if k != "trace_id"}})
        quarantined = sorted(self.quarantined() + list(extra_quarantined), key=lambda q: q["path"])
        self._write(f"{self.root}/traces.parquet", parquet(traces_frame_from(traces), "TRACES"))
        ost = self.scan("op_shape_time", [t["trace_id"] for t in traces]).collect()
        self._write(f"{self.root}/op_shape_time.parquet", parquet(ost, "OP_SHAPE_TIME"))
        self._write(f"{self.root}/quarantined.json", (json.dumps(quarantined, indent=2) + "\n").encode())
        return {"traces": traces, "quarantined": quarantined}


def batches(ordered: list[tuple[str, tuple]], sizes: dict[str, int]) -> list[list[tuple[str, tuple]]]:
    """`ordered` ((trace_id, task) pairs) cut, in order, into runs of up to BATCH_BYTES of trace file and
    BATCH_TRACES traces each; a trace larger than BATCH_BYTES is a batch of its own."""
    out: list[list[tuple[str, tuple]]] = []
    size = 0
    for pair in ordered:
        if not out or len(out[-1]) >= BATCH_TRACES or (out[-1] and size + sizes[pair[0]] > BATCH_BYTES):
            out.append([])
            size = 0
        out[-1].append(pair)
        size += sizes[pair[0]]
    return out


class _Pool:
    """`workers` spawned processes for `_in_pool`, started on the first `start()` (each warmed by
    `_warm`), shut down by `shutdown()`."""

    def __init__(self, workers: int):
        self.workers = workers
        self.executor = None
        self.ahead: list = []  # futures of the work start_pool_ahead gave it, which an ingest waits for

    def start(self) -> _Pool:
        if self.executor is None:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor

            self.executor = ProcessPoolExecutor(max_workers=self.workers,
                                                mp_context=multiprocessing.get_context("spawn"))
            with _polars_threads(1):  # a worker is spawned by a submit, and polars reads this at its import
                for _ in range(self.workers):
                    self.executor.submit(_warm)
        return self

    def submit(self, fn, *args):
        with _polars_threads(1):
            return self.executor.submit(fn, *args)

    def shutdown(self) -> None:
        if self.executor is not None:
            self.executor.shutdown()


# Pools started by start_pool_ahead, for the next ingest of this process that parses on a local pool to take.
_AHEAD: list[_Pool] = []


def start_pool_ahead(workers: int | None = None, store: TraceStore | None = None,
                     captures: Iterable[str | Path] = ()) -> _Pool:
    """A local pool whose workers start now (spawned, their imports loaded: ~0.5 s of a core each), for the next
    `TraceStore.ingest` of this process that parses on a local pool of that size to take instead of starting one:
    a caller with work of its own before its ingest (run-pipeline loading Dagster, ~1.5 s of one core) lets the
    workers start beside it. The ingest that takes it shuts it down; `drop_pool_ahead` does if none did.

    With a `store`, one of its workers then parses the graph-capture traces `captures` into it, each once, as the
    ingest would in this process (the store's capture tables are keyed by the files' bytes, and what a worker writes
    is what this process would), leaving the other core to the caller: the ingest that takes the pool waits for
    them and finds them stored. A capture trace that cannot be read is left to the ingest, which quarantines its
    traces as before."""
    pool = _Pool(workers or os.cpu_count() or 1).start()
    if store is not None and store.local:
        # one task: one worker, not all, so that the caller's own work (Dagster's loading) keeps a core
        pool.ahead = [pool.submit(_store_captures, store.url, list(dict.fromkeys(map(str, captures))))]
    _AHEAD.append(pool)
    return pool


def _store_captures(url: str, files: list[str]) -> None:
    """Capture traces parsed into the store at `url` unless they are there (in a worker of a pool started ahead)."""
    store = _open(url)
    for file in files:
        try:
            store._ensure_captures([file], IngestReport())
        except TraceError:
            pass  # the ingest reads it again and quarantines the traces that need it, naming the file


def drop_pool_ahead(pool: _Pool) -> None:
    """Shut a pool started ahead down, unless an ingest took it (which shut it down itself)."""
    if pool in _AHEAD:
        _AHEAD.remove(pool)
        pool.shutdown()


def _pool_for(workers: int) -> _Pool:
    """A pool started ahead with `workers` workers (taken: no later ingest gets it) once the capture traces it was
    given are in the store, else a new one, not started."""
    from concurrent.futures import wait

    pool = next((p for p in _AHEAD if p.workers == workers), None)
    if pool is None:
        return _Pool(workers)
    _AHEAD.remove(pool)
    wait(pool.ahead)
    return pool


def _warm() -> None:
    """A fresh worker's imports and the default taxonomy, loaded before its first batch comes."""
    from ingest.pipeline import ingest_trace  # noqa: F401 - the import is the point
    from ingest.classify import classify_events  # noqa: F401
    from ingest.kineto import read_kineto  # noqa: F401
    from ingest.attribution import attribute  # noqa: F401

    load_taxonomy(None)


def _sidecar_captures(path: str | Path, sidecars: dict[str, list | TraceError]) -> list:
    """ingest.graphs.capture_traces_for(path), read once per folder (every profile of a folder has the same)."""
    folder = str(sibling(path))
    if folder not in sidecars:
        try:
            sidecars[folder] = capture_traces_for(path)
        except TraceError as exc:
            sidecars[folder] = exc
    found = sidecars[folder]
    if isinstance(found, TraceError):
        raise found
    return found


def _in_pool(first: list[tuple[str, tuple]], rest: Callable[[], tuple[list, list[str]]], sizes: dict[str, int],
             pool: _Pool, meanwhile: Callable[[], object] | None = None) -> Iterable[list[str]]:
    """The trace_ids of batches of `first` and of the pairs `rest()` returns, parsed on the `pool`'s
    processes: this process parses the capture traces (`rest`, which also names the trace_ids it
    settled) while the workers start on `first`, calls `meanwhile`, then hands out the rest of the
    batches, longest first, as workers finish theirs. Batches are handed out a few at a time, not all at
    once, so that those `rest` adds (the longest profiles may wait for a capture trace) go before the short
    ones left."""
    from concurrent.futures import FIRST_COMPLETED, wait

    queue = batches(first, sizes)
    in_flight: set = set()

    def feed(ahead: int) -> None:
        while queue and len(in_flight) < ahead * pool.workers:
            in_flight.add(pool.submit(_ingest_batch, queue.pop(0)))

    feed(4)  # ~4 s of work each: the capture traces take this process ~1 s each
    more, settled = rest()
    if meanwhile is not None:
        meanwhile()  # the workers hold ~4 s of batches each by now
    yield settled
    queue = sorted(queue + batches(more, sizes), key=lambda batch: -sum(sizes[tid] for tid, _ in batch))
    while in_flight or queue:
        feed(2)  # each worker holds its next batch, so it never waits for this process
        done, _ = wait(in_flight, return_when=FIRST_COMPLETED)
        for future in done:
            in_flight.remove(future)
            yield future.result()


@contextmanager
def _polars_threads(n: int):
    """Processes started inside run polars on `n` threads (POLARS_MAX_THREADS, read at its import) unless
    the user set it: beside a process per core, a trace's many small queries cost ~7% more CPU with a
    second polars thread in each process (50 fleet profiles in one process, 57 against 61-73 ms each)."""
    if "POLARS_MAX_THREADS" in os.environ:
        yield
        return
    os.environ["POLARS_MAX_THREADS"] = str(n)
    try:
        yield
    finally:
        os.environ.pop("POLARS_MAX_THREADS", None)


_OPEN: dict[str, TraceStore] = {}


def _open(url: str) -> TraceStore:
    """The store at `url`, opened once per worker process."""
    if url not in _OPEN:
        # A worker process's first trace: what it has imported by now (polars, and a Dask worker's own
        # machinery) lives as long as the process; frozen, the collector no longer walks it again and again.
        gc.freeze()
        _OPEN[url] = TraceStore(url)
    return _OPEN[url]


def _ingest_batch(batch: list[tuple[str, tuple]], store: TraceStore | None = None) -> list[str]:
    """Parse a batch of (trace_id, task) pairs into the store (in a worker process, or in-process with
    `store`); their trace_ids. The batch's traces are read one by one and written together (put_many).

    A trace the store has already is skipped: the batch runs again when its worker died, and what
    the first attempt stored stays as it was. A trace that cannot be read is quarantined alone."""
    results = []
    store = store or _open(batch[0][1][0])
    for tid, task in batch:
        if not store.has(tid):
            parsed = _parse_one(task, store)
            if not isinstance(parsed, str):
                results.append(parsed)
    if results:
        try:
            store.put_many(results)
        except Exception:  # noqa: BLE001 - one trace's tables that cannot be written must not cost the others theirs
            for result in results:
                _put_or_quarantine(result, store)
    return [tid for tid, _ in batch]


def _put_or_quarantine(result, store: TraceStore) -> None:
    try:
        store.put(result)
    except Exception as exc:  # noqa: BLE001 - any failure of one trace quarantines it; the rest go on
        store.quarantine(result.summary["trace_id"], failure_reason(exc))


def _parse_one(task: tuple, store: TraceStore):
    """One trace read and classified (an ingest.pipeline.TraceResult), or its trace_id once quarantined."""
    url, path, name, digests, taxonomy = task
    capture_events = store.captures_for(digests)
    try:
        return ingest_trace(path, name, captures=[], taxonomy=taxonomy, capture_events=capture_events)
    except Exception as exc:  # noqa: BLE001 - any failure of one trace quarantines it; the rest go on
        tid = file_trace_id(path)
        store.quarantine(tid, exc.problem if isinstance(exc, TraceError) else failure_reason(exc))
        return tid
