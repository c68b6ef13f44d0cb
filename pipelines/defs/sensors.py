"""Sensors: new trace files become partitions and are ingested."""

import dagster as dg

from pipelines.defs.jobs import ingest_job
from pipelines.partitions import trace_files, usable_key
from pipelines.resources import HotshapeStore

MAX_NEW_PER_TICK = 200  # a burst of thousands of files is spread over ticks instead of one huge request


@dg.sensor(job=ingest_job, minimum_interval_seconds=60, default_status=dg.DefaultSensorStatus.RUNNING)
def new_trace_sensor(context: dg.SensorEvaluationContext, store: HotshapeStore):
    """Add a partition for every new trace file under the trace root and request its ingest."""
    known = set(context.instance.get_dynamic_partitions(trace_files.name))
    found = store.trace_keys()
    unusable = [k for k in found if not usable_key(k)]
    if unusable:
        context.log.warning(f"{len(unusable)} trace file(s) have ',' or '|' in their path and get no partition: {unusable[:5]}")
    new = [k for k in found if k not in known and usable_key(k)][:MAX_NEW_PER_TICK]
    if not new:
        return dg.SkipReason(f"no new trace files under {store.trace_root}")
    return dg.SensorResult(
        run_requests=[dg.RunRequest(partition_key=k, run_key=k) for k in new],
        dynamic_partitions_requests=[trace_files.build_add_request(new)],
    )
