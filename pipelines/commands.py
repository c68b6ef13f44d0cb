"""`hotshape run-pipeline`: the whole Dagster graph, in-process, on a project-local instance."""

from __future__ import annotations

import argparse
import atexit
import gc
import json
import os
import shutil
import sys
import uuid
from contextlib import contextmanager
from pathlib import Path

# Imports inside functions: `hotshape` imports this module to build its parser (pipelines/cli.py), so each
# command loads only what it runs.

DAGSTER_HOME = ".dagster_home"
# The instance configuration of record lives in the default home, not the repo root: `dagster dev` warns that a
# ./dagster.yaml "will not be used" whenever DAGSTER_HOME names another directory.
INSTANCE_CONFIG = f"{DAGSTER_HOME}/dagster.yaml"
PACKAGED_CONFIG = Path(__file__).with_name("instance.yaml")  # what ./.dagster_home/dagster.yaml links to
INGEST = ["kernel_events", "op_shape_time"]
REFRESH = ["fleet_weights", "release_bundle", "weight_drift"]
EVALUATE = ["evaluation_results", "scores"]
# The job (pipelines/defs/jobs.py) that runs each selection, so run-pipeline's runs carry the names the
# sensors and schedules use, not __ephemeral_asset_job__.
JOB_OF = {tuple(INGEST): "ingest_trace", tuple(REFRESH): "refresh_weights", tuple(EVALUATE): "evaluate_submission",
          ("scores",): "rescore"}
# Dagster's own switches for runs of many partitions (read when the events are written): one planned event per
# asset for the run's whole range instead of one per partition, and a batch's materialisations stored in one
# write where the storage can (Postgres). The UI still shows every partition's materialisation and check; a run
# that crashes leaves its partitions missing rather than marked failed.
EVENT_SETTINGS = {"DAGSTER_EMIT_PARTITION_SUBSET_IN_PLANNED_EVENTS": "1", "DAGSTER_EVENT_BATCH_SIZE": "10000"}
# Step-by-step DEBUG events stay in the run history (the UI shows them); the terminal gets warnings.
QUIET = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}


def run_config(selection: list[str], device: str, gpus: int) -> dict:
    """The run config of one materialize(): on a cuda host with several GPUs an evaluation is sharded over all
    of them (`hotshape eval --devices all`), as run-pipeline evaluates one submission at a time."""
    if "evaluation_results" not in selection or device != "cuda" or gpus < 2:
        return QUIET
    return {**QUIET, "ops": {"evaluation_results": {"config": {"devices": list(range(gpus))}}}}


def dagster_home(path: str | None = None) -> Path:
    """$DAGSTER_HOME, else ./.dagster_home, made if missing and holding a dagster.yaml: a home without one gets a
    link to ./.dagster_home/dagster.yaml where that exists (a checkout: so history persists under one
    configuration), else a copy of the packaged configuration of record (pipelines/instance.yaml)."""
    home = Path(path or os.environ.get("DAGSTER_HOME") or DAGSTER_HOME).resolve()
    home.mkdir(parents=True, exist_ok=True)
    config, root_config = home / "dagster.yaml", Path(INSTANCE_CONFIG).resolve()
    if config.is_file():
        return home
    config.unlink(missing_ok=True)  # a link whose target is gone
    if root_config.is_file() and root_config != config.resolve():
        try:
            config.symlink_to(os.path.relpath(root_config, home))
            return home
        except OSError:
            pass
    shutil.copyfile(root_config if root_config.is_file() else PACKAGED_CONFIG, config)
    return home


def _checks(result, suffix: str = "") -> dict[str, bool]:
    return {f"{e.asset_key.to_user_string()}:{e.check_name}{suffix}": e.passed for e in result.get_asset_check_evaluations()}


def _warnings(result) -> list[str]:
    """The checks of a run that did not pass with severity WARN: worth a look, not a failure."""
    import dagster as dg

    return [f"{e.asset_key.to_user_string()}:{e.check_name}" for e in result.get_asset_check_evaluations()
            if not e.passed and e.severity == dg.AssetCheckSeverity.WARN]


