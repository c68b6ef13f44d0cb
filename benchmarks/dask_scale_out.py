"""`hotshape build` through a local Dask scheduler with two worker processes against one process, same bytes.

    .venv/bin/python benchmarks/dask_scale_out.py fleet --root /tmp/fleet --profiles 320 \
        --results benchmarks/results/dask_scale_out.txt
    .venv/bin/python benchmarks/dask_scale_out.py dagster-batch --root /tmp/fleet --profiles 40
    .venv/bin/python benchmarks/dask_scale_out.py per-mb --results benchmarks/results/dask_scale_out.txt

`fleet` builds fleet_N.yaml of a fleet written by `benchmarks/fleet.py generate` four ways, each from a
fresh trace store and alone on the machine: `--jobs 1` (one process); `--cluster` on a `dask scheduler`
with two `dask worker` processes (--nworkers 1 --nthreads 1, started before the clock starts, as a
cluster is, and stopped after that build), once with ingest.cluster.WORKER_ENV (what docs/scale-out.md
deploys) and once with Dask's defaults; and the local pool (`--jobs 2`) for reference; then checks that
the four releases are byte-for-byte the same.
`dagster-batch` runs `benchmarks/fleet.py dagster`'s comparison with every trace partition in one
Dagster run (the range tags a single-run backfill gives its run). `per-mb` times the store ingest of the example traces in this process (one core, fresh store each
repeat) and prints MB of trace JSON per CPU-second, the number docs/scale-out.md sizes a cluster from.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

import fleet as fleet_bench  # noqa: E402  benchmarks/fleet.py: write_fleet, json_mb, timed

DASK = Path(sys.executable).with_name("dask")


def _start(argv: list, log: Path, env=None) -> subprocess.Popen:
    return subprocess.Popen([str(a) for a in argv], stdout=log.open("wb"), stderr=subprocess.STDOUT,
                            start_new_session=True, cwd=REPO, env=env)


def local_cluster(work: Path, workers: int, tuned: bool = True) -> tuple[str, list[subprocess.Popen]]:
    """A `dask scheduler` on 127.0.0.1 and `workers` single-threaded `dask worker` processes; its address.
    `tuned`: with ingest.cluster.WORKER_ENV (what docs/scale-out.md deploys), else Dask's defaults."""
    from distributed import Client

    from ingest.cluster import WORKER_ENV

    work.mkdir(parents=True, exist_ok=True)
    sched_file = work / "scheduler.json"
    # this checkout's code on every process's path, not the one the environment has installed
    env = os.environ | (WORKER_ENV if tuned else {"DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES": "1"}) | {
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    procs = [_start([DASK, "scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
                     "--scheduler-file", sched_file], work / "scheduler.log", env)]
    while not sched_file.is_file():
        time.sleep(0.1)
    for i in range(workers):
        procs.append(_start([DASK, "worker", "--scheduler-file", sched_file, "--host", "127.0.0.1", "--nworkers", "1",
                             "--nthreads", "1", "--memory-limit", "4GB", "--no-dashboard"], work / f"worker{i}.log",
                            env))
    address = json.loads(sched_file.read_text())["address"]
    with Client(address, timeout=60) as client:
        client.wait_for_workers(workers, timeout=120)
    return address, procs


def cluster_cpu_s(procs: list[subprocess.Popen]) -> float:
    """CPU seconds used so far by the scheduler and worker process trees (nannies and workers)."""
    import psutil

    total = 0.0
    for p in procs:
        root = psutil.Process(p.pid)
        for proc in [root, *root.children(recursive=True)]:
            t = proc.cpu_times()
            total += t.user + t.system
    return total


def stop(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        os.killpg(p.pid, signal.SIGTERM)
    for p in procs:
        try:
            p.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)


def release_files(release: Path) -> dict[str, bytes]:
    from release.bundle import read_release

    return {"release.json": (release / "release.json").read_bytes(), **read_release(release).all_files()}


def fleet(root: Path, n: int, work: Path) -> list[str]:
    """One line per way of building fleet_N.yaml, and whether the releases are identical."""
    fleet_yaml = fleet_bench.write_fleet(root, n)
    mb = fleet_bench.json_mb(root, 0, n)
    hotshape = [sys.executable, "-m", "pipelines.cli", "build", "--traces", str(root), "--fleet", str(fleet_yaml)]
    lines = [f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} cores, N={n}, "
             f"json_mb={mb:.1f}, load average before {os.getloadavg()[0]:.1f}"]
    times = {}
    # each way alone on the machine: a scheduler and its workers are started (before the clock) for
    # their own build only and stopped after it
    ways = (("one-process", None), ("dask-2-workers", True), ("dask-2-defaults", False), ("local-pool-2", None))
    for label, tuned in ways:
        out = work / label
        procs, extra = [], ["--jobs", "2" if label == "local-pool-2" else "1"]
        try:
            if tuned is not None:
                address, procs = local_cluster(out / "cluster", 2, tuned)
                extra = ["--cluster", address]
            cpu0, load = cluster_cpu_s(procs), os.getloadavg()[0]
            times[label] = t = fleet_bench.timed([*hotshape, "--out", str(out / "rel"), "--store", str(out / "store"),
                                                  "--name", "fleet", *extra])
            cluster = f"cluster_cpu_s={cluster_cpu_s(procs) - cpu0:7.1f} " if procs else ""
        finally:
            stop(procs)
        lines.append(f"{label:<15} wall_s={t['wall_s']:7.1f} client_cpu_s={t['user_s'] + t['sys_s']:7.1f} {cluster}"
                     f"ratio_to_one_process={t['wall_s'] / times['one-process']['wall_s']:.2f} "
                     f"load_before={load:.1f} load_after={os.getloadavg()[0]:.1f}")
        print(lines[-1], flush=True)
    base = release_files(work / "one-process" / "rel")
    for label, _ in ways[1:]:
        other = release_files(work / label / "rel")
        same = sorted(other) == sorted(base) and all(other[k] == base[k] for k in base)
        lines.append(f"{label} release identical to one-process: {same}")
    return lines


