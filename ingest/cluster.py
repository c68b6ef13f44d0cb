"""Trace ingest fanned out over a running Dask distributed scheduler (`--cluster tcp://HOST:8786`).

The work is the local pool's: one `ingest.store._ingest_batch` task per batch of traces the store lacks
(ingest.store.batches: a few MB of trace files, so a task's own cost on its worker is small beside the
parses), which parses each trace, writes its files into the store and returns only the trace_ids. Every
worker therefore has to see the trace paths and the store URL the client names (a volume mounted on
every host, or an fsspec URL such as s3://bucket/store for the store); docs/scale-out.md shows a
Kubernetes layout.

A worker that dies mid-batch loses its attempt at the trace it was parsing only: a trace's files are
temporary names until renamed and its summary is renamed last, so the store does not count a half-written
trace, and the scheduler gives the batch to another worker, which skips the traces already stored. Run the
scheduler with `DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES=1` so that this happens once; when the
batch's second worker dies too (KilledWorker), each of its traces still without a result is sent again on
its own, and a trace whose own task kills two workers is tried once more, alone among such last tries,
and quarantined with that reason if that try kills its workers too (a trace that kills workers is most often
one too large for their memory; a dead worker counts against every task it had been given). The other traces of the batch are never
quarantined for it. An exception raised by the parse itself quarantines that trace with its type and
message, as on the local path (one bad file never aborts a batch).
"""

from __future__ import annotations

import hashlib
import itertools
import os
import sys
from collections.abc import Callable, Iterable

SCHEDULER_ENV = "HOTSHAPE_DASK_SCHEDULER"
CONNECT_TIMEOUT_S = 30
# The environment of a scheduler and workers that only parse traces (docs/scale-out.md sets it in the
# Helm values; benchmarks/dask_scale_out.py starts its workers with it). Dask's defaults serve the
# dashboard and memory accounting; on a 2-core host they cost the parses ~10% of the workers' CPU.
WORKER_ENV = {
    # a task may fail once on a dead worker: the scheduler then gives it to another (see above)
    "DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES": "1",
    # the statistical profiler walks the parsing thread's stack every 10 ms, for the dashboard
    "DASK_DISTRIBUTED__WORKER__PROFILE__ENABLED": "False",
    # the nanny sets MALLOC_TRIM_THRESHOLD_=65536 for the worker, which also pins glibc's mmap threshold at
    # 128 kB: each large buffer of a parse is mapped and faulted in anew (10x the page faults of a process
    # with glibc's own thresholds); a worker parses one trace at a time, so its peak is one trace's need
    "DASK_DISTRIBUTED__NANNY__PRE_SPAWN_ENVIRON": '{"MALLOC_TRIM_THRESHOLD_": None}',
    # each process checks its event loop for blockage every 20 ms
    "DASK_DISTRIBUTED__ADMIN__TICK__INTERVAL": "1s",
    # a worker parses one trace at a time; polars' own pool (a thread per core) made the parses of workers on
    # one host contend (the local pool's spawned workers run the same way: ingest/store.py)
    "POLARS_MAX_THREADS": "1",
}


def default_cluster() -> str | None:
    """The scheduler address in HOTSHAPE_DASK_SCHEDULER, or None (ingest in local processes)."""
    return os.environ.get(SCHEDULER_ENV) or None


def add_cluster_argument(parser) -> None:
    """`--cluster ADDRESS` on a command that ingests traces (ingest, build, refresh)."""
    parser.add_argument("--cluster", default=default_cluster(), metavar="tcp://HOST:8786",
                        help=f"parse traces on the workers of this Dask scheduler, which must see the trace "
                             f"paths and the store (default: ${SCHEDULER_ENV}, else local processes)")


def _progress(items, total: int):
    if total > 1 and sys.stderr.isatty():
        from tqdm import tqdm

        return tqdm(items, total=total, unit="trace", file=sys.stderr)
    return items


