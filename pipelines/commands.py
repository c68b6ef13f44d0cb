"""`hotshape run-pipeline`: the whole Dagster graph, in-process, on a project-local instance."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path

DAGSTER_HOME = ".dagster_home"
INGEST = ["kernel_events", "op_shape_time"]
REFRESH = ["fleet_weights", "release_bundle", "weight_drift"]
# Step-by-step DEBUG events stay in the run history (the UI shows them); the terminal gets warnings.
QUIET = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}


def dagster_home(path: str | None = None) -> Path:
    """$DAGSTER_HOME, else ./.dagster_home holding a link to ./dagster.yaml (so history persists)."""
    home = Path(path or os.environ.get("DAGSTER_HOME") or DAGSTER_HOME).resolve()
    home.mkdir(parents=True, exist_ok=True)
    config, root_config = home / "dagster.yaml", Path("dagster.yaml").resolve()
    if not config.exists() and root_config.is_file() and root_config != config:
        try:
            config.symlink_to(os.path.relpath(root_config, home))
        except OSError:
            shutil.copyfile(root_config, config)
    return home


def _checks(result) -> dict[str, bool]:
    return {f"{e.asset_key.to_user_string()}:{e.check_name}": e.passed for e in result.get_asset_check_evaluations()}


def materialize_all(store, instance) -> dict:
    """Ingest every trace not ingested yet (one partition each), then refresh weights, release and drift.

    The refresh runs when something new was ingested or no release exists, as the sensor and the
    refresh schedule would do it; a second call on the same inputs changes nothing.
    """
    import dagster as dg

    from pipelines.definitions import ASSETS, CHECKS
    from pipelines.partitions import trace_files, usable_key

    resources = {"store": store}
    keys = [k for k in store.trace_keys() if usable_key(k)]
    known = set(instance.get_dynamic_partitions(trace_files.name))
    instance.add_dynamic_partitions(trace_files.name, [k for k in keys if k not in known])
    summary: dict = {"traces": [], "checks": {}}
    ingested = 0
    for key in keys:
        done = store.read_summary(key)
        if done is not None and store.op_shape_time_file(done["trace_id"]).is_file():
            summary["traces"].append({"partition": key, "trace_id": done["trace_id"], "status": "already ingested"})
            continue
        r = dg.materialize(ASSETS + CHECKS, selection=INGEST, partition_key=key, instance=instance,
                           resources=resources, run_config=QUIET, raise_on_error=False)
        ingested += r.success
        done = store.read_summary(key) or {}
        summary["traces"].append({"partition": key, "trace_id": done.get("trace_id"),
                                  "status": "ingested" if r.success else "failed"})
        summary["checks"].update({f"{k}[{key}]": v for k, v in _checks(r).items()})
    if ingested or not (store.release_dir / "release.json").is_file():
        r = dg.materialize(ASSETS + CHECKS, selection=REFRESH, instance=instance, resources=resources,
                           run_config=QUIET, raise_on_error=False)
        summary["checks"].update(_checks(r))
        summary["refreshed"] = r.success
        if not r.success:
            summary["error"] = "refresh failed; see the run's events in the Dagster UI"
    else:
        summary["refreshed"] = False
    release = store.release_dir
    if (release / "release.json").is_file():
        info = json.loads((release / "release.json").read_text())
        summary["release"] = str(release)
        summary["weights_version"] = info["weights"][-1]["version"]
        drift = sorted(store.drift_dir.glob(f"{info['name']}-v*.html"))
        summary["drift_report"] = str(drift[-1]) if drift else None
    return summary


def run_pipeline(args: argparse.Namespace) -> int:
    """Materialize the graph on --traces/--fleet into --out and print where the release and scores are."""
    import dagster as dg

    from pipelines.resources import HotshapeStore

    store = HotshapeStore(trace_root=args.traces, fleet=args.fleet, out=args.out, submissions=args.submissions)
    home = dagster_home(args.dagster_home)
    instance = dg.DagsterInstance.from_config(str(home))
    try:
        summary = materialize_all(store, instance)
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
    p.add_argument("--dagster-home", help=f"Dagster instance directory (default: $DAGSTER_HOME or ./{DAGSTER_HOME})")
    p.add_argument("--json", action="store_true", help="print a machine-readable summary")
    p.set_defaults(func=run_pipeline)
