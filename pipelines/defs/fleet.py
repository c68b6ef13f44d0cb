"""fleet.yaml as an observed input of the graph: its content version, observed by a sensor and by run-pipeline, and
recorded by fleet_weights, so that an edit (card-hours, a deployment, a phase_mix) refreshes the weights."""

import hashlib
from pathlib import Path

import dagster as dg

from pipelines.defs.metadata import path_value
from pipelines.resources import HotshapeStore

# External: hotshape never writes it. Each observation carries the file's content version as its data version,
# so the UI shows fleet_weights stale after an edit.
fleet_file = dg.AssetSpec("fleet_file", group_name="weighting", kinds={"yaml"},
                          description="fleet.yaml: each deployment's accelerator, card-hours, phase mix and trace globs "
                                      "(docs/fleet.md); edited by people, observed by fleet_change_sensor")
FLEET_VERSION = "fleet_sha256"  # the metadata key of fleet_weights naming the fleet.yaml version it was computed from


def fleet_version(store: HotshapeStore) -> str | None:
    """The first 16 hex digits of the sha256 of fleet.yaml's bytes, or None when it cannot be read."""
    try:
        return hashlib.sha256(Path(store.fleet).read_bytes()).hexdigest()[:16]
    except OSError:
        return None


def fleet_observation(store: HotshapeStore, version: str) -> dg.AssetObservation:
    """An observation of fleet_file at `version` (its data version), with the file's absolute path."""
    return dg.AssetObservation(asset_key=fleet_file.key, tags={"dagster/data_version": version},
                               metadata={FLEET_VERSION: version,
                                         "path": path_value(store.fleet)})


def weights_fleet_version(instance: dg.DagsterInstance) -> str | None:
    """The fleet.yaml version the latest fleet_weights was computed from (None before the first)."""
    event = instance.get_latest_materialization_event(dg.AssetKey("fleet_weights"))
    metadata = event.asset_materialization.metadata if event is not None else {}
    return metadata[FLEET_VERSION].value if FLEET_VERSION in metadata else None


def fleet_changed(instance: dg.DagsterInstance, store: HotshapeStore) -> str | None:
    """fleet.yaml's version when it differs from the one the latest weights were computed from, else None (also
    before the first weights: the first refresh is the ingest's to request)."""
    used, now = weights_fleet_version(instance), fleet_version(store)
    return now if used is not None and now is not None and now != used else None
