"""The hotshape code location: every asset, check, job, sensor and schedule, and the store resource.

Nothing on this import path imports torch or triton (tests/pipelines/test_definitions.py checks it):
the evaluator's heavy imports happen inside the evaluation step.
"""

from __future__ import annotations

import dagster as dg

from pipelines.defs import fleet, ingest, jobs, kernels_eval, release, schedules, sensors, weighting
from pipelines.resources import HotshapeStore, store_from_env

OWNERS = ["team:hotshape"]
ASSETS = dg.map_asset_specs(lambda spec: spec.replace_attributes(owners=OWNERS), [
    fleet.fleet_file, ingest.kernel_events, ingest.op_shape_time, weighting.fleet_weights, release.release_bundle,
    release.weight_drift,
    kernels_eval.evaluation_results, kernels_eval.scores])
CHECKS = [
    ingest.gpu_time_conserved,
    weighting.hot_problem_weights_sum_to_one,
    weighting.coverage_above_floor,
    weighting.selected_problems_are_their_operators_work,
    release.no_sealed_strings_in_public,
    release.release_weights_sum_to_one,
    release.every_selected_problem_has_roofline,
    release.moves_within_intervals,
    kernels_eval.every_problem_evaluated,
    kernels_eval.no_fallback_counted_as_native,
    kernels_eval.score_weights_sum_to_one,
    kernels_eval.s_agg_in_range,
]
JOBS = [jobs.ingest_job, jobs.refresh_job, jobs.evaluate_job, jobs.rescore_job]
SENSORS = [sensors.new_trace_sensor, sensors.fleet_change_sensor, sensors.new_submission_sensor,
           sensors.new_weights_sensor]
SCHEDULES = [schedules.refresh_schedule, schedules.rescore_schedule]


def definitions_for(store: HotshapeStore) -> dg.Definitions:
    """Every definition, wired to `store`."""
    return dg.Definitions(assets=ASSETS, asset_checks=CHECKS, jobs=JOBS, sensors=SENSORS, schedules=SCHEDULES,
                          resources={"store": store})


@dg.definitions
def defs() -> dg.Definitions:
    """The code location; HOTSHAPE_* environment variables configure the store when it loads."""
    return definitions_for(store_from_env())