class _Graph:
    """Runs of the named jobs on one instance and store, as the sensors and schedules would launch them."""

    def __init__(self, store, instance, on_run=None, on_event=None):
        from pipelines.definitions import definitions_for

        self.store, self.instance, self.defs = store, instance, definitions_for(store)
        self.on_run, self.on_event = on_run, on_event

    def run(self, selection: list[str], partition_key: str | None = None, partition_range: tuple[str, str] | None = None):
        """One run of the job of `selection`: of one partition, of a range of partitions (one run for all of them, as
        a single-run backfill launches it), or unpartitioned."""
        from kernels_eval.harness.shard import host_gpus
        from dagster._core.storage.tags import ASSET_PARTITION_RANGE_END_TAG, ASSET_PARTITION_RANGE_START_TAG

        config = run_config(selection, self.store.device, host_gpus() if self.store.device == "cuda" else 0)
        job = self.defs.resolve_job_def(JOB_OF[tuple(selection)])
        tags = None
        if partition_range is not None and partition_range[0] != partition_range[1]:
            tags = {ASSET_PARTITION_RANGE_START_TAG: partition_range[0], ASSET_PARTITION_RANGE_END_TAG: partition_range[1]}
        elif partition_range is not None:
            partition_key = partition_range[0]
        run_id = str(uuid.uuid4())  # known before the run starts, so its events reach on_event as they are stored
        if self.on_event is not None:
            self.instance.add_event_listener(run_id, self.on_event)
        result = job.execute_in_process(run_config=config, instance=self.instance, partition_key=partition_key,
                                        tags=tags, raise_on_error=False, run_id=run_id)
        if self.on_run is not None:
            self.on_run(result, partition_key if tags is None else f"{partition_range[0]} … {partition_range[1]}")
        return result

    def add_partitions(self, partitions, keys: list[str]) -> list[str]:
        from pipelines.partitions import usable_key

        keys = [k for k in keys if usable_key(k)]
        known = set(self.instance.get_dynamic_partitions(partitions.name))
        self.instance.add_dynamic_partitions(partitions.name, [k for k in keys if k not in known])
        return keys


def ranges(order: list[str], wanted: set[str]) -> list[list[str]]:
    """The runs of consecutive keys of `order` that are all in `wanted`."""
    out: list[list[str]] = []
    previous_wanted = False
    for key in order:
        if key in wanted:
            out[-1].append(key) if previous_wanted else out.append([key])
        previous_wanted = key in wanted
    return out


