"""`hotshape run-pipeline`: the whole Dagster graph, in-process, on a project-local instance."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import uuid
from pathlib import Path

# Imports inside functions: `hotshape` imports this module to build its parser (pipelines/cli.py), so each
# command loads only what it runs.

DAGSTER_HOME = ".dagster_home"
# The instance configuration of record lives in the default home, not the repo root: `dagster dev` warns that a
# ./dagster.yaml "will not be used" whenever DAGSTER_HOME names another directory.
INSTANCE_CONFIG = f"{DAGSTER_HOME}/dagster.yaml"
INGEST = ["kernel_events", "op_shape_time"]
REFRESH = ["fleet_weights", "release_bundle", "weight_drift"]
EVALUATE = ["evaluation_results", "scores"]
# The job (pipelines/defs/jobs.py) that runs each selection, so run-pipeline's runs carry the names the
# sensors and schedules use, not __ephemeral_asset_job__.
JOB_OF = {tuple(INGEST): "ingest_trace", tuple(REFRESH): "refresh_weights", tuple(EVALUATE): "evaluate_submission",
          ("scores",): "rescore"}
# Step-by-step DEBUG events stay in the run history (the UI shows them); the terminal gets warnings.
QUIET = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}


def run_config(selection: list[str], device: str, gpus: int) -> dict:
    """The run config of one materialize(): on a cuda host with several GPUs an evaluation is sharded over all
    of them (`hotshape eval --devices all`), as run-pipeline evaluates one submission at a time."""
    if "evaluation_results" not in selection or device != "cuda" or gpus < 2:
        return QUIET
    return {**QUIET, "ops": {"evaluation_results": {"config": {"devices": list(range(gpus))}}}}


def dagster_home(path: str | None = None) -> Path:
    """$DAGSTER_HOME, else ./.dagster_home; another home gets a link to ./.dagster_home/dagster.yaml (so history persists)."""
    home = Path(path or os.environ.get("DAGSTER_HOME") or DAGSTER_HOME).resolve()
    home.mkdir(parents=True, exist_ok=True)
    config, root_config = home / "dagster.yaml", Path(INSTANCE_CONFIG).resolve()
    if not config.exists() and root_config.is_file() and root_config != config:
        try:
            config.symlink_to(os.path.relpath(root_config, home))
        except OSError:
            shutil.copyfile(root_config, config)
    return home


def _checks(result, suffix: str = "") -> dict[str, bool]:
    return {f"{e.asset_key.to_user_string()}:{e.check_name}{suffix}": e.passed for e in result.get_asset_check_evaluations()}


class _Graph:
    """Runs of the named jobs on one instance and store, as the sensors and schedules would launch them."""

    def __init__(self, store, instance, on_run=None, on_event=None):
        from pipelines.definitions import definitions_for

        self.store, self.instance, self.defs = store, instance, definitions_for(store)
        self.on_run, self.on_event = on_run, on_event

    def run(self, selection: list[str], partition_key: str | None = None):
        from kernels_eval.harness.shard import host_gpus

        config = run_config(selection, self.store.device, host_gpus() if self.store.device == "cuda" else 0)
        job = self.defs.resolve_job_def(JOB_OF[tuple(selection)])
        run_id = str(uuid.uuid4())  # known before the run starts, so its events reach on_event as they are stored
        if self.on_event is not None:
            self.instance.add_event_listener(run_id, self.on_event)
        result = job.execute_in_process(run_config=config, instance=self.instance, partition_key=partition_key,
                                        raise_on_error=False, run_id=run_id)
        if self.on_run is not None:
            self.on_run(result, partition_key)
        return result

    def add_partitions(self, partitions, keys: list[str]) -> list[str]:
        from pipelines.partitions import usable_key

        keys = [k for k in keys if usable_key(k)]
        known = set(self.instance.get_dynamic_partitions(partitions.name))
        self.instance.add_dynamic_partitions(partitions.name, [k for k in keys if k not in known])
        return keys


def _ingest(graph: _Graph, summary: dict) -> int:
    """Materialise every trace partition not yet materialised over the trace file's current bytes; how many were."""
    from pipelines.partitions import trace_files

    import dagster as dg

    store, ingested = graph.store, 0
    materialised = graph.instance.get_materialized_partitions(dg.AssetKey("op_shape_time"))
    for key in graph.add_partitions(trace_files, store.trace_keys()):
        done = store.read_summary(key)
        if done is not None and key in materialised:
            summary["traces"].append({"partition": key, "trace_id": done["trace_id"], "status": "already ingested"})
            continue
        r = graph.run(INGEST, key)
        ingested += r.success
        summary["traces"].append({"partition": key, "trace_id": (store.read_summary(key) or {}).get("trace_id"),
                                  "status": "ingested" if r.success else "failed"})
        summary["checks"].update(_checks(r, f"[{key}]"))
    return ingested


def _evaluate(graph: _Graph, summary: dict, release_name: str, version: int) -> None:
    """Evaluate submissions without results, score those without a score under weights `version`."""
    from pipelines.partitions import submissions

    store = graph.store
    summary["scores"] = {}
    for key in graph.add_partitions(submissions, store.submission_keys()):
        scored = store.scores_dir(key) / f"{release_name}-v{version}.json"
        selection = EVALUATE if not store.results_file(key).is_file() else [] if scored.is_file() else ["scores"]
        if selection and not graph.run(selection, key).success:
            summary["error"] = f"evaluating or scoring submission {key} failed; see its run in the Dagster UI"
        if scored.is_file():
            by_hardware = json.loads(scored.read_text())
            summary["scores"][key] = {
                "path": str(scored), "results": str(store.results_file(key)),
                "S_agg": {s["hardware"]: s["S_agg"] for s in by_hardware},
                "correct_weight": {s["hardware"]: s["rates"]["correct"]["weighted"] for s in by_hardware},
                "performance_measured": any(s["performance_measured"] for s in by_hardware)}