def dagster_batch(root: Path, first: int, count: int, work: Path) -> list[str]:
    """The 40-profile comparison of `fleet.py dagster`, with every trace partition in one run (a single-run
    backfill's range tags), then the refresh run; seconds per profile against `hotshape build`."""
    import dagster as dg

    from pipelines.definitions import ASSETS, CHECKS
    from pipelines.resources import HotshapeStore

    sub, fleet_yaml = fleet_bench.subfleet(root, work / "traces", first, count)
    home = work / "dagster"
    home.mkdir(parents=True)
    shutil.copy(REPO / ".dagster_home" / "dagster.yaml", home / "dagster.yaml")
    store = HotshapeStore(trace_root=str(sub), fleet=str(fleet_yaml), out=str(work / "pipeline"),
                          submissions=str(work / "none"))
    quiet = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}
    keys = store.trace_keys()
    start = time.perf_counter()
    with dg.DagsterInstance.from_config(str(home)) as instance:
        instance.add_dynamic_partitions("trace_files", keys)
        ingest = dg.materialize(ASSETS + CHECKS, selection=["kernel_events", "op_shape_time"], instance=instance,
                                resources={"store": store}, run_config=quiet,
                                tags={"dagster/asset_partition_range_start": keys[0],
                                      "dagster/asset_partition_range_end": keys[-1]})
        ingested = time.perf_counter()
        refresh = dg.materialize(ASSETS + CHECKS, selection=["fleet_weights", "release_bundle", "weight_drift"],
                                 instance=instance, resources={"store": store}, run_config=quiet)
    done = time.perf_counter()
    assert ingest.success and refresh.success
    subprocess.run([sys.executable, "-m", "pipelines.cli", "build", "--traces", str(sub), "--fleet", str(fleet_yaml),
                    "--out", str(work / "rel")], check=True, capture_output=True, cwd=REPO)
    build = time.perf_counter() - done
    n = len(keys)
    return [f"dagster batch    profiles={n} build_s_per_profile={build / n:.3f} "
            f"pipeline_s_per_profile={(done - start) / n:.3f} overhead_s_per_profile={(done - start - build) / n:.3f} "
            f"(ingest run {ingested - start:.1f} s, refresh run {done - ingested:.1f} s)"]


def per_mb(repeats: int) -> list[str]:
    """MB of example-trace JSON ingested into a fresh store per CPU-second of this process (one core)."""
    from ingest.discovery import discover
    from ingest.store import TraceStore

    paths = discover([str(REPO / "examples" / "traces")])
    mb = sum(len(gzip.decompress(p.read_bytes())) if p.name.endswith(".gz") else p.stat().st_size
             for p in paths) / 1e6
    with tempfile.TemporaryDirectory() as tmp:
        TraceStore(Path(tmp) / "warm").ingest(paths, jobs=1)  # imports and first-call costs out of the timing
        best = None
        for i in range(repeats):
            cpu0, wall0 = time.process_time(), time.perf_counter()
            TraceStore(Path(tmp) / f"s{i}").ingest(paths, jobs=1)
            cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
            best = min(best or (cpu, wall), (cpu, wall))
    cpu, wall = best
    return [f"per-mb examples traces={len(paths)} json_mb={mb:.1f} best_of={repeats} cpu_s={cpu:.2f} wall_s={wall:.2f} "
            f"mb_per_cpu_s={mb / cpu:.1f}"]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    f = sub.add_parser("fleet", help="build fleet_N three ways (one process, Dask two workers, local pool)")
    f.add_argument("--root", type=Path, required=True, help="a fleet written by benchmarks/fleet.py generate")
    f.add_argument("--profiles", type=int, default=320)
    f.add_argument("--work", type=Path, default=Path("/tmp/dask-scale-out"))
    b = sub.add_parser("dagster-batch", help="Dagster run overhead per profile with all partitions in one run")
    b.add_argument("--root", type=Path, required=True, help="a fleet written by benchmarks/fleet.py generate")
    b.add_argument("--first", type=int, default=41)
    b.add_argument("--profiles", type=int, default=40)
    b.add_argument("--work", type=Path, default=Path("/tmp/dask-scale-out-dagster"))
    m = sub.add_parser("per-mb", help="ingest MB/s per core on the example traces")
    m.add_argument("--repeats", type=int, default=3)
    for p in (f, b, m):
        p.add_argument("--results", type=Path, help="append the lines here")
    args = parser.parse_args(argv)
    if args.command == "fleet":
        shutil.rmtree(args.work, ignore_errors=True)
        args.work.mkdir(parents=True)
        lines = fleet(args.root, args.profiles, args.work)
    elif args.command == "dagster-batch":
        shutil.rmtree(args.work, ignore_errors=True)
        lines = dagster_batch(args.root, args.first, args.profiles, args.work)
    else:
        lines = per_mb(args.repeats)
    print("\n".join(lines))
    if args.results:
        with args.results.open("a") as out:
            out.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