def _ingest(graph: _Graph, summary: dict) -> int:
    """Materialise every trace partition not yet materialised over the trace file's current bytes, all of them in one
    run (a single-run backfill: one fan-out ingest, each partition checked on its own); how many were."""
    from pipelines.partitions import trace_files

    import dagster as dg

    store = graph.store
    materialised = graph.instance.get_materialized_partitions(dg.AssetKey("op_shape_time"))
    keys = graph.add_partitions(trace_files, store.trace_keys())
    status: dict[str, dict] = {}
    for key in keys:
        done = store.read_summary(key) if key in materialised else None
        if done is not None:
            status[key] = {"partition": key, "trace_id": done["trace_id"], "status": "already ingested"}
    # a run covers a range of the partitions in the order they were added: one range unless some in between are done
    for batch in ranges(graph.instance.get_dynamic_partitions(trace_files.name), set(keys) - set(status)):
        r = graph.run(INGEST, partition_range=(batch[0], batch[-1]))
        conserved = {e.partition or batch[0]: e.passed for e in r.get_asset_check_evaluations()}
        summary["checks"].update({f"kernel_events:gpu_time_conserved[{k}]": ok for k, ok in conserved.items()})
        ids = {m.partition or batch[0]: m.metadata["trace_id"].value
               for m in (e.materialization for e in r.get_asset_materialization_events())
               if m.asset_key == dg.AssetKey("kernel_events") and "trace_id" in m.metadata}
        for key in batch:
            ok = r.success and conserved.get(key, False)
            status[key] = {"partition": key, "trace_id": ids.get(key), "status": "ingested" if ok else "failed"}
    summary["traces"].extend(status[k] for k in keys)
    return sum(t["status"] == "ingested" for t in status.values())


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

    As the sensors and schedules would: the refresh runs when something new was ingested, fleet.yaml was edited
    since the latest weights, or no release exists, and stored results are only re-scored; a second call on the same inputs changes nothing.
    `on_run` gets each run's result as it ends, `on_event` each event of a run as the instance stores it.
    """
    from pipelines.defs.fleet import fleet_changed, fleet_observation

    graph = _Graph(store, instance, on_run, on_event)
    summary: dict = {"traces": [], "checks": {}, "refreshed": False}
    edited = fleet_changed(instance, store)  # fleet.yaml differs from the version of the latest weights
    if edited is not None:
        instance.report_runless_asset_event(fleet_observation(store, edited))
        summary["fleet_changed"] = edited
    if _ingest(graph, summary) or edited is not None or not (store.release_dir / "release.json").is_file():
        r = graph.run(REFRESH)
        summary["checks"].update(_checks(r))
        summary["check_warnings"] = _warnings(r)
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


@contextmanager
def graph_loaded():
    """The graph's modules loaded with the collector off (Dagster's, the assets', what they import and Dagster's
    sqlite storage: ~250,000 objects that live as long as the process, none of them garbage), then frozen while the
    body runs: the collector's full passes, which Dagster's event handling sets off a dozen times a run, no longer
    walk them (0.5-0.8 s of collections in an 80-trace run-pipeline: benchmarks/README.md, "The orchestrated path").
    Unfrozen on leaving, for a caller that goes on in the same process."""
    from ingest.tracefile import gc_paused

    with gc_paused():
        import pipelines.definitions  # noqa: F401 - the import is the point
        import pipelines.sqlite_files  # noqa: F401

        gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def run_pipeline(args: argparse.Namespace) -> int:
    """Materialize the graph on --traces/--fleet into --out and print where the release and scores are."""
    from weighting.fleet import read_once

    with read_once():  # the fleet as the command found it, read once (its assets and checks ask 6 times)
        return _checked_run(args)


def _checked_run(args: argparse.Namespace) -> int:
    from ingest.store import drop_pool_ahead
    from kernels_eval.harness.sandbox import check_bwrap
    from pipelines.inputs import check_inputs, submission_names

    check_inputs(args.traces, args.fleet)  # bad input: one line and exit 2 (cli.error_line), before anything is made
    if submission_names(args.submissions):
        problem = check_bwrap()  # candidates run in bubblewrap: say so first
        if problem:
            print(f"hotshape run-pipeline: {problem} (Debian/Ubuntu: apt-get install bubblewrap)", file=sys.stderr)
            return 2
    atexit.unregister(exit_frozen)
    atexit.register(exit_frozen)
    ahead = workers_ahead(Path(args.traces), Path(args.out))
    try:
        with graph_loaded():
            return _run_pipeline(args)
    finally:
        if ahead is not None:
            drop_pool_ahead(ahead)


def exit_frozen(modules=None) -> None:
    """At exit, everything frozen: the interpreter's last collections then skip the ~300,000 objects a run of the
    graph leaves, which are freed with the process (0.6-0.7 s of an 80-trace run-pipeline: benchmarks/README.md,
    "The orchestrated path"); `hotshape ingest` does the same. Not once Triton is loaded: its nanobind bindings report
    every instance still alive at exit as a leak, on stderr."""
    loaded = sys.modules if modules is None else modules
    if not any(name == "triton" or name.startswith("triton.") for name in loaded):
        gc.freeze()


def workers_ahead(trace_root: Path, out: Path):
    """The trace store's local pool, started now (ingest.store.start_pool_ahead) when the trace root holds at least
    two files the store has never seen, with enough bytes between them for the ingest to parse in parallel: its
    workers then spawn, import and parse the graph-capture traces those files are replays of (what the ingest
    would parse in this process first) beside Dagster's loading (graph_loaded, ~1.5 s of one core) instead of after
    it, and kernel_events' ingest takes them. None otherwise (a second run on the same traces starts no process)."""
    from ingest.discovery import discover
    from ingest.graphs import capture_traces_for
    from ingest.store import PARALLEL_MIN_BYTES, TraceStore, start_pool_ahead
    from ingest.tracefile import TraceError

    if not trace_root.is_dir():
        return None
    store = TraceStore(out / "store")
    seen = set(store.paths()["path"].to_list())  # names ingested before (the path index)
    new = [p for p in discover([str(trace_root)]) if p.relative_to(trace_root).as_posix() not in seen]
    if len(new) < 2 or sum(p.stat().st_size for p in new) < PARALLEL_MIN_BYTES:
        return None
    captures = []
    for first in {p.parent: p for p in reversed(new)}.values():  # one trace per folder: its sidecar names them all
        try:
            captures += capture_traces_for(first)
        except TraceError:
            pass  # the ingest quarantines that folder's traces, naming the sidecar
    return start_pool_ahead(store=store, captures=captures)