def _key(batch: list[tuple[str, tuple]]) -> str:
    """The task key of a batch: it names the traces and the store they go to (each task's first field), so
    a batch submitted twice for one store (two clients) runs once, while the same traces sent to another
    store are parsed again: a scheduler still holding an earlier run's result under a key that named only
    the traces answered with it, and a trace was reported done that this store never got (seen in a test
    run after another ingest of the same traces on the same scheduler)."""
    store = hashlib.sha256(str(batch[0][1][0]).encode()).hexdigest()[:12]
    if len(batch) == 1:
        return f"hotshape-ingest-{batch[0][0]}-{store}"
    digest = hashlib.sha256("\n".join(tid for tid, _ in batch).encode()).hexdigest()[:16]
    return f"hotshape-ingest-batch-{digest}-{store}"


def ingest_on_cluster(address: str, batches: list[list[tuple[str, tuple]]], store,
                      run: Callable[[list], list[str]],
                      progress: Callable[..., Iterable] | None = None,
                      more: Callable[[], tuple[list[list[tuple[str, tuple]]], list[str]]] | None = None,
                      priority: Callable[[list], int] | None = None) -> list[str]:
    """Run `batches` (lists of (trace_id, ingest task) pairs) on the scheduler at `address`, and then the
    batches `more()` returns (called here once the first are submitted, with the trace_ids it settled
    itself); the trace_ids done, in that order (what the workers stored, or what was quarantined).
    `run(batch)` is the task a worker runs (the store passes its own `_ingest_batch`).
    `priority(batch)` orders the batches on the scheduler (default: as given). Progress counts traces:
    a batch's traces as it finishes."""
    from distributed import Client, as_completed  # lazy: dask.distributed is ~1 s of imports, for --cluster only
    from distributed.scheduler import KilledWorker

    submitted = itertools.count()
    with Client(address, timeout=CONNECT_TIMEOUT_S) as client:
        futures: dict = {}
        done = as_completed([], with_results=False)

        def submit(batch, first=False, key=None):
            # a batch sent again trace by trace goes before the rest
            future = client.submit(run, batch, key=key or _key(batch), retries=1, pure=False,
                                   priority=2**62 if first else priority(batch) if priority else -next(submitted))
            futures[future] = batch
            done.add(future)

        for batch in batches:
            submit(batch)
        later, settled = more() if more else ([], [])
        for batch in later:
            submit(batch)

        # A dead worker counts against every task the scheduler had given it, not only the one it was running
        # (seen: an innocent trace sent beside the one that kills workers got KilledWorker with it and was
        # quarantined). A trace whose own task got KilledWorker is therefore tried once more, alone among
        # such last tries (one in flight at a time), and quarantined only if that try's workers die too.
        alone: list = []  # traces waiting for their last try
        last_try: set = set()  # the trace whose last try is in flight (one at most)

        def next_alone():
            if alone and not last_try:
                tid, task = alone.pop(0)
                submit([(tid, task)], first=True, key=f"{_key([(tid, task)])}-alone")
                last_try.add(tid)

        def finished():
            yield from settled
            for future in done:
                batch = futures.pop(future)
                try:
                    future.result()
                except KilledWorker as exc:
                    if len(batch) > 1:
                        for tid, task in batch:
                            if store.has(tid):
                                yield tid
                            else:
                                submit([(tid, task)], first=True)
                        continue
                    tid = batch[0][0]
                    if tid not in last_try and not store.has(tid):
                        alone.append(batch[0])
                        next_alone()
                        continue
                    if not store.has(tid):  # it may have died after its last write
                        store.quarantine(tid, f"the workers parsing it died twice ({type(exc).__name__}: {exc})")
                if len(batch) == 1:
                    last_try.discard(batch[0][0])
                next_alone()
                yield from (tid for tid, _ in batch)

        total = sum(map(len, batches)) + sum(map(len, later)) + len(settled)
        for _ in (progress or _progress)(finished(), total=total):
            pass
    return [tid for batch in [*batches, *later] for tid, _ in batch] + list(settled)