def progress_line(result, partition_key: str | None) -> str:
    """One line per finished run: the assets it materialised (and its partition), or that it failed."""
    assets = sorted({e.asset_key.to_user_string() for e in result.get_asset_materialization_events()})
    where = f" [{partition_key}]" if partition_key else ""
    return f"{'materialised' if result.success else 'failed'}{where}: {', '.join(assets) or 'nothing'}"


def materialize_all(store, instance, on_run=None, on_event=None) -> dict:
    """Ingest new traces (one partition each), refresh weights → release → drift, evaluate new
    submissions and score every submission under the latest weights.

    As the sensors and schedules would: the refresh runs when something new was ingested or no
    release exists, and stored results are only re-scored; a second call on the same inputs changes nothing.
    `on_run` gets each run's result as it ends, `on_event` each event of a run as the instance stores it.
    """
    graph = _Graph(store, instance, on_run, on_event)
    summary: dict = {"traces": [], "checks": {}, "refreshed": False}
    if _ingest(graph, summary) or not (store.release_dir / "release.json").is_file():
        r = graph.run(REFRESH)
        summary["checks"].update(_checks(r))
        summary["refreshed"] = r.success
        if not r.success:
            summary["error"] = "refresh failed; see its run in the Dagster UI"
    if not (store.release_dir / "release.json").is_file():
        return summary
    info = json.loads((store.release_dir / "release.json").read_text())
    version = info["weights"][-1]["version"]
    drift = store.drift_dir / f"{info['name']}-v{version}.html"
    summary.update(release=str(store.release_dir), weights_version=version,
                   drift_report=str(drift) if drift.is_file() else None)
    _evaluate(graph, summary, info["name"], version)
    return summary


def run_pipeline(args: argparse.Namespace) -> int:
    """Materialize the graph on --traces/--fleet into --out and print where the release and scores are."""
    import dagster as dg

    from kernels_eval.harness.sandbox import check_bwrap
    from pipelines.progress import AssetProgress
    from pipelines.resources import HotshapeStore

    problem = check_bwrap()  # the evaluation step runs candidates in bubblewrap: say so before the first asset
    if problem:
        print(f"hotshape run-pipeline: {problem} (Debian/Ubuntu: apt-get install bubblewrap)", file=sys.stderr)
        return 2
    store = HotshapeStore(trace_root=args.traces, fleet=args.fleet, out=args.out, submissions=args.submissions,
                          device=args.device)
    home = dagster_home(args.dagster_home)
    instance = dg.DagsterInstance.from_config(str(home))
    # on stderr (a terminal, or --progress), so a long refresh is not silent: each asset as it materialises
    # (from the run's event stream), then each run's line as it ends
    show = args.progress or sys.stderr.isatty()
    def say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    on_run = (lambda result, key: say(progress_line(result, key))) if show else None
    try:
        summary = materialize_all(store, instance, on_run, AssetProgress(say) if show else None)
    finally:
        instance.dispose()
    summary["dagster_home"] = str(home)
    failed = [k for k, ok in summary["checks"].items() if not ok]
    ok = "release" in summary and "error" not in summary and all(t["status"] != "failed" for t in summary["traces"])
    if args.json:
        print(json.dumps(summary, indent=2, sort_keys=True))
        return 0 if ok else 1
    for t in summary["traces"]:
        print(f"{t['status']:17s} {t['partition']}  {t['trace_id'] or ''}")
    for name in failed:
        print(f"check failed: {name}", file=sys.stderr)
    if "release" in summary:
        print(f"release: {summary['release']} (weights v{summary['weights_version']})")
    if summary.get("drift_report"):
        print(f"drift:   {summary['drift_report']}")
    for key, sc in summary.get("scores", {}).items():
        figures = ", ".join(f"S_agg[{hw}] {'n/a' if v is None else f'{v:.4f}'}, correct on {sc['correct_weight'][hw]:.1%} "
                            f"of the weight" for hw, v in sc["S_agg"].items())
        timing = "" if sc["performance_measured"] else "; performance not measured (S_i needs GPU timing)"
        print(f"scores:  {sc['path']}  ({key}: {figures or 'no results'}{timing})")
    if summary.get("error"):
        print(f"hotshape run-pipeline: {summary['error']}", file=sys.stderr)
    print(f"history: DAGSTER_HOME={home} dagster dev   (opens the UI on this run history)")
    return 0 if ok else 1


def register(subparsers) -> None:
    """Add `run-pipeline` to the hotshape command."""
    p = subparsers.add_parser("run-pipeline", help="run the whole Dagster graph in-process (ingest → weights → release → scores)")
    p.add_argument("--traces", default="examples/traces", help="trace root (default: examples/traces)")
    p.add_argument("--fleet", default="examples/fleet.yaml", help="fleet.yaml (default: examples/fleet.yaml)")
    p.add_argument("--out", default="out/pipeline", help="where tables, the release and scores go (default: out/pipeline)")
    p.add_argument("--submissions", default="examples/submissions", help="submission directories to evaluate")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                   help="evaluation device (default cpu: Triton interpreter on smoke shapes, no timing)")
    p.add_argument("--dagster-home", help=f"Dagster instance directory (default: $DAGSTER_HOME or ./{DAGSTER_HOME})")
    p.add_argument("--json", action="store_true", help="print a machine-readable summary")
    p.add_argument("--progress", action="store_true", help="name each asset on stderr as it materialises (seconds, "
                                                            "rows, problems) and each run as it ends, even when "
                                                            "stderr is not a terminal")
    p.set_defaults(func=run_pipeline)
