"""Sensors and schedules evaluated directly: a new trace file is ingested and refreshes weights to v2."""

from __future__ import annotations

import json
import os
import shutil
from datetime import datetime, timezone

import dagster as dg

from pipelines.definitions import definitions_for
from pipelines.defs.schedules import refresh_schedule
from pipelines.defs.sensors import new_trace_sensor
from release.bundle import read_release
from tests.pipelines.conftest import QUIET, copy_traces, dense_store

FIRST = ["llama3-8b-compiled/eager.json.gz", "llama3-8b/eager.json.gz"]
LATER = "llama3-8b/graph.json.gz"  # a CUDA-graph profile of the same deployment arrives later


def _sensor_tick(instance, store):
    return new_trace_sensor(dg.build_sensor_context(instance=instance, resources={"store": store}))


RANGE = ("dagster/asset_partition_range_start", "dagster/asset_partition_range_end")


def test_sensor_adds_a_partition_per_new_trace_file_and_requests_one_run_for_them(tmp_path):
    store = dense_store(tmp_path, FIRST)
    root = tmp_path / "traces"
    with dg.instance_for_test() as inst:
        result = _sensor_tick(inst, store)
        new = list(result.dynamic_partitions_requests[0].partition_keys)
        assert sorted(new) == FIRST
        # one run over the partitions just added (a single-run backfill), not one run per trace
        [request] = result.run_requests
        assert request.partition_key is None and tuple(request.tags[t] for t in RANGE) == (new[0], new[-1])
        inst.add_dynamic_partitions("trace_files", new)
        assert isinstance(_sensor_tick(inst, store), dg.SkipReason)

        copy_traces(root, [LATER])
        (root / "llama3-8b" / "bad,name.json.gz").write_bytes((root / LATER).read_bytes())  # a comma breaks UI keys
        result = _sensor_tick(inst, store)
        assert [(r.partition_key, r.run_key) for r in result.run_requests] == [(LATER, LATER)]
        assert list(result.dynamic_partitions_requests[0].partition_keys) == [LATER]


def _run(defs, instance, request: dg.RunRequest, job_name: str):
    job = defs.resolve_job_def(job_name)
    result = job.execute_in_process(instance=instance, partition_key=request.partition_key, tags=request.tags,
                                    run_config=QUIET, raise_on_error=False)
    assert result.success, job_name
    return result


def _schedule_tick(defs, instance):
    ctx = dg.build_schedule_context(instance=instance, repository_def=defs.get_repository_def(),
                                    scheduled_execution_time=datetime(2026, 12, 1, 3, tzinfo=timezone.utc))
    return refresh_schedule.evaluate_tick(ctx)


def test_new_trace_file_is_ingested_and_the_refresh_schedule_makes_weights_v2(instance, tmp_path):
    store = dense_store(tmp_path, FIRST)
    defs = definitions_for(store)

    assert _schedule_tick(defs, instance).skip_message == "no trace ingested yet"
    tick = _sensor_tick(instance, store)
    instance.add_dynamic_partitions("trace_files", list(tick.dynamic_partitions_requests[0].partition_keys))
    [request] = tick.run_requests
    ingested = _run(defs, instance, request, "ingest_trace")
    # one run, every partition materialised and checked on its own
    assert sorted(e.partition for e in ingested.get_asset_check_evaluations()) == sorted(FIRST)
    assert instance.get_materialized_partitions(dg.AssetKey("op_shape_time")) == set(FIRST)
    [refresh] = _schedule_tick(defs, instance).run_requests
    _run(defs, instance, refresh, "refresh_weights")
    assert read_release(store.release_dir).versions == [1]
    assert "no trace ingested since" in _schedule_tick(defs, instance).skip_message

    copy_traces(tmp_path / "traces", [LATER])
    result = _sensor_tick(instance, store)
    instance.add_dynamic_partitions("trace_files", list(result.dynamic_partitions_requests[0].partition_keys))
    [request] = result.run_requests
    _run(defs, instance, request, "ingest_trace")
    [refresh] = _schedule_tick(defs, instance).run_requests
    refreshed = _run(defs, instance, refresh, "refresh_weights")

    rel = read_release(store.release_dir)
    assert rel.versions == [1, 2]
    # movement beyond the bootstrap intervals warns, it never fails the refresh
    [moves] = [e for e in refreshed.get_asset_check_evaluations() if e.check_name == "moves_within_intervals"]
    beyond = rel.drift(2)["beyond_interval"]
    assert moves.passed == (not beyond["problems"] and not beyond["operators"])
    assert moves.severity == dg.AssetCheckSeverity.WARN
    drift = instance.fetch_materializations(dg.AssetKey("weight_drift"), limit=1).records[0].asset_materialization
    meta = {k: v.value for k, v in drift.metadata.items()}
    assert meta["weights_version"] == 2 and meta["compared_with"] == "v1"
    # The new graph-replay profile moves chat-dense-8b's shares: the weights really moved.
    # metadata floats are rounded to 4 significant digits; the release's drift JSON keeps them whole
    assert meta["total_variation"] > 0 and meta["total_variation"] == float(f"{rel.drift(2)['total_variation']:.4g}")
    # shapes, not problem ids, as `hotshape drift` writes them
    from weighting.drift import shape_labels

    page, labels = (store.drift_dir / "hotshape-v2.html").read_text(), shape_labels(rel.manifest)
    assert any(label.split(" ", 1)[1][:20] in page for label in labels.values())
    assert meta["operator_weights_before_after"].startswith("![W_op v1 → v2](data:image/png;base64,")


