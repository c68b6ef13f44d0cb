"""Sensors: new trace files and submissions become partitions and runs; a new weights version re-scores."""

import dagster as dg
from dagster._core.storage.tags import ASSET_PARTITION_RANGE_END_TAG, ASSET_PARTITION_RANGE_START_TAG

from kernels_eval.harness import shard
from pipelines.defs.fleet import fleet_changed, fleet_observation
from pipelines.defs.jobs import evaluate_job, ingest_job, refresh_job, rescore_job
from pipelines.defs.kernels_eval import GPU_POOL
from pipelines.defs.release import release_bundle
from pipelines.partitions import submissions, trace_files, usable_key
from pipelines.resources import HotshapeStore

MAX_NEW_PER_TICK = 1000  # a burst of more files is spread over ticks instead of one huge request


def _new_partitions(context, partitions: dg.DynamicPartitionsDefinition, found: list[str], what: str,
                    request=None, batch: bool = False):
    """A SensorResult adding a partition for every usable key not known yet and requesting runs for them: one run
    of them all with `batch` (a range of the partitions just added, as a single-run backfill), else one run per
    key, `request(n)` giving the n-th new run's tags and run config (n counts every partition, known ones first)."""
    unusable = [k for k in found if not usable_key(k)]
    if unusable:
        context.log.warning(f"{len(unusable)} {what} have ',' or '|' in their name and get no partition: {unusable[:5]}")
    known = set(context.instance.get_dynamic_partitions(partitions.name))
    new = [k for k in found if k not in known and usable_key(k)][:MAX_NEW_PER_TICK]
    if not new:
        return dg.SkipReason(f"no new {what}")
    if batch and len(new) > 1:
        # the new keys are added in this order after every known one, so they are one range of the partitions
        requests = [dg.RunRequest(run_key=f"{new[0]}..{new[-1]}", tags={
            ASSET_PARTITION_RANGE_START_TAG: new[0], ASSET_PARTITION_RANGE_END_TAG: new[-1]})]
    else:
        extra = request or (lambda n: {})
        requests = [dg.RunRequest(partition_key=k, run_key=k, **extra(len(known) + j)) for j, k in enumerate(new)]
    return dg.SensorResult(run_requests=requests, dynamic_partitions_requests=[partitions.build_add_request(new)])


@dg.sensor(job=ingest_job, minimum_interval_seconds=60, default_status=dg.DefaultSensorStatus.RUNNING)
def new_trace_sensor(context: dg.SensorEvaluationContext, store: HotshapeStore):
    """Add a partition for every new trace file under the trace root and request one ingest run for them all."""
    return _new_partitions(context, trace_files, store.trace_keys(), "trace files", batch=True)


@dg.sensor(job=evaluate_job, minimum_interval_seconds=60, default_status=dg.DefaultSensorStatus.RUNNING)
def new_submission_sensor(context: dg.SensorEvaluationContext, store: HotshapeStore):
    """Add a partition for every new submission directory and request its evaluation and score."""
    if not (store.release_dir / "release.json").is_file():
        return dg.SkipReason("no release yet: submissions are evaluated once refresh_weights has built one")
    # On cuda each run gets one GPU, round robin, as its step config and its run tag: dagster.yaml allows one
    # evaluation run per tag value, and the gpu pool one step per GPU.
    gpus = size_gpu_pool(context.instance, store.device)

    def request(n: int) -> dict:
        if not gpus:
            return {"tags": {"hotshape/device": store.device}}
        index = n % gpus
        return {"tags": {"hotshape/device": f"cuda:{index}"},
                "run_config": {"ops": {"evaluation_results": {"config": {"devices": [index]}}}}}

    return _new_partitions(context, submissions, store.submission_keys(), "submissions", request)


def size_gpu_pool(instance: dg.DagsterInstance, device: str) -> int:
    """The host's GPUs on cuda (0 on cpu), after setting the `gpu` pool's slots to that count where it differs."""
    gpus = shard.host_gpus() if device == "cuda" else 0
    slots = max(gpus, 1)
    storage = instance.event_log_storage
    if storage.get_concurrency_info(GPU_POOL).slot_count != slots:
        storage.set_concurrency_slots(GPU_POOL, slots)
    return gpus


def rescore_requests(instance: dg.DagsterInstance, store: HotshapeStore, tag: str) -> list[dg.RunRequest]:
    """One scores run per submission partition whose score under the release's latest weights is missing or older
    than its results (a score that is current is never made again: `dg dev` opened after run-pipeline launches
    nothing); `tag` makes the run key unique."""
    import json

    if not (store.release_dir / "release.json").is_file():
        return []
    info = json.loads((store.release_dir / "release.json").read_text())
    name, version = info["name"], info["weights"][-1]["version"]

    def stale(key: str) -> bool:
        results, scored = store.results_file(key), store.scores_dir(key) / f"{name}-v{version}.json"
        return results.is_file() and (not scored.is_file() or scored.stat().st_mtime_ns < results.stat().st_mtime_ns)

    return [dg.RunRequest(partition_key=k, run_key=f"{k}:{tag}")
            for k in sorted(instance.get_dynamic_partitions(submissions.name)) if stale(k)]


# A plain sensor over the release's materializations, not @asset_sensor: asset sensors take no resources.
@dg.sensor(job=rescore_job, minimum_interval_seconds=60, default_status=dg.DefaultSensorStatus.RUNNING)
def new_weights_sensor(context: dg.SensorEvaluationContext, store: HotshapeStore):
    """When the release gets a new weights version, re-score every evaluated submission under it."""
    records = context.instance.fetch_materializations(release_bundle.key, limit=1).records
    if not records:
        return dg.SkipReason("no release yet")
    latest = records[0]
    if context.cursor == str(latest.storage_id):
        return dg.SkipReason("no new weights version since the last tick")
    metadata = latest.asset_materialization.metadata
    version = metadata["weights_version"].value if "weights_version" in metadata else latest.storage_id
    requests = rescore_requests(context.instance, store, f"weights-v{version}")
    return dg.SensorResult(run_requests=requests, cursor=str(latest.storage_id),
                           skip_reason=None if requests else "every evaluated submission is scored under these weights")


@dg.sensor(job=refresh_job, minimum_interval_seconds=60, default_status=dg.DefaultSensorStatus.RUNNING)
def fleet_change_sensor(context: dg.SensorEvaluationContext, store: HotshapeStore):
    """When fleet.yaml's content differs from the version the latest weights were computed from, observe it and
    refresh the weights (release vN+1 and its drift report), once per version."""
    version = fleet_changed(context.instance, store)
    if version is None:
        return dg.SkipReason("fleet.yaml is the version the latest weights were computed from")
    return dg.SensorResult(run_requests=[dg.RunRequest(run_key=f"fleet-{version}")],
                           asset_events=[fleet_observation(store, version)])
