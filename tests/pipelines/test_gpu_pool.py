"""The Dagster `gpu` pool sized to the host's GPUs, and each evaluation run given its GPU (no GPU needed)."""

from __future__ import annotations

import shutil

import dagster as dg

from tests.conftest import REPO


def _store(tmp_path, device: str):
    from pipelines.resources import HotshapeStore

    subs = tmp_path / "submissions"
    for name in ("a", "b", "c"):
        shutil.copytree(REPO / "tests" / "adversarial" / "honest", subs / name)
    store = HotshapeStore(trace_root=str(tmp_path / "traces"), out=str(tmp_path / "out"), submissions=str(subs),
                          device=device)
    store.release_dir.mkdir(parents=True)
    (store.release_dir / "release.json").write_text("{}")
    return store


def test_each_new_submission_gets_one_gpu_round_robin_and_the_pool_one_slot_per_gpu(tmp_path, monkeypatch):
    from kernels_eval.harness import shard
    from pipelines.defs.sensors import new_submission_sensor

    monkeypatch.setattr(shard, "host_gpus", lambda: 2)
    store = _store(tmp_path, "cuda")
    with dg.instance_for_test() as inst:
        tick = new_submission_sensor(dg.build_sensor_context(instance=inst, resources={"store": store}))
        got = [(r.partition_key, r.tags["hotshape/device"], r.run_config["ops"]["evaluation_results"]["config"])
               for r in tick.run_requests]
        assert got == [("a", "cuda:0", {"devices": [0]}), ("b", "cuda:1", {"devices": [1]}),
                       ("c", "cuda:0", {"devices": [0]})]
        assert inst.event_log_storage.get_concurrency_info("gpu").slot_count == 2


def test_on_cpu_the_pool_keeps_one_slot_and_runs_no_device_config(tmp_path):
    from pipelines.defs.sensors import new_submission_sensor

    store = _store(tmp_path, "cpu")
    with dg.instance_for_test() as inst:
        tick = new_submission_sensor(dg.build_sensor_context(instance=inst, resources={"store": store}))
        assert [r.tags for r in tick.run_requests] == [{"hotshape/device": "cpu"}] * 3
        assert all(not r.run_config for r in tick.run_requests)
        assert inst.event_log_storage.get_concurrency_info("gpu").slot_count == 1


def test_evaluation_results_takes_its_devices_as_config():
    from pipelines.defs.kernels_eval import GPU_POOL, EvaluationDevices, evaluation_results

    assert evaluation_results.op.pool == GPU_POOL == "gpu"
    assert EvaluationDevices().devices == [] and EvaluationDevices(devices=[1]).devices == [1]


def test_run_pipeline_shards_an_evaluation_over_every_gpu_of_the_host():
    from pipelines.commands import EVALUATE, QUIET, run_config

    assert run_config(EVALUATE, "cuda", 4)["ops"] == {"evaluation_results": {"config": {"devices": [0, 1, 2, 3]}}}
    assert run_config(EVALUATE, "cuda", 1) == run_config(EVALUATE, "cpu", 0) == QUIET
    assert run_config(["scores"], "cuda", 4) == QUIET