def _run_pipeline(args: argparse.Namespace) -> int:
    from pipelines.progress import AssetProgress
    from pipelines.resources import HotshapeStore
    from pipelines.sqlite_files import held, open_instance

    store = HotshapeStore(trace_root=args.traces, fleet=args.fleet, out=args.out, submissions=args.submissions,
                          device=args.device)
    home = dagster_home(args.dagster_home)
    for variable, value in EVENT_SETTINGS.items():
        os.environ.setdefault(variable, value)
    # on stderr (a terminal, or --progress), so a long refresh is not silent: each asset as it materialises
    # (from the run's event stream), then each run's line as it ends
    show = args.progress or sys.stderr.isatty()
    def say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    on_run = (lambda result, key: say(progress_line(result, key))) if show else None
    # a sqlite instance's files stay open between Dagster's connections, which commit without a sync each, and a
    # batch of materialisations is stored in one transaction per file (pipelines/sqlite_files.py); a Postgres
    # instance is untouched
    with held(home):
        instance = open_instance(home)
        # one held connection per storage instead of one per event (what the webserver does); none on sqlite
        instance.optimize_for_webserver(statement_timeout=0, pool_recycle=3600, max_overflow=4)
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
        if name in summary.get("check_warnings", []):
            print(f"warning: check {name} did not pass (severity WARN: the run went on; its result is in the "
                  "Dagster UI and the drift report)", file=sys.stderr)
        else:
            print(f"check failed: {name}", file=sys.stderr)
    if summary.get("fleet_changed"):
        print(f"fleet:   {args.fleet} changed since the latest weights (now {summary['fleet_changed']}): weights refreshed")
    if "release" in summary:
        print(f"release: {summary['release']} (weights v{summary['weights_version']})")
    if summary.get("drift_report"):
        print(f"drift:   {summary['drift_report']}")
    if "release" in summary and not summary["refreshed"]:
        print(f"weights: unchanged since v{summary['weights_version']} (no new trace, {args.fleet} as before); add "
              "traces or edit card-hours there and run again for new weights and their drift report")
    for key, sc in summary.get("scores", {}).items():
        figures = ", ".join(f"S_agg[{hw}] {'not measured' if v is None else f'{v:.4f}'}, correct on {sc['correct_weight'][hw]:.1%} "
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
    p.add_argument("--submissions", default="examples/submissions",
                   help="folder whose sub-directories are the submissions to evaluate, one <operator>.py per operator "
                        "in each (default: examples/submissions)")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                   help="evaluation device (default cpu: Triton interpreter on smoke shapes, no timing)")
    p.add_argument("--dagster-home", help=f"Dagster instance directory (default: $DAGSTER_HOME or ./{DAGSTER_HOME})")
    p.add_argument("--json", action="store_true", help="print a machine-readable summary")
    p.add_argument("--progress", action="store_true", help="name each asset on stderr as it materialises (seconds, "
                                                            "rows, problems) and each run as it ends, even when "
                                                            "stderr is not a terminal")
    p.set_defaults(func=run_pipeline)
