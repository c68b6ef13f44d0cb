"""The hotshape code location: every asset, check, job, sensor and schedule, and the store resource.

Nothing on this import path imports torch or triton (tests/pipelines/test_definitions.py checks it):
the evaluator's heavy imports happen inside the evaluation step.
"""

from __future__ import annotations

import dagster as dg

from pipelines.defs import ingest, jobs, release, schedules, sensors, weighting
from pipelines.resources import store_from_env

ASSETS = [ingest.kernel_events, ingest.op_shape_time, weighting.fleet_weights, release.release_bundle, release.weight_drift]
CHECKS = [
    ingest.gpu_time_conserved,
    weighting.hot_problem_weights_sum_to_one,
    weighting.coverage_above_floor,
    release.no_sealed_strings_in_public,
    release.release_weights_sum_to_one,
    release.every_selected_problem_has_roofline,
]
JOBS = [jobs.ingest_job, jobs.refresh_job]
SENSORS = [sensors.new_trace_sensor]
SCHEDULES = [schedules.refresh_schedule]


@dg.definitions
def defs() -> dg.Definitions:
    """The code location; HOTSHAPE_* environment variables configure the store when it loads."""
    return dg.Definitions(assets=ASSETS, asset_checks=CHECKS, jobs=JOBS, sensors=SENSORS, schedules=SCHEDULES,
                          resources={"store": store_from_env()})