def test_rescore_schedule_and_new_weights_sensor_score_stored_results_without_evaluating(tmp_path):
    from pipelines.commands import materialize_all
    from pipelines.defs.schedules import rescore_schedule
    from pipelines.defs.sensors import new_submission_sensor, new_weights_sensor
    from tests.conftest import REPO

    subs = tmp_path / "submissions"
    shutil.copytree(REPO / "tests" / "adversarial" / "honest", subs / "honest")
    store = dense_store(tmp_path, FIRST, submissions=str(subs))
    defs = definitions_for(store)
    with dg.instance_for_test() as inst:
        submission_tick = new_submission_sensor(dg.build_sensor_context(instance=inst, resources={"store": store}))
        assert "no release yet" in submission_tick.skip_message  # nothing to evaluate against
        first = materialize_all(store, inst)
        shutil.copytree(subs / "honest", subs / "second")
        submission_tick = new_submission_sensor(dg.build_sensor_context(instance=inst, resources={"store": store}))
        [request] = submission_tick.run_requests  # "honest" was added and evaluated by materialize_all
        assert (request.partition_key, request.tags) == ("second", {"hotshape/device": "cpu"})
        assert set(first["scores"]) == {"honest"} and first["scores"]["honest"]["S_agg"] == {"cpu": None}
        evaluations = len(inst.fetch_materializations(dg.AssetKey("evaluation_results"), limit=100).records)

        ctx = dg.build_schedule_context(instance=inst, repository_def=defs.get_repository_def(), resources={"store": store},
                                        scheduled_execution_time=datetime(2026, 12, 2, 4, tzinfo=timezone.utc))
        # Nothing is stale after run-pipeline: neither the schedule nor the weights sensor, ticking for the first time
        # (the UI opened on this history), scores again what materialize_all just scored.
        assert "scored under the latest weights" in rescore_schedule.evaluate_tick(ctx).skip_message
        first_tick = new_weights_sensor(dg.build_sensor_context(instance=inst, resources={"store": store}))
        assert first_tick.run_requests == [] and first_tick.cursor

        # A new evaluation run of "honest" (its results newer than its score): the schedule re-scores it.
        results, scored = store.results_file("honest"), store.scores_dir("honest") / "hotshape-v1.json"
        os.utime(results, ns=(results.stat().st_atime_ns, scored.stat().st_mtime_ns + 10**9))
        [request] = rescore_schedule.evaluate_tick(ctx).run_requests
        assert (request.partition_key, request.run_key) == ("honest", "honest:2026-12-02")
        result = _run(defs, inst, request, "rescore")
        assert [e.asset_key.to_user_string() for e in result.get_asset_materialization_events()] == ["scores"]

        # A new weights version: the weights sensor re-scores under it; still no new evaluation.
        _run(defs, inst, dg.RunRequest(), "refresh_weights")
        sensor_ctx = dg.build_sensor_context(instance=inst, resources={"store": store}, cursor=first_tick.cursor)
        tick = new_weights_sensor(sensor_ctx)
        [request] = tick.run_requests
        assert request.run_key == "honest:weights-v2"
        again = dg.build_sensor_context(instance=inst, resources={"store": store}, cursor=tick.cursor)
        assert isinstance(new_weights_sensor(again), dg.SkipReason)
        _run(defs, inst, request, "rescore")
        scored = json.loads((store.scores_dir("honest") / "hotshape-v2.json").read_text())
        assert [s["weights_version"] for s in scored] == ["v2"]
        assert len(inst.fetch_materializations(dg.AssetKey("evaluation_results"), limit=100).records) == evaluations
        # and once scored under v2, a sensor with no cursor (a new UI) launches nothing again
        fresh = new_weights_sensor(dg.build_sensor_context(instance=inst, resources={"store": store}))
        assert fresh.run_requests == []


def test_fleet_change_sensor_observes_an_edit_and_requests_one_refresh(tmp_path):
    from pipelines.commands import materialize_all
    from pipelines.defs.sensors import fleet_change_sensor

    store = dense_store(tmp_path, FIRST)
    with dg.instance_for_test() as inst:
        tick = fleet_change_sensor(dg.build_sensor_context(instance=inst, resources={"store": store}))
        assert isinstance(tick, dg.SkipReason)  # no weights yet: the first refresh follows the first ingest
        materialize_all(store, inst)
        tick = fleet_change_sensor(dg.build_sensor_context(instance=inst, resources={"store": store}))
        assert isinstance(tick, dg.SkipReason)  # the weights were computed from this very file

        fleet = tmp_path / "fleet.yaml"
        fleet.write_text(fleet.read_text().replace("card_hours: 2880", "card_hours: 28800"))
        tick = fleet_change_sensor(dg.build_sensor_context(instance=inst, resources={"store": store}))
        [request] = tick.run_requests
        [observation] = tick.asset_events
        assert observation.asset_key == dg.AssetKey("fleet_file")
        assert request.run_key == f"fleet-{observation.tags['dagster/data_version']}"
        _run(definitions_for(store), inst, request, "refresh_weights")
        assert read_release(store.release_dir).versions == [1, 2]
        assert (store.drift_dir / "hotshape-v2.html").is_file()
        assert isinstance(fleet_change_sensor(dg.build_sensor_context(instance=inst, resources={"store": store})),
                          dg.SkipReason)
