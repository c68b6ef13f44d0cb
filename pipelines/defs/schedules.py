"""Schedules: refresh weights when traces were ingested since the last release; re-score daily."""

import dagster as dg

from pipelines.defs.ingest import kernel_events
from pipelines.defs.jobs import refresh_job, rescore_job
from pipelines.defs.release import release_bundle
from pipelines.defs.sensors import rescore_requests
from pipelines.resources import HotshapeStore


def _last_materialized(instance: dg.DagsterInstance, asset) -> float | None:
    event = instance.get_latest_materialization_event(asset.key)
    return event.timestamp if event is not None else None


@dg.schedule(job=refresh_job, cron_schedule="0 * * * *", execution_timezone="UTC",
             default_status=dg.DefaultScheduleStatus.RUNNING)
def refresh_schedule(context: dg.ScheduleEvaluationContext):
    """Hourly: refresh weights (release vN+1) if any trace was ingested since the release last changed."""
    ingested = _last_materialized(context.instance, kernel_events)
    released = _last_materialized(context.instance, release_bundle)
    if ingested is None:
        return dg.SkipReason("no trace ingested yet")
    if released is not None and released >= ingested:
        return dg.SkipReason("no trace ingested since the last release refresh")
    return dg.RunRequest(run_key=f"refresh-{ingested}")


@dg.schedule(job=rescore_job, cron_schedule="0 4 * * *", execution_timezone="UTC",
             default_status=dg.DefaultScheduleStatus.RUNNING)
def rescore_schedule(context: dg.ScheduleEvaluationContext, store: HotshapeStore):
    """Daily: re-score, from stored results (no GPU), every evaluated submission whose score under the latest weights
    is missing or older than its results (what a missed new_weights_sensor tick left behind)."""
    day = context.scheduled_execution_time.strftime("%Y-%m-%d")
    return rescore_requests(context.instance, store, day) or dg.SkipReason(
        "every evaluated submission is scored under the latest weights")
