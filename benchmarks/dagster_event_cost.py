"""What Dagster's event log costs per event: one single-run batch of N partitions of two trivial assets and a
partitioned check (3 events per partition, what a batch ingest writes), on sqlite or on a PostgreSQL URL, with
Postgres connections opened per event (Dagster's default) or held (`optimize_for_webserver`), and sqlite files
closed after each event (Dagster's default) or kept open (`--held-files`: pipelines/sqlite_files.py), through
Dagster's sqlite event log or run-pipeline's (`--batching`: pipelines/sqlite_files.open_instance).

    .venv/bin/python benchmarks/dagster_event_cost.py sqlite 200 [--held-files] [--batching]
    .venv/bin/python benchmarks/dagster_event_cost.py postgres 200 --url postgresql+psycopg2://USER@HOST:PORT/DB [--held]

Prints wall and CPU seconds of this process (a Postgres server's own CPU is not counted) and the events written.
Run with the environment run-pipeline sets (DAGSTER_EMIT_PARTITION_SUBSET_IN_PLANNED_EVENTS=1,
DAGSTER_EVENT_BATCH_SIZE=10000) to measure what it pays.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import time
import warnings
from pathlib import Path

import dagster as dg

PARTS = dg.DynamicPartitionsDefinition(name="p")


@dg.asset(partitions_def=PARTS, backfill_policy=dg.BackfillPolicy.single_run())
def first():
    return dg.MaterializeResult(metadata={"n": 1})


@dg.asset(partitions_def=PARTS, deps=[first], backfill_policy=dg.BackfillPolicy.single_run())
def second():
    return dg.MaterializeResult(metadata={"n": 1})


with warnings.catch_warnings():
    warnings.simplefilter("ignore")

    @dg.asset_check(asset=first, partitions_def=PARTS, blocking=False)
    def checked(context):  # not annotated: under `from __future__ import annotations` dagster sees a string
        for key in context.partition_keys:
            yield dg.AssetCheckEvaluation(asset_key=first.key, check_name="checked", passed=True, partition=key)
        yield dg.Output(None, output_name=next(iter(context.op_execution_context.op_def.output_dict)))


def cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("storage", choices=("sqlite", "postgres"))
    parser.add_argument("partitions", type=int)
    parser.add_argument("--url", help="postgresql+psycopg2://... of an empty database")
    parser.add_argument("--held", action="store_true", help="hold one connection per storage")
    parser.add_argument("--held-files", action="store_true",
                        help="sqlite: keep the instance's files open, synchronous=NORMAL (what run-pipeline does)")
    parser.add_argument("--batching", action="store_true",
                        help="run-pipeline's event log, sqlite or Postgres (pipelines/sqlite_files.open_instance)")
    args = parser.parse_args()
    home = tempfile.mkdtemp()
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    if args.storage == "postgres":
        with open(f"{home}/dagster.yaml", "w") as f:
            f.write(f"storage:\n  postgres:\n    postgres_url: {args.url}\n")
    if args.held_files:
        from pipelines.sqlite_files import held

        held(home).__enter__()  # left open until the process ends, as run-pipeline holds them for its whole run
    if args.batching:
        from pipelines.sqlite_files import open_instance

        instance = open_instance(home)
    else:
        instance = dg.DagsterInstance.from_config(home)
    if args.held:
        instance.optimize_for_webserver(statement_timeout=0, pool_recycle=3600, max_overflow=4)
    keys = [f"k{i:05d}" for i in range(args.partitions)]
    instance.add_dynamic_partitions(PARTS.name, keys)
    start, cpu0 = time.perf_counter(), cpu()
    result = dg.materialize([first, second, checked], instance=instance, tags={
        "dagster/asset_partition_range_start": keys[0], "dagster/asset_partition_range_end": keys[-1]})
    print(f"storage={args.storage} held={args.held} partitions={args.partitions} "
          f"held_files={args.held_files} batching={args.batching} batch_size={os.environ.get('DAGSTER_EVENT_BATCH_SIZE', '0')} "
          f"wall_s={time.perf_counter() - start:.2f} "
          f"cpu_s={cpu() - cpu0:.2f} events={len(result.all_events)} success={result.success}")


if __name__ == "__main__":
    main()
