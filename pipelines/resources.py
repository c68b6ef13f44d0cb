"""The one resource: where the pipeline reads traces, fleet and submissions, and where it writes."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import dagster as dg

from ingest.discovery import discover
from ingest.store import TraceStore
from ingest.tracefile import trace_id_of
from pipelines.inputs import submission_names
from weighting.selection import load_policy

# HOTSHAPE_* environment variables override the defaults when definitions load (see store_from_env).
ENV_FIELDS = {
    "trace_root": "HOTSHAPE_TRACES",
    "fleet": "HOTSHAPE_FLEET",
    "out": "HOTSHAPE_OUT",
    "submissions": "HOTSHAPE_SUBMISSIONS",
    "release_name": "HOTSHAPE_RELEASE_NAME",
    "policy": "HOTSHAPE_POLICY",
    "coverage_floor": "HOTSHAPE_COVERAGE_FLOOR",
    "device": "HOTSHAPE_DEVICE",
    "dask_scheduler": "HOTSHAPE_DASK_SCHEDULER",
}


class HotshapeStore(dg.ConfigurableResource):
    """Trace root, fleet.yaml, submissions and the output directory of one hotshape pipeline.

    Relative paths resolve against the working directory of the run (the repo root under
    `dagster dev` and `hotshape run-pipeline`).
    """

    trace_root: str = "examples/traces"
    fleet: str = "examples/fleet.yaml"
    out: str = "out/pipeline"
    submissions: str = "examples/submissions"
    release_name: str = "hotshape"
    policy: str | None = None  # selection policy YAML; None = weighting's policy.yaml
    coverage_floor: float = 0.5  # fleet GPU time the selected problems must cover
    device: str = "cpu"  # evaluation device: cpu (Triton interpreter, smoke shapes, no timing) or cuda
    dask_scheduler: str | None = None  # tcp://HOST:8786: traces are parsed on its workers (ingest.cluster)

    # ---- traces -------------------------------------------------------------------------------
    def trace_keys(self) -> list[str]:
        """Every profile under the trace root as a relative posix path (sidecars left out)."""
        root = Path(self.trace_root)
        if not root.is_dir():
            return []
        return [p.relative_to(root).as_posix() for p in discover([str(root)])]

    def trace_path(self, key: str) -> Path:
        """The trace file of partition `key`."""
        return Path(self.trace_root) / key

    @property
    def trace_store_dir(self) -> Path:
        """The trace store (ingest.store) every asset reads and the kernel_events asset writes: `out/store`."""
        return Path(self.out) / "store"

    def trace_store(self):
        """The trace store, opened (ingest.store.TraceStore)."""
        return TraceStore(self.trace_store_dir)

    def trace_id(self, key: str) -> str:
        """The content address of the trace file behind partition `key` as it is now."""
        return trace_id_of(self.trace_path(key).read_bytes())

    def kernel_events_file(self, trace_id: str) -> Path:
        """kernel_events of one trace in the trace store."""
        return Path(self.trace_store().file("kernel_events", trace_id))

    def op_shape_time_file(self, trace_id: str) -> Path:
        """op_shape_time of one trace in the trace store."""
        return Path(self.trace_store().file("op_shape_time", trace_id))

    def read_summary(self, key: str) -> dict | None:
        """The stored summary (a `traces` row) of the trace file behind partition `key`, or None when not stored."""
        import msgspec

        summary = self.trace_store().summary(self.trace_id(key)) if self.trace_path(key).is_file() else None
        return None if summary is None else {"path": key, **msgspec.structs.asdict(summary)}

    # ---- weights, releases, drift ---------------------------------------------------------------
    @property
    def weights_dir(self) -> Path:
        """What fleet_weights mined from the store for the latest refresh (flow.build.save_mined)."""
        return Path(self.out) / "weights"

    @property
    def release_dir(self) -> Path:
        """The release this pipeline builds and refreshes."""
        return Path(self.out) / "releases" / self.release_name

    @property
    def drift_dir(self) -> Path:
        """HTML drift reports, one per weights version after the first."""
        return Path(self.out) / "drift"

    def load_policy(self):
        """The selection policy (weighting.selection.Policy)."""
        return load_policy(self.policy)

    # ---- submissions ----------------------------------------------------------------------------
    def submission_keys(self) -> list[str]:
        """Submission directory names under the submissions root."""
        return submission_names(self.submissions)

    def submission_path(self, key: str) -> Path:
        """The directory of submission `key`."""
        return Path(self.submissions) / key

    def results_file(self, key: str) -> Path:
        """Evaluation results of submission `key`, every run appended (kernels_eval.results_schema)."""
        return Path(self.out) / "results" / f"{key}.parquet"

    def scores_dir(self, key: str) -> Path:
        """Scores of submission `key`, one file per weights version."""
        return Path(self.out) / "scores" / key


def store_from_env(environ: Mapping[str, str] | None = None) -> HotshapeStore:
    """The store with HOTSHAPE_* variables applied over the defaults; read when definitions load."""
    environ = os.environ if environ is None else environ
    fields = {name: environ[var] for name, var in ENV_FIELDS.items() if environ.get(var)}
    if "coverage_floor" in fields:
        fields["coverage_floor"] = float(fields["coverage_floor"])
    return HotshapeStore(**fields)
