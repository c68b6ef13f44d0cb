"""Trace ingest fanned out over a running Dask distributed scheduler (`--cluster tcp://HOST:8786`).

The work is the local pool's: one `ingest.store._ingest_one` task per trace the store lacks, which parses
the trace, writes its files into the store and returns only its trace_id. Every worker therefore has
to see the trace paths and the store URL the client names (a volume mounted on every host, or an
fsspec URL such as s3://bucket/store for the store); docs/scale-out.md shows a Kubernetes layout.

A worker that dies mid-trace loses that attempt only: its files are temporary names until renamed
and the summary is renamed last, so the store does not count the trace, and the scheduler gives
the task to another worker. Run the scheduler with `DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES=1`
so that this happens once; a trace whose second worker dies too comes back as KilledWorker and
is quarantined with that reason (a trace that kills workers is most often one too large for their
memory). An exception raised by the parse itself quarantines that trace with its type and message, as
on the local path (one bad file never aborts a batch).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable

SCHEDULER_ENV = "HOTSHAPE_DASK_SCHEDULER"
CONNECT_TIMEOUT_S = 30


def default_cluster() -> str | None:
    """The scheduler address in HOTSHAPE_DASK_SCHEDULER, or None (ingest in local processes)."""
    return os.environ.get(SCHEDULER_ENV) or None


def add_cluster_argument(parser) -> None:
    """`--cluster ADDRESS` on a command that ingests traces (ingest, build, refresh)."""
    parser.add_argument("--cluster", default=default_cluster(), metavar="tcp://HOST:8786",
                        help=f"parse traces on the workers of this Dask scheduler, which must see the trace "
                             f"paths and the store (default: ${SCHEDULER_ENV}, else local processes)")


def _progress(futures, total: int):
    if total > 1 and sys.stderr.isatty():
        from tqdm import tqdm

        return tqdm(futures, total=total, unit="trace", file=sys.stderr)
    return futures


def ingest_on_cluster(address: str, tasks: list[tuple[str, tuple]], store,
                      progress: Callable[..., Iterable] | None = None) -> list[str]:
    """Run `tasks` ((trace_id, ingest task) pairs, longest first) on the scheduler at `address`; the
    trace_ids done, in the order of `tasks` (what the scheduler finished, or quarantined)."""
    from distributed import Client, as_completed
    from distributed.scheduler import KilledWorker

    from ingest.store import _ingest_one

    with Client(address, timeout=CONNECT_TIMEOUT_S) as client:
        # The key names the trace, so a task submitted twice (two clients, one store) runs once;
        # priority keeps the local pool's longest-first order.
        futures = {client.submit(_ingest_one, task, key=f"hotshape-ingest-{tid}", retries=1,
                                 priority=len(tasks) - i, pure=False): tid
                   for i, (tid, task) in enumerate(tasks)}
        done = as_completed(futures, with_results=False)
        for future in (progress or _progress)(done, total=len(futures)):
            tid = futures[future]
            try:
                future.result()
            except KilledWorker as exc:
                if store.summary(tid) is None:  # it may have died after its last write
                        store.quarantine(tid, f"the workers parsing it died twice ({type(exc).__name__}: {exc})")
    return [tid for tid, _ in tasks]
