"""Schedules: refresh weights when traces were ingested since the last release."""

import dagster as dg

from pipelines.defs.ingest import kernel_events
from pipelines.defs.jobs import refresh_job
from pipelines.defs.release import release_bundle


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
